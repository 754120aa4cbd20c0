"""llama-server's conversation streams on `pyriver serve` (pyriver/server/streams.py): a streamed
chat with X-Conversation-Id is kept, replayed from any byte offset by GET /v1/stream, finished when
its client has gone, stopped and forgotten by DELETE /v1/stream, listed by /v1/streams/lookup; and
the same through the router (--models-dir), a stop while the model loads cancelling the request."""
from __future__ import annotations

import json
import os
import threading
import time
from urllib.parse import quote

import pytest

from server_proc import ServerProcess, http, sse

MSGS = [{"role": "user", "content": "Name three rivers of Europe."}]
CONV = "conv-1::smol/model"   # slashes: the id travels in the query string


def _q(conv: str) -> str:
    return "conv_id=" + quote(conv, safe="")


def _content(lines) -> str:
    out = ""
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            ch = json.loads(line[6:])
            if ch.get("choices"):
                out += ch["choices"][0]["delta"].get("content") or ""
    return out


def _replay(url: str, conv: str, frm: int = 0):
    status, body = http("GET", f"{url}/v1/stream?{_q(conv)}&from={frm}")
    return status, body if isinstance(body, str) else json.dumps(body)


def _wait_done(url: str, conv: str, timeout: float = 120.0) -> dict:
    end = time.time() + timeout
    while time.time() < end:
        status, infos = http("POST", url + "/v1/streams/lookup", {"conversation_ids": [conv]})
        assert status == 200
        if infos and infos[0]["is_done"]:
            return infos[0]
        time.sleep(0.1)
    raise AssertionError("the session never finished")


@pytest.fixture(scope="module")
def server(smol_path):
    s = ServerProcess(smol_path, "--parallel", "2", "--ctx", "1024", "--threads", "2", "--no-lossless")
    yield s
    s.close()


def test_a_kept_stream_replays_from_any_offset_then_stops(server):
    body = {"messages": MSGS, "max_tokens": 24, "temperature": 0, "stream": True}
    lines = list(sse(server.url, "/v1/chat/completions", body, headers={"X-Conversation-Id": CONV}))
    plain = _content(sse(server.url, "/v1/chat/completions", body))
    assert _content(lines) == plain and plain   # a kept stream streams what any stream does
    info = _wait_done(server.url, CONV)
    status, whole = _replay(server.url, CONV)
    assert status == 200 and _content(whole.splitlines()) == plain and "data: [DONE]" in whole
    assert info["total_bytes"] == len(whole.encode()) and info["conversation_id"] == CONV
    # lookup by the id before "::" finds it too; ids never asked about are not listed
    assert [i["conversation_id"] for i in http("POST", server.url + "/v1/streams/lookup",
                                                {"conversation_ids": ["conv-1"]})[1]] == [CONV]
    assert http("POST", server.url + "/v1/streams/lookup", {"conversation_ids": ["other"]})[1] == []
    status, tail = _replay(server.url, CONV, 10)
    assert status == 200 and tail.encode() == whole.encode()[10:]
    assert _replay(server.url, CONV, "x")[0] == 400 and http("GET", server.url + "/v1/stream")[0] == 400
    assert http("DELETE", f"{server.url}/v1/stream?{_q(CONV)}")[0] == 204
    assert _replay(server.url, CONV)[0] == 404
    assert http("DELETE", f"{server.url}/v1/stream?{_q('never')}")[0] == 204   # idempotent


def test_the_generation_outlives_its_client_and_a_delete_stops_it(server):
    body = {"messages": MSGS, "max_tokens": 48, "temperature": 0, "stream": True}
    want = _content(sse(server.url, "/v1/chat/completions", body))
    gen = sse(server.url, "/v1/chat/completions", body, headers={"X-Conversation-Id": "gone"})
    next(gen)   # one event, then the client goes away
    gen.close()
    _wait_done(server.url, "gone")
    assert _content(_replay(server.url, "gone")[1].splitlines()) == want   # the whole answer all the same
    # a long answer stopped by DELETE mid-way: it ends short of its max_tokens and frees its slot
    long = dict(body, max_tokens=400, messages=[{"role": "user", "content": "Write a very long story."}])
    gen = sse(server.url, "/v1/chat/completions", long, headers={"X-Conversation-Id": "stop-me"})
    next(gen)
    assert http("DELETE", f"{server.url}/v1/stream?{_q('stop-me')}")[0] == 204
    rest = list(gen)
    assert "data: [DONE]" in rest and len(rest) < 300
    assert _replay(server.url, "stop-me")[0] == 404
    end = time.time() + 30
    while time.time() < end and any(s["is_processing"] for s in http("GET", server.url + "/slots")[1]):
        time.sleep(0.1)
    assert not any(s["is_processing"] for s in http("GET", server.url + "/slots")[1])


def test_through_the_router(tmp_path, smol_path, gemma_path):
    os.symlink(smol_path, tmp_path / "smol.gguf")
    os.symlink(gemma_path, tmp_path / "gemma-3.gguf")
    r = ServerProcess("--models-dir", str(tmp_path), "--ctx", "512", "--threads", "2", "--parallel", "1",
                      "--no-lossless")
    try:
        body = {"model": "smol", "messages": MSGS, "max_tokens": 16, "temperature": 0, "stream": True}
        text = _content(sse(r.url, "/v1/chat/completions", body, headers={"X-Conversation-Id": CONV}))
        _wait_done(r.url, CONV)
        status, whole = _replay(r.url, CONV)
        assert status == 200 and _content(whole.splitlines()) == text and text
        assert http("DELETE", f"{r.url}/v1/stream?{_q(CONV)}")[0] == 204
        assert _replay(r.url, CONV)[0] == 404
        # a stop while the model loads: the request waiting for it ends with a 400
        result = {}

        def post():
            result["answer"] = http("POST", r.url + "/v1/chat/completions", dict(body, model="gemma-3", max_tokens=256),
                                    headers={"X-Conversation-Id": "loading"})
        t = threading.Thread(target=post)
        t.start()
        end, seen = time.time() + 10, False
        while time.time() < end and not seen:
            states = {m["id"]: m["status"]["value"] for m in http("GET", r.url + "/models")[1]["data"]}
            seen = states["gemma-3"] == "loading"
        if not seen:
            t.join()
            pytest.skip("the load window was too short to see")
        assert _replay(r.url, "loading")[0] == 503   # its model is loading: retry later
        assert http("DELETE", f"{r.url}/v1/stream?{_q('loading')}")[0] == 204
        t.join(60)
        status, err = result["answer"]
        assert status == 400 and "cancelled" in err["error"]["message"]
    finally:
        r.close()
