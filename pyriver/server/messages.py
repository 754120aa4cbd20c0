"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, the API coding agents
speak, as llama-server serves it: the request becomes a chat completion (llama-server's
convert_anthropic_to_oai: `system` a system message, text blocks content, an assistant's `tool_use`
blocks its tool_calls, a user's `tool_result` blocks tool messages, `tools` functions with
`input_schema` as parameters, `tool_choice` auto/any/tool/none, `stop_sequences` stop), runs through
the chat plan the OpenAI route uses (template, tools, grammar), and the answer comes back as a
message: text and `tool_use` content blocks, `stop_reason` end_turn / max_tokens / stop_sequence /
tool_use, `usage`. Streamed, its events: message_start, content_block_start / _delta (text_delta,
input_json_delta) / _stop per block, message_delta with the stop reason and usage, message_stop.
An assistant's `thinking` blocks become its reasoning_content (the template renders them, in the chat
and in count_tokens alike); `image` blocks (base64 or url source, also inside a tool_result) become
image_url parts, which need --mmproj (without it: 400, "image input is not supported"; llama-server's 500 there
is a recorded difference, tests/tools/server_suite_gaps.json). Documents: 400. An empty messages list is
answered as llama-server answers it: the generation prompt alone."""
from __future__ import annotations

import json
import secrets
from typing import Dict, List, Optional

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse
from starlette.routing import Route

from pyriver.text.toolcall import DeltaStream
from pyriver.server import multimodal, streams
from pyriver.server.disconnect import or_cancel
from pyriver.server.schema import CHAT, APIError, json_object, parse

DEFAULT_MAX_TOKENS = 4096   # Anthropic requires max_tokens; a request without it gets this


def routes(srv, guarded, app_chat) -> List[Route]:
    """app_chat: app's chat helpers (plan, tokens, events), handed in as responses.routes gets them."""
    async def messages(req: HTTPRequest):
        return await guarded(req, lambda r: _handle(srv, r, app_chat))

    async def count(req: HTTPRequest):
        return await guarded(req, lambda r: _count(srv, r, app_chat))
    return [Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count, methods=["POST"])]


def _text(blocks, where: str) -> str:
    """A content of text blocks (or a string) as one string."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise APIError(400, f"{where}: content must be a string or a list of content blocks", param="messages")
    out = []
    for b in blocks:
        if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
            raise APIError(400, f"{where}: only text blocks ({{type: 'text', text}}) are supported here, got "
                           f"{str(b.get('type') if isinstance(b, dict) else b)[:40]!r}", param="messages")
        out.append(b["text"])
    return "".join(out)


def _image(b: Dict, where: str) -> Dict:
    """An image block as the chat's image_url part (llama-server's: a base64 source a data: URL, a url
    source its URL; the chat's media loading then takes either, --mmproj deciding whether it may)."""
    src = b.get("source")
    kind = src.get("type") if isinstance(src, dict) else None
    if kind == "base64" and isinstance(src.get("data"), str):
        url = f"data:{src.get('media_type') or 'image/jpeg'};base64,{src['data']}"
    elif kind == "url" and isinstance(src.get("url"), str):
        url = src["url"]
    else:
        raise APIError(400, f"{where}: an image block needs a source {{type: 'base64', media_type, data}} or "
                       "{type: 'url', url}", param="messages")
    return {"type": "image_url", "image_url": {"url": url}}


def _result(content, where: str):
    """A tool_result's content: a string, or (with an image among its blocks) the chat's parts."""
    if not isinstance(content, list) or not any(isinstance(b, dict) and b.get("type") == "image" for b in content):
        return _text(content, where)
    parts = []
    for b in content:
        if isinstance(b, dict) and b.get("type") == "image":
            parts.append(_image(b, where))
        else:
            parts.append({"type": "text", "text": _text([b], where)})
    return parts


