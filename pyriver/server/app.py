"""The ASGI app (Starlette): the Server every route family shares, and the app that assembles the
families (openai_api.py, llamacpp_api.py, messages.py, ...) over its scheduler. The model loads in a
thread after the server starts listening, so /health answers 503 until it is ready. Results are
shaped by the runtime's own completion and chat helpers."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import sys
import threading
from typing import Callable, Dict, List, Optional

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from pyriver.engine import kv_types
from pyriver.errors import ContextFullError
from pyriver.text.grammar import GrammarError, constrain
from pyriver.text.reasoning_budget import Budget, BudgetSampler
from pyriver.engine.sampling import Sampler
from pyriver.text.toolcall import ToolError
from pyriver.server import drafting, embeddings, gcp, infill, messages, multimodal, props, rerank, responses
from pyriver.server import builtin_template, context_shift, llamacpp_api as L, lora as lora_api, openai_api
from pyriver.server.prompt_cache import DEFAULT_MIB, SLOT_SIMILARITY
from pyriver.server.cors import CORS
from pyriver.server.inbox import Inbox, hold
from pyriver.server.metrics import Metrics
from pyriver.server.scheduler import QueueFull, Request, Scheduler
from pyriver.server.schema import APIError
from pyriver.server.streams import Sessions, stream_routes
from pyriver.server.webui import webui_routes


class Server:
    """What the endpoints share: settings, the model and scheduler once loaded, the metrics."""

    def __init__(self, settings: Dict):
        self.settings = settings
        self.llm = None
        self.sched: Optional[Scheduler] = None
        self.error: Optional[str] = None
        self.metrics = Metrics()
        # llama-server's --alias (comma-separated names) and --tags: the id is the first alias in
        # sorted order (its std::set), else the file name
        self.aliases = _names(settings.get("alias"))
        self.tags = _names(settings.get("tags"))
        self.model_id = self.aliases[0] if self.aliases else None
        self.inbox: Optional[Inbox] = None   # made on the event loop, at start-up
        self.streams = Sessions()            # conversation streams (X-Conversation-Id)
        self.projector = None                # --mmproj: the model's engine.mtmd.Projector (multimodal.py)
        self.on_load_error: Optional[Callable[[], None]] = None   # told when the start-up load fails

    def load(self) -> None:
        try:
            from pyriver.api.llama import Llama
            s = self.settings
            llm = load_llama(s)
            if s.get("drafts_by_default") and not llm.context.engine.partial_cuts:
                # a rejected draft would run the slot's tokens again (a recurrent memory cannot be cut
                # part-way): default drafts do not pay there; --lossless asks for them anyway
                llm.set_lossless(False)
            if s.get("mmproj"):   # multimodal input: libmtmd over the llama.cpp engine's context
                self.projector = llm.load_projector(s["mmproj"], multimodal.marker())
            llm.chat_stops(None)   # compiles the chat template once, before any request thread
            llm.chats.template = builtin_template.from_settings(s, llm.chats.template)   # --chat-template(-file)
            self.model_id = self.model_id or llm.model_path.rsplit("/", 1)[-1]
            drafter = drafting.make(s.get("spec"), llm, s["parallel"], s["threads"], s.get("llama_kwargs", {}))
            self.sched = Scheduler(llm, s["parallel"], batch_rule=s["batch_rule"], queue_max=s["queue"],
                                   prompt_chunk=s["prompt_chunk"], metrics=self.metrics, drafter=drafter,
                                   ctx_shift=s.get("ctx_shift", False), cache_ram_mib=s.get("cache_ram", DEFAULT_MIB),
                                   n_keep=s.get("n_keep", 0), cache_reuse=s.get("cache_reuse", 0),
                                   kv_pool=s.get("kv_pool"), cache_idle=s.get("cache_idle_slots", True),
                                   slot_similarity=s.get("slot_prompt_similarity", SLOT_SIMILARITY),
                                   log=_log if s.get("verbose") else None,
                                   handoff=None if self.inbox is None else self.inbox.flush)
            if self.sched.log:   # llama.cpp's llama_kv_cache line, of the slots' cache
                _log(f"{kv_types.line(self.sched.dec.kv_cache())} ({s['parallel']} slots x {self.sched.n_ctx} tokens)")
            if self.sched.log and self.sched.cache_idle:   # llama-server's debug line, as its test reads it
                _log("idle slots will be saved to prompt cache upon starting a new task"
                     + (" and cleared" if s.get("kv_pool") else "") + " __TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__")
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

    def meta(self) -> Dict:
        """The loaded model's facts as llama-server's /v1/models gives them (size: its weights' bytes)."""
        llm = self.llm
        return {"n_vocab": llm.n_vocab(), "n_ctx": llm.n_ctx(), "n_ctx_train": llm.info["n_ctx_train"],
                "n_embd": llm.info["n_embd"], "n_params": llm.info["n_params"], "size": llm.info["n_bytes"]}

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
            s = constrain(base, self.llm.vocab, grammar, len(toks))
        except GrammarError as e:
            raise APIError(400, str(e), param="grammar", code="invalid_grammar") from None
        rb = f.get("reasoning_budget")   # thinking.after_prompt's; llama.cpp applies it before the grammar
        if rb is None:
            return s
        def piece(tok: int) -> bytes:
            with self.sched.vocab_lock:   # the Vocab's piece buffer is shared
                return self.llm.vocab.piece(tok)
        return BudgetSampler(s, lambda: Budget(rb["start"], rb["ends"], rb["forced"], rb["budget"], piece),
                             rb["prefill"], len(toks))

    def base_sampler(self, params, seed, bias) -> Sampler:
        """llama.cpp's samplers for a request (llama-server's chain; penalties see the prompt too)."""
        n_ctx = self.sched.n_ctx   # a window past the context sees the same tokens: llama.cpp allocates the window
        params = dataclasses.replace(params, penalty_last_n=min(params.penalty_last_n, n_ctx),
                                     dry_penalty_last_n=min(params.dry_penalty_last_n, n_ctx))
        try:
            return Sampler(params, seed, bias=bias, vocab=self.llm.vocab)
        except ValueError as e:
            raise APIError(400, str(e)) from None

    def submit(self, f: Dict, toks: List[int], logprobs: Optional[int], sampler: Sampler, media=None) -> Request:
        return self.submit_request(toks, sampler, f["max_tokens"] or self.max_tokens(toks), logprobs,
                                   lora=f.get("lora"), id_slot=f.get("id_slot", -1) if f["n"] in (None, 1) else -1,
                                   progress=bool(f["stream"] and f.get("return_progress")), media=media,
                                   cache_prompt=f.get("cache_prompt", True), stream=f["stream"], stops=f["stops"],
                                   shift=context_shift.check_fields(f))

    def max_tokens(self, toks: List[int]) -> int:
        """A request's token limit when it gives none: --n-predict, else the rest of the context
        (llama-server: a request's own n_predict/max_tokens wins over --n-predict)."""
        n = self.settings.get("n_predict", -1)
        return n if n and n > 0 else self.sched.n_ctx - len(toks)

    def samplers(self, f: Dict, toks: List[int], grammar) -> List[Sampler]:
        """One sampler per choice (f["n"]), each with its own grammar state (run off the event loop)."""
        return [self.sampler(f, toks, grammar) for _ in range(f["n"] or 1)]

    def submit_n(self, f: Dict, toks: List[int], logprobs: Optional[int], samplers: List[Sampler],
                 media=None) -> List[Request]:
        """f["n"] requests of one prompt (n choices); all or none: a refused one cancels the others."""
        rs: List[Request] = []
        try:
            for sampler in samplers:
                rs.append(self.submit(f, toks, logprobs, sampler, media))
        except APIError:
            for r in rs:
                r.cancel()
            raise
        return rs

    def submit_request(self, toks: List[int], sampler: Sampler, max_tokens: int, logprobs: Optional[int],
                       probs=None, lora=None, id_slot: int = -1, progress: bool = False, media=None,
                       cache_prompt: bool = True, stream: bool = True, stops=(), shift=None) -> Request:
        """lora: the request's `lora` field as sent (server/lora.py checks it: 400). id_slot:
        llama-server's, the slot that runs it (Scheduler.submit). progress: prompt progress reports.
        media: a multimodal prompt's chunks by position (toks holds NULL_TOKEN there). cache_prompt:
        llama-server's, False runs the whole prompt again. stream False with no stop strings of the
        caller's (stops): its tokens reach the loop in batches (inbox.hold). shift: its n_keep,
        n_discard and n_cache_reuse (context_shift.check_fields)."""
        scales = lora_api.request_scales(self, lora)
        r = Request(prompt=toks, sampler=sampler, max_tokens=max_tokens, logprobs=logprobs, out=self.inbox.out(),
                    probs=probs, lora=scales, id_slot=-1 if id_slot is None else id_slot, progress=progress,
                    media=media or {}, cache_prompt=cache_prompt, **(shift or {}))
        if not stream:
            hold(r.out, stops)
        try:
            self.sched.submit(r)
        except QueueFull as e:
            raise APIError(503, f"the server is busy: {e}", type_="server_error", code="queue_full") from None
        self.metrics.requests += 1
        return r

    def river(self, r: Request) -> Optional[Dict]:
        return self.llm.river_stats(r.exits, r.lossless)


def _error(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


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

    async def health(_req: HTTPRequest):   # public, as llama-server's
        if srv.llm is None:
            return JSONResponse({"status": "error" if srv.error else "loading", "error": srv.error}, status_code=503)
        return JSONResponse({"status": "ok", "slots": srv.settings["parallel"]})

    async def metrics(_req: HTTPRequest):   # llama-server's: only with --metrics, public as /health
        if not srv.settings.get("endpoint_metrics"):
            return _error(APIError(501, "This server does not support metrics endpoint. Start it with `--metrics`",
                                   type_="not_supported_error"))
        res = PlainTextResponse(srv.metrics.render(), media_type="text/plain; version=0.0.4")
        # the name as llama-server spells it (Starlette's headers= would lower-case it)
        res.raw_headers.append((b"Process-Start-Time-Unix", str(int(srv.metrics.started)).encode()))
        return res

    async def not_found(req: HTTPRequest, exc):
        return _error(APIError(getattr(exc, "status_code", 404), f"{req.method} {req.url.path}: "
                               f"{getattr(exc, 'detail', 'not found')}"))

    routes = openai_api.routes(srv, guarded) + [
              Route("/health", health, methods=["GET"]),
              Route("/v1/health", health, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"]),
              *L.routes(srv, guarded)] + webui_routes(srv, guarded) + embeddings.routes(srv, guarded) \
        + rerank.routes(srv, guarded) + responses.routes(srv, guarded, openai_api.CHAT_API) \
        + messages.routes(srv, guarded, openai_api.CHAT_API) \
        + infill.routes(srv, guarded) + props.routes(srv, guarded) + lora_api.routes(srv, guarded) \
        + stream_routes(srv.streams, guarded)
    app_ref: List = []   # gcp's predict route calls the app's own routes
    routes += gcp.routes(srv, app_ref, routes)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        # The model loads while the server listens: /health is 503 until it is ready. Where it cannot
        # load, on_load_error is told (pyriver serve stops then, as llama-server exits).
        run = start(srv)

        def load():
            run()
            if srv.error is not None and srv.on_load_error is not None:
                srv.on_load_error()
        threading.Thread(target=load, name="pyriver-load", daemon=True).start()
        yield
        stop(srv)
        close(srv)

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found}, lifespan=lifespan,
                    middleware=[Middleware(CORS, origins=srv.settings.get("cors_origins", "*"))])
    app_ref.append(app)
    return app


def load_llama(s: Dict):
    """The served Llama. Its draft store (--draft-store FILE) when the file is refused (corrupt,
    truncated, another model's: pyriver.speculative.store.DraftStoreError): said on stderr, and the
    server runs with a store in memory that does not overwrite the file."""
    from pyriver.api.llama import Llama
    from pyriver.speculative.store import DraftStoreError
    kw = dict(s.get("llama_kwargs", {}))
    mib = kw.pop("draft_store_mib", None)
    store = kw.pop("draft_store", None)

    llm = Llama(s["model"], n_ctx=s["n_ctx"], n_threads=s["threads"], n_threads_batch=s["threads"],
                verbose=s.get("verbose", False), **kw)
    if store is not None and llm.speculator is not None:
        bound = None if mib is None else mib << 20
        try:
            llm.drafts.bind_store(store, bound)
        except DraftStoreError as e:
            print(f"pyriver serve: --draft-store refused: {e}; serving with a new store in memory (the file is left "
                  "as it is)", file=sys.stderr, flush=True)
            llm.drafts.bind_store(True, bound)
    return llm


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


def _log(line: str) -> None:
    """--verbose: a line of the server's own log (stderr)."""
    print(f"pyriver serve: {line}", file=sys.stderr, flush=True)


def _names(value: Optional[str]) -> List[str]:
    """A comma-separated flag's names, stripped, empty ones dropped, sorted and unique."""
    return sorted({v.strip() for v in (value or "").split(",") if v.strip()})
