"""/infill (llama-server's fill-in-the-middle) on Qwen2.5-Coder 1.5B's FIM tokens: the prompt laid
out (repo-level pattern, extra files, a prompt the middle starts with), the tokens evaluated and the
greedy middle all equal to llama-server's on the same file; a model without FIM tokens 501; bad
fields 400."""
from __future__ import annotations

import pytest

from server_proc import ServerProcess, http, llama_server

PREFIX = "def fibonacci(n):\n    \"\"\"The n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"
SUFFIX = "\n\nprint(fibonacci(10))\n"
EXTRA = [{"filename": "util.py", "text": "def memo(f):\n    cache = {}\n    return f\n"},
         {"text": "# no file name: llama-server's tmp\n"}]
REQUESTS = [
    {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16, "temperature": 0},
    {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": EXTRA, "prompt": "    return", "n_predict": 12,
     "temperature": 0},
    {"input_prefix": ["def add(a, b):", "\n    "], "input_suffix": "", "n_predict": 8, "temperature": 0},
]


def _answers(url):
    out = []
    for body in REQUESTS:
        status, r = http("POST", url + "/infill", body)
        assert status == 200, r
        out.append((r["content"], r["tokens_evaluated"], r["prompt"]))
    return out


@pytest.fixture(scope="module")
def llama_servers_answers(qwen15_path):
    p = llama_server("-m", qwen15_path, "-c", "4096", "-np", "1", "-t", "2")
    try:
        return _answers(p.url)
    finally:
        p.close()


@pytest.mark.peer
def test_infill_equals_llama_server(qwen15_path, llama_servers_answers):
    # llama-server's kernels for the prompt too (--no-batch-layout): the answers hold the infill
    # prompt's layout to llama-server's bit for bit; the default's tiled prompt steps turn a near-tie
    # of this 18-token prompt (docs/lossless.md, "Prompts on ggml's tiled kernel")
    s = ServerProcess(qwen15_path, "--parallel", "1", "--ctx", "4096", "--threads", "2", "--no-lossless",
                      "--no-batch-layout")
    try:
        ours = _answers(s.url)
        status, r = http("POST", s.url + "/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 4,
                                                     "temperature": 0, "stream": True})
        assert status == 200
        for bad in ({"input_suffix": ""}, {"input_prefix": "", "input_suffix": "", "input_extra": {"text": "x"}},
                    {"input_prefix": "", "input_suffix": "", "input_extra": [{"filename": "a.py"}]},
                    {"input_prefix": "", "input_suffix": "", "prompt": [1, 2]},
                    {"input_prefix": [10 ** 9], "input_suffix": ""}):
            status, r = http("POST", s.url + "/infill", bad)
            assert status == 400 and "error" in r, bad
    finally:
        s.close()
    assert ours == llama_servers_answers
    assert "<|repo_name|>myproject" in ours[1][2] and "<|file_sep|>util.py" in ours[1][2]


def test_a_model_without_fim_tokens_is_501(smol_path):
    s = ServerProcess(smol_path, "--parallel", "1", "--ctx", "512", "--threads", "2", "--no-lossless")
    try:
        status, r = http("POST", s.url + "/infill", {"input_prefix": "a", "input_suffix": "b"})
    finally:
        s.close()
    assert status == 501 and "Infill is not supported by this model" in r["error"]["message"]
