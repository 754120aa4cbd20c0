"""Several models in one server (`pyriver serve --models-dir DIR`), as llama-server's router mode
serves them: GET /models (and /v1/models) lists the directory's models with their state, POST
/models/load and /models/unload load and unload one, and every other route goes to the model the
request names: the JSON body's "model" for a POST, the `?model=` query for a GET. A model loads on
first use (pool.py) unless --no-models-autoload (or `?autoload=false`).

Each loaded model is served by its own app.build_app(Server), the single-model app unchanged: the
router reads the request's body once, chooses the model (model_of: the one home of that rule)
and hands the request, body replayed, to that model's app. Routing happens in front of every API
family, so none of them knows of the router."""
from __future__ import annotations

import itertools
import json
import time
from typing import Dict, List, Optional, Tuple
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route

from pyriver.server import app as A
from pyriver.server import llamacpp_api as L, streams
from pyriver.server.cors import CORS
from pyriver.server.models_dir import scan
from pyriver.server.pool import Entry, ModelPool
from pyriver.server.schema import APIError
from pyriver.server.webui import page_routes

PUBLIC = ("/health", "/v1/health")   # no API key, as llama-server's


def model_of(scope, body: bytes) -> Optional[str]:
    """The model a request names: the body's "model" (a POST), else the `model` query parameter."""
    if body:
        try:
            d = json.loads(body)
        except ValueError:
            raise APIError(400, "the request body is not valid JSON") from None
        if isinstance(d, dict) and d.get("model") is not None:
            if not isinstance(d["model"], str):
                raise APIError(400, "'model' must be a string", param="model")
            return d["model"]
    return _query(scope, "model")


def _query(scope, key: str) -> Optional[str]:
    v = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(key)
    return v[0] if v else None


async def _read_body(receive) -> bytes:
    parts, more = [], True
    while more:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            break
        parts.append(msg.get("body", b""))
        more = msg.get("more_body", False)
    return b"".join(parts)


def _replay(body: bytes, receive):
    """receive() for the model's app: the body read already, then the client's own (a disconnect)."""
    sent = False

    async def again():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return again


