"""POST /infill: llama-server's fill-in-the-middle endpoint. `input_prefix` and `input_suffix` (strings,
or llama-server's mixed lists of strings and token ids), optional `input_extra` (files of the same
project: [{filename, text}]) and `prompt` (text the middle starts with), laid out as llama-server's
format_prompt_infill lays them out (the repo-level pattern: [FIM_REP]myproject, [FIM_SEP]filename
and text per extra file, [FIM_SEP]filename, then [FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID];
the prefix cut to 3/4 of a batch, the suffix to the rest, the extra files to what the context keeps
after a batch and twice n_predict); the rest is a /completion of those tokens (the same fields, the
same answer). A model without FIM tokens: 501, as llama-server answers."""
from __future__ import annotations

import json
from typing import Dict, List

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse
from starlette.routing import Route

from pyriver.server import llamacpp_api as L
from pyriver.server.disconnect import or_cancel
from pyriver.server.schema import APIError, json_object

# llama-server's default n_batch: its layout cuts the prefix and suffix to shares of it (pyriver's
# steps are sized apart from it, so the layout keeps llama-server's number)
LAYOUT_BATCH = 2048


def routes(srv, guarded) -> List[Route]:
    async def infill(req: HTTPRequest):
        async def h(req):
            body = _check(srv, json_object(await req.body()))
            toks = await run_in_threadpool(layout, srv, body)
            f = await run_in_threadpool(L.parse_native, srv, json.dumps(dict(body, prompt=toks)).encode())
            n = L.Native(srv, f, toks, 0)
            if f["stream"]:
                return L.stream_response(n)
            return JSONResponse(await or_cancel(req, [n.r], L.run_one(n)))
        return await guarded(req, h)
    return [Route("/infill", infill, methods=["POST"])]


def _check(srv, body: Dict) -> Dict:
    missing = "".join(f"{name} token is missing. " for name, t in zip(("prefix", "suffix", "middle"), srv.llm.vocab.fim)
                      if t < 0)
    if missing:
        raise APIError(501, f"Infill is not supported by this model: {missing}", type_="not_supported_error")
    if "prompt" in body and not isinstance(body["prompt"], str):
        raise APIError(400, '"prompt" must be a string', param="prompt")
    for k in ("input_prefix", "input_suffix"):
        if k not in body:
            raise APIError(400, f'"{k}" is required', param=k)
        val = body[k]
        if not (isinstance(val, str) or isinstance(val, list) and all(
                isinstance(x, (str, int)) and not isinstance(x, bool) for x in val)):
            raise APIError(400, f'"{k}" must be a string or a list of strings and token ids', param=k)
    extra = body.get("input_extra", [])
    if not isinstance(extra, list):
        raise APIError(400, '"input_extra" must be an array of {"filename": string, "text": string}', param="input_extra")
    for chunk in extra:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise APIError(400, 'extra_context chunk must contain a "text" field with a string value', param="input_extra")
        if "filename" in chunk and not isinstance(chunk["filename"], str):
            raise APIError(400, 'extra_context chunk\'s "filename" field must be a string', param="input_extra")
    return dict(body, input_extra=extra)


def layout(srv, body: Dict) -> List[int]:
    """llama-server's format_prompt_infill, token for token."""
    v = srv.llm.vocab
    pre, suf, mid = v.fim
    with srv.sched.vocab_lock:
        tok = lambda text: v.tokenize(text.encode("utf-8"), add_bos=False, special=False)  # noqa: E731
        mixed = lambda x: tok(x) if isinstance(x, str) else [t for part in x for t in (tok(part) if isinstance(part, str) else [part])]  # noqa: E731
        prefix, suffix = mixed(body["input_prefix"]), mixed(body["input_suffix"])
        prompt = v.tokenize(body.get("prompt", "").encode("utf-8"), add_bos=False, special=True)   # as llama-server's
        extra: List[int] = []
        if v.fim_rep >= 0:
            extra += [v.fim_rep] + tok("myproject\n")
        for chunk in body["input_extra"]:
            if v.fim_sep >= 0:
                extra += [v.fim_sep] + tok(chunk.get("filename", "tmp") + "\n")
            else:   # llama-server's chunk separator
                extra += tok("\n\n--- snippet ---\n\n")
            extra += tok(chunk["text"])
        if v.fim_sep >= 0:
            extra += [v.fim_sep] + tok("filename\n")
    n_batch, n_predict, n_ctx = LAYOUT_BATCH, srv.settings.get("n_predict", -1), srv.llm.n_ctx()
    n_prefix = min(len(prefix), 3 * (n_batch // 4))
    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra))
    head = [pre] + prefix[len(prefix) - n_prefix:] + prompt
    tail = [suf] + suffix[:n_suffix]
    inp, end = (tail, head) if srv.settings.get("spm_infill") else (head, tail)
    if v.add_bos:
        inp = [v.bos] + inp
    return extra[len(extra) - n_extra:] + inp + end + [mid]