def _message(m, i: int) -> List[Dict]:
    """The chat messages of one Anthropic message (a user's tool results come first, as tool messages)."""
    where = f"messages[{i}]"
    role = m.get("role") if isinstance(m, dict) else None
    if role not in ("user", "assistant"):
        raise APIError(400, f"{where}: role must be 'user' or 'assistant'", param="messages")
    content = m.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise APIError(400, f"{where}: content must be a string or a list of content blocks", param="messages")
    texts, images, calls, results, thinking = [], [], [], [], []
    for b in content:
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            texts.append(b["text"])
            images.append({"type": "text", "text": b["text"]})
        elif kind == "image" and role == "user":
            images.append(_image(b, where))
        elif kind == "tool_use" and role == "assistant":
            if not isinstance(b.get("id"), str) or not isinstance(b.get("name"), str) or not isinstance(b.get("input"), dict):
                raise APIError(400, f"{where}: a tool_use block needs id, name and input (an object)", param="messages")
            calls.append({"id": b["id"], "type": "function",
                          "function": {"name": b["name"], "arguments": json.dumps(b["input"])}})
        elif kind == "tool_result" and role == "user":
            if not isinstance(b.get("tool_use_id"), str):
                raise APIError(400, f"{where}: a tool_result block needs tool_use_id", param="messages")
            res = _result(b.get("content", ""), where + " tool_result")
            if b.get("is_error"):
                res = "Error: " + res if isinstance(res, str) else [{"type": "text", "text": "Error:"}] + res
            results.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": res})
        elif kind == "thinking" and role == "assistant":
            if not isinstance(b.get("thinking"), str):
                raise APIError(400, f"{where}: a thinking block needs thinking (a string)", param="messages")
            thinking.append(b["thinking"])   # the template's reasoning_content, as llama-server hands it on
        elif kind == "redacted_thinking" and role == "assistant":
            continue   # nothing readable to hand on
        else:
            raise APIError(400, f"{where}: content blocks of type {str(kind)[:40]!r} are not supported here "
                           "(text, a user's image, an assistant's tool_use and thinking, a user's tool_result)",
                           param="messages")
    out = list(results)
    if role == "assistant":
        msg: Dict = {"role": "assistant", "content": "".join(texts) or None}
        if calls:
            msg["tool_calls"] = calls
        if thinking:
            msg["reasoning_content"] = "".join(thinking)
        out.append(msg)
    elif len(images) > len(texts):   # an image among them: the chat's parts, the media path takes them
        out.append({"role": "user", "content": images})
    elif texts or not results:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _tool_choice(tc) -> Optional[object]:
    if tc is None:
        return None
    kind = tc.get("type") if isinstance(tc, dict) else None
    if kind == "auto":
        return "auto"
    if kind == "any":
        return "required"
    if kind == "none":
        return "none"
    if kind == "tool" and isinstance(tc.get("name"), str):
        return {"type": "function", "function": {"name": tc["name"]}}
    raise APIError(400, "tool_choice must be {type: auto|any|none} or {type: 'tool', name}", param="tool_choice")


def to_chat(body: Dict) -> Dict:
    """The chat completion request of a Messages request."""
    msgs = body.get("messages")
    if not isinstance(msgs, list):   # empty: llama-server's permissive answer, the generation prompt alone
        raise APIError(400, "'messages' must be a list", param="messages")
    out: List[Dict] = []
    if body.get("system") is not None:
        out.append({"role": "system", "content": _text(body["system"], "system")})
    for i, m in enumerate(msgs):
        out += _message(m, i)
    chat_body: Dict = {"messages": out, "max_tokens": body.get("max_tokens", DEFAULT_MAX_TOKENS)}
    for k in ("model", "temperature", "top_p", "top_k", "stream", "lora", "id_slot", "chat_template_kwargs"):
        if k in body:   # lora, id_slot and chat_template_kwargs: llama-server's
            chat_body[k] = body[k]
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":   # llama-server's: a thinking budget
        chat_body["thinking_budget_tokens"] = thinking.get("budget_tokens", 10000)
    if body.get("stop_sequences") is not None:
        chat_body["stop"] = body["stop_sequences"]
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools):
            raise APIError(400, "tools must be a list of {name, description, input_schema}", param="tools")
        chat_body["tools"] = [{"type": "function", "function": {
            "name": t["name"], "description": t.get("description", ""),
            "parameters": t.get("input_schema") or {"type": "object", "properties": {}}}} for t in tools]
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        chat_body["tool_choice"] = choice
        if isinstance(body["tool_choice"], dict) and body["tool_choice"].get("disable_parallel_tool_use"):
            chat_body["parallel_tool_calls"] = False
    return chat_body


