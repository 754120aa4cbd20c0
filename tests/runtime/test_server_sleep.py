"""`pyriver serve --sleep-idle-seconds N` on a real server (llama-server's): idle, the model's memory
goes (the process shrinks) while /health, /props ("is_sleeping"), /v1/models and /metrics answer
without waking it; a completion or a token count wakes it, with the same answer as before."""
from __future__ import annotations

import os
import re
import time

from server_proc import ServerProcess, http


def _sleeping(url: str) -> bool:
    status, body = http("GET", url + "/props")
    assert status == 200
    return body["is_sleeping"]


def _counter(text: str, name: str) -> float:
    return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))


def _wait_sleep(url: str, timeout: float = 20.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if _sleeping(url):
            return
        time.sleep(0.1)
    raise AssertionError("the server did not go to sleep")


def test_sleep_and_wake(smol_path):
    s = ServerProcess(smol_path, "--ctx", "256", "--parallel", "1", "--threads", "2", "--no-lossless",
                      "--sleep-idle-seconds", "1", "--alias", "smol", "--metrics")
    try:
        ask = {"prompt": "Hello", "n_predict": 4, "temperature": 0}
        status, first = http("POST", s.url + "/completion", ask)
        assert status == 200
        awake_rss = s.rss_kb()
        metrics = _counter(http("GET", s.url + "/metrics")[1], "llamacpp:tokens_predicted_total")
        assert metrics == 4
        _wait_sleep(s.url)
        assert s.rss_kb() < awake_rss - os.path.getsize(smol_path) // 2048   # the weights went (half their size at least)
        assert http("GET", s.url + "/health")[0] == 200
        status, models = http("GET", s.url + "/v1/models")
        assert status == 200 and models["data"][0]["id"] == "smol"
        # the counters as they were (the throughput window is the scrape's own), and still asleep
        assert _counter(http("GET", s.url + "/metrics")[1], "llamacpp:tokens_predicted_total") == metrics
        assert _sleeping(s.url)
        status, body = http("POST", s.url + "/completion", ask)   # wakes it: the same greedy answer
        assert status == 200 and body["content"] == first["content"] and not _sleeping(s.url)
        _wait_sleep(s.url)
        for path, req in (("/chat/completions/input_tokens", {"messages": [{"role": "user", "content": "Hi"}]}),
                          ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "Hi"}]}),
                          ("/v1/responses/input_tokens", {"input": "Hi"}),
                          ("/tokenize", {"content": "Hello"})):
            status, body = http("POST", s.url + path, req)
            assert status == 200 and not _sleeping(s.url), path
            _wait_sleep(s.url)
    finally:
        s.close()
