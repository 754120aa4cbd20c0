"""The ASGI app (Starlette): OpenAI-compatible endpoints over the scheduler. The model loads in a
thread after the server starts listening, so /health answers 503 until it is ready. Results are
shaped by the runtime's own completion and chat helpers."""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import threading
import types
from typing import AsyncIterator, Dict, List, Optional, Tuple

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

from .. import chat
from .. import completion as C
from ..errors import ContextFullError
from ..grammar import GrammarError, constrain
from ..logprobs import as_dict as logprobs_dict
from ..sampling import Sampler
from ..structured import ChatPlan, request_grammar
from ..toolcall import DeltaStream, ToolError
from . import drafting, embeddings, infill, messages, props, rerank, responses
from . import builtin_template, llamacpp_api as L, lora as lora_api
from .prompt_cache import DEFAULT_MIB
from .cors import CORS
from .disconnect import or_cancel
from .inbox import Inbox
from .metrics import Metrics
from .river_tokens import TokenExits
from .scheduler import QueueFull, Request, Scheduler
from .schema import CHAT, COMPLETION, APIError, parse
from .webui import webui_routes


class Server:
    """What the endpoints share: settings, the model and scheduler once loaded, the metrics."""

    def __init__(self, settings: Dict):
        self.settings = settings
        self.llm = None
        self.sched: Optional[Scheduler] = None
        self.error: Optional[str] = None
        self.metrics = Metrics()
        self.model_id = settings.get("alias") or None
        self.inbox: Optional[Inbox] = None   # made on the event loop, at start-up

    def load(self) -> None:
        try:
            from ..llama import Llama
            s = self.settings
            llm = Llama(s["model"], n_ctx=s["n_ctx"], n_threads=s["threads"], n_threads_batch=s["threads"],
                        verbose=s.get("verbose", False), **s.get("llama_kwargs", {}))
            if s.get("drafts_by_default") and not llm._ectx.partial_cuts:
                # a rejected draft would run the slot's tokens again (a recurrent memory cannot be cut
                # part-way): default drafts do not pay there; --lossless asks for them anyway
                llm.set_lossless(False)
            llm.chat_stops(None)   # compiles the chat template once, before any request thread
            llm._template = builtin_template.from_settings(s, llm._template)   # --chat-template(-file)
            self.model_id = self.model_id or llm.model_path.rsplit("/", 1)[-1]
            drafter = drafting.make(s.get("spec"), llm, s["parallel"], s["threads"], s.get("llama_kwargs", {}))
            self.sched = Scheduler(llm, s["parallel"], batch_rule=s["batch_rule"], queue_max=s["queue"],
                                   prompt_chunk=s["prompt_chunk"], metrics=self.metrics, drafter=drafter,
                                   ctx_shift=s.get("ctx_shift", False), cache_ram_mib=s.get("cache_ram", DEFAULT_MIB),
                                   handoff=None if self.inbox is None else self.inbox.flush)
            self.metrics.n_slots = s["parallel"]
            self.metrics.sched = self.sched
            self.llm = llm
        except Exception as e:   # /health tells; the process stays up to say so
            self.error = f"{type(e).__name__}: {e}"

    # -- checks shared by the endpoints ----------------------------------------------------
    def check_key(self, req: HTTPRequest) -> None:
        key = self.settings.get("api_key")
        if not key:
            return
        got = req.headers.get("authorization") or req.headers.get("x-api-key", "")   # X-Api-Key as llama-server
        token = got[7:] if got.lower().startswith("bearer ") else got
        if not any([hmac.compare_digest(token.encode(), k.encode()) for k in key.split(",")]):
            raise APIError(401, "a missing or wrong API key (Authorization: Bearer KEY)", type_="authentication_error",
                           code="invalid_api_key")

    def ready(self):
        if self.llm is None:
            raise APIError(503, self.error or "the model is loading", type_="server_error")
        return self.llm

    def check_model(self, name: Optional[str]) -> None:
        """Any name is the one model, as llama-server (one model) takes it: clients that name
        theirs (gpt-3.5-turbo ...) work unchanged."""

    def prompt_tokens(self, toks: List[int]) -> List[int]:
        n_ctx = self.sched.n_ctx
        if not toks:
            raise APIError(400, "the prompt is empty", param="prompt")
        bad = [t for t in toks if not 0 <= t < self.llm.n_vocab()]
        if bad:
            raise APIError(400, f"token id {bad[0]} is out of range [0, {self.llm.n_vocab()})", param="prompt")
        if len(toks) >= n_ctx:
            raise APIError(400, f"the request exceeds the available context size: the prompt has {len(toks)} tokens "
                           f"but the context holds {n_ctx} (at least one more is needed to generate)", param="prompt",
                           type_="exceed_context_size_error", code="context_length_exceeded",   # llama-server's type
                           n_prompt_tokens=len(toks), n_ctx=n_ctx)
        return toks

    def sampler(self, f: Dict, toks: List[int], grammar) -> Sampler:
        """The request's sampler, under its grammar (parsed and checked here: run it off the event loop)."""
        bias = L.logit_bias(self, f.get("logit_bias"))
        base = self.base_sampler(f["sampling"], f["seed"], bias)
        try:
            return constrain(base, self.llm.vocab, grammar, len(toks))
        except GrammarError as e:
            raise APIError(400, str(e), param="grammar", code="invalid_grammar") from None

    def base_sampler(self, params, seed, bias) -> Sampler:
        """llama.cpp's samplers for a request (llama-server's chain; penalties see the prompt too)."""
        try:
            return Sampler(params, seed, bias=bias, vocab=self.llm.vocab)
        except ValueError as e:
            raise APIError(400, str(e)) from None

    def submit(self, f: Dict, toks: List[int], logprobs: Optional[int], sampler: Sampler) -> Request:
        return self.submit_request(toks, sampler, f["max_tokens"] or self.max_tokens(toks), logprobs,
                                   lora=f.get("lora"), id_slot=f.get("id_slot", -1) if f["n"] in (None, 1) else -1)

    def max_tokens(self, toks: List[int]) -> int:
        """A request's token limit when it gives none: --n-predict, else the rest of the context
        (llama-server: a request's own n_predict/max_tokens wins over --n-predict)."""
        n = self.settings.get("n_predict", -1)
        return n if n and n > 0 else self.sched.n_ctx - len(toks)

    def samplers(self, f: Dict, toks: List[int], grammar) -> List[Sampler]:
        """One sampler per choice (f["n"]), each with its own grammar state (run off the event loop)."""
        return [self.sampler(f, toks, grammar) for _ in range(f["n"] or 1)]

    def submit_n(self, f: Dict, toks: List[int], logprobs: Optional[int], samplers: List[Sampler]) -> List[Request]:
        """f["n"] requests of one prompt (n choices); all or none: a refused one cancels the others."""
        rs: List[Request] = []
        try:
            for sampler in samplers:
                rs.append(self.submit(f, toks, logprobs, sampler))
        except APIError:
            for r in rs:
                r.cancel()
            raise
        return rs

    def submit_request(self, toks: List[int], sampler: Sampler, max_tokens: int, logprobs: Optional[int],
                       probs=None, lora=None, id_slot: int = -1) -> Request:
        """lora: the request's `lora` field as sent (server/lora.py checks it: 400). id_slot:
        llama-server's, the slot that runs it (Scheduler.submit)."""
        scales = lora_api.request_scales(self, lora)
        r = Request(prompt=toks, sampler=sampler, max_tokens=max_tokens, logprobs=logprobs, out=self.inbox.out(),
                    probs=probs, lora=scales, id_slot=-1 if id_slot is None else id_slot)
        try:
            self.sched.submit(r)
        except QueueFull as e:
            raise APIError(503, f"the server is busy: {e}", type_="server_error", code="queue_full") from None
        self.metrics.requests += 1
        return r

    def river(self, r: Request) -> Optional[Dict]:
        return self.llm.river_stats(r.exits, r.lossless)


