"""LoRA adapters on a real `pyriver serve --lora` (server/lora.py), llama-server 0.3.36 with the same
flags as the referee: greedy texts through the openai client, a request's `lora` at scales 0, 0.5
and 1 (/completion), /lora-adapters GET and POST, two concurrent requests of different
configurations (never batched together: each answers as alone), bad entries as 400s, and /props and
/slots naming the adapters."""
from __future__ import annotations

import openai
import pytest

from server_proc import ServerProcess, http, together, llama_server

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "Name three rivers."}]
N = 24
SCALES = (0.0, 0.5, 1.0)


def _complete(url, scale=None, prompt=PROMPT):
    body = {"prompt": prompt, "n_predict": N, "temperature": 0}
    if scale is not None:
        body["lora"] = [{"id": 0, "scale": scale}]
    status, d = http("POST", url + "/completion", body)
    assert status == 200, d
    return d["content"]


def _client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def _script(url):
    """The same requests, in the same order, on either server (one slot each, so that both reuse or
    drop a slot's cache alike): greedy texts through the openai client, /completion at each scale,
    and the server's scales set by POST /lora-adapters."""
    c = _client(url)
    out = {"chat": c.chat.completions.create(model="m", messages=CHAT, max_tokens=N,
                                             temperature=0).choices[0].message.content,
           # each prompt runs once per configuration: a prompt loaded back from a cache computes its
           # last token alone, whose bits may differ from a whole prompt's (either server)
           "v1": c.completions.create(model="m", prompt="Once upon a time, a river", max_tokens=N,
                                      temperature=0).choices[0].text,
           **{s: _complete(url, s) for s in SCALES},
           "get": http("GET", url + "/lora-adapters")}
    for i, scales in enumerate(([{"id": 0, "scale": 0.5}], [], [{"id": 0, "scale": 1.0}])):
        out[f"post{i}"] = http("POST", url + "/lora-adapters", scales)
        out[f"get{i}"] = http("GET", url + "/lora-adapters")
        out[f"default{i}"] = _complete(url, prompt=f"{i} {PROMPT}")   # a request without lora: the server's scales
    return out


@pytest.fixture(scope="module")
def peer(smol_path, smol_lora_path):
    p = llama_server("-m", smol_path, "--lora", smol_lora_path, "-c", "512", "-np", "1", "-t", "2")
    try:
        return _script(p.url)
    finally:
        p.close()


def _serve(path, lora, parallel):
    # --no-lossless: llama-server drafts nothing by default (pyriver's n-gram drafts verify in multi-token rows)
    return ServerProcess(path, "--lora", lora, "--parallel", str(parallel), "--ctx", "256", "--threads", "2",
                         "--no-lossless")


@pytest.fixture(scope="module")
def served(smol_path, smol_lora_path):
    s = _serve(smol_path, smol_lora_path, 1)
    yield s
    s.close()


@pytest.mark.peer
def test_texts_scales_and_lora_adapters_equal_llama_servers(served, peer):
    got = _script(served.url)
    assert got == peer
    assert len({peer[s] for s in SCALES}) == 3   # each scale its own text: a scale ignored shows
    assert peer["get0"][1][0]["scale"] == 0.5 and peer["default0"] != peer["default1"]


@pytest.mark.peer
def test_concurrent_requests_of_different_configurations(smol_path, smol_lora_path, peer):
    """Two slots, three configurations at once: the scheduler runs one configuration per step, by
    turns, so each text is the one it has alone; /slots and /props name the adapters."""
    s = _serve(smol_path, smol_lora_path, 2)
    try:
        assert together(lambda x: _complete(s.url, x), SCALES) == {x: peer[x] for x in SCALES}
        slots = http("GET", s.url + "/slots")[1]
        assert all(sl["lora"] in ([], [{"id": 0, "scale": 0.5}], [{"id": 0, "scale": 1.0}]) for sl in slots)
        assert any(sl["lora"] for sl in slots)
        assert http("GET", s.url + "/props")[1]["default_generation_settings"]["params"]["lora"] == \
            [{"id": 0, "scale": 1.0}]
    finally:
        s.close()


