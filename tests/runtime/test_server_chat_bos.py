"""A chat's prompt on `pyriver serve` is llama-server's, BOS included: llama-server drops a BOS its
template wrote and tokenizes with the model's specials (common_chat_templates_apply, then
add_special), so a model that adds BOS gets one even where its template writes none (the Gemma 3
270M file: a ChatML template without bos_token). llama-cpp-python's Llama adds none there, and
pyriver.Llama follows it (its chat is llama_cpp's)."""
from __future__ import annotations

import pytest

from server_proc import ServerProcess, http, llama_server

MESSAGES = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
# content as a list of text parts (OpenAI clients send it so): llama-server joins them with a newline
PARTS = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use Python."}]},
         {"role": "user", "content": [{"type": "text", "text": "Add two"}, {"type": "text", "text": "numbers."}]}]


def _chat(url):
    status, body = http("POST", url + "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 12,
                                                              "temperature": 0})
    assert status == 200, body
    return body["usage"]["prompt_tokens"], body["choices"][0]["message"]["content"]


def _parts(url):
    """/apply-template's prompt and a chat's prompt_tokens for the messages of text parts."""
    prompt = http("POST", url + "/apply-template", {"messages": PARTS})[1]["prompt"]
    status, body = http("POST", url + "/v1/chat/completions", {"messages": PARTS, "max_tokens": 1, "temperature": 0})
    assert status == 200, body
    return prompt, body["usage"]["prompt_tokens"]


@pytest.fixture(scope="module")
def llama_servers_answer(gemma_path):
    p = llama_server("-m", gemma_path, "-c", "512", "-np", "1", "-t", "2")
    try:
        return _chat(p.url), _parts(p.url)
    finally:
        p.close()


@pytest.mark.peer
def test_chat_prompt_and_text_are_llama_server_s(gemma_path, llama_servers_answer):
    from pyriver import Llama
    s = ServerProcess(gemma_path, "--parallel", "1", "--ctx", "512", "--threads", "2", "--no-lossless")
    try:
        n, text = _chat(s.url)
        parts = _parts(s.url)
    finally:
        s.close()
    assert (n, text) == llama_servers_answer[0]
    assert parts == llama_servers_answer[1]
    with Llama(gemma_path, n_ctx=512, verbose=False) as llm:   # llama_cpp's rule: the template's BOS only
        plain = llm.chat_tokens(MESSAGES)
        assert llm.chat_tokens(MESSAGES, server_bos=True) == [llm.token_bos()] + plain and len(plain) + 1 == n
