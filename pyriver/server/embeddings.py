"""POST /v1/embeddings (OpenAI's shape) and /embeddings (llama-server's), as llama-server serves them
when started with --embedding: the Llama's own context computes them (the scheduler decodes in
another), at full depth, normalized (L2) when pooled. OpenAI's endpoint needs a pooling other than
none, as llama-server's does (`--pooling mean` for a chat model whose GGUF declares none)."""
from __future__ import annotations

import base64
from typing import Dict, List

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse
from starlette.routing import Route

from pyriver.api.embedding import LLAMA_POOLING_TYPE_NONE
from pyriver.server.schema import APIError, json_object

POOLINGS = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}


def routes(srv, guarded) -> List[Route]:
    async def oai(req: HTTPRequest):
        return await guarded(req, lambda r: _handle(srv, r, True))

    async def native(req: HTTPRequest):
        return await guarded(req, lambda r: _handle(srv, r, False))

    return [Route("/v1/embeddings", oai, methods=["POST"]), Route("/embeddings", native, methods=["POST"])]


def _inputs(body: Dict) -> list:
    """input (or llama-server's content): a string, a list of strings, token ids, or lists of them."""
    v = body.get("input", body.get("content"))
    if v is None:
        raise APIError(400, "\"input\" or \"content\" must be provided", param="input")
    if isinstance(v, (str, dict)) or (isinstance(v, list) and v and all(isinstance(t, int) for t in v)):
        v = [v]
    if not isinstance(v, list) or not v:
        raise APIError(400, "\"input\" must be a string, a list of strings or token ids, and not empty", param="input")
    v = [_content_text(x) if isinstance(x, dict) else x for x in v]
    for x in v:
        if not (isinstance(x, str) or (isinstance(x, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                                                  for t in x))):
            raise APIError(400, "each input must be a string or a list of token ids", param="input")
    return v


def _content_text(x: Dict) -> str:
    """An input given as an object, as llama-server takes it: {"content": [text parts]} is their
    texts joined (tokenize_oai_content_array; no media on a text model), {"prompt_string": text} the text."""
    if "content" in x:
        parts = x["content"]
        if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
            raise APIError(400, "\"content\" must be an array of content parts", param="input")
        for p in parts:
            if p.get("type") != "text" or not isinstance(p.get("text", ""), str):
                raise APIError(400, f"content parts of type {str(p.get('type'))[:40]!r} are not supported "
                               "(a text model: text parts only)", param="input")
        return "".join(p.get("text", "") for p in parts)
    if isinstance(x.get("prompt_string"), str):
        return x["prompt_string"]
    raise APIError(400, "an input object must have \"content\" (content parts) or \"prompt_string\"", param="input")


def check_tokens(llm, toks: List[int], param: str) -> List[int]:
    """One input's tokens, embedded in one batch: not empty, in the vocabulary, at most n_batch."""
    limit = min(llm.n_batch, llm.n_ctx())
    if not toks:
        raise APIError(400, "Input content cannot be empty", param=param)
    bad = [t for t in toks if not 0 <= t < llm.n_vocab()]
    if bad:
        raise APIError(400, f"token id {bad[0]} is out of range [0, {llm.n_vocab()})", param=param)
    if len(toks) > limit:
        raise APIError(400, f"an input has {len(toks)} tokens; at most {limit} (n_batch) can be embedded",
                       param=param, code="context_length_exceeded")
    return toks


def _tokens(srv, inputs: list) -> List[List[int]]:
    llm = srv.llm
    with srv.sched.vocab_lock:
        return [check_tokens(llm, llm.tokenize(x.encode("utf-8"), add_bos=True, special=True)
                             if isinstance(x, str) else list(x), "input") for x in inputs]


async def _handle(srv, req: HTTPRequest, oai: bool) -> JSONResponse:
    llm = srv.llm
    if not getattr(getattr(llm, "embeddings", None), "enabled", False):
        raise APIError(501, "This server does not support embeddings. Start it with `--embedding`",
                       type_="not_supported_error")
    pooled = llm.pooling_type() != LLAMA_POOLING_TYPE_NONE
    if oai and not pooled:
        raise APIError(400, "Pooling type 'none' is not OAI compatible. Please use a different pooling type (--pooling)")
    body = json_object(await req.body())
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise APIError(400, "The format to return the embeddings in. Can be either float or base64",
                       param="encoding_format")
    if oai:
        srv.check_model(body.get("model"))
    batches = await run_in_threadpool(_tokens, srv, _inputs(body))
    # llama-server normalizes pooled vectors (Euclidean, its embd_normalize 2) and leaves per-token ones
    vecs = await run_in_threadpool(llm.embed_tokens, batches, pooled)
    if not oai:
        return JSONResponse([{"index": i, "embedding": v if not pooled else [v]} for i, v in enumerate(vecs)])
    n = sum(len(t) for t in batches)
    data = []
    for i, v in enumerate(vecs):
        if fmt == "base64":
            data.append({"embedding": base64.b64encode(np.asarray(v, dtype=np.float32).tobytes()).decode(),
                         "index": i, "object": "embedding", "encoding_format": "base64"})
        else:
            data.append({"embedding": v, "index": i, "object": "embedding"})
    return JSONResponse({"model": body.get("model") or srv.model_id, "object": "list",
                         "usage": {"prompt_tokens": n, "total_tokens": n}, "data": data})
