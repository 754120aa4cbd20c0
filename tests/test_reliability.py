"""Reliability on real runs: a short long-run (chat turns with context shifts, River on) without
fd/thread growth, load/close cycles without leaks, the context filling up with River on, and
several processes sharing one model file's pages."""
from __future__ import annotations

import pytest

from pyriver import ContextFullError, Llama, longrun, memshare


def test_short_long_run_has_no_fd_or_thread_growth(smol_path):
    res = longrun.run(smol_path, tokens=600, n_ctx=256, max_tokens=64, turns_per_conversation=5, reloads=4,
                      progress=False)
    assert res["tokens"] >= 600
    assert res["context_shifts"] >= 1 and res["resets"] >= 1   # both paths ran
    sm = longrun.summary(res, warmup_tokens=200)
    assert sm["fds"][0] == sm["fds"][1], sm
    assert sm["threads"][0] == sm["threads"][1], sm
    assert sm["reload_fds"][0] == sm["reload_fds"][1] and sm["reload_threads"][0] == sm["reload_threads"][1], sm
    # A leaked model or context is >= 90 MiB here (the mapped weights alone); the allocator's
    # own noise between cycles is a few MiB.
    assert sm["reload_rss"][1] - sm["reload_rss"][0] < 32, sm


def test_context_full_with_river_is_length_then_reusable(smol_path):
    """Filling the whole cache (with exits writing K/V through river blocks) ends as 'length' at
    exactly n_ctx, the next generation past it is refused cleanly, and repeats are identical."""
    with Llama(smol_path, n_ctx=48, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975) as llm:
        outs = []
        for _ in range(3):
            out = llm("Count from one to one hundred: one, two,", max_tokens=-1, temperature=0)
            assert out["choices"][0]["finish_reason"] == "length"
            assert out["usage"]["total_tokens"] == 48
            outs.append(out["choices"][0]["text"])
            assert len(llm.input_ids) <= 48
        assert outs[0] == outs[1] == outs[2]
        with pytest.raises(ContextFullError):
            llm.eval([5] * 49)
        assert llm.river_stats()["tokens"] > 0


def test_processes_share_the_mapped_weights(smol_path):
    """Three processes on one file: each maps the weights, and the pages are shared (their
    proportional share of the mapping is about a third of what each has resident)."""
    res = memshare.measure(smol_path, procs=3)
    assert len(set(res["outputs"])) == 1            # same text in every process
    for row in res["per_process"]:
        assert row["file_rss"] > 40                  # the weights really are read from the mapping
        assert row["file_pss"] < 0.5 * row["file_rss"], row


def test_four_threads_on_one_llama_with_river(smol_path):
    """Calls from four threads (streaming and not, completion and chat) serialize step by step:
    every result equals the one-thread result, and no thread is left waiting."""
    import threading
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
