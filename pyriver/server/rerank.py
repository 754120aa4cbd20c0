"""POST /rerank (also /reranking, /v1/rerank, /v1/reranking), as llama-server serves it when started
with --reranking (pooling RANK): each document's score is its (query, document) prompt's RANK
pooling, element 0, unnormalized (llama-server's send_rerank reads embd[0]). On a causal model
without a classifier head that is the last token's hidden state after the final norm, element 0
(pyriver.api.embedding.pool): what llama-server gives on such a file, a number without a reranker's
meaning; a real reranker's head is refused at load (pyriver.api.embedding.rank_head).

Jina's request and answer (`documents`; `results` of `index`, `relevance_score`; `usage`) or TEI's
(`texts`; a bare list of `index`, `score`, with `return_text` its `text`), best first, `top_n`
kept."""
from __future__ import annotations

from typing import Dict, List

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse
from starlette.routing import Route

from pyriver.api.embedding import LLAMA_POOLING_TYPE_RANK
from pyriver.server.embeddings import check_tokens
from pyriver.server.schema import APIError, json_object

PATHS = ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking")


def routes(srv, guarded) -> List[Route]:
    async def rerank(req: HTTPRequest):
        return await guarded(req, lambda r: _handle(srv, r))
    return [Route(p, rerank, methods=["POST"]) for p in PATHS]


def _strings(v):
    return v if isinstance(v, list) and all(isinstance(x, str) for x in v) else None


def parse(body) -> Dict:
    """llama-server's reading of the body: `query` a string; `documents`, else `texts`, a non-empty
    list of strings (a wrong type counts as absent, as its json_value); `top_n` a number, else all;
    TEI's format when `texts` is there."""
    if not isinstance(body, dict):
        raise APIError(400, "the body must be a JSON object")
    if "query" not in body:
        raise APIError(400, "\"query\" must be provided", param="query")
    if not isinstance(body["query"], str):
        raise APIError(400, "\"query\" must be a string", param="query")
    docs = _strings(body.get("documents"))
    if docs is None:
        docs = _strings(body.get("texts")) or []
    if not docs:
        raise APIError(400, "\"documents\" must be a non-empty string array", param="documents")
    top_n = body.get("top_n")
    top_n = int(top_n) if isinstance(top_n, (int, float)) and not isinstance(top_n, bool) else len(docs)
    if top_n < 0:   # llama-server answers 500 (a vector resized to -1)
        raise APIError(400, "\"top_n\" must be >= 0", param="top_n")
    model = body.get("model")
    return {"query": body["query"], "documents": docs, "top_n": top_n, "tei": "texts" in body,
            "return_text": "texts" in body and body.get("return_text") is True,
            "model": model if isinstance(model, str) else None}


def prompt_tokens(llm, query: str, doc: str) -> List[int]:
    """llama-server's format_prompt_rerank: the GGUF's `rerank` template with {query} and
    {document} (special tokens parsed), else [BOS] query [EOS] [SEP] document [EOS], each marker
    where the vocabulary adds it (EOS falling back to SEP)."""
    tpl = llm.meta("tokenizer.chat_template.rerank")
    if tpl is not None:
        text = tpl.replace("{query}", query).replace("{document}", doc)
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    v = llm.vocab
    eos = v.eos if v.eos != -1 else v.sep
    out = [v.bos] if v.add_bos else []
    out += llm.tokenize(query.encode("utf-8"), add_bos=False, special=False)
    out += ([eos] if v.add_eos else []) + ([v.sep] if v.add_sep else [])
    out += llm.tokenize(doc.encode("utf-8"), add_bos=False, special=False)
    return out + ([eos] if v.add_eos else [])


def _tokens(srv, query: str, docs: List[str]) -> List[List[int]]:
    with srv.sched.vocab_lock:
        return [check_tokens(srv.llm, prompt_tokens(srv.llm, query, d), "documents") for d in docs]


def answer(f: Dict, model: str, scores: List[float], n_tokens: int):
    label = "score" if f["tei"] else "relevance_score"
    rows = []
    for i, s in enumerate(scores):
        row = {"index": i, label: s}
        if f["return_text"]:
            row["text"] = f["documents"][i]
        rows.append(row)
    rows.sort(key=lambda r: -r[label])   # best first (stable: ties keep the documents' order)
    rows = rows[:f["top_n"]]
    if f["tei"]:
        return rows
    return {"model": f["model"] or model, "object": "list",
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}, "results": rows}


async def _handle(srv, req: HTTPRequest) -> JSONResponse:
    llm = srv.llm
    if not getattr(getattr(llm, "embeddings", None), "enabled", False) or llm.pooling_type() != LLAMA_POOLING_TYPE_RANK:
        raise APIError(501, "This server does not support reranking. Start it with `--reranking`",
                       type_="not_supported_error")
    f = parse(json_object(await req.body()))
    batches = await run_in_threadpool(_tokens, srv, f["query"], f["documents"])
    vecs = await run_in_threadpool(llm.embed_tokens, batches, False)
    scores = [float(v[0]) for v in vecs]
    return JSONResponse(answer(f, srv.model_id, scores, sum(len(t) for t in batches)))