def _blocks(msg: Dict) -> List[Dict]:
    """The content blocks of a chat answer: its thinking (llama-server's: an empty signature), its
    text, then a tool_use block per tool call."""
    out = []
    if msg.get("reasoning_content"):
        out.append({"type": "thinking", "thinking": msg["reasoning_content"], "signature": ""})
    if msg.get("content"):
        out.append({"type": "text", "text": msg["content"]})
    for c in msg.get("tool_calls") or []:
        try:
            args = json.loads(c["function"]["arguments"] or "{}")
        except ValueError:
            args = {}
        out.append({"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                    "input": args if isinstance(args, dict) else {}})
    return out


def _stop(finish: str, word: Optional[str]):
    """(stop_reason, stop_sequence) of a chat finish reason."""
    if finish == "tool_calls":
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    return ("stop_sequence", word) if word else ("end_turn", None)


def _usage(r) -> Dict:
    return {"input_tokens": len(r.prompt), "output_tokens": r.n_decoded, "cache_read_input_tokens": r.n_cached}


async def _prepare(srv, req: HTTPRequest, app_chat):
    """The request, its chat fields, plan, prompt tokens and media (None without a projector): the
    chat route's prompt (openai_api._chat_prompt)."""
    body = json_object(await req.body())
    f = parse(json.dumps(to_chat(body)).encode(), CHAT, "messages", srv.settings.get("defaults"))
    srv.check_model(f["model"])
    plan, toks, mp = await run_in_threadpool(app_chat.prompt, srv, f)
    media = None
    if mp is not None:
        toks, media = multimodal.check(srv, mp), mp.media
    return body, f, plan, toks, media


async def _count(srv, req: HTTPRequest, app_chat):
    _, _, _, toks, _ = await _prepare(srv, req, app_chat)
    return JSONResponse({"input_tokens": len(toks)})


async def _handle(srv, req: HTTPRequest, app_chat):
    body, f, plan, toks, media = await _prepare(srv, req, app_chat)
    if media is None:
        srv.prompt_tokens(toks)
    r = srv.submit_n(f, toks, None, await run_in_threadpool(srv.samplers, f, toks, plan.grammar), media)[0]
    asked = [s for s in (body.get("stop_sequences") or []) if s]
    ev = app_chat.new_events(r, srv.llm.chat_stops(f["stops"]))
    mid, model = "msg_" + secrets.token_hex(12), f["model"] or srv.model_id

    def word() -> Optional[str]:
        """The stop sequence that ended the text, if one of the request's did."""
        rest = ev.text.buf[ev.text.sent:].decode("utf-8", "ignore")
        return next((s for s in asked if rest.startswith(s)), None)

    def message(content: List[Dict], stop_reason, stop_sequence) -> Dict:
        return {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": _usage(r)}

    if not f["stream"]:
        async def collect():
            parts, finish = [], "length"
            async for text, fin in app_chat.events(r, [], ev):
                parts.append(text)
                finish = fin or finish
            return "".join(parts), finish
        msg = app_chat.choice("", 0, model, *await or_cancel(req, [r], collect()), plan)
        return JSONResponse(message(_blocks(msg["message"]), *_stop(msg["finish_reason"], word())))

    def sse(kind: str, data: Dict) -> str:
        return f"event: {kind}\ndata: {json.dumps(dict(type=kind, **data))}\n\n"

    def stop(index: int, kind: str) -> str:
        """A block's end; a thinking block's after llama-server's empty signature_delta (the API requires one)."""
        sig = sse("content_block_delta", {"index": index, "delta": {"type": "signature_delta", "signature": ""}})
        return (sig if kind == "thinking" else "") + sse("content_block_stop", {"index": index})

    async def stream():
        try:
            head = message([], None, None)
            head["usage"] = {"input_tokens": len(r.prompt), "output_tokens": 0}
            yield sse("message_start", {"message": head})
            ds = DeltaStream(plan.tools)   # content, reasoning and tool calls as they come
            think = plan.thinking.stream() if plan.thinking.tags is not None else None   # thinking apart
            index, open_kind, finish = -1, None, "length"
            async for text, fin in app_chat.events(r, [], ev):
                for ch in app_chat.text_chunks(ds, think, "", 0, model, text, fin):
                    c = ch["choices"][0]
                    finish = c["finish_reason"] or finish
                    d = c["delta"]
                    if d.get("reasoning_content"):
                        if open_kind != "thinking":
                            index, open_kind = index + 1, "thinking"
                            yield sse("content_block_start", {"index": index, "content_block": {"type": "thinking",
                                                                                                "thinking": ""}})
                        yield sse("content_block_delta", {"index": index, "delta": {"type": "thinking_delta",
                                                                                    "thinking": d["reasoning_content"]}})
                    if d.get("content"):
                        if open_kind != "text":
                            if open_kind is not None:
                                yield stop(index, open_kind)
                            index, open_kind = index + 1, "text"
                            yield sse("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                        yield sse("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": d["content"]}})
                    for call in d.get("tool_calls") or []:   # a call opens a block; its arguments stream as deltas
                        if call.get("id"):
                            if open_kind is not None:
                                yield stop(index, open_kind)
                            index, open_kind = index + 1, "tool_use"
                            yield sse("content_block_start", {"index": index, "content_block": {
                                "type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": {}}})
                        if call["function"].get("arguments"):
                            yield sse("content_block_delta", {"index": index, "delta": {
                                "type": "input_json_delta", "partial_json": call["function"]["arguments"]}})
            if open_kind is not None:
                yield stop(index, open_kind)
            reason, seq = _stop(finish, word())
            yield sse("message_delta", {"delta": {"stop_reason": reason, "stop_sequence": seq},
                                        "usage": {"output_tokens": r.n_decoded}})
            yield sse("message_stop", {})
        except APIError as e:   # after the headers went out: the error as an event
            yield sse("error", {"error": {"type": "invalid_request_error", "message": e.body()["error"]["message"]}})
        finally:   # the client went away (or the stream ended): the slot frees at the next step
            r.cancel()
    return streams.event_stream(stream())
