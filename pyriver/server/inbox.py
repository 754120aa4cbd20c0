"""From the scheduler thread to the event loop: what the scheduler hands a request (its Request.out)
when the request is served on the loop. Everything handed over between two turns of the loop
arrives in one wake-up: a step's tokens for every stream. A thread per stream, as before, cost a
thread wake-up per token and stream, each taking a core from the decode step on a small machine.

The scheduler thread puts items as it samples them and calls flush() right before its next native
step (and before it waits for work): the loop is woken then, once, by a byte on a pipe written
with the GIL held. A wake-up through loop.call_soon_threadsafe, in the middle of a step's Python,
let the loop take the GIL at the socket write that wakes it, so that the scheduler waited for the
loop's formatting of the token before it could sample the next slot or start the next step (0.3 ms
a token on a 2-core machine, 2% to 4% of a decode step); now the loop takes the GIL when the
scheduler releases it in the native step, and formats the tokens while the step runs."""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import threading
from typing import Callable, List, Tuple


def _gil_held_writer() -> Callable[[int], None]:
    """write(fd, one byte) that keeps the GIL (ctypes.PyDLL calls hold it); os.write where there is no libc write."""
    try:
        w = ctypes.PyDLL(None).write
        w.argtypes, w.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_ssize_t
        return lambda fd: w(fd, b"\0", 1)   # -1 (EAGAIN) when the pipe is full: the loop is woken already
    except (OSError, AttributeError):
        def write(fd: int) -> None:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(fd, b"\0")
        return write


_write = _gil_held_writer()


class Inbox:
    """One per event loop: the scheduler thread puts and flushes, the loop delivers to each request's queue."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.lock = threading.Lock()
        self.pending: List[Tuple[asyncio.Queue, tuple]] = []
        self.woken = False   # a wake-up is on its way and the loop has not taken the pending items yet
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self.closed = False
        loop.add_reader(self._r, self._deliver)

    def put(self, q: asyncio.Queue, item: tuple) -> None:
        """Delivered at the next flush()."""
        with self.lock:
            self.pending.append((q, item))

    def put_many(self, q: asyncio.Queue, items: List[tuple]) -> None:
        with self.lock:
            self.pending.extend((q, item) for item in items)

    def flush(self) -> None:
        """Wakes the loop (once) for everything put so far."""
        with self.lock:
            if not self.pending or self.woken or self.closed:
                return
            self.woken = True
            _write(self._w)

    def _deliver(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):   # drained first: a flush after the swap below writes again
            os.read(self._r, 4096)
        with self.lock:
            batch, self.pending, self.woken = self.pending, [], False
        for q, item in batch:
            q.put_nowait(item)

    def close(self) -> None:
        """On the loop, at shutdown (the scheduler thread has ended): what is left is delivered."""
        with self.lock:
            self.closed = True
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self._r)
        self._deliver()
        os.close(self._r)
        os.close(self._w)

    def out(self) -> "Out":
        return Out(self)


# Tokens a non-streamed answer hands over per wake-up of the loop. A wake-up and the loop's work on a
# token took 0.20 ms of the main thread's CPU a token, taken from the decode step's cores; the loop
# needs them one by one only to see a caller's stop string as soon as it completes (held tokens would
# be decoded past it), so a request with one hands them over as they come.
HOLD = 32


def hold(out, user_stops) -> None:
    """A non-streamed request's Request.out: its tokens reach the loop HOLD at a time unless the
    caller gave stop strings (a chat template's end-of-turn text, which its special token ends
    first, is not one)."""
    if not any(user_stops or ()):
        out.batch = HOLD


class Out:
    """A request's Request.out on the loop: put() from the scheduler thread, await get() on the loop."""

    def __init__(self, inbox: Inbox):
        self.inbox = inbox
        self.q: asyncio.Queue = asyncio.Queue()
        self.batch = 1   # token items handed over together (hold); any other item takes the held ones along
        self.held: List[tuple] = []   # the scheduler thread's alone

    def put(self, item: tuple) -> None:
        if self.batch > 1 and item[0] == "token":
            self.held.append(item)
            if len(self.held) < self.batch:
                return
            item = None
        if self.held:
            held, self.held = self.held, []
            self.inbox.put_many(self.q, held)
        if item is not None:
            self.inbox.put(self.q, item)

    async def get(self) -> tuple:
        return await self.q.get()