@pytest.mark.parametrize("path, body", [
    ("/completion", {"prompt": PROMPT, "lora": [{"id": 1, "scale": 1.0}]}),
    ("/completion", {"prompt": PROMPT, "lora": [{"id": 0, "scale": "big"}]}),
    ("/completion", {"prompt": PROMPT, "lora": {"id": 0}}),
    ("/v1/completions", {"prompt": PROMPT, "lora": [{"id": -1, "scale": 1}]}),
    ("/v1/chat/completions", {"messages": CHAT, "lora": [{"id": True, "scale": 1}]}),
    ("/v1/chat/completions", {"messages": CHAT, "lora": [{"id": 0}]}),
    ("/lora-adapters", {"id": 0, "scale": 1}),
    ("/lora-adapters", [{"id": 3, "scale": 1}]),
    ("/lora-adapters", b"[{"),
])
def test_bad_lora_entries_are_400s(served, path, body):
    status, d = http("POST", served.url + path, body)
    assert status == 400 and d["error"]["type"] == "invalid_request_error", d
    assert http("GET", served.url + "/lora-adapters")[1][0]["scale"] == 1.0   # nothing changed


def test_server_flags(smol_path, smol_lora_path):
    """--lora-init-without-apply: loaded at 0 (llama-server's README; its 0.3.36 build applies them
    anyway); --lora-scaled and comma lists give ids in order; what cannot run exits with a reason."""
    s = ServerProcess(smol_path, "--lora", f"{smol_lora_path},{smol_lora_path}", "--lora-scaled",
                      f"{smol_lora_path}:0.5", "--lora-init-without-apply", "--ctx", "128", "--threads", "2",
                      "--parallel", "1", "--no-lossless")
    try:
        assert [(a["id"], a["scale"]) for a in http("GET", s.url + "/lora-adapters")[1]] == [(0, 0.0), (1, 0.0), (2, 0.0)]
        base = _complete(s.url)
        assert base == _complete(s.url, 0.0)
        status, d = http("POST", s.url + "/completion", {"prompt": PROMPT, "n_predict": N, "temperature": 0,
                                                         "lora": [{"id": 2, "scale": 1.0}]})
        assert status == 200 and d["content"] != base
    finally:
        s.close()
    for extra, why in ((("--engine", "native"), "pyriver's own graphs have no LoRA"),
                       (("--river", "q4_0"), "--river needs pyriver's own graphs"),
                       (("--lora-scaled", "x.gguf"), "not FILE:SCALE")):
        s = ServerProcess(smol_path, "--lora", smol_lora_path, *extra, wait=False)
        try:
            assert s.proc.wait(60) == 2 and why in s.proc.stdout.read()
        finally:
            s.close()


def test_messages_and_responses_take_a_requests_lora(served):
    """/v1/messages and /v1/responses pass a request's lora on as the chat route does: at scale 0 the
    answer is the plain model's chat answer, at 1 the adapter's, and the two differ."""
    c = _client(served.url)
    want = {}
    for scale in (0.0, 1.0):
        want[scale] = c.chat.completions.create(model="m", messages=CHAT, max_tokens=N, temperature=0,
                                                extra_body={"lora": [{"id": 0, "scale": scale}]}).choices[0].message.content
    assert want[0.0] != want[1.0]
    for scale in (0.0, 1.0):
        status, m = http("POST", served.url + "/v1/messages", {"model": "m", "messages": CHAT, "max_tokens": N,
                                                                "temperature": 0, "lora": [{"id": 0, "scale": scale}]})
        assert status == 200 and m["content"][0]["text"] == want[scale], (scale, m)
        status, r = http("POST", served.url + "/v1/responses", {"model": "m", "input": CHAT[0]["content"],
                                                                 "max_output_tokens": N, "temperature": 0,
                                                                 "lora": [{"id": 0, "scale": scale}]})
        assert status == 200 and r["output"][0]["content"][0]["text"] == want[scale], (scale, r)

