"""POST /v1/responses (also /responses): OpenAI's Responses API, text in and text out, as
llama-server serves it: the request becomes a chat completion (llama-server's
convert_responses_to_chatcmpl: `instructions` a system message, `input` a string or message items,
`max_output_tokens` max_tokens) and the answer a response object; streamed, its named events
(response.created, in_progress, output_item.added, content_part.added, output_text.delta, the
.done events, response.completed). llama-server's extensions: `return_progress` (a
response.in_progress event with `prompt_progress` once the prompt is in the cache: pyriver's
scheduler reports the prompt when it is done, not chunk by chunk), `timings_per_token` (`timings`
on each delta); response.completed carries `timings`. POST /v1/responses/input_tokens: the prompt's
token count ({"input_tokens", "object": "response.input_tokens"}). Tools, files and images: 400.
A thinking model's reasoning (server/thinking.py) comes first as a `reasoning` output item (its
text a reasoning_text part; streamed, response.reasoning_text.delta events); `reasoning.effort` is
the chat's reasoning_effort and an input `reasoning` item the assistant's reasoning_content, as
llama-server converts them."""
from __future__ import annotations

import json
import secrets
import time
from typing import Dict, List

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse
from starlette.routing import Route

from pyriver.server import llamacpp_api as L
from pyriver.server import streams
from pyriver.server.disconnect import or_cancel
from pyriver.server.schema import CHAT, APIError, json_object, parse


def routes(srv, guarded, app_chat) -> List[Route]:
    """app_chat: app's chat helpers (plan, tokens, collect, events), handed in so this module does not
    import app, which imports it to build the routes."""
    async def responses(req: HTTPRequest):
        return await guarded(req, lambda r: _handle(srv, r, app_chat))
    async def count(req: HTTPRequest):
        return await guarded(req, lambda r: _count(srv, r, app_chat))
    return [Route("/v1/responses", responses, methods=["POST"]), Route("/responses", responses, methods=["POST"]),
            Route("/v1/responses/input_tokens", count, methods=["POST"]),
            Route("/responses/input_tokens", count, methods=["POST"])]


async def _count(srv, req: HTTPRequest, app_chat):
    """/v1/responses/input_tokens (llama-server's): the prompt tokens the request's chat renders to."""
    chat = to_chat(json_object(await req.body()))
    for k in ("return_progress", "timings_per_token"):
        chat.pop(k, None)
    f = parse(json.dumps(chat).encode(), CHAT, "messages", srv.settings.get("defaults"))
    plan = await run_in_threadpool(app_chat.plan, srv, f)
    try:
        toks = await run_in_threadpool(app_chat.tokens, srv, plan, f)
    except ValueError as e:
        raise APIError(400, f"the messages do not render with the model's chat template: {e}", param="input")
    return JSONResponse({"input_tokens": len(toks), "object": "response.input_tokens"})


def _text_parts(parts, role: str) -> str:
    out = []
    for p in parts:
        kind = p.get("type") if isinstance(p, dict) else None
        if kind not in ("input_text", "output_text"):
            raise APIError(400, f"content parts of type {str(kind)[:40]!r} are not supported (text only: "
                           "'input_text', 'output_text')", param="input")
        if not isinstance(p.get("text"), str):
            raise APIError(400, f"'{kind}' requires 'text' (a string)", param="input")
        out.append(p["text"])
    return "".join(out)


