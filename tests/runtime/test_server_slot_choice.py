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


def _turns(url):
    q1 = [{"role": "user", "content": "Name three rivers of Europe."}]
    s1, r1 = http("POST", url + "/v1/chat/completions", {"messages": q1, "max_tokens": 24, "temperature": 0})
    assert s1 == 200, r1
    q2 = q1 + [r1["choices"][0]["message"], {"role": "user", "content": "Which is the longest?"}]
    s2, r2 = http("POST", url + "/v1/chat/completions", {"messages": q2, "max_tokens": 4, "temperature": 0})
    assert s2 == 200, r2
    return r1["usage"], r2["timings"]["cache_n"]


def test_a_next_turn_continues_the_answer_s_rows_as_on_llama_server(smol_path):
    """The answer's rows stay with the prompt's (llama-server's slot keeps both), so a conversation's next
    turn computes only its new message; under an exit rule the answer's rows are not full depth's and
    only the prompt's stay."""
    flags = ("--threads", "2", "--ctx", "1024", "--parallel", "1")
    py, ls = ServerProcess(smol_path, *flags, "--no-lossless"), llama_server("-m", smol_path, "-t", "2", "-c", "1024", "--parallel", "1")
    try:
        (u1, ours), (_, theirs) = _turns(py.url), _turns(ls.url)
    finally:
        py.close()
        ls.close()
    assert ours == theirs and ours >= u1["prompt_tokens"] + u1["completion_tokens"] - 2, (ours, theirs, u1)
    river = ServerProcess(smol_path, *flags, "--river", "q4_0", "--tau", "0.9")
    try:
        u1, cached = _turns(river.url)
    finally:
        river.close()
    assert cached <= u1["prompt_tokens"]
