"""llama-server's /metrics on a real `pyriver serve` (pyriver/server/metrics.py): 501 without
--metrics; with it the Process-Start-Time-Unix header and the llamacpp:* series, whose prompt,
cached and predicted counts add up to the requests' own timings; an idle slot keeps nothing of its
last request's budget (/slots: n_remain -1, n_decoded 0); a streamed /completion with
timings_per_token and return_progress carries timings on its progress chunks (zeros first)."""
from __future__ import annotations

import json
import urllib.request

import pytest

from server_proc import ServerProcess, http, sse

PROMPT = "The river rises in the hills above the town, runs through the old mill race and under three bridges."


@pytest.fixture(scope="module")
def server(smol_path):
    s = ServerProcess(smol_path, "--parallel", "1", "--ctx", "512", "--threads", "2", "--no-lossless", "--metrics",
                      "--prompt-chunk", "8")
    yield s
    s.close()


def _metrics(url: str):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        assert r.status == 200
        start = r.headers.get("Process-Start-Time-Unix")
        text = r.read().decode()
    types, out = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line.startswith("llamacpp:"):
            name, value = line.split(" ", 1)
            out[name] = (types[name], float(value))
            assert f"# HELP {name} " in text
    return start, out


def test_metrics_off_without_the_flag(smol_path):
    s = ServerProcess(smol_path, "--parallel", "1", "--ctx", "256", "--threads", "2", "--no-lossless")
    try:
        status, body = http("GET", s.url + "/metrics")
        assert status == 501 and body["error"]["type"] == "not_supported_error", (status, body)
        assert "--metrics" in body["error"]["message"]
        assert http("GET", s.url + "/props")[1]["endpoint_metrics"] is False
    finally:
        s.close()


def test_metrics_count_what_the_requests_report(server):
    start, m0 = _metrics(server.url)
    assert start is not None and int(start) > 0
    assert http("GET", server.url + "/props")[1]["endpoint_metrics"] is True
    n_prompt = n_cached = n_pred = 0
    for n_predict in (1, 4, 4):   # the third continues the second's prompt: cached tokens
        status, d = http("POST", server.url + "/completion", {"prompt": PROMPT, "n_predict": n_predict,
                                                               "temperature": 0})
        assert status == 200, d
        n_prompt += d["timings"]["prompt_n"]
        n_cached += d["timings"]["cache_n"]
        n_pred += d["timings"]["predicted_n"]
    assert n_cached > 0
    _, m = _metrics(server.url)
    delta = lambda k: m[k][1] - m0[k][1]  # noqa: E731
    assert delta("llamacpp:prompt_tokens_total") == n_prompt
    assert delta("llamacpp:prompt_tokens_cached_total") == n_cached
    assert delta("llamacpp:tokens_predicted_total") == n_pred
    assert delta("llamacpp:n_decode_total") > 0
    assert m["llamacpp:requests_processing"] == ("gauge", 0.0)
    for name in ("prompt_seconds_total", "tokens_predicted_seconds_total", "n_tokens_max",
                 "spec_decode_num_draft_tokens_total"):
        assert m["llamacpp:" + name][0] == "counter"
    for name in ("prompt_tokens_seconds", "predicted_tokens_seconds", "requests_deferred", "n_busy_slots_per_decode"):
        assert m["llamacpp:" + name][0] == "gauge"


def test_idle_slot_keeps_no_budget(server):
    assert http("POST", server.url + "/completion", {"prompt": PROMPT, "n_predict": 3})[0] == 200
    status, slots = http("GET", server.url + "/slots")
    assert status == 200 and slots[0]["is_processing"] is False
    assert slots[0]["next_token"][0]["n_remain"] == -1 and slots[0]["next_token"][0]["n_decoded"] == 0


def test_progress_chunks_carry_timings(server):
    lines = sse(server.url, "/completion", {"prompt": PROMPT * 2, "n_predict": 2, "stream": True,
                                            "timings_per_token": True, "return_progress": True, "cache_prompt": False})
    chunks = [json.loads(x[len("data: "):]) for x in lines if x.startswith("data: ")]
    progress = [c for c in chunks if "prompt_progress" in c]
    assert len(progress) > 1
    first = progress[0]["timings"]
    assert first["prompt_n"] == 0 and first["prompt_ms"] == 0.0 and first["predicted_n"] == 0
    ms = [c["timings"]["prompt_ms"] for c in progress]
    assert ms == sorted(ms) and ms[-1] > 0
    assert all(v is not None and v >= 0 for c in progress for v in c["timings"].values())
    tokens = [c for c in chunks if c.get("content") and "prompt_progress" not in c]
    assert tokens and all("timings" in c for c in tokens)


def test_throughput_gauges_cover_the_time_since_the_last_scrape(server):
    """llama-server's bucket: prompt_tokens_seconds and predicted_tokens_seconds measure the requests
    finished since the scrape before; a scrape with nothing finished since reads 0."""
    _metrics(server.url)
    status, _ = http("POST", server.url + "/completion", {"prompt": "Count: one, two,", "n_predict": 6,
                                                          "temperature": 0, "cache_prompt": False})
    assert status == 200
    _, first = _metrics(server.url)
    assert first["llamacpp:predicted_tokens_seconds"][1] > 0 and first["llamacpp:prompt_tokens_seconds"][1] > 0
    _, second = _metrics(server.url)
    assert second["llamacpp:predicted_tokens_seconds"][1] == 0 and second["llamacpp:prompt_tokens_seconds"][1] == 0
    assert second["llamacpp:tokens_predicted_total"] == first["llamacpp:tokens_predicted_total"]
