"""Completions: result shapes as llama-cpp-python's, streaming, stop strings, seeds, chat."""
from __future__ import annotations

import pytest


def test_result_shape(llm):
    r = llm("Rivers flow", max_tokens=8, temperature=0)
    assert set(r) == {"id", "object", "created", "model", "choices", "usage"}
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-")
    (c,) = r["choices"]
    assert set(c) == {"text", "index", "logprobs", "finish_reason"}
    assert c["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 8
    assert r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"] + 8


def test_stream_equals_non_stream(llm):
    full = llm("Once upon a time", max_tokens=40, temperature=0)["choices"][0]["text"]
    chunks = list(llm("Once upon a time", max_tokens=40, temperature=0, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == full
    assert all(c["object"] == "text_completion" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_stop_string_is_never_printed(llm):
    text = llm("The capital of France is", max_tokens=40, temperature=0)["choices"][0]["text"]
    assert "\n" in text
    r = llm("The capital of France is", max_tokens=40, temperature=0, stop=["\n"])
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["choices"][0]["text"] == text[: text.index("\n")]
    streamed = "".join(c["choices"][0]["text"] for c in
                       llm("The capital of France is", max_tokens=40, temperature=0, stop="\n", stream=True))
    assert streamed == r["choices"][0]["text"]


def test_seed_reproducible(llm):
    a = llm("A list of fruits:", max_tokens=24, temperature=0.9, seed=123)["choices"][0]["text"]
    b = llm("A list of fruits:", max_tokens=24, temperature=0.9, seed=123)["choices"][0]["text"]
    c = llm("A list of fruits:", max_tokens=24, temperature=0.9, seed=124)["choices"][0]["text"]
    assert a == b
    assert a != c


def test_chat_completion_and_stream(llm):
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    r = llm.create_chat_completion(msgs, max_tokens=32, temperature=0)
    assert r["object"] == "chat.completion"
    msg = r["choices"][0]["message"]
    assert msg["role"] == "assistant" and msg["content"].strip()
    chunks = list(llm.create_chat_completion(msgs, max_tokens=32, temperature=0, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == msg["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == r["choices"][0]["finish_reason"]


@pytest.mark.parametrize("ref_kw, our_kw", [({"n_batch": 1}, {"batch_invariant": True}), ({}, {})],
                         ids=["stepwise", "default"])
def test_chat_matches_llama_cpp(smol_path, ref_kw, our_kw):
    """The default computes what llama-cpp-python computes by default; batch_invariant=True, what
    llama.cpp computes one token per step."""
    import llama_cpp
    from pyriver import Llama
    ref = llama_cpp.Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, **ref_kw)
    msgs = [{"role": "user", "content": "Name two rivers in Africa."}]
    want = ref.create_chat_completion(msgs, max_tokens=40, temperature=0)["choices"][0]["message"]["content"]
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, **our_kw) as llm:
        got = llm.create_chat_completion(msgs, max_tokens=40, temperature=0)["choices"][0]["message"]["content"]
    assert got == want


def test_echo_and_samplers(llm):
    r = llm("Echo this:", max_tokens=6, temperature=0, echo=True)
    assert r["choices"][0]["text"].startswith("Echo this:")
    plain = llm("Echo this:", max_tokens=6, temperature=0)["choices"][0]["text"]
    assert r["choices"][0]["text"] == "Echo this:" + plain
    for kw in (dict(top_k=1), dict(top_p=0.0001), dict(min_p=0.999)):
        # Each of these leaves only the most likely token: the greedy text.
        assert llm("Echo this:", max_tokens=6, temperature=1.0, seed=1, **kw)["choices"][0]["text"] == plain
    t = llm("Echo this:", max_tokens=12, temperature=0.8, typical_p=0.5, repeat_penalty=1.3,
            frequency_penalty=0.5, presence_penalty=0.5, seed=3)
    assert t["usage"]["completion_tokens"] >= 1
    with pytest.raises(ValueError, match="top_p"):
        llm("x", max_tokens=2, top_p=1.5)
