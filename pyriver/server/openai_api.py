"""The OpenAI routes: /v1/completions, /v1/chat/completions (and llama-server's /chat/completions
alias, its /apply-template and /chat/completions/input_tokens: the chat's prompt alone) and
/v1/models over the scheduler, results shaped by the runtime's own completion and chat
helpers; and the request pieces the other chat-shaped families (messages.py, responses.py) share:
the chat plan, its tokens, a request's text events."""
from __future__ import annotations

import json
import types
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from pyriver.text import chat_template as chat
from pyriver.text import completion as C
from pyriver.text.logprobs import as_dict as logprobs_dict
from pyriver.text.reasoning import opened
from pyriver.text.structured import ChatPlan, request_grammar
from pyriver.text.template_render import system_merged
from pyriver.text.toolcall import DeltaStream
from pyriver.server import llamacpp_api as L, multimodal, streams, thinking, verbose
from pyriver.server.disconnect import or_cancel
from pyriver.server.river_tokens import TokenExits
from pyriver.server.scheduler import Request
from pyriver.server.schema import CHAT, COMPLETION, APIError, end_error, parse



class Events:
    """(text, finish reason or None) pairs of a request from what the scheduler hands it; the last
    pair carries the reason. Stop strings through the runtime's TextStream; a stop string cancels it.
    A request that asked for prompt progress (Request.progress) also gets (None, report) pairs first.
    stop_type and word: how it ended in llama-server's terms (none, word, eos, limit; the stop string)."""

    def __init__(self, r: Request, stops: List[str]):
        self.r = r
        self.stops = stops
        self.text = C.TextStream([s.encode("utf-8") for s in stops if s])
        self.done = False
        self.n_tokens = 0   # token items read (river_tokens counts on it)
        self.stop_type, self.word = "none", ""

    def feed(self, item: tuple) -> List[Tuple[Optional[str], Any]]:
        if item[0] == "progress":
            return [(None, item[1])]
        if item[0] == "token":
            self.n_tokens += 1
            text, stopped = self.text.feed(item[2])
            if stopped:
                self.done = True
                self.r.stop_at(self.n_tokens)
                self.stop_type, self.word = "word", L.stopping_word(self.stops, self.text.buf)
                return [(text, "stop")]
            return [(text, None)] if text else []
        self.done = True
        reason = item[1]
        if reason.startswith("error: grammar: "):   # the request's grammar allowed no token
            raise APIError(400, reason[len("error: grammar: "):], param="grammar", code="grammar_dead_end")
        if reason.startswith("error"):
            raise end_error(reason)
        self.stop_type = "eos" if reason == "stop" else "limit"
        rest = self.text.finish()
        return ([(rest, None)] if rest else []) + [("", "stop" if reason == "stop" else "length")]


async def events(r: Request, stops: List[str], ev: Optional[Events] = None) -> AsyncIterator[Tuple[Optional[str], Any]]:
    ev = ev or Events(r, stops)
    while not ev.done:
        for pair in ev.feed(await r.out.get()):
            yield pair


def _sse(chunks: AsyncIterator[dict], r: Request, srv, req: HTTPRequest) -> StreamingResponse:
    """The chunks as server-sent events, made on the event loop as the scheduler hands tokens over;
    kept in a conversation stream under the request's X-Conversation-Id (streams.py)."""
    async def body():
        try:
            async for ch in chunks:
                ch.setdefault("system_fingerprint", L.fingerprint())
                yield f"data: {json.dumps(ch)}\n\n"
            yield "data: [DONE]\n\n"
        except APIError as e:   # after the headers went out: the error as an event, as llama-server sends it
            yield f"data: {json.dumps(e.body())}\n\n"
        finally:   # the client went away (or the stream ended): the slot frees at the next step
            r.cancel()
    conv = streams.conv_id(req)
    if conv:
        return streams.kept(srv.streams, conv, body(), r.cancel)
    return streams.event_stream(body())


