"""Lossless mode's drafters (river, n-gram, both) and the draft length by cost: the choice of
drafter, the cost rule, and greedy output equal to full depth's with every drafter, adaptive k
included (batch_invariant=True, so that the check is exact)."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import RecordingCost, model_path
from pyriver import Llama
from pyriver.speculative.draft import SuffixLookup, NgramOrRiver, PromptLookupDecoding, drafter, proposal
from pyriver.speculative.draftlen import DEFAULT_COST, DraftCost, DraftLength
from pyriver.engine.sampling import Sampler, SamplingParams

# A completion that repeats its prompt's code (n-gram drafts match) and one that does not.
CODE = ("def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n\n\n"
        "# The same two functions again, unchanged:\ndef area(w, h):\n")
PROMPTS = [CODE, "The river flows through the old town, and in the evening"]
CHEAP = DraftCost([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7], river_draft=0.05)   # river drafts pay too


def _greedy(llm, prompt: str, n: int = 64):
    return list(llm.context.generate_tokens(llm.tokenize(prompt.encode(), add_bos=True),
                                     Sampler(SamplingParams(temperature=0.0)), n))


def test_drafter_selection(request):
    assert drafter("river") is None
    assert type(drafter("ngram")) is SuffixLookup and not getattr(drafter("ngram"), "river_fallback", False)
    assert type(drafter("both")) is NgramOrRiver and drafter("both").river_fallback
    with pytest.raises(ValueError, match="unknown drafter"):
        drafter("bigram")
    path = model_path(request, "smol")
    with Llama(path, n_ctx=256, n_threads=2, verbose=False, river="q4_0") as llm:
        for name, kind, fallback in [("ngram", SuffixLookup, False), ("both", NgramOrRiver, True),
                                     ("river", type(None), True)]:
            llm.set_lossless(True, draft_model=name, draft_max=5, draft_cost="default")
            s = llm.speculator
            assert type(s.draft_model) is kind and s.river_fallback == fallback and s.cost is DEFAULT_COST
        with pytest.raises(ValueError, match="unknown drafter"):
            llm.set_lossless(True, draft_model="bigram")
        with pytest.raises(TypeError, match="draft_cost"):
            llm.set_lossless(True, draft_model="ngram", draft_cost=[1.0, 1.2])
        assert llm("Hi", max_tokens=4, temperature=0)["choices"]   # still usable
    with Llama(path, n_ctx=256, n_threads=2, verbose=False, river=None) as llm:
        with pytest.raises(ValueError, match="river"):
            llm.set_lossless(True, draft_model="both")   # its fallback needs a river
        llm.set_lossless(True, draft_model="ngram")   # n-grams alone need none
        assert llm.lossless


def test_suffix_lookup_takes_the_longest_most_recent_match():
    d = SuffixLookup(max_ngram_size=8, num_pred_tokens=3)
    assert list(d(np.array([1, 2, 3, 4, 9, 2, 3, 4, 5, 1, 2, 3]))) == [4, 9, 2] and d.match_size == 3
    assert list(d(np.array([7, 3, 1, 8, 3, 2, 3]))) == [2, 3] and d.match_size == 1   # the most recent of equals
    assert d(np.array([5, 6, 7])).size == 0 and d.match_size == 0
    assert SuffixLookup(max_ngram_size=2)(np.array([1, 2, 3, 1, 2, 3])).size and SuffixLookup(2).match_size == 0


def test_drafters_propose_lists_as_their_calls_do():
    # the server and lossless mode ask for lists (pyriver.speculative.draft.proposal): the same tokens as a call
    d = SuffixLookup(max_ngram_size=8, num_pred_tokens=3)
    assert d.propose([1, 2, 3, 4, 9, 2, 3, 4, 5, 1, 2, 3]) == [4, 9, 2] and d.match_size == 3
    assert d.propose([7, 3, 1, 8, 3, 2, 3]) == [2, 3] and d.match_size == 1
    assert d.propose([5, 6, 7]) == [] and d.match_size == 0
    both = NgramOrRiver(SuffixLookup(max_ngram_size=8, num_pred_tokens=3))
    assert proposal(both, [1, 2, 3, 4, 9, 2, 3, 4, 5, 1, 2, 3]) == [4, 9, 2] and both.match_size == 3
    foreign = PromptLookupDecoding(max_ngram_size=3, num_pred_tokens=4)   # no propose(): called on an array
    got = proposal(foreign, [5, 1, 2, 3, 9, 7, 1, 2, 3])
    assert got == [9, 7, 1, 2] and all(type(t) is int for t in got) and foreign.match_size == 3
    rng = np.random.default_rng(0)
    for _ in range(300):   # repetitive texts, against the rule written out: longest suffix, most recent copy
        ids = rng.integers(0, 4, int(rng.integers(2, 60))).tolist()
        n, want = len(ids), ([], 0)
        for m in range(min(5, n - 1), 0, -1):
            ends = [e for e in range(m - 1, n - 1) if ids[e - m + 1:e + 1] == ids[n - m:]]
            if ends:
                want = (ids[ends[-1] + 1:ends[-1] + 7], m)
                break
        a, b = SuffixLookup(5, 6), SuffixLookup(5, 6)
        assert (a.propose(ids), a.match_size) == want == (list(b(np.array(ids))), b.match_size)


def test_ngram_match_size():
    d = PromptLookupDecoding(max_ngram_size=3, num_pred_tokens=4)
    assert list(d(np.array([5, 1, 2, 3, 9, 7, 1, 2, 3]))) == [9, 7, 1, 2] and d.match_size == 3
    assert list(d(np.array([5, 1, 2, 9, 2]))) == [9, 2] and d.match_size == 1
    assert d(np.array([5, 6, 7])).size == 0 and d.match_size == 0
    assert NgramOrRiver(d).match_size == 0


def test_draft_length_by_cost():
    dl = DraftLength(DraftCost([1.0, 1.3, 1.4, 1.5], river_draft=0.8), draft_max=6)
    assert dl.choose("ngram") == 2                 # free drafts at the 50% prior: 2 (1.25 tokens per cost)
    assert dl.choose("ngram", cap=1) == 1          # never past the proposal
    assert dl.choose("river") == 0                 # a draft at 0.8 of a step does not pay at 75%
    for _ in range(20):
        dl.update("ngram", 4, 0)                   # every n-gram draft rejected
    assert dl.choose("ngram") == 0                 # then a plain full-depth step
    assert max(dl.choose("ngram") for _ in range(30)) > 0   # not for good: the counts fade back to the prior
    cheap = DraftLength(DraftCost([1.0, 1.05], river_draft=0.1), draft_max=6)
    for _ in range(20):
        cheap.update("river", 4, 4)
    assert cheap.choose("river") == 6              # cheap, always kept: as long as allowed
    assert DraftCost([1.0, 1.5], 0.0).step(4) == 2.5   # beyond the table: the last increment
    assert DraftCost([1.0, 0.8, 1.2], 0.0).verify == [1.0, 0.8, 1.2]   # as measured: a longer step may cost less
    sparse = DraftCost({1: 1.0, 2: 1.8, 16: 7.6, 12: 8.8}, 0.0)
    assert sparse.step(16) == 7.6 and sparse.step(13) is None   # a size not measured is never taken
    dl = DraftLength(sparse, draft_max=64)
    for _ in range(5):
        dl.update("ngram16", 15, 15)               # long matches kept whole
    assert dl.choose("ngram20", cap=15) == 15      # 16 rows cost less than 12: the longer draft
    assert dl.choose("ngram20", cap=14) == 11      # a step of 13..15 is not in the table: the 12 below
    with pytest.raises(ValueError):
        DraftCost([1.0, 0.0], 0.0)


@pytest.mark.parametrize("name", ["ngram", "both", "river"])
def test_adaptive_k_keeps_full_depth_text(request, name):
    path = model_path(request, "smol")
    with Llama(path, n_ctx=512, n_threads=2, verbose=False, river=None, batch_invariant=True) as full:
        want = [_greedy(full, p) for p in PROMPTS]
    with Llama(path, n_ctx=512, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975,
               batch_invariant=True) as llm:
        llm.set_lossless(True, draft_model=name, draft_max=6, draft_cost=CHEAP)
        got, src = [], {}
        for p in PROMPTS:
            got.append(_greedy(llm, p))
            for s, v in llm.river_stats()["lossless"]["by_source"].items():
                o = src.get(s, {"drafted": 0, "accepted": 0, "longest": 0})
                src[s] = {"drafted": o["drafted"] + v["drafted"], "accepted": o["accepted"] + v["accepted"],
                          "longest": max(o["longest"], v["longest"])}
    assert got == want
    expect = {"ngram": {"ngram"}, "both": {"ngram", "river"}, "river": {"river"}}[name]
    assert set(src) == expect and all(v["drafted"] > 0 and v["accepted"] > 0 for v in src.values())   # drafted, kept
    assert max(v["longest"] for v in src.values()) > 2   # k grew past the starting choice


def test_draft_cost_parsing(tmp_path):
    """Every front end's --draft-cost / draft_cost reads through one rule (pyriver.speculative.draftlen.parse_cost)."""
    from pyriver.speculative.draftlen import parse_cost
    assert parse_cost(None) is None and parse_cost("default") is DEFAULT_COST and parse_cost(CHEAP) is CHEAP
    vc = tmp_path / "vc.json"
    vc.write_text('{"k": {"2": {"decode_steps": 1.5}, "1": {"decode_steps": 1.0}, "3": {"decode_steps": 1.7}}}')
    c = parse_cost(str(vc))
    assert c.verify == [1.0, 1.5, 1.7] and c.river_draft == DEFAULT_COST.river_draft
    assert parse_cost(c.to_dict()).verify == c.verify   # as a calibration stores it
    with pytest.raises(ValueError, match="not 'default' and not a readable file"):
        parse_cost(str(tmp_path / "missing.json"))
    vc.write_text('{"points": []}')
    with pytest.raises(ValueError, match="verify-cost"):
        parse_cost(str(vc))
    with pytest.raises(TypeError, match="draft_cost"):
        parse_cost(3)


