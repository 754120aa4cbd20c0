"""`pyriver serve --embedding`: /v1/embeddings through the real `openai` client equals
pyriver.Llama's normalized embed; /embeddings in llama-server's shape; the errors llama-server gives."""
from __future__ import annotations

import base64

import numpy as np
import openai
import pytest

from pyriver import Llama
from server_proc import ServerProcess, http

TEXTS = ["The river flows to the sea.", "Embeddings map text to vectors."]


@pytest.fixture(scope="module")
def server(smol_path):
    s = ServerProcess(smol_path, "--parallel", "2", "--ctx", "256", "--threads", "2", "--embedding", "--pooling", "mean")
    yield s
    s.close()


@pytest.fixture(scope="module")
def want(smol_path):
    """Llama's vectors with the server's default attention (-fa auto: flash attention, llama-server's)."""
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river=None, embedding=True, pooling_type=1,
               flash_attn=True) as llm:
        toks = [llm.tokenize(t.encode(), special=True) for t in TEXTS]
        return llm.embed_tokens(toks, normalize=True), sum(map(len, toks))


def test_openai_client_embeddings(server, want):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    r = client.embeddings.create(model="SmolLM2-135M-Instruct.Q4_1.gguf", input=TEXTS)
    vecs, n = want
    assert r.object == "list" and [d.index for d in r.data] == [0, 1] and r.data[0].object == "embedding"
    assert r.usage.prompt_tokens == r.usage.total_tokens == n
    for d, v in zip(r.data, vecs):
        np.testing.assert_allclose(d.embedding, v, rtol=0, atol=1e-6)
        assert abs(np.linalg.norm(d.embedding) - 1.0) < 1e-5
    # the client's default asks for base64: decoded, the same floats
    status, body = http("POST", server.url + "/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64"})
    assert status == 200 and body["data"][0]["encoding_format"] == "base64"
    got = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype=np.float32)
    np.testing.assert_allclose(got, vecs[0], rtol=0, atol=1e-6)


def test_llama_server_shape_and_generation_alongside(server, want):
    status, body = http("POST", server.url + "/embeddings", {"content": TEXTS[1]})
    assert status == 200 and body[0]["index"] == 0 and len(body[0]["embedding"]) == 1
    np.testing.assert_allclose(body[0]["embedding"][0], want[0][1], rtol=0, atol=1e-6)
    status, body = http("POST", server.url + "/v1/completions", {"prompt": "Rivers are", "max_tokens": 4})
    assert status == 200 and body["choices"][0]["text"]


def test_content_parts_are_the_string(server):
    """An input given as {"content": [text parts]} (llama-server's) embeds as their joined text."""
    status, body = http("POST", server.url + "/v1/embeddings", {"input": [
        "hello world", {"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]}]})
    assert status == 200 and body["data"][0]["embedding"] == body["data"][1]["embedding"]
    status, one = http("POST", server.url + "/v1/embeddings", {"input": {"content": [{"type": "text", "text": "hello world"}]}})
    assert status == 200 and one["data"][0]["embedding"] == body["data"][0]["embedding"]


@pytest.mark.parametrize("body,status,words", [
    ({"input": {"content": "string"}}, 400, "array of content parts"),
    ({"input": "\udcff"}, 400, "UTF-8"),   # a lone surrogate: was a 500 (server_fuzz found it)
    ({"input": [{"content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]}, 400, "not supported"),
    ({"input": [{"x": 1}]}, 400, "content"),
    ({"input": []}, 400, "input"),
    ({"input": ""}, 400, "cannot be empty"),   # SmolLM2 adds no BOS: no tokens, as llama-server says
    ({"input": [[1, 2], [99999999]]}, 400, "out of range"),
    ({"input": "x " * 400}, 400, "at most"),
    ({"input": "x", "encoding_format": "hex"}, 400, "float or base64"),
    ({}, 400, "must be provided"),
])
def test_bad_requests(server, body, status, words):
    got, resp = http("POST", server.url + "/v1/embeddings", body)
    assert got == status, resp
    if status != 200:
        assert words in resp["error"]["message"]
    assert http("GET", server.url + "/health")[0] == 200


def test_without_flag_or_pooling(smol_path):
    s = ServerProcess(smol_path, "--parallel", "1", "--ctx", "128", "--threads", "2")
    try:
        status, body = http("POST", s.url + "/v1/embeddings", {"input": "x"})
        assert status == 501 and "--embedding" in body["error"]["message"]
    finally:
        s.close()
    s = ServerProcess(smol_path, "--parallel", "1", "--ctx", "128", "--threads", "2", "--embedding")
    try:
        status, body = http("POST", s.url + "/v1/embeddings", {"input": "x"})
        assert status == 400 and "Pooling type 'none'" in body["error"]["message"]
        status, body = http("POST", s.url + "/embeddings", {"content": [1, 2, 3]})
        assert status == 200 and np.asarray(body[0]["embedding"]).shape == (3, 576)   # one vector per token
    finally:
        s.close()
