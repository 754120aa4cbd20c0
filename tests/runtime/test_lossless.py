"""Lossless mode, greedy: the river drafts, the backbone verifies, and the output is full depth's
token for token (with batch_invariant=True, so that a verify step's rows are the logits single
decode steps give). Every check here is exact."""
from __future__ import annotations


import numpy as np
import pytest

from helpers import PROMPTS, code_lines, interrupted_at, model_path
from pyriver import Llama
from pyriver.engine import debug
from pyriver.engine.sampling import Sampler, SamplingParams

N_TOKENS = 128
# (model, river type, tau, min exit layer, longest draft). tau 0.0 exits nearly every token at its
# min layer: the draft runs almost the whole stack on the river (acceptance is lowest there).
CONFIGS = [
    ("smol", "q4_0", 0.975, 4, 4),
    ("smol", "iq4_nl", 0.985, 4, 6),
    ("smol", "q4_0", 0.0, 2, 3),
    ("gqa_untied", "q8_0", 0.0, 1, 2),
    ("deep_rope_linear", "q4_0", 0.0, 1, 5),
    ("mha", "q4_0", 0.0, 0, 1),
]


def _greedy_tokens(llm, tokens, n: int = N_TOKENS):
    return list(llm.context.generate_tokens(tokens, Sampler(SamplingParams(temperature=0.0)), n))


def _greedy(llm, prompt: str, n: int = N_TOKENS):
    return _greedy_tokens(llm, llm.tokenize(prompt.encode(), add_bos=True), n)


def _lossless(path, river, tau, min_layer, k, **kw):
    return Llama(path, n_ctx=512, n_threads=2, verbose=False, river=river, exit_threshold=tau,
                 min_exit_layer=min_layer, lossless=True, draft_max=k, river_force=True, **{"batch_invariant": True, **kw})


@pytest.fixture(scope="module")
def full_depth(request):
    """river=None tokens per model and prompt, computed once."""
    cache = {}

    def get(model, prompt):
        if (model, prompt) not in cache:
            with Llama(model_path(request, model), n_ctx=512, n_threads=2, verbose=False, river=None,
                       batch_invariant=True) as full:
                for p in PROMPTS:
                    cache[(model, p)] = _greedy(full, p)
        return cache[(model, prompt)]
    return get


@pytest.mark.parametrize("model,river,tau,min_layer,k", CONFIGS)
def test_greedy_tokens_equal_full_depth(request, full_depth, model, river, tau, min_layer, k):
    drafted = accepted = 0
    exits = []
    with _lossless(model_path(request, model), river, tau, min_layer, k) as llm:
        for prompt in PROMPTS:
            assert _greedy(llm, prompt) == full_depth(model, prompt), prompt
            ls = llm.river_stats()["lossless"]
            drafted, accepted = drafted + ls["drafted"], accepted + ls["accepted"]
            exits.append(ls["draft_mean_exit_layer"])
            assert ls["verify_steps"] > 0
    # Both outcomes of verification happened: drafts kept and drafts cut.
    assert 0 < accepted < drafted
    if tau == 0.0:   # nearly every draft exits at the first checked block (whose cos(in, out) >= 0)
        assert max(exits) < min_layer + 0.5


def test_verify_rows_are_full_depth_rows(smol_path):
    """Every row of every verify step equals a full-depth batched evaluation of the same tokens."""
    with _lossless(smol_path, "q4_0", 0.975, 4, 4) as llm, \
            Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river=None, batch_invariant=True) as full:
        steps = []
        real = llm.decode_logits

        def recording(tokens, logits_all=False, prompt=False):
            before = llm._input_ids.tolist()
            rows = real(tokens, logits_all=logits_all, prompt=prompt)
            if logits_all:
                steps.append((before, list(tokens), rows))
            return rows
        llm.decode_logits = recording
        llm(PROMPTS[2], max_tokens=40, temperature=0)
        assert sum(len(t) > 1 for _, t, _ in steps) >= 3
        for before, toks, rows in steps:
            full.reset()
            ref = full.decode_logits(before + toks, logits_all=True, prompt=True)[len(before):]
            assert np.array_equal(rows, ref)


def _third_draft_wrong(ref, n_vocab):
    """A draft model that knows full depth's greedy sequence ref (prompt included) and proposes its
    next three tokens with the third one wrong on purpose: every verify step of three drafts keeps
    two and cuts one, on any CPU (a river's drafts are kept or cut as its arithmetic falls)."""
    def draft(ids):
        nxt = list(ref[len(ids):len(ids) + 3])
        if len(nxt) == 3:
            nxt[2] = (nxt[2] + 1) % n_vocab
        return np.array(nxt, dtype=np.intc)
    return draft