def routes(srv, guarded) -> list:
    # Over 40 lines only as the two handlers of the family, closing over the one Server.
    async def completions(req: HTTPRequest):
        return await guarded(req, _completions)

    async def _completions(req: HTTPRequest):
        f = parse(await req.body(), COMPLETION, "prompt", srv.settings.get("defaults"))
        srv.check_model(f["model"])
        p = f["prompt"]
        p = p[0] if isinstance(p, list) and isinstance(p[0], (str, dict)) else p
        media = None
        if isinstance(p, dict):   # llama-server's JSON prompt, multimodal_data included (server/multimodal.py)
            toks, media = await run_in_threadpool(L.prompt_input, srv, p)
        else:
            toks = await run_in_threadpool(_tokenize, srv, p) if isinstance(p, str) else list(p)
        if media is None:
            srv.prompt_tokens(toks)
        grammar = request_grammar(f["response_format"], f["grammar"], f["json_schema"])
        rs = srv.submit_n(f, toks, f["logprobs"], await run_in_threadpool(srv.samplers, f, toks, grammar), media)
        r = rs[0]   # n choices: n requests
        cid, created, model = C.new_id("cmpl"), C.now(), srv.model_id
        if f["stream"]:
            return _sse(_completion_chunks(srv, r, f, toks, cid, created, model), r, srv, req)
        evs = [Events(ri, f["stops"]) for ri in rs]
        choices = []
        for i, (ri, (text, finish)) in enumerate(zip(rs, await or_cancel(req, rs, _collect_all(rs, f["stops"], evs)))):
            lp = None
            if f["logprobs"] is not None:
                with srv.sched.vocab_lock:   # pieces come from the shared Vocab buffer
                    lp = logprobs_dict(srv.llm.vocab, ri.logprob_entries, text, len(p) if isinstance(p, str) else 0)
            choices.append(dict(C.completion_dict(cid, created, model, text, finish, None, logprobs=lp)["choices"][0],
                                index=i))
        d = C.completion_dict(cid, created, model, "", None, _usage(*rs))
        d.update(choices=choices, system_fingerprint=L.fingerprint(), timings=L.timings(r))
        d["river"] = srv.river(r)   # null when River is off
        if verbose.wanted(srv, f):
            d["__verbose"] = verbose.final(srv, r, f, toks, choices[0]["text"], evs[0])
        return JSONResponse(d)

    async def chat_completions(req: HTTPRequest):
        return await guarded(req, _chat)

    async def _chat(req: HTTPRequest):
        f = parse(await req.body(), CHAT, "messages", srv.settings.get("defaults"))
        srv.check_model(f["model"])
        plan, toks, mp = await run_in_threadpool(_chat_prompt, srv, f)
        media = None
        if mp is not None:
            toks, media = multimodal.check(srv, mp), mp.media
        else:
            srv.prompt_tokens(toks)
        rs = srv.submit_n(f, toks, (f["top_logprobs"] or 0) if f["logprobs"] else None,
                          await run_in_threadpool(srv.samplers, f, toks, plan.grammar), media)
        r = rs[0]
        stops = srv.llm.chat_stops(f["stops"])
        cid, created, model = C.new_id("chatcmpl"), C.now(), srv.model_id
        if f["stream"]:
            return _sse(_chat_chunks(srv, r, f, toks, stops, cid, created, model, plan), r, srv, req)
        evs = [Events(ri, stops) for ri in rs]
        texts = await or_cancel(req, rs, _collect_all(rs, stops, evs))
        choices = []
        for i, (ri, (text, finish)) in enumerate(zip(rs, texts)):
            c = _chat_choice(cid, created, model, text, finish, plan, i)
            if f["logprobs"]:
                c["logprobs"] = L.chat_logprobs(srv, ri.logprob_entries[:_n_tokens(srv, ri, text)])
            choices.append(c)
        d = chat.chat_dict(cid, created, model, "", None, _usage(*rs))
        d.update(choices=choices, system_fingerprint=L.fingerprint(), timings=L.timings(r))
        d["river"] = srv.river(r)
        if verbose.wanted(srv, f):
            d["__verbose"] = verbose.final(srv, r, f, toks, texts[0][0], evs[0])
        return JSONResponse(d)

    async def apply_template(req: HTTPRequest):
        async def h(req):   # llama-server's: the chat route's prompt, nothing generated
            f = parse(await req.body(), CHAT, "messages", srv.settings.get("defaults"))
            plan, _, _ = await run_in_threadpool(_chat_prompt, srv, f)
            return JSONResponse({"prompt": plan.prompt})
        return await guarded(req, h)

    async def input_tokens(req: HTTPRequest):
        async def h(req):   # llama-server's: the chat route's prompt tokens, media's positions counted
            f = parse(await req.body(), CHAT, "messages", srv.settings.get("defaults"))
            _, toks, mp = await run_in_threadpool(_chat_prompt, srv, f)
            return JSONResponse({"input_tokens": len(toks if mp is None else mp.tokens),
                                 "object": "response.input_tokens"})
        return await guarded(req, h)

    async def models(req: HTTPRequest):
        async def h(_):
            return JSONResponse({"models": [multimodal.models_entry(srv)],   # llama-server's (Ollama-shaped) list
                                 "object": "list", "data": [   # llama-server's entry of its one model
                {"id": srv.model_id, "aliases": srv.aliases, "tags": srv.tags, "object": "model", "created": C.now(),
                 "owned_by": "pyriver", "meta": srv.meta()}]})
        return await guarded(req, h)

    return [Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/chat/completions", chat_completions, methods=["POST"]),   # llama-server's aliases
            Route("/apply-template", apply_template, methods=["POST"]),
            Route("/chat/completions/input_tokens", input_tokens, methods=["POST"]),
            Route("/v1/chat/completions/input_tokens", input_tokens, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/models", models, methods=["GET"])]


def _tokenize(srv, text: str) -> List[int]:
    with srv.sched.vocab_lock:
        return srv.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True) if text else [srv.llm.token_bos()]


def _chat_plan(srv, f: Dict) -> ChatPlan:
    """The request's messages, template variables, grammar and tools (pyriver.text.structured),
    and its reasoning (plan.thinking: server/thinking.py)."""
    template = srv.llm.chats.template
    source = template.source
    think = thinking.plan(srv, f, source)
    plan = ChatPlan(source, system_merged(template, f["messages"]), f["response_format"], f["grammar"],
                    f["json_schema"], f["tools"], f["tool_choice"], f["parallel_tool_calls"])
    plan.extra = dict(thinking.template_extra(srv, f, think), **plan.extra)
    plan.thinking, plan.prompt = think, ""
    return plan


def _chat_prompt(srv, f: Dict):
    """(plan, prompt tokens, multimodal prompt) of a chat request's fields, as the chat route, the
    template route and the token count take them (llama-server's oaicompat_chat_params_parse):
    content parts joined as llama-server joins them (media: the markers, and the files), the plan,
    the rendered text in plan.prompt; with a projector the prompt goes through libmtmd's tokenizer
    (tokens None). A template's own error is a 400."""
    f["messages"], files = multimodal.chat_media(srv, f["messages"])
    plan = _chat_plan(srv, f)
    try:
        if srv.projector is not None:   # llama-server's: every chat through libmtmd's tokenizer
            return plan, None, _chat_media_prompt(srv, plan, f, files)
        toks = _chat_tokens(srv, plan, f)
    except ValueError as e:
        raise APIError(400, f"the messages do not render with the model's chat template: {e}", param="messages")
    return plan, thinking.after_prompt(srv, plan.thinking, plan.prompt, toks, f), None


def _render(srv, plan: ChatPlan, f: Dict):
    """chat_prompt's (text, add_bos); a template's own error (raise_exception: no messages, a role it
    refuses) as ValueError, which the routes answer with a 400."""
    try:
        return srv.llm.chat_prompt(plan.messages, f["add_generation_prompt"], f["continue_final"], server_bos=True,
                                   **plan.extra)
    except ValueError:
        raise
    except Exception as e:   # jinja2's TemplateError and the like: the request's messages, not the server
        raise ValueError(str(e)) from None


def _chat_tokens(srv, plan: ChatPlan, f: Dict) -> List[int]:
    with srv.sched.vocab_lock:
        text, add_bos = _render(srv, plan, f)
        plan.prompt = text   # the answer is parsed after its opened thinking tag (server/thinking.py)
        return srv.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)


