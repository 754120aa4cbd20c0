"""Reliability of one Llama: the context filling up with River on, calls from several threads, and
results that do not depend on the cache's history or on batching."""
from __future__ import annotations

import threading

import pytest

from pyriver import ContextFullError, Llama

pytestmark = pytest.mark.slow


def test_context_full_with_river_is_length_then_reusable(smol_path):
    """Filling the whole cache (with exits writing K/V through river blocks) ends as 'length' at
    exactly n_ctx, the next generation past it is refused cleanly, and repeats are identical
    (batch-invariant: by default a repeat runs its last prompt token alone, as llama_cpp does)."""
    with Llama(smol_path, n_ctx=48, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975,
               batch_invariant=True) as llm:
        outs = []
        for _ in range(3):
            out = llm("Count from one to one hundred: one, two,", max_tokens=-1, temperature=0)
            assert out["choices"][0]["finish_reason"] == "length"
            assert out["usage"]["total_tokens"] == 48
            outs.append(out["choices"][0]["text"])
            assert llm.n_tokens <= 48
        assert outs[0] == outs[1] == outs[2]
        with pytest.raises(ContextFullError):
            llm.decode_logits([5] * 49)
        assert llm.river_stats()["tokens"] > 0


def test_four_threads_on_one_llama_with_river(smol_path):
    """Calls from four threads (streaming and not, completion and chat) serialize step by step:
    every result equals the one-thread result, and no thread is left waiting."""
    with Llama(smol_path, n_ctx=1024, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975) as llm:
        def one(i):
            if i % 2:
                msgs = [{"role": "user", "content": f"Name {i} colours."}]
                out = llm.create_chat_completion(msgs, max_tokens=20, temperature=0, stream=i == 3)
                if i == 3:
                    return "".join(c["choices"][0]["delta"].get("content", "") for c in out)
                return out["choices"][0]["message"]["content"]
            out = llm(f"River number {i} flows", max_tokens=20, temperature=0, stream=i == 2)
            return "".join(c["choices"][0]["text"] for c in out) if i == 2 else out["choices"][0]["text"]

        want = [one(i) for i in range(4)]
        got = [[] for _ in range(4)]
        th = [threading.Thread(target=lambda i=i: [got[i].append(one(i)) for _ in range(3)]) for i in range(4)]
        for t in th:
            t.start()
        for t in th:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in th)
        assert got == [[w] * 3 for w in want]


def test_river_result_does_not_depend_on_cache_history_or_batching(smol_path):
    """With exits on, a prompt always runs at full depth and generated tokens one by one: the same
    call repeated (its prompt then all but one token cached), and a prompt split by n_batch into
    chunks with a last chunk of one token, give the same text and exits as the first call."""
    prompt = "The river flows down to the sea, and"
    kw = dict(n_ctx=256, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975)
    with Llama(smol_path, **kw) as llm:
        n = len(llm.tokenize(prompt.encode()))
        first = llm(prompt, max_tokens=24, temperature=0)["choices"][0]["text"], llm.river_stats()["exit_layers"]
        again = llm(prompt, max_tokens=24, temperature=0)["choices"][0]["text"], llm.river_stats()["exit_layers"]
    with Llama(smol_path, n_batch=n - 1, **kw) as split:
        chunked = split(prompt, max_tokens=24, temperature=0)["choices"][0]["text"], split.river_stats()["exit_layers"]
    assert len(set(first[1])) > 1          # exits really happened at different blocks
    assert again == first
    assert chunked == first
