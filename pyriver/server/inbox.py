"""From the scheduler thread to the event loop: what the scheduler hands a request (its Request.out)
when the request is served on the loop. Everything handed over between two turns of the loop
arrives in one wake-up: a step's tokens for every stream. A thread per stream, as before, cost a
thread wake-up per token and stream, each taking a core from the decode step on a small machine."""
from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import List, Tuple


class Inbox:
    """One per event loop: the scheduler thread puts, the loop delivers to each request's queue."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.lock = threading.Lock()
        self.pending: List[Tuple[asyncio.Queue, tuple]] = []

    def put(self, q: asyncio.Queue, item: tuple) -> None:
        with self.lock:
            first = not self.pending
            self.pending.append((q, item))
        if first:   # the loop is not yet told: one call for all that arrives before it runs
            with contextlib.suppress(RuntimeError):   # the loop is closed: the server is shutting down
                self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self.lock:
            batch, self.pending = self.pending, []
        for q, item in batch:
            q.put_nowait(item)

    def out(self) -> "Out":
        return Out(self)


class Out:
    """A request's Request.out on the loop: put() from the scheduler thread, await get() on the loop."""

    def __init__(self, inbox: Inbox):
        self.inbox = inbox
        self.q: asyncio.Queue = asyncio.Queue()

    def put(self, item: tuple) -> None:
        self.inbox.put(self.q, item)

    async def get(self) -> tuple:
        return await self.q.get()