def test_poisoned_cache_is_never_read(smol_path):
    """Rows of cut drafts and never-written rows are not read: a cache filled with NaN or a large
    finite value gives the clean run's tokens and log-probabilities exactly (flash attention on the
    CPU skips masked rows, so NaN stays out of the logits unless a row that is read was never
    written). Drafts from the river (its decode steps' rows are cut before each verify step) and
    from a draft model wrong on purpose (verify steps that cut drafts, whatever the CPU: the
    river's 31 drafts of these 40 tokens were all kept on two CPUs). Control: garbage in a row
    that is read shows."""
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river=None) as full:
        prompt = full.tokenize(PROMPTS[0].encode(), add_bos=True)
        ref = prompt + _greedy_tokens(full, prompt, 40)
        wrong = _third_draft_wrong(ref, full.n_vocab())
    river = dict(river="q4_0", exit_threshold=0.975, min_exit_layer=4, lossless=True, draft_max=4, river_force=True)
    for kw in (river, dict(river=None, draft_model=wrong, draft_max=3)):
        with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, flash_attn=True, **kw) as llm:
            def run():
                llm.reset()
                r = llm(PROMPTS[0], max_tokens=40, temperature=0, logprobs=3)["choices"][0]
                return r["text"], r["logprobs"]
            clean = run()
            ls = llm.river_stats()["lossless"]
            assert ls["verify_steps"] > 0
            if ls["draft"] != "river":   # drafts both kept and cut, many times
                assert ls["accepted"] >= 10 and ls["drafted"] - ls["accepted"] >= 5, ls
            for value in (1000.0, float("nan")):
                llm.reset()
                debug.kv_fill(llm, value)
                assert run() == clean
    # Control: the garbage where a row that is read lies.
    with _lossless(smol_path, "q4_0", 0.975, 4, 4, flash_attn=True, batch_invariant=False) as llm:
        prompt = llm.tokenize(PROMPTS[0].encode())
        llm.reset()
        llm.decode_logits(prompt)
        ref = llm.decode_logits([1], prompt=True)
        llm.reset()
        llm.decode_logits(prompt)
        debug.kv_fill(llm, 1000.0)
        assert not np.array_equal(ref, llm.decode_logits([1], prompt=True))


@pytest.mark.parametrize("model", ["smol", "gqa_untied"])
def test_context_full_in_the_middle_of_a_draft(request, model):
    """The context ends inside a draft: the same tokens, finish reason and usage as full depth."""
    path = model_path(request, model)
    prompt = PROMPTS[1]
    with Llama(path, n_ctx=512, n_threads=2, verbose=False, river=None) as probe:
        n_ctx = len(probe.tokenize(prompt.encode())) + 13   # 13: not a multiple of any draft length + 1
    outs = []
    for kw in (dict(river=None), dict(river="q4_0", exit_threshold=0.97, min_exit_layer=1, lossless=True,
                                      draft_max=6, river_force=True)):
        with Llama(path, n_ctx=n_ctx, n_threads=2, verbose=False, batch_invariant=True, **kw) as llm:
            r = llm(prompt, max_tokens=0, temperature=0, logprobs=1)
            c = r["choices"][0]
            outs.append((c["text"], c["finish_reason"], r["usage"], c["logprobs"]["tokens"]))
            if kw.get("lossless"):
                assert llm.river_stats()["lossless"]["verify_steps"] > 1
    assert outs[0] == outs[1]
    assert outs[0][1] == "length"


@pytest.mark.parametrize("fn", ["generate", "_step", "_river_draft"])   # _draft hands river drafts to _river_draft
def test_interrupt_at_every_line_of_draft_and_verify(synth_paths, fn):
    """A KeyboardInterrupt at each line of the lossless loop (mid-draft, mid-verify, mid-cut): the
    next result equals a fresh object's, statistics included. The check's prompt continues the
    interrupted call's text, so rows that call left in the cache (drafts, cut or not) are there to
    be reused wrongly."""
    from pyriver.speculative.lossless import Speculator
    path = synth_paths["gqa_untied"]
    kw = dict(n_ctx=256, n_threads=2, verbose=False, river="q8_0", exit_threshold=0.0, min_exit_layer=1,
              lossless=True, draft_max=3, batch_invariant=True)
    with Llama(path, **kw) as fresh:
        start = fresh.tokenize(b"A river is")
        follow = start + _greedy_tokens(fresh, start, 12)

        def check(llm):
            r = llm(follow, max_tokens=20, temperature=0, logprobs=2)
            return r["choices"][0]["text"], r["choices"][0]["logprobs"], llm.river_stats()["lossless"]
        ref = check(fresh)
    fired = 0
    with Llama(path, **kw) as llm:
        for line in code_lines(getattr(Speculator, fn)):
            llm("The river flows down", max_tokens=5, temperature=0)   # a cache to reuse and cut
            fired += interrupted_at(getattr(Speculator, fn), line, lambda: llm(start, max_tokens=12, temperature=0))
            assert check(llm) == ref, f"after an interrupt at {fn} line {line}"
    assert fired >= len(code_lines(getattr(Speculator, fn))) // 2
