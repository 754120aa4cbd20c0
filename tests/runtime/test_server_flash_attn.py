"""pyriver serve's attention follows -fa as llama-server's does: the default (auto) computes with
flash attention, as llama-server's default and Llama(flash_attn=True) do, and -fa off with llama.cpp's
mul_mat + soft_max attention, as Llama's default (llama-cpp-python's). Read off the first token's
log-probabilities, bit for bit (tests/unit/test_flash_attn_args.py holds the flag's parsing)."""
from __future__ import annotations

import pytest

from pyriver import Llama
from server_proc import ServerProcess, http

PROMPT = "The three largest cities of France are"


def _server_logprobs(path, *flags):
    s = ServerProcess(path, "-np", "1", "-t", "2", "--no-lossless", *flags)
    try:
        code, r = http("POST", s.url + "/completion", {"prompt": PROMPT, "n_predict": 1, "temperature": 0.0,
                                                       "n_probs": 5})
    finally:
        s.close()
    assert code == 200, r
    return {t["token"]: t["logprob"] for t in r["completion_probabilities"][0]["top_logprobs"]}


def _llama_logprobs(path, flash_attn):
    with Llama(path, n_ctx=256, n_threads=2, verbose=False, flash_attn=flash_attn) as llm:
        out = llm.create_completion(PROMPT, max_tokens=1, temperature=0.0, logprobs=5)
    return dict(out["choices"][0]["logprobs"]["top_logprobs"][0])


@pytest.fixture(scope="module")
def reference(smol_path):
    return {fa: _llama_logprobs(smol_path, fa) for fa in (True, False)}


def test_the_default_is_flash_attention_as_llama_server_s(smol_path, reference):
    assert reference[True] != reference[False]   # the two attentions part in the last bits: what is told apart
    assert _server_logprobs(smol_path) == reference[True]


def test_fa_off_is_llama_cpp_python_s_attention(smol_path, reference):
    assert _server_logprobs(smol_path, "-fa", "off") == reference[False]