class Events:
    """(text, finish reason or None) pairs of a request from what the scheduler hands it; the last
    pair carries the reason. Stop strings through the runtime's TextStream; a stop string cancels it."""

    def __init__(self, r: Request, stops: List[str]):
        self.r = r
        self.text = C.TextStream([s.encode("utf-8") for s in stops if s])
        self.done = False
        self.n_tokens = 0   # token items read (river_tokens counts on it)

    def feed(self, item: tuple) -> List[Tuple[str, Optional[str]]]:
        if item[0] == "token":
            self.n_tokens += 1
            text, stopped = self.text.feed(item[2])
            if stopped:
                self.done = True
                self.r.stop_at(self.n_tokens)
                return [(text, "stop")]
            return [(text, None)] if text else []
        self.done = True
        reason = item[1]
        if reason.startswith("error: grammar: "):   # the request's grammar allowed no token
            raise APIError(400, reason[len("error: grammar: "):], param="grammar", code="grammar_dead_end")
        if reason.startswith("error"):
            raise RuntimeError(reason)
        rest = self.text.finish()
        return ([(rest, None)] if rest else []) + [("", "stop" if reason == "stop" else "length")]


async def events(r: Request, stops: List[str], ev: Optional[Events] = None) -> AsyncIterator[Tuple[str, Optional[str]]]:
    ev = ev or Events(r, stops)
    while not ev.done:
        for pair in ev.feed(await r.out.get()):
            yield pair