def test_llama_takes_drafter_and_cost_at_construction(request):
    """Llama(lossless=True, draft_model=NAME, draft_cost=...) as `pyriver run` and the server make it:
    n-gram drafts without a river, their statistics by source and the draft length rule."""
    with Llama(model_path(request, "smol"), n_ctx=256, n_threads=2, verbose=False, river=None, lossless=True,
               draft_model="ngram", draft_max=6, draft_cost="default") as llm:
        assert llm.river_path is None and llm.speculator.cost is DEFAULT_COST
        llm(CODE, max_tokens=24, temperature=0)
        ls = llm.river_stats()["lossless"]
        assert ls["draft"] == "SuffixLookup" and ls["draft_length"] == "by cost"
        assert set(ls["by_source"]) == {"ngram"} and ls["by_source"]["ngram"]["drafted"] > 0


def test_lossless_reads_the_cost_at_each_steps_context(request):
    """Llama's lossless mode chooses each draft length at the context of its step (DraftCost.at)."""
    cost = RecordingCost([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7], 0.0, 10, (100, {n: 1.0 + 0.2 * (n - 1) for n in range(1, 9)}, 1.1))
    with Llama(model_path(request, "smol"), n_ctx=256, n_threads=2, verbose=False, river=None, lossless=True,
               draft_model="ngram", draft_cost=cost) as llm:
        n = len(llm.tokenize(CODE.encode()))
        llm(CODE, max_tokens=24, temperature=0)
    assert cost.seen and cost.seen[0] == n   # the prompt and the first token in the cache
    assert cost.seen == sorted(cost.seen) and cost.seen[-1] > n


def test_the_automatic_table_is_measured_at_two_contexts_once(request, tmp_cache, monkeypatch):
    from pyriver.speculative import costcurve
    from pyriver.api.llama import COST_PROMPT
    with Llama(model_path(request, "mha"), n_ctx=2048, n_threads=2, verbose=False, river=None) as llm:
        prompt = llm.tokenize(COST_PROMPT.encode())
        c, tile = costcurve.auto(llm, prompt)
        assert tile == 0   # no flash attention: no tiled verify steps
        assert c.context == len(prompt) and c.far[0] == costcurve.FAR * len(prompt)
        assert set(c.points) == set(c.far[1]) == set(costcurve.SIZES)

        def measure(*a, **k):
            raise AssertionError("measured again")
        monkeypatch.setattr(costcurve, "measure", measure)
        assert costcurve.auto(llm, prompt)[0].to_dict() == c.to_dict()   # read from the cache
    monkeypatch.undo()
    with Llama(model_path(request, "mha"), n_ctx=256, n_threads=2, verbose=False, river=None) as llm:
        c, _ = costcurve.auto(llm, llm.tokenize(COST_PROMPT.encode()))
        assert c.far is None and max(c.points) <= 128   # no room for a far context: one table
