"""With batch_invariant=True a greedy result never depends on who else used the model: the same
tokens in the cache, reached any way (prompt split into steps, decode steps, threads, n_batch,
other callers' turns, prefix reuse), give the same logits bit for bit. The default computes what
llama-cpp-python computes for the same calls, prefix reuse included. Interleavings are driven step
by step in one thread, so no test here depends on luck or timing; the racing-thread tests are in
test_dropin and test_context_and_threads."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from helpers import model_path
from pyriver import Llama
from pyriver.engine.sampling import Sampler, SamplingParams

TEXT = b"The river carries the water of the mountains down to the sea; along its banks, towns grew where boats"


def _last_logits(llm, steps):
    """From an empty cache, the steps (("prompt" | "decode", tokens) pairs) in order; the logits
    after the last token."""
    llm.reset()
    out = None
    for kind, toks in steps:
        out = llm.decode_logits(toks, prompt=kind == "prompt")[-1]
    return out


def _ways(s):
    """Ways to bring the same tokens into the cache."""
    return {
        "one prompt step": [("prompt", s)],
        "prompt in steps of 1, 3, 7 and the rest": [("prompt", s[:1]), ("prompt", s[1:4]), ("prompt", s[4:11]),
                                                    ("prompt", s[11:])],
        "a prompt, then decode steps": [("prompt", s[:10])] + [("decode", [t]) for t in s[10:]],
        "decode steps only": [("decode", [t]) for t in s],
    }


# Gemma 3 270M: Q4_K/Q6_K matrices and sliding-window layers; SmolLM2: Q4_1 with a Q8_0 head;
# mha: F32 matrices (llamafile's tinyBLAS takes every F32 product of two or more tokens).
@pytest.mark.parametrize("model", ["smol", "gemma3_270m", "mha"])
def test_same_tokens_give_the_same_logits_however_reached(request, model):
    path = model_path(request, model)
    with Llama(path, n_ctx=256, n_threads=2, n_threads_batch=2, verbose=False, batch_invariant=True) as llm:
        assert llm.batch_invariant
        s = llm.tokenize(TEXT)[:40]
        ways = _ways(s)
        ref = _last_logits(llm, ways.pop("one prompt step"))
        for name, steps in ways.items():
            assert np.array_equal(_last_logits(llm, steps), ref), name
    # Other threads for decode and for prompts, and n_batch chunks of 5 tokens.
    for kw in ({"n_threads": 1, "n_threads_batch": 2}, {"n_threads": 2, "n_threads_batch": 1}, {"n_batch": 5}):
        with Llama(path, n_ctx=256, verbose=False, batch_invariant=True, **kw) as other:
            assert np.array_equal(other.decode_logits(s)[-1], ref), kw
            assert np.array_equal(_last_logits(other, _ways(s)["a prompt, then decode steps"]), ref), kw


def test_by_default_the_step_shows(smol_path):
    """Control for the test above: by default (llama.cpp's kernels for multi-token steps) how the
    tokens came in shows in the logits (so the comparison above can fail)."""
    with Llama(smol_path, n_ctx=256, n_threads=2, n_threads_batch=2, verbose=False) as llm:
        assert not llm.batch_invariant
        ways = _ways(llm.tokenize(TEXT)[:40])
        ref = _last_logits(llm, ways.pop("one prompt step"))
        assert not np.array_equal(_last_logits(llm, ways["a prompt, then decode steps"]), ref)


class _Recorder(Sampler):
    """Greedy, keeping every logits row it chose from."""

    def __init__(self):
        super().__init__(SamplingParams(temperature=0.0), None)
        self.seen = []

    def sample(self, logits, seq):
        self.seen.append(np.array(logits, copy=True))
        return super().sample(logits, seq)


def _interleave(gens, pattern):
    """Advance each generator `pattern[i]` steps in turn until all are done."""
    outs = [[] for _ in gens]
    live = set(range(len(gens)))
    for i in itertools.cycle(range(len(gens))):
        if not live:
            return outs
        for _ in range(pattern[i]):
            if i not in live:
                break
            try:
                outs[i].append(next(gens[i]))
            except StopIteration:
                live.discard(i)


PROMPTS = ["The first river", "A second, different prompt about cities and their bridges", "The first river runs"]


@pytest.mark.parametrize("invariant", [True, False], ids=["batch-invariant", "default"])
@pytest.mark.parametrize("river", [None, "q4_0"], ids=["river off", "river on"])
def test_interleaved_generations_equal_alone(smol_path, river, invariant):
    """Three generations on one Llama, advanced in turns of different lengths (the third shares a
    prefix with the first): each sees, at every step, the logits it sees alone, bit for bit, and
    makes the same tokens. With River on, exits included (a generated token is re-run as a decode
    step, never as part of another caller's prompt). By default too on SmolLM2, whose prompt steps
    give the same bits however a prompt is split (docs/default-cpu.md; Gemma's do not): a
    generation re-runs its own tokens as decode steps, one each, as it first computed them."""
    kw = {"river": river, "exit_threshold": 0.975} if river else {"river": None}
    with Llama(smol_path, n_ctx=1024, n_threads=2, verbose=False, batch_invariant=invariant, **kw) as llm:
        alone = []
        for p in PROMPTS:
            rec = _Recorder()
            toks = list(llm.context.generate_tokens(llm.tokenize(p.encode()), rec, 20))
            alone.append((toks, rec.seen))
        for pattern in ([1, 1, 1], [3, 1, 2], [7, 2, 1]):
            recs = [_Recorder() for _ in PROMPTS]
            gens = [llm.context.generate_tokens(llm.tokenize(p.encode()), r, 20) for p, r in zip(PROMPTS, recs)]
            outs = _interleave(gens, pattern)
            for (toks, seen), got, rec in zip(alone, outs, recs):
                assert got == toks, pattern
                assert len(rec.seen) == len(seen) and all(np.array_equal(a, b) for a, b in zip(rec.seen, seen)), pattern


@pytest.mark.parametrize("river", [None, "q4_0"], ids=["river off", "river on"])
def test_second_chat_turn_is_the_same_with_or_without_reuse(smol_path, river):
    """A chat's second turn on the Llama that answered the first (its prompt cached) equals the
    same turn on a fresh Llama, log-probabilities included. River off, the first answer's tokens
    are reused from the cache; River on, they were decode steps with exits, so they are computed
    again as the second turn's prompt, as a fresh Llama computes them."""
    kw = {"river": river, "exit_threshold": 0.975} if river else {"river": None}
    kw["batch_invariant"] = True
    first = [{"role": "user", "content": "Name a river in Europe."}]
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, **kw) as llm:
        answer = llm.create_chat_completion(first, max_tokens=16, temperature=0)["choices"][0]["message"]
        convo = first + [answer, {"role": "user", "content": "And one in Asia?"}]
        reused = llm.create_chat_completion(convo, max_tokens=16, temperature=0, logprobs=3)
        evaluated = llm.last_stats["prompt_eval_tokens"]
        total = llm.last_stats["prompt_tokens"]
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, **kw) as fresh:
        alone = fresh.create_chat_completion(convo, max_tokens=16, temperature=0, logprobs=3)
    assert reused["choices"][0]["message"] == alone["choices"][0]["message"]
    assert reused["choices"][0]["logprobs"] == alone["choices"][0]["logprobs"]
    assert evaluated < total   # the first turn's prompt came from the cache


def _llama_cpp_greedy(ref, tokens, n):
    """llama_cpp.Llama.generate at temperature 0, stopped after n tokens (or before an end token)
    as its create_completion stops it: each token and the logits it was chosen from."""
    import llama_cpp
    out, seen = [], []
    for tok in ref.generate(tokens, temp=0.0, top_k=1):
        if llama_cpp.llama_vocab_is_eog(ref._model.vocab, tok):
            break
        seen.append(np.ctypeslib.as_array(ref._ctx.get_logits(), shape=(ref.n_vocab(),)).copy())
        out.append(tok)
        if len(out) == n:
            break
    return out, seen


def test_default_chat_turns_are_llama_cpps(smol_path):
    """The default on one Llama, two turns (the second's prompt holds the first answer): every
    token and every logits row it was chosen from equal llama_cpp.Llama's with its defaults on the
    same calls, bit for bit. Both reuse the cached prefix, the first answer included (decode steps,
    not recomputed as a prompt), and neither runs the last token max_tokens ended on."""
    import llama_cpp
    ref = llama_cpp.Llama(smol_path, n_ctx=512, n_threads=2, verbose=False)
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river=None) as llm:
        p1 = llm.tokenize(b"<|im_start|>user\nWrite a poem about a river.<|im_end|>\n<|im_start|>assistant\n", special=True)
        rec = _Recorder()
        g1 = list(llm.context.generate_tokens(p1, rec, 8))
        want1, seen1 = _llama_cpp_greedy(ref, p1, 8)
        assert g1 == want1 and len(g1) == 8   # ended by max_tokens: its last token was not run
        assert all(np.array_equal(a, b) for a, b in zip(rec.seen, seen1))
        p2 = p1 + g1 + llm.tokenize(b"<|im_end|>\n<|im_start|>user\nAnd one about the sea?<|im_end|>\n<|im_start|>assistant\n",
                                    add_bos=False, special=True)
        rec = _Recorder()
        g2 = list(llm.context.generate_tokens(p2, rec, 16))
        assert llm.last_stats["prompt_eval_tokens"] == len(p2) - (len(p1) + 7)   # the first answer was reused
        want2, seen2 = _llama_cpp_greedy(ref, p2, 16)
        assert g2 == want2
        assert len(rec.seen) == len(seen2) and all(np.array_equal(a, b) for a, b in zip(rec.seen, seen2))
    ref.close()