def _error(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


def _sse(chunks: AsyncIterator[dict], r: Request) -> StreamingResponse:
    """The chunks as server-sent events, made on the event loop as the scheduler hands tokens over."""
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
    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def build_app(srv: Server) -> Starlette:
    # Over 80 lines only as a list of short route handlers closing over the one Server.
    async def guarded(req: HTTPRequest, handler):
        try:
            srv.check_key(req)
            srv.ready()
            return await handler(req)
        except APIError as e:
            return _error(e)
        except ContextFullError as e:
            return _error(APIError(400, str(e), code="context_length_exceeded"))
        except (GrammarError, ToolError) as e:
            return _error(APIError(400, str(e), code="invalid_request"))

    async def completions(req: HTTPRequest):
        return await guarded(req, _completions)

    async def _completions(req: HTTPRequest):
        f = parse(await req.body(), COMPLETION, "prompt", srv.settings.get("defaults"))
        srv.check_model(f["model"])
        p = f["prompt"]
        p = p[0] if isinstance(p, list) and isinstance(p[0], str) else p
        toks = srv.prompt_tokens(await run_in_threadpool(_tokenize, srv, p) if isinstance(p, str) else list(p))
        grammar = request_grammar(f["response_format"], f["grammar"], f["json_schema"])
        rs = srv.submit_n(f, toks, f["logprobs"], await run_in_threadpool(srv.samplers, f, toks, grammar))
        r = rs[0]   # n choices: n requests
        cid, created, model = C.new_id("cmpl"), C.now(), srv.model_id
        if f["stream"]:
            return _sse(_completion_chunks(srv, r, f, cid, created, model), r)
        choices = []
        for i, (ri, (text, finish)) in enumerate(zip(rs, await or_cancel(req, rs, _collect_all(rs, f["stops"])))):
            lp = None
            if f["logprobs"] is not None:
                with srv.sched.vocab_lock:   # pieces come from the shared Vocab buffer
                    lp = logprobs_dict(srv.llm.vocab, ri.logprob_entries, text, len(p) if isinstance(p, str) else 0)
            choices.append(dict(C.completion_dict(cid, created, model, text, finish, None, logprobs=lp)["choices"][0],
                                index=i))
        d = C.completion_dict(cid, created, model, "", None, _usage(*rs))
        d.update(choices=choices, system_fingerprint=L.fingerprint(), timings=L.timings(r))
        d["river"] = srv.river(r)   # null when River is off
        return JSONResponse(d)

    async def chat_completions(req: HTTPRequest):
        return await guarded(req, _chat)

    async def _chat(req: HTTPRequest):
        f = parse(await req.body(), CHAT, "messages", srv.settings.get("defaults"))
        srv.check_model(f["model"])
        plan = await run_in_threadpool(_chat_plan, srv, f)
        try:
            toks = await run_in_threadpool(_chat_tokens, srv, plan, f)
        except ValueError as e:
            raise APIError(400, f"the messages do not render with the model's chat template: {e}", param="messages")
        srv.prompt_tokens(toks)
        rs = srv.submit_n(f, toks, (f["top_logprobs"] or 0) if f["logprobs"] else None,
                          await run_in_threadpool(srv.samplers, f, toks, plan.grammar))
        r = rs[0]
        stops = srv.llm.chat_stops(f["stops"])
        cid, created, model = C.new_id("chatcmpl"), C.now(), srv.model_id
        if f["stream"]:
            return _sse(_chat_chunks(srv, r, f, stops, cid, created, model, plan), r)
        choices = []
        for i, (ri, (text, finish)) in enumerate(zip(rs, await or_cancel(req, rs, _collect_all(rs, stops)))):
            c = dict(chat.chat_dict(cid, created, model, text, finish, {}, plan.tools)["choices"][0], index=i)
            if f["logprobs"]:
                c["logprobs"] = L.chat_logprobs(srv, ri.logprob_entries[:_n_tokens(srv, ri, text)])
            choices.append(c)
        d = chat.chat_dict(cid, created, model, "", None, _usage(*rs))
        d.update(choices=choices, system_fingerprint=L.fingerprint(), timings=L.timings(r))
        d["river"] = srv.river(r)
        return JSONResponse(d)

    async def models(req: HTTPRequest):
        async def h(_):
            return JSONResponse({"object": "list", "data": [
                {"id": srv.model_id, "object": "model", "created": C.now(), "owned_by": "pyriver"}]})
        return await guarded(req, h)

    async def health(_req: HTTPRequest):   # public, as llama-server's
        if srv.llm is None:
            return JSONResponse({"status": "error" if srv.error else "loading", "error": srv.error}, status_code=503)
        return JSONResponse({"status": "ok", "slots": srv.settings["parallel"]})

    async def metrics(_req: HTTPRequest):
        return PlainTextResponse(srv.metrics.render(), media_type="text/plain; version=0.0.4")

    async def not_found(req: HTTPRequest, exc):
        return _error(APIError(getattr(exc, "status_code", 404), f"{req.method} {req.url.path}: "
                               f"{getattr(exc, 'detail', 'not found')}"))

    app_chat = types.SimpleNamespace(plan=_chat_plan, tokens=_chat_tokens, collect=_collect, events=events, new_events=Events)
    routes = [Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/chat/completions", chat_completions, methods=["POST"]),   # llama-server's aliases
              Route("/v1/models", models, methods=["GET"]),
              Route("/models", models, methods=["GET"]),
              Route("/health", health, methods=["GET"]),
              Route("/v1/health", health, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"]),
              *L.routes(srv, guarded)] + webui_routes(srv, guarded) + embeddings.routes(srv, guarded) \
        + rerank.routes(srv, guarded) + responses.routes(srv, guarded, app_chat) + messages.routes(srv, guarded, app_chat) \
        + infill.routes(srv, guarded) + props.routes(srv, guarded) + lora_api.routes(srv, guarded)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        # The model loads while the server listens: /health is 503 until it is ready.
        threading.Thread(target=start(srv), name="pyriver-load", daemon=True).start()
        yield
        stop(srv)
        close(srv)

    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found}, lifespan=lifespan,
                     middleware=[Middleware(CORS, origins=srv.settings.get("cors_origins", "*"))])


