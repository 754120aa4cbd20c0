"""A real `pyriver serve --parallel 4` and llama-server --parallel 4 (the peer) take the same
requests in turn: each request keeps as many cached prompt tokens on both (the slot llama-server
chooses, and whether its prompt cache is updated: Scheduler._slot_for), so its first token's
log-probabilities are the same. A prompt computed whole and one computed after a reused prefix differ
in their last bits; with the old choice (the slot with the longest reusable prefix, however short)
the sixth request reused 24 tokens where llama-server computed all 284, and its first log-probability
was 0.023 away."""
from __future__ import annotations

from pyriver.tools.prompts import PROMPTS, SERVE_EDIT_PROMPTS
from server_proc import ServerProcess, http, llama_server

PROMPTS6 = [p for k, p in PROMPTS if k == "chat"][:4] + [p for _, p in SERVE_EDIT_PROMPTS][:2]


def _ask(url, prompt):
    status, r = http("POST", url + "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                                            "max_tokens": 2, "temperature": 0, "logprobs": True,
                                                            "top_logprobs": 1})
    assert status == 200, r
    first = r["choices"][0]["logprobs"]["content"][0]
    return r["timings"]["cache_n"], r["timings"]["prompt_n"], first["token"], first["logprob"]


def test_requests_keep_the_cached_prefix_llama_server_keeps(smol_path):
    py = ServerProcess(smol_path, "--threads", "2", "--ctx", "2048", "--parallel", "4", "--no-lossless")
    try:
        ls = llama_server("-m", smol_path, "-t", "2", "-tb", "2", "-c", "8192", "--parallel", "4")
        try:
            seen = [(_ask(py.url, p), _ask(ls.url, p)) for p in PROMPTS6]
        finally:
            ls.close()
    finally:
        py.close()
    assert [a[:2] for a, _ in seen] == [b[:2] for _, b in seen]
    assert any(b[0] == 0 for _, b in seen[1:])   # a later prompt that llama-server computed whole
    for a, b in seen:
        assert a[2] == b[2] and abs(a[3] - b[3]) < 1e-3, (a, b)