def _chat_media_prompt(srv, plan: ChatPlan, f: Dict, files):
    """The chat's prompt text with its media markers, through the projector (server/multimodal.py)."""
    with srv.sched.vocab_lock:
        text, _ = _render(srv, plan, f)
    plan.prompt, plan.thinking.prefix = text, opened(text, plan.thinking.tags)
    return multimodal.tokenize(srv, text, files or [])


def _chat_choice(cid: str, created: int, model: str, text: str, finish: str, plan: ChatPlan, i: int = 0) -> dict:
    """A choice of a chat answer: its reasoning apart (as llama-server), then content and tool calls."""
    think = getattr(plan, "thinking", None)
    reasoning, text = think.split(text) if think is not None else ("", text)
    c = dict(chat.chat_dict(cid, created, model, text, finish, {}, plan.tools)["choices"][0], index=i)
    if reasoning:
        c["message"]["reasoning_content"] = reasoning
    return c


async def _collect(r: Request, stops: List[str], ev: Optional[Events] = None):
    parts, finish = [], "length"
    async for text, fin in events(r, stops, ev):   # no progress reports: it does not stream
        parts.append(text)
        finish = fin or finish
    return "".join(parts), finish


async def _collect_all(rs: List[Request], stops: List[str], evs: Optional[List[Events]] = None) -> List[Tuple[str, str]]:
    return [await _collect(r, stops, ev) for r, ev in zip(rs, evs or [None] * len(rs))]


