"""llama-server's Google Cloud Vertex AI compatibility on a real `pyriver serve` (pyriver/server/gcp.py):
with AIP_MODE=PREDICTION, POST /predict runs each instance on the route its @requestFormat names
(camelCase or path) and answers the predictions in order, a bad instance as an error object among
them; bad bodies are 400s; AIP_HEALTH_ROUTE is /health; without AIP_MODE there is no /predict."""
from __future__ import annotations

import pytest

from server_proc import ServerProcess, free_port, http

MSGS = [{"role": "user", "content": "Name a river."}]


@pytest.fixture(scope="module")
def server(smol_path):
    port = free_port()
    s = ServerProcess(smol_path, "--parallel", "2", "--ctx", "512", "--threads", "2", "--no-lossless", port=port,
                      env={"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port), "AIP_HEALTH_ROUTE": "healthz"})
    yield s
    s.close()


def test_predict_runs_each_instance_on_its_route(server):
    chat = {"max_tokens": 4, "temperature": 0, "messages": MSGS}
    status, d = http("POST", server.url + "/predict", {"instances": [
        dict(chat, **{"@requestFormat": "chatCompletions", "stream": True}),   # streaming is turned off
        dict(chat, **{"@requestFormat": "/v1/chat/completions"}),
        {"@requestFormat": "tokenize", "content": "Hello"},
        {"@requestFormat": "noSuchRoute"},
        {"max_tokens": 2},
        "not an object",
    ]})
    assert status == 200, d
    p = d["predictions"]
    assert len(p) == 6
    assert p[0]["choices"][0]["message"]["role"] == "assistant" and p[0]["choices"][0]["message"]["content"]
    assert p[1]["choices"][0]["message"]["content"] == p[0]["choices"][0]["message"]["content"]
    direct = http("POST", server.url + "/tokenize", {"content": "Hello"})[1]
    assert p[2] == direct
    assert "noSuchRoute" in p[3]["error"]["message"]
    assert "@requestFormat" in p[4]["error"]["message"] and "object" in p[5]["error"]["message"]


def test_predict_bad_bodies_are_400(server):
    for body in (b"{not json", [1, 2], {"instances": {}}, {"instances": [{}] * 129}, {}):
        status, d = http("POST", server.url + "/predict", body if isinstance(body, bytes) else body)
        assert status == 400 and d["error"]["type"] == "invalid_request_error", (body, status, d)


def test_health_route(server):
    status, d = http("GET", server.url + "/healthz")
    assert status == 200 and d["status"] == "ok"


def test_no_predict_without_aip_mode(smol_path):
    s = ServerProcess(smol_path, "--parallel", "1", "--ctx", "256", "--threads", "2", "--no-lossless")
    try:
        assert http("POST", s.url + "/predict", {"instances": []})[0] == 404
    finally:
        s.close()