def to_chat(body: Dict) -> Dict:
    """The chat completion request of a responses request (llama-server's conversion, text only)."""
    if body.get("previous_response_id"):
        raise APIError(400, "llama.cpp does not support 'previous_response_id'.", param="previous_response_id")
    if body.get("tools"):
        raise APIError(400, "'tools' are not supported by /v1/responses here (use /v1/chat/completions)", param="tools")
    if "input" not in body:
        raise APIError(400, "'input' is required", param="input")
    chat = {k: v for k, v in body.items() if k not in ("input", "instructions", "max_output_tokens", "tools",
                                                          "reasoning")}
    if isinstance(body.get("reasoning"), dict) and "effort" in body["reasoning"]:   # llama-server's conversion
        chat["reasoning_effort"] = body["reasoning"]["effort"]
    msgs = []
    if "instructions" in body:
        if not isinstance(body["instructions"], str):
            raise APIError(400, "'instructions' must be a string", param="instructions")
        msgs.append({"role": "system", "content": body["instructions"]})
    inp = body["input"]
    if isinstance(inp, str):
        msgs.append({"role": "user", "content": inp})
    elif isinstance(inp, list):
        for item in inp:
            if isinstance(item, dict) and item.get("type") == "reasoning":   # an assistant turn's reasoning
                if msgs and msgs[-1]["role"] == "assistant":
                    msgs[-1]["reasoning_content"] = _reasoning_text(item)
                else:
                    msgs.append({"role": "assistant", "content": "", "reasoning_content": _reasoning_text(item)})
                continue
            role = item.get("role") if isinstance(item, dict) else None
            if role not in ("user", "system", "developer", "assistant"):
                raise APIError(400, "each input item must be a message with a role (user, system, developer, "
                               "assistant)", param="input")
            content = item.get("content")
            if isinstance(content, list):
                content = _text_parts(content, role)
            if not isinstance(content, str):
                raise APIError(400, "a message's 'content' must be a string or a list of text parts", param="input")
            if role == "assistant" and msgs and msgs[-1].get("reasoning_content") is not None \
                    and msgs[-1]["role"] == "assistant" and not msgs[-1]["content"]:
                msgs[-1]["content"] = content   # the reasoning item's message
                continue
            msgs.append({"role": "system" if role == "developer" else role, "content": content})
    else:
        raise APIError(400, "'input' must be a string or a list of messages", param="input")
    if not msgs:
        raise APIError(400, "'input' must not be empty", param="input")
    chat["messages"] = msgs
    if "max_output_tokens" in body:
        chat["max_tokens"] = body["max_output_tokens"]
    return chat


def _reasoning_text(item: Dict) -> str:
    parts = item.get("content")
    if not isinstance(parts, list) or not parts or not isinstance(parts[0], dict) \
            or not isinstance(parts[0].get("text"), str):
        raise APIError(400, "a 'reasoning' input item needs 'content': [{type: 'reasoning_text', text}]", param="input")
    return parts[0]["text"]


def _reasoning_item(rsid: str, reasoning: str) -> Dict:
    return {"id": rsid, "summary": [], "type": "reasoning",
            "content": [{"text": reasoning, "type": "reasoning_text"}], "encrypted_content": ""}


def _response(rid: str, mid: str, model: str, text: str, r, created: int, reasoning: str = "",
              rsid: str = "") -> Dict:
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    output = [dict(_reasoning_item(rsid or "rs_" + secrets.token_hex(16), reasoning), status="completed")] \
        if reasoning else []
    output += [{"type": "message", "status": "completed", "id": mid, "content": [part], "role": "assistant"}] \
        if text else []
    n_in, n_out = len(r.prompt), r.n_decoded
    return {"id": rid, "object": "response", "created_at": created, "completed_at": int(time.time()),
            "status": "completed", "model": model, "output": output,
            "usage": {"input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out,
                      "input_tokens_details": {"cached_tokens": r.n_cached}}}


