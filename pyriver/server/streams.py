"""llama-server's conversation streams (its server-stream.cpp): a streamed OpenAI request with an
`X-Conversation-Id` header keeps its server-sent events in a session under that id, and its
generation goes on when the client goes away (a page reload). `GET /v1/stream?conv_id=ID&from=N`
replays the session's bytes from offset N, then follows them live until the answer ends;
`DELETE /v1/stream?conv_id=ID` (the user's Stop) cancels the generation and forgets the session
(204, also for an id it does not know); `POST /v1/streams/lookup {"conversation_ids": [...]}` tells
the state of the sessions of the ids asked about (an id matches itself and "ID::MODEL"). A new
request under an id cancels the session before it; a finished session is kept TTL seconds; a
session keeps at most CAP bytes, the oldest dropped (a replay from before them is a 400)."""
from __future__ import annotations

import asyncio
import json
import time
from typing import AsyncIterator, Callable, Dict, List, Optional

from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from pyriver.server.schema import APIError

HEADER = "x-conversation-id"
TTL = 300                # seconds a finished session stays, as llama-server's STREAM_SESSION_TTL_SECONDS
CAP = 16 * 1024 * 1024   # bytes a session keeps


class Session:
    def __init__(self, conv_id: str, cancel: Callable[[], None]):
        self.conv_id, self.cancel = conv_id, cancel
        self.buf = bytearray()
        self.dropped = 0   # bytes dropped from the front (CAP)
        self.done = False
        self.started_at, self.completed_at = int(time.time()), None
        self._changed = asyncio.Event()
        self.producer: Optional[asyncio.Future] = None   # the task writing a kept request's events

    @property
    def total(self) -> int:
        return self.dropped + len(self.buf)

    def write(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > CAP:
            cut = len(self.buf) - CAP
            del self.buf[:cut]
            self.dropped += cut
        self._wake()

    def finish(self) -> None:
        self.done, self.completed_at = True, int(time.time())
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def read_from(self, offset: int) -> AsyncIterator[bytes]:
        """The bytes from offset on, then each new write, until the session ends."""
        while True:
            if offset < self.dropped:
                return
            if offset < self.total:
                chunk = bytes(self.buf[offset - self.dropped:])
                offset += len(chunk)
                yield chunk
                continue
            if self.done:
                return
            await self._changed.wait()

    def info(self) -> Dict:
        return {"conversation_id": self.conv_id, "is_done": self.done, "total_bytes": self.total,
                "started_at": self.started_at, "completed_at": self.completed_at or 0}


class Sessions:
    """One server's sessions (on the event loop: no lock)."""

    def __init__(self):
        self.by_id: Dict[str, Session] = {}

    def _expire(self) -> None:
        now = time.time()
        for k in [k for k, s in self.by_id.items() if s.done and now - s.completed_at > TTL]:
            del self.by_id[k]

    def create(self, conv_id: str, cancel: Callable[[], None]) -> Session:
        self.evict_and_cancel(conv_id)
        s = self.by_id[conv_id] = Session(conv_id, cancel)
        return s

    def get(self, conv_id: str) -> Optional[Session]:
        self._expire()
        return self.by_id.get(conv_id)

    def evict_and_cancel(self, conv_id: str) -> None:
        s = self.by_id.pop(conv_id, None)
        if s is not None and not s.done:
            s.cancel()

    def lookup(self, ids: List[str]) -> List[Dict]:
        self._expire()
        return [s.info() for rid in ids for s in self.by_id.values()
                if s.conv_id == rid or s.conv_id.startswith(rid + "::")]


def event_stream(body: AsyncIterator) -> StreamingResponse:
    """A server-sent event response of body's events, as every streamed route of the server sends them."""
    return StreamingResponse(body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def conv_id(req: HTTPRequest) -> str:
    return req.headers.get(HEADER, "")


def kept(sessions: Sessions, conv: str, body: AsyncIterator[str], cancel: Callable[[], None]) -> StreamingResponse:
    """The response of a streamed request with a conversation id: its events go to a new session,
    written by a task of their own (the generation outlives the client), and the client reads the
    session from its start like any replay."""
    s = sessions.create(conv, cancel)

    async def produce():
        try:
            async for event in body:
                s.write(event.encode("utf-8"))
        finally:
            s.finish()
    s.producer = asyncio.ensure_future(produce())   # held: the loop keeps only a weak reference to a task
    return event_stream(s.read_from(0))


def conv_param(req: HTTPRequest) -> str:
    conv = req.query_params.get("conv_id", "")
    if not conv:
        raise APIError(400, "Missing conversation id in path")
    return conv


def replay(sessions: Sessions, req: HTTPRequest) -> StreamingResponse:
    """GET /v1/stream: the session's bytes from ?from= on, then live until it ends."""
    s = sessions.get(conv_param(req))
    if s is None:
        raise APIError(404, "Stream not found or expired", type_="not_found_error")
    try:
        offset = int(req.query_params.get("from") or 0)
    except ValueError:
        raise APIError(400, "Invalid 'from' offset", param="from") from None
    if offset < s.dropped or offset < 0:
        raise APIError(400, "Stream offset lost, please restart", param="from")
    return event_stream(s.read_from(offset))


async def lookup_ids(req: HTTPRequest) -> List[str]:
    """POST /v1/streams/lookup's ids."""
    try:
        body = json.loads(await req.body() or b"{}")
    except ValueError as e:
        raise APIError(400, f"invalid body: {e}") from None
    ids = body.get("conversation_ids") if isinstance(body, dict) else None
    return [i for i in ids if isinstance(i, str) and i] if isinstance(ids, list) else []


def stream_routes(sessions: Sessions, guarded) -> List[Route]:
    async def get(req: HTTPRequest):
        async def h(req):
            return replay(sessions, req)
        return await guarded(req, h)

    async def delete(req: HTTPRequest):
        async def h(req):
            sessions.evict_and_cancel(conv_param(req))
            return Response(status_code=204)
        return await guarded(req, h)

    async def lookup(req: HTTPRequest):
        async def h(req):
            return JSONResponse(sessions.lookup(await lookup_ids(req)))
        return await guarded(req, h)

    return [Route("/v1/stream", get, methods=["GET"]), Route("/v1/stream", delete, methods=["DELETE"]),
            Route("/v1/streams/lookup", lookup, methods=["POST"])]
