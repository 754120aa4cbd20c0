"""A server slot decoding alone, and Llama's lossless mode, skip the n-gram proposal where no draft
could be chosen (a suffix match grows by at most a token a step, and matches shorter than
DraftLength.shortest are never drafted: DraftLength.cut_short): the same drafts as proposing and
choosing every step, with far fewer proposals."""
import random
import types

from pyriver.speculative.draft import SuffixLookup, proposal, suffix_lookup
from pyriver.speculative.draftlen import DraftCost, DraftLength, NGRAM_BUCKETS, choose_together
from pyriver.speculative.lossless import Speculator
from pyriver.server import drafting
from pyriver.server.drafting import LlamaDrafter

# SmolLM2 Q4_1's automatic table on the 2-core Xeon (flash attention, 2026-11-29): a two-row step costs
# 1.67 single ones, so a chat's short matches do not pay
SMOL = DraftCost({1: 1.0, 2: 1.674, 3: 2.26, 4: 2.79, 6: 3.93, 8: 4.71, 12: 6.9, 16: 8.9, 24: 13.0, 32: 17.5,
                  48: 26.5, 64: 27.2}, 0.77, 162,
                 (1296, {1: 1.0, 2: 1.554, 3: 2.35, 4: 3.05, 6: 4.28, 8: 5.32, 12: 8.4, 16: 10.8, 24: 16.0,
                         32: 21.6, 48: 30.6, 64: 11.4}, 2.76))
CHEAP = DraftCost([1.0, 1.05, 1.1, 1.2], 0.77)   # every draft pays
# a table that turns from no short match paying to every one paying within a few hundred tokens of
# context (a new table every 6 tokens): a window of skipped steps must not outlive its table
TURNING = DraftCost({1: 1.0, 2: 1.95, 4: 3.5, 8: 7.0}, 0.77, 100, (300, {1: 1.0, 2: 1.75, 4: 3.2, 8: 6.4}, 1.0))
TABLES = [SMOL, CHEAP, TURNING, DraftCost({1: 1.0, 2: 1.5, 4: 1.6, 16: 3.0, 32: 6.5}, 0.77)]


def _text(rng, n_prompt=120, n_answer=500):
    """A prompt and an answer: mostly fresh tokens from a small vocabulary (a chat's short matches),
    some stretches copied from the prompt or from the answer so far (long matches)."""
    prompt = [rng.randrange(60) for _ in range(n_prompt)]
    answer = []
    while len(answer) < n_answer:
        if rng.random() < 0.08:
            src = prompt + answer
            at = rng.randrange(len(src) - 20)
            answer.extend(src[at:at + rng.randint(4, 20)])
        else:
            answer.append(rng.randrange(60))
    return prompt, answer[:n_answer]


def _serve(cost, prompt, answer, alone, max_tokens, monkeypatch):
    """Each step's drafts of one slot over answer (kept while they match it), and the proposals made."""
    calls = []
    monkeypatch.setattr(drafting, "proposal", lambda m, toks: calls.append(1) or proposal(m, toks))
    d = LlamaDrafter(types.SimpleNamespace(draft_max=64, draft_model=SuffixLookup(), cost=cost, source="ngram"), 1000)
    if not alone:
        d.suffix = False   # propose and choose_together every step
    d.start(0, None, len(prompt))
    hist, out, i = list(prompt), [], 0
    while i < len(answer):
        limit = min(64, max_tokens - i - 1)
        drafts = d.propose({0: (hist, limit)})[0]
        kept = 0
        while kept < len(drafts) and i + 1 + kept < len(answer) and drafts[kept] == answer[i + 1 + kept]:
            kept += 1
        if drafts:
            d.dls[0].update(d.keys[0], len(drafts), kept)
        out.append(tuple(drafts))
        hist.extend(answer[i:i + 1 + kept])
        i += 1 + kept
    return out, len(calls)


