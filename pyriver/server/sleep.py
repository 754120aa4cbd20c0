"""`pyriver serve --sleep-idle-seconds N`, as llama-server sleeps: after N seconds with no request
the model's memory goes (its scheduler stops, the Llama closes: weights, KV cache, projector), and
the next request that needs the model loads it again (it waits for the load). While asleep the
read-only endpoints answer without waking it: /health (ok), /props (as on entering sleep, with
"is_sleeping": true), /models and /v1/models (as on entering sleep), /metrics (the scrape taken on
entering sleep, then one taken right after it: throughput windows that saw nothing), and awake
they do not count as activity. Any other request, token counting included, wakes it. An ASGI wrapper around the single-model app: the
routes know nothing of it."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Dict, Optional

from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response

from pyriver.server import app as A
from pyriver.server.schema import APIError

READ_ONLY = ("/props", "/models", "/v1/models", "/metrics")
HEALTH = ("/health", "/v1/health")


async def _capture(app, path: str):
    """(status, headers, body) of a GET of path on app, in process."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "path": path,
             "raw_path": path.encode(), "query_string": b"", "headers": [], "scheme": "http",
             "server": ("127.0.0.1", 0), "client": ("127.0.0.1", 0), "root_path": ""}
    out: Dict = {"body": b""}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(msg):
        if msg["type"] == "http.response.start":
            out["status"], out["headers"] = msg["status"], msg.get("headers", [])
        elif msg["type"] == "http.response.body":
            out["body"] += msg.get("body", b"")
    await app(scope, receive, send)
    return out["status"], out["headers"], out["body"]


class Sleeper:
    """The app of one Server, put to sleep after idle seconds and woken by a request."""

    def __init__(self, srv: A.Server, app, idle_s: float):
        self.srv, self.app, self.idle_s = srv, app, idle_s
        self.sleeping = False
        self.active = 0                     # requests in flight (any but the read-only ones while asleep)
        self.last = time.monotonic()
        self.lock: Optional[asyncio.Lock] = None
        self.snap: Dict[str, tuple] = {}
        self.scrapes = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            if self.lock is None:
                self.lock = asyncio.Lock()
                asyncio.get_running_loop().create_task(self._watch())
            return await self.app(scope, receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if scope.get("method") in ("GET", "HEAD") and (path in HEALTH or path in READ_ONLY):
            if self.sleeping:
                async with self.lock:   # a sleep (or wake) under way ends first: asleep means the memory went
                    pass
            if self.sleeping:
                return await self._asleep(path, scope, receive, send)
            return await self.app(scope, receive, send)   # no activity: polling them lets it sleep
        self.active += 1
        try:
            if self.sleeping:
                await self._wake()
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
            self.last = time.monotonic()

    async def _asleep(self, path, scope, receive, send):
        if path in HEALTH:   # public
            return await JSONResponse({"status": "ok", "slots": self.srv.settings["parallel"]})(scope, receive, send)
        try:
            self.srv.check_key(HTTPRequest(scope))
        except APIError as e:
            return await JSONResponse(e.body(), status_code=e.status)(scope, receive, send)
        if path == "/metrics":
            key = "/metrics" if self.scrapes == 0 else "/metrics#2"
            self.scrapes += 1
        else:
            key = path
        status, headers, body = self.snap[key]
        media = dict(headers).get(b"content-type", b"application/json").decode()
        return await Response(body, status_code=status, media_type=media)(scope, receive, send)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(min(0.1, self.idle_s / 4 or 0.1))
            if self.sleeping or self.active or self.srv.llm is None or self.srv.sched is None:
                continue
            if time.monotonic() - self.last >= self.idle_s and self.srv.sched.busy_slots() == 0 \
                    and self.srv.sched.queue_length() == 0:
                async with self.lock:
                    if not self.active and not self.sleeping:
                        await self._sleep()

    async def _sleep(self) -> None:
        snap = {}
        for p in READ_ONLY:
            snap[p] = await _capture(self.app, p)
        snap["/metrics#2"] = await _capture(self.app, "/metrics")
        status, headers, body = snap["/props"]
        if status == 200:
            snap["/props"] = (status, headers, json.dumps(dict(json.loads(body), is_sleeping=True)).encode())
        if self.active:   # a request came in meanwhile: stay awake
            return
        self.snap, self.scrapes, self.sleeping = snap, 0, True
        srv = self.srv
        await asyncio.to_thread(A.stop, srv)   # joins the scheduler's thread
        llm, srv.llm, srv.sched, srv.projector = srv.llm, None, None, None
        srv.metrics.sched = None
        await asyncio.to_thread(llm.close)

    async def _wake(self) -> None:
        async with self.lock:
            if not self.sleeping:
                return
            await asyncio.to_thread(self.srv.load)
            self.sleeping = False