async def _handle(srv, req: HTTPRequest, app_chat):
    body = json_object(await req.body())
    extra = {k: body.get(k) for k in ("return_progress", "timings_per_token")}
    for k, v in extra.items():
        if v is not None and not isinstance(v, bool):
            raise APIError(400, f"'{k}' must be a boolean", param=k)
    chat = to_chat(body)
    for k in extra:
        chat.pop(k, None)
    f = parse(json.dumps(chat).encode(), CHAT, "messages", srv.settings.get("defaults"))
    if f["n"] != 1:
        raise APIError(400, "'n' is not a field of /v1/responses", param="n")
    plan = await run_in_threadpool(app_chat.plan, srv, f)
    try:
        toks = await run_in_threadpool(app_chat.tokens, srv, plan, f)
    except ValueError as e:
        raise APIError(400, f"the messages do not render with the model's chat template: {e}", param="input")
    toks = await run_in_threadpool(app_chat.after_prompt, srv, plan.thinking, plan.prompt, toks, f)
    srv.prompt_tokens(toks)
    r = srv.submit_n(f, toks, None, await run_in_threadpool(srv.samplers, f, toks, plan.grammar))[0]
    stops = srv.llm.chat_stops(f["stops"])
    rid, mid, created, model = "resp_" + secrets.token_hex(16), "msg_" + secrets.token_hex(16), int(time.time()), \
        f["model"] or srv.model_id
    if not f["stream"]:
        text, _ = await or_cancel(req, [r], app_chat.collect(r, stops))
        reasoning, text = plan.thinking.split(text)
        return JSONResponse(_response(rid, mid, model, text, r, created, reasoning))

    def sse(kind: str, data: Dict) -> str:
        return f"event: {kind}\ndata: {json.dumps(dict(type=kind, **data))}\n\n"

    async def stream():
        head = {"response": {"id": rid, "object": "response", "status": "in_progress"}}
        try:
            yield sse("response.created", head)
            yield sse("response.in_progress", head)
            parts, started, progressed = [], False, not extra["return_progress"]
            think = plan.thinking.stream()
            rsid, thinking = "rs_" + secrets.token_hex(16), []
            async for piece, _fin in app_chat.events(r, stops):
                if not progressed and r.t_first is not None:
                    progressed = True
                    n = len(r.prompt)
                    yield sse("response.in_progress", dict(head, prompt_progress={
                        "total": n, "cache": r.n_cached, "processed": n,
                        "time_ms": (r.t_first - r.t_submit) * 1e3}))
                text = ""
                for d in think.feed(piece or ""):   # reasoning deltas apart, content as before
                    if "reasoning_content" in d:
                        if not thinking:
                            yield sse("response.output_item.added", {"item": dict(
                                _reasoning_item(rsid, ""), content=[], status="in_progress")})
                        thinking.append(d["reasoning_content"])
                        yield sse("response.reasoning_text.delta", {"delta": d["reasoning_content"], "item_id": rsid})
                    else:
                        text += d["content"]
                if not text:
                    continue
                if not started:
                    started = True
                    yield sse("response.output_item.added", {"item": {
                        "content": [], "id": mid, "role": "assistant", "status": "in_progress", "type": "message"}})
                    yield sse("response.content_part.added", {"item_id": mid, "part": {"type": "output_text", "text": ""}})
                parts.append(text)
                d = {"item_id": mid, "delta": text}
                if extra["timings_per_token"]:
                    d["timings"] = L.timings(r)
                yield sse("response.output_text.delta", d)
            text, reasoning = "".join(parts), "".join(thinking)
            final = _response(rid, mid, model, text, r, created, reasoning, rsid)
            if reasoning:   # llama-server's: the reasoning item done first
                yield sse("response.output_item.done", {"item": _reasoning_item(rsid, reasoning)})
            if text:
                part = final["output"][-1]["content"][0]
                yield sse("response.output_text.done", {"item_id": mid, "text": text})
                yield sse("response.content_part.done", {"item_id": mid, "part": part})
                yield sse("response.output_item.done", {"item": final["output"][-1]})
            del final["completed_at"]
            yield sse("response.completed", {"response": final, "timings": L.timings(r)})
        except APIError as e:   # after the headers went out: the error as an event
            yield f"event: error\ndata: {json.dumps(e.body())}\n\n"
        finally:   # the client went away (or the stream ended): the slot frees at the next step
            r.cancel()
    return streams.event_stream(stream())
