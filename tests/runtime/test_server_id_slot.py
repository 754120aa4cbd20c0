"""llama-server's `id_slot` on a real `pyriver serve`: a request runs on the slot it names (modulo the
slot count, as llama-server wraps it) and the answer says which; a request for a busy slot waits for
it while requests for any slot go ahead; a wrong type is a 400. Compared with llama-server's answers
to the same requests."""
from __future__ import annotations

import threading
import time

import pytest

from server_proc import ServerProcess, http, sse, llama_server

PROMPT = "Tell me about the sea."


def _ask(url: str, **extra):
    status, r = http("POST", url + "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0, **extra})
    assert status == 200, r
    return r["id_slot"], r["content"]


def _slots_named(url: str) -> list:
    return [_ask(url, id_slot=k)[0] for k in (1, 0, 3, -1)][:3]


@pytest.fixture(scope="module")
def server(smol_path):
    s = ServerProcess(smol_path, "--parallel", "2", "--ctx", "512", "--threads", "2", "--no-lossless")
    yield s
    s.close()


def test_a_request_runs_on_the_slot_it_names(server):
    assert _slots_named(server.url) == [1, 0, 1]   # 3 % 2 slots = 1
    slot, _ = _ask(server.url)
    assert slot in (0, 1)
    status, body = http("GET", server.url + "/slots")
    assert status == 200 and {s["id"] for s in body} == {0, 1}
    status, r = http("POST", server.url + "/completion", {"prompt": PROMPT, "n_predict": 2, "id_slot": "one"})
    assert status == 400 and "id_slot" in r["error"]["message"]
    status, r = http("POST", server.url + "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "id_slot": 1.5})
    assert status == 400 and "id_slot" in r["error"]["message"]


def test_a_busy_slot_makes_its_request_wait_and_others_go_ahead(server):
    t = {}
    first = sse(server.url, "/completion", {"prompt": PROMPT, "n_predict": 60, "temperature": 0, "id_slot": 0,
                                           "stream": True, "ignore_eos": True})
    next(first)   # slot 0 is decoding

    def ask(name, **extra):
        t[name] = (_ask(server.url, **extra)[0], time.perf_counter())
    waits = threading.Thread(target=ask, args=("slot0",), kwargs={"id_slot": 0})
    waits.start()
    time.sleep(0.3)   # queued behind the stream, before the free-slot request
    ask("any")
    for _ in first:
        pass
    t["stream_end"] = time.perf_counter()
    waits.join(60)
    assert t["any"][0] == 1 and t["any"][1] < t["stream_end"]   # went ahead on the free slot
    assert t["slot0"][0] == 0 and t["slot0"][1] > t["stream_end"]   # waited for its own


@pytest.mark.peer
def test_id_slot_as_llama_server_answers(smol_path):
    p = llama_server("-m", smol_path, "-c", "1024", "-np", "2", "-t", "2")
    try:
        theirs = _slots_named(p.url)
    finally:
        p.close()
    assert theirs == [1, 0, 1]