def _usage(r: Request, *more: Request) -> dict:
    """OpenAI's usage, with the prompt tokens a slot's cache already held (cached_tokens); with
    several choices (n > 1) the prompt counts once, the generated tokens of all."""
    return dict(C.usage_dict(len(r.prompt), r.n_decoded + sum(m.n_decoded for m in more)),
                prompt_tokens_details={"cached_tokens": r.n_cached})


def _usage_chunk(d: dict, r: Request) -> dict:
    d = dict(d, choices=[])
    d["usage"] = _usage(r)
    d["timings"] = L.timings(r)
    return d


def _n_tokens(srv, r: Request, text: str) -> int:
    """How many of r's tokens make up text (text may stop short of them: a stop string)."""
    n, got = 0, 0
    want = len(text.encode("utf-8"))
    with srv.sched.vocab_lock:
        for tok, _lp, _top in r.logprob_entries:
            if got >= want:
                break
            got += len(srv.llm.vocab.piece(tok))
            n += 1
    return n


async def _completion_chunks(srv, r: Request, f: Dict, toks: List[int], cid: str, created: int,
                             model: str) -> AsyncIterator[dict]:
    ev = Events(r, f["stops"])
    tags = TokenExits.make(srv, r, ev, f["river_tokens"])
    verbose_on = verbose.wanted(srv, f)
    async for text, fin in events(r, f["stops"], ev):
        if text is None:   # prompt progress (return_progress), as llama-server's chunk of no text
            yield dict(C.completion_dict(cid, created, model, "", None, None), prompt_progress=fin)
            continue
        if text:
            ch = C.completion_dict(cid, created, model, text, None, None)
            if verbose_on:   # llama-server's: each streamed chunk with its native chunk
                ch["__verbose"] = L.partial(r, 0, text, [], len(toks))
            yield tags.attach(ch) if tags else ch
        if fin:
            ch = dict(C.completion_dict(cid, created, model, "", fin, None), river=srv.river(r))
            if verbose_on:
                ch["__verbose"] = verbose.final(srv, r, f, toks, "", ev)
            yield ch
    if f["include_usage"]:
        yield _usage_chunk(C.completion_dict(cid, created, model, "", None, None), r)