def start(srv: Server):
    """The server's inbox, made on the running loop; returns what loads the model (for a thread)."""
    srv.inbox = Inbox(asyncio.get_running_loop())
    return srv.load


def stop(srv: Server) -> None:
    """The scheduler's thread ends (joined: the router calls this in a thread)."""
    if srv.sched is not None:
        srv.sched.stop()


def close(srv: Server) -> None:
    """On the loop, after stop(): the inbox closes and the model's memory goes (the router unloads so)."""
    if srv.sched is not None and srv.sched.thread.is_alive():   # it may still hand over or step: all stay
        return
    if srv.inbox is not None:
        srv.inbox.close()
    if srv.llm is not None:
        srv.llm.close()


def _tokenize(srv: Server, text: str) -> List[int]:
    with srv.sched.vocab_lock:
        return srv.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True) if text else [srv.llm.token_bos()]


def _chat_plan(srv: Server, f: Dict) -> ChatPlan:
    """The request's messages, template variables, grammar and tools (pyriver.structured)."""
    return ChatPlan(srv.llm._template.source, f["messages"], f["response_format"], f["grammar"], f["json_schema"],
                    f["tools"], f["tool_choice"], f["parallel_tool_calls"])


def _chat_tokens(srv: Server, plan: ChatPlan, f: Dict) -> List[int]:
    with srv.sched.vocab_lock:
        return srv.llm.chat_tokens(plan.messages, f["add_generation_prompt"], f["continue_final"], server_bos=True,
                                   **plan.extra)