def test_same_drafts_fewer_proposals(monkeypatch):
    rng = random.Random(7)
    skipped = 0
    for case in range(12):
        prompt, answer = _text(rng)
        for cost in TABLES:
            max_tokens = rng.choice([len(answer), 300, 10 ** 6])   # the cap falls near max_tokens
            ref, _ = _serve(cost, prompt, answer, False, max_tokens, monkeypatch)
            got, calls = _serve(cost, prompt, answer, True, max_tokens, monkeypatch)
            assert got == ref, (case, cost)
            skipped += len(got) - calls
            if cost is CHEAP:
                assert calls == len(got)   # every match may draft: nothing to skip
    assert skipped > 1000   # on SMOL most steps of these texts skip (a one-token match: the next 2 steps)


def test_shortest():
    dl = DraftLength(SMOL, 64)
    s = dl.shortest(64, 200)
    # the shortest match that may draft is a bucket's; every shorter one's key is cut to nothing alone
    assert s in NGRAM_BUCKETS and s > 1
    for b in NGRAM_BUCKETS:
        for kind in ("ngram", "repeat"):
            k = choose_together([(dl, f"{kind}{b}", 64)], SMOL, context=200)[0]
            if b < s:
                assert k == 0
    assert max(choose_together([(dl, f"{kind}{s}", 64)], SMOL, context=200)[0] for kind in ("ngram", "repeat")) > 0
    assert DraftLength(CHEAP, 64).shortest(64) == 1
    assert dl.shortest(0, 200) is None   # no room for a draft: no match drafts
    dl.update("repeat1", 1, 1)   # a key that learned stops the skip at its bucket: its choice would forget
    assert dl.shortest(64, 200) == 1


def test_suffix_match_grows_by_one():
    """The bound the skip rests on: a step's suffix match is at most the last one's plus one."""
    rng = random.Random(3)
    prompt, answer = _text(rng)
    text, last = list(prompt), None
    for t in answer:
        m = suffix_lookup(text, 32, 64)[1]
        if last is not None:
            assert m <= last + 1
        last = m
        text.append(t)


class Lookup(SuffixLookup):
    """The suffix lookup under another type: Llama's lossless mode proposes and chooses every step."""


def _generate(cost, prompt, answer, model, max_tokens):
    """Llama's lossless mode's drafts (Speculator._draft) over answer, kept while they match it, and
    the proposals made."""
    calls = []
    propose = model.propose
    model.propose = lambda toks: calls.append(1) or propose(toks)
    spec = Speculator(draft_model=model, draft_max=64, cost=cost)
    llm = types.SimpleNamespace(n_vocab=lambda: 1000)
    dl = DraftLength(cost, 64)
    seq, out, i = list(prompt), [], 0
    while i < min(len(answer), max_tokens):
        room = max_tokens - i - 1
        drafts, _, source, key = spec._draft(llm, seq, None, 64, {}, dl, room, len(prompt))
        kept = 0
        while kept < len(drafts) and i + 1 + kept < len(answer) and drafts[kept] == answer[i + 1 + kept]:
            kept += 1
        dl.update(key, len(drafts), kept)
        out.append((tuple(drafts), source))
        seq.extend(answer[i:i + 1 + kept])
        i += 1 + kept
    return out, len(calls)


def test_llama_lossless_same_drafts_fewer_proposals():
    rng = random.Random(11)
    skipped = 0
    for case in range(8):
        prompt, answer = _text(rng)
        for cost in TABLES:
            max_tokens = rng.choice([len(answer), 300])
            ref, ref_calls = _generate(cost, prompt, answer, Lookup(), max_tokens)
            got, calls = _generate(cost, prompt, answer, SuffixLookup(), max_tokens)
            assert got == ref, (case, cost)
            assert ref_calls >= len(ref) - 1   # every step but a last one without room proposes
            skipped += len(got) - calls
    assert skipped > 500
