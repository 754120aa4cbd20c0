"""A client that goes away before its answer (a non-streamed request it stopped waiting for) frees
its slots: llama-server stops a task whose connection closed (req.should_stop), and llama.cpp's
test_cancel_request reads /slots to see it. A streamed answer notices at its next write (openai_api._sse);
a plain one writes nothing until the end, so the connection is watched while it is computed."""
from __future__ import annotations

import asyncio
from typing import Awaitable, Iterable, TypeVar

from starlette.requests import Request as HTTPRequest

T = TypeVar("T")


async def or_cancel(req: HTTPRequest, requests: Iterable, answer: Awaitable[T]) -> T:
    """answer's result; if the client disconnects first, requests are cancelled (each slot frees at the
    scheduler's next step, and answer ends). The request's body must have been read: what the ASGI
    server hands over after it is the disconnect."""
    rs = list(requests)

    async def watch():
        while (await req.receive())["type"] != "http.disconnect":
            pass
        for r in rs:
            r.cancel()
    watcher = asyncio.ensure_future(watch())
    try:
        return await answer
    finally:
        watcher.cancel()