async def _chat_chunks(srv, r: Request, f: Dict, toks: List[int], stops: List[str], cid: str, created: int,
                       model: str, plan: ChatPlan) -> AsyncIterator[dict]:
    last = _role_chunk(cid, created, model)
    lp = _LogprobCursor(srv, r) if f["logprobs"] else None
    ds = DeltaStream(plan.tools)   # content, reasoning and tool calls as they come
    think = plan.thinking.stream() if plan.thinking.tags is not None else None   # reasoning deltas apart
    ev = Events(r, stops)
    tags = TokenExits.make(srv, r, ev, f["river_tokens"])
    async for text, fin in events(r, stops, ev):
        if text is None:   # prompt progress (return_progress): llama-server's role chunk with the report
            yield dict(_role_chunk(cid, created, model), prompt_progress=fin)
            continue
        for ch in _text_chunks(ds, think, cid, created, model, text, fin):
            if lp is not None and ch["choices"][0]["delta"].get("content"):
                ch["choices"][0]["logprobs"] = lp.take(ch["choices"][0]["delta"]["content"])
            yield last
            last = tags.attach(ch) if tags else ch
    last["river"] = srv.river(r)
    if verbose.wanted(srv, f):   # llama-server's: on the first chunk of its final result, the finishing one here
        last["__verbose"] = verbose.final(srv, r, f, toks, "", ev)
    yield last
    if f["include_usage"]:
        yield _usage_chunk(chat.chunk_dict(cid, created, model, {}, None), r)


def _text_chunks(ds: DeltaStream, think, cid: str, created: int, model: str, text: str, fin) -> List[dict]:
    """A piece of the answer's chunks: reasoning deltas (think: a reasoning.Stream) each a chunk of
    its own, content through the tool-call stream; the finishing chunk last."""
    if think is None:
        return chat.tool_delta_chunks(ds, cid, created, model, text, fin)
    out = []
    for d in think.feed(text):
        if "reasoning_content" in d:
            out.append(chat.chunk_dict(cid, created, model, d, None))
        else:
            out += chat.tool_delta_chunks(ds, cid, created, model, d["content"], None)
    return out + (chat.tool_delta_chunks(ds, cid, created, model, "", fin) if fin else [])


def _role_chunk(cid: str, created: int, model: str) -> dict:
    ch = chat.role_chunk(cid, created, model)
    ch["choices"][0]["delta"]["content"] = None   # as llama-server's first chunk
    return ch


class _LogprobCursor:
    """Streamed chat logprobs: each chunk takes the entries of the tokens that make up its text."""

    def __init__(self, srv, r: Request):
        self.srv, self.r, self.used, self.have, self.sent = srv, r, 0, 0, 0

    def take(self, text: str) -> Optional[dict]:
        self.sent += len(text.encode("utf-8"))
        start = self.used
        with self.srv.sched.vocab_lock:
            while self.have < self.sent and self.used < len(self.r.logprob_entries):
                self.have += len(self.srv.llm.vocab.piece(self.r.logprob_entries[self.used][0]))
                self.used += 1
        return L.chat_logprobs(self.srv, self.r.logprob_entries[start:self.used])


# What the chat-shaped families (messages.py, responses.py) take from here
CHAT_API = types.SimpleNamespace(plan=_chat_plan, tokens=_chat_tokens, prompt=_chat_prompt, collect=_collect,
                                 events=events, new_events=Events, after_prompt=thinking.after_prompt,
                                 choice=_chat_choice, text_chunks=_text_chunks)