async def _collect(r: Request, stops: List[str]):
    parts, finish = [], "length"
    async for text, fin in events(r, stops):
        parts.append(text)
        finish = fin or finish
    return "".join(parts), finish


async def _collect_all(rs: List[Request], stops: List[str]) -> List[Tuple[str, str]]:
    return [await _collect(r, stops) for r in rs]


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


def _n_tokens(srv: Server, r: Request, text: str) -> int:
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


async def _completion_chunks(srv: Server, r: Request, f: Dict, cid: str, created: int,
                             model: str) -> AsyncIterator[dict]:
    ev = Events(r, f["stops"])
    tags = TokenExits.make(srv, r, ev, f["river_tokens"])
    async for text, fin in events(r, f["stops"], ev):
        if text:
            ch = C.completion_dict(cid, created, model, text, None, None)
            yield tags.attach(ch) if tags else ch
        if fin:
            yield dict(C.completion_dict(cid, created, model, "", fin, None), river=srv.river(r))
    if f["include_usage"]:
        yield _usage_chunk(C.completion_dict(cid, created, model, "", None, None), r)


async def _chat_chunks(srv: Server, r: Request, f: Dict, stops: List[str], cid: str, created: int,
                       model: str, plan: ChatPlan) -> AsyncIterator[dict]:
    last = chat.role_chunk(cid, created, model)
    last["choices"][0]["delta"]["content"] = None   # as llama-server's first chunk
    lp = _LogprobCursor(srv, r) if f["logprobs"] else None
    ds = DeltaStream(plan.tools)   # content, or tool calls parsed at the end
    ev = Events(r, stops)
    tags = TokenExits.make(srv, r, ev, f["river_tokens"])
    async for text, fin in events(r, stops, ev):
        for ch in chat.tool_delta_chunks(ds, cid, created, model, text, fin):
            if lp is not None and ch["choices"][0]["delta"].get("content"):
                ch["choices"][0]["logprobs"] = lp.take(ch["choices"][0]["delta"]["content"])
            yield last
            last = tags.attach(ch) if tags else ch
    last["river"] = srv.river(r)
    yield last
    if f["include_usage"]:
        yield _usage_chunk(chat.chunk_dict(cid, created, model, {}, None), r)


class _LogprobCursor:
    """Streamed chat logprobs: each chunk takes the entries of the tokens that make up its text."""

    def __init__(self, srv: Server, r: Request):
        self.srv, self.r, self.used, self.have, self.sent = srv, r, 0, 0, 0

    def take(self, text: str) -> Optional[dict]:
        self.sent += len(text.encode("utf-8"))
        start = self.used
        with self.srv.sched.vocab_lock:
            while self.have < self.sent and self.used < len(self.r.logprob_entries):
                self.have += len(self.srv.llm.vocab.piece(self.r.logprob_entries[self.used][0]))
                self.used += 1
        return L.chat_logprobs(self.srv, self.r.logprob_entries[start:self.used])