class Router:
    """The ASGI app of `pyriver serve --models-dir`."""

    def __init__(self, settings: Dict):
        self.settings = settings
        self.pool = ModelPool(self._scan(), settings, settings.get("models_max", 4), settings.get("presets"))
        self.autoload = settings.get("models_autoload", True)
        # a model-less Server (it never loads): its app answers what no model needs to (404, 405,
        # OPTIONS), its routes tell which paths exist, and it checks API keys
        self.shell = A.Server(dict(settings, webui=False))
        self.shell_app = A.build_app(self.shell)
        self.convs: Dict[str, Tuple[str, int]] = {}   # conversation id -> (its model, the request's ticket)
        self._tickets = itertools.count(1)
        self.own = Starlette(routes=self._routes())

    # -- ASGI -----------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if scope["type"] != "http" or scope["method"] == "OPTIONS":
            return await self.shell_app(scope, receive, send)
        if self._served(scope, self.own) and not (scope["path"] == "/props" and _query(scope, "model")):
            return await CORS(self.own, self.settings.get("cors_origins", "*"))(scope, receive, send)
        if not self._served(scope, self.shell_app):   # no such route: 404 or 405 as one model's server
            return await self.shell_app(scope, receive, send)
        body = await _read_body(receive)
        try:
            self.shell.check_key(HTTPRequest(scope))   # before a model loads for the request
            entry = self._entry(model_of(scope, body))
            # a conversation stream's model, remembered before the load: GET /v1/stream finds its
            # session there, and a stop while the model loads cancels the request (llama-server's)
            conv = HTTPRequest(scope).headers.get(streams.HEADER, "")
            ticket = self._remember(conv, entry.name) if conv else 0
            e = await self.pool.acquire(entry, self._autoload(scope))
            if ticket and self.convs.get(conv, ("", 0))[1] != ticket:
                self.pool.release(e)
                raise APIError(400, "request cancelled by a stop while the model was loading")
        except APIError as err:
            resp = JSONResponse(err.body(), status_code=err.status)
            return await CORS(resp, self.settings.get("cors_origins", "*"))(scope, receive, send)
        try:
            await e.app(scope, _replay(body, receive), send)
        finally:
            self.pool.release(e)

    @staticmethod
    def _served(scope, app: Starlette) -> bool:
        return any(r.matches(scope)[0] == Match.FULL for r in app.routes)

    async def _lifespan(self, receive, send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                self.pool.start()
                for e in self.pool.entries.values():   # a preset's load-on-startup, while --models-max has room
                    if e.preset is not None and e.preset.preset.load_on_startup and e.status == "unloaded":
                        try:
                            await self.pool.load(e)
                        except APIError:
                            break
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                self.pool.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _entry(self, name: Optional[str]) -> Entry:
        if not name:
            raise APIError(400, "model name is missing from the request", param="model")
        e = self.pool.entry(name)
        if e is None:
            raise APIError(400, f"model '{name}' not found", param="model", code="model_not_found")
        return e

    def _remember(self, conv: str, name: str) -> int:
        ticket = next(self._tickets)
        self.convs[conv] = (name, ticket)
        return ticket

    def _conv_owner(self, conv: str) -> Optional[Entry]:
        owner = self.convs.get(conv)
        return self.pool.entry(owner[0]) if owner else None

    def _autoload(self, scope) -> bool:
        v = _query(scope, "autoload")
        return self.autoload if v is None else v in ("true", "1")

    # -- the router's own routes ------------------------------------------------------------------
    def _routes(self) -> List[Route]:
        async def guarded(req: HTTPRequest, handler):
            try:
                self.shell.check_key(req)
                return await handler(req)
            except APIError as e:
                return JSONResponse(e.body(), status_code=e.status)

        async def models(req: HTTPRequest):
            async def h(req):
                if req.query_params.get("reload"):
                    self.rescan()
                entries = sorted(self.pool.entries.values(), key=lambda e: e.name)
                return JSONResponse({"data": [self._model_json(e) for e in entries],
                                     "object": "list"})
            return await guarded(req, h)

        def action(fn, unknown: APIError):
            async def route(req: HTTPRequest):
                async def h(req):
                    body = await req.body()
                    e = self.pool.entry(model_of(req.scope, body) or "")
                    if e is None:
                        raise unknown
                    await fn(e)
                    return JSONResponse({"success": True})
                return await guarded(req, h)
            return route

        async def health(_req: HTTPRequest):
            return JSONResponse({"status": "ok"})

        async def props(req: HTTPRequest):
            async def h(_):
                return JSONResponse({"role": "router", "max_instances": self.pool.max,
                                     "models_autoload": self.autoload, "model_alias": "pyriver",
                                     "model_path": "none", "default_generation_settings": {"params": None, "n_ctx": 0},
                                     "ui_settings": {}, "build_info": L.fingerprint(), "cors_proxy_enabled": False})
            return await guarded(req, h)

        async def stream_get(req: HTTPRequest):
            async def h(req):
                e = self._conv_owner(streams.conv_param(req))
                if e is not None and e.status == "loading":
                    raise APIError(503, "Stream owner model is loading, retry later", type_="unavailable_error")
                if e is None or e.srv is None:
                    raise APIError(404, "Stream not found or expired", type_="not_found_error")
                return streams.replay(e.srv.streams, req)
            return await guarded(req, h)

        async def stream_delete(req: HTTPRequest):
            async def h(req):
                conv = streams.conv_param(req)
                e = self._conv_owner(conv)
                if e is not None and e.srv is not None:
                    e.srv.streams.evict_and_cancel(conv)
                self.convs.pop(conv, None)   # a request still waiting for the model's load is cancelled
                return Response(status_code=204)
            return await guarded(req, h)

        async def stream_lookup(req: HTTPRequest):
            async def h(req):
                ids = await streams.lookup_ids(req)
                return JSONResponse([info for e in self.pool.entries.values() if e.srv is not None
                                     for info in e.srv.streams.lookup(ids)])
            return await guarded(req, h)

        not_found = APIError(404, "model is not found", type_="not_found_error")
        return [Route("/models", models, methods=["GET"]), Route("/v1/models", models, methods=["GET"]),
                Route("/models/load", action(self.pool.load, not_found), methods=["POST"]),
                Route("/models/unload", action(self.pool.unload, APIError(400, "model is not found")),
                      methods=["POST"]),
                *[Route(p, health, methods=["GET"]) for p in PUBLIC], Route("/props", props, methods=["GET"]),
                Route("/v1/stream", stream_get, methods=["GET"]), Route("/v1/stream", stream_delete, methods=["DELETE"]),
                Route("/v1/streams/lookup", stream_lookup, methods=["POST"]),
                *(page_routes() if self.settings.get("webui", True) else [])]

    def _model_json(self, e: Entry) -> dict:
        """llama-server's router entry: OpenAI's model fields, the state, where it comes from."""
        status = {"value": "loaded" if e.status == "unloading" else e.status,
                  "args": ["pyriver", "serve", "--model", e.path, "--alias", e.name]}
        if e.status == "unloaded" and e.error is not None:
            status.update(failed=True, error=e.error)
        pm = e.preset
        if pm is not None:
            status["preset"] = pm.ini
        return {"id": e.name, "aliases": pm.aliases if pm else [], "tags": pm.tags if pm else [], "object": "model",
                "owned_by": "pyriver", "created": int(time.time()), "status": status,
                "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
                "source": pm.source if pm else "models_dir", "can_remove": False,
                **({"meta": e.srv.meta()} if e.status == "loaded" else {})}

    def rescan(self) -> None:
        """GET /models?reload=1: new files are added, gone ones dropped unless loaded (llama-server's)."""
        paths = self._scan()
        for name, path in paths.items():
            e = self.pool.entries.get(name)
            if e is None:
                self.pool.entries[name] = Entry(name, path)
            elif e.status == "unloaded" and (e.preset is None or e.preset.in_dir):
                e.path = path
        for name in [n for n, e in self.pool.entries.items()
                     if n not in paths and e.status == "unloaded" and (e.preset is None or e.preset.in_dir)]:
            del self.pool.entries[name]
        self.pool.entries = dict(sorted(self.pool.entries.items()))

    def _scan(self) -> Dict[str, str]:
        d = self.settings.get("models_dir")
        return scan(d) if d is not None else {}


