"""The router's models (pyriver serve --models-dir): loaded on first use, the least recently used
idle one unloaded past --models-max, as llama-server's router does. In pyriver a loaded model is a
Server of its own (its Llama, scheduler and slots) in this one process, not a child process.

Everything here runs on the event loop, so the state needs no lock; loads and unloads run in
threads, so that one model loading never holds up the requests of the others. A model with
requests in flight (or waited for) is never unloaded: a request that needs its room waits."""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Dict, List, Optional

from pyriver.server import app as A
from pyriver.server.schema import APIError


class Entry:
    """One model of the directory. status: unloaded, loading, loaded, or unloading (its room is
    not free yet: it still counts against --models-max)."""

    def __init__(self, name: str, path: str):
        self.name, self.path = name, path
        self.preset = None   # its models_preset.PresetModel (settings of its own, aliases, tags), if any
        self.status = "unloaded"
        self.srv: Optional[A.Server] = None
        self.app = None   # the model's own ASGI app (app.build_app over srv) while loaded
        self.last_used = 0.0
        self.in_flight = 0   # requests being answered
        self.waiters = 0     # requests waiting for it to load: it is not a victim meanwhile
        self.loads = 0       # load attempts so far
        self.error: Optional[str] = None   # why the last load failed


class ModelPool:
    def __init__(self, paths: Dict[str, str], settings: Dict, models_max: int, presets: Optional[Dict] = None):
        self.entries = {n: Entry(n, p) for n, p in paths.items()}
        for name, pm in (presets or {}).items():   # a section of a directory model's name configures it
            e = self.entries.setdefault(name, Entry(name, pm.path))
            e.path, e.preset = pm.path, pm
        self.entries = dict(sorted(self.entries.items()))
        self.settings, self.max = settings, models_max
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._changed: Optional[asyncio.Event] = None

    def start(self) -> None:
        self.loop, self._changed = asyncio.get_running_loop(), asyncio.Event()

    def entry(self, name: str) -> Optional[Entry]:
        """The model of that name, or of that alias (a preset's `alias`)."""
        e = self.entries.get(name)
        return e if e is not None else next((e for e in self.entries.values()
                                             if e.preset is not None and name in e.preset.aliases), None)

    # -- waiting for a change (a load or unload ended, a request ended) ---------------------
    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self) -> None:
        await self._changed.wait()

    # -- requests -------------------------------------------------------------------------
    async def acquire(self, e: Entry, autoload: bool) -> Entry:
        """e, loaded and counted in flight (release() it): loaded first if it is not, waiting for room."""
        e.waiters += 1
        loads = e.loads
        try:
            while True:
                if e.status == "loaded":
                    e.in_flight += 1
                    e.last_used = time.monotonic()
                    return e
                if e.status == "unloaded":
                    if e.error is not None and e.loads > loads:   # the load this request waited for failed
                        raise APIError(503, f"model '{e.name}' failed to load: {e.error}", type_="server_error")
                    if not autoload:
                        raise APIError(400, "model is not loaded")
                    if self._make_room():
                        self._load(e)
                await self._wait()
        finally:
            e.waiters -= 1

    def release(self, e: Entry) -> None:
        e.in_flight -= 1
        e.last_used = time.monotonic()
        self._notify()

    # -- /models/load and /models/unload ------------------------------------------------------
    async def load(self, e: Entry) -> None:
        """Starts loading e once there is room (returns then, as llama-server's /models/load)."""
        if e.status != "unloaded":
            raise APIError(400, "model is already running")
        e.waiters += 1
        try:
            while e.status == "unloaded":
                room = self._make_room()
                if room is None:
                    raise APIError(503, "model limit reached, try again later", type_="server_error")
                if room:
                    self._load(e)
                    return
                await self._wait()
        finally:
            e.waiters -= 1

    async def unload(self, e: Entry) -> None:
        """Unloads e once its requests have ended (a load under way ends first); returns unloaded."""
        if e.status not in ("loading", "loaded"):
            raise APIError(400, "model is not running")
        while e.status == "loading":
            await self._wait()
        if e.status == "loaded":
            self._unload(e)
        while e.status != "unloaded":
            await self._wait()

    # -- room under --models-max ----------------------------------------------------------------
    def _make_room(self) -> Optional[bool]:
        """True: room for one more model; False: an idle model is on its way out, wait; None: none
        can go (each has requests), wait for one to end."""
        running = sum(e.status != "unloaded" for e in self.entries.values())
        if self.max <= 0 or running < self.max:
            return True
        idle = [e for e in self.entries.values() if e.status == "loaded" and not e.in_flight and not e.waiters]
        if any(e.status == "unloading" for e in self.entries.values()):
            return False
        if not idle:
            return None
        self._unload(min(idle, key=lambda e: e.last_used))
        return False

    def _load(self, e: Entry) -> None:
        e.status, e.error = "loading", None
        e.loads += 1
        base = self.settings if e.preset is None else e.preset.settings
        srv = A.Server(dict(base, model=e.path, alias=e.name, webui=False))
        run = A.start(srv)   # its inbox, on the loop

        def load():
            run()
            try:
                self.loop.call_soon_threadsafe(self._loaded, e, srv)
            except RuntimeError:   # the loop closed at shutdown
                pass
        threading.Thread(target=load, name=f"pyriver-load-{e.name}", daemon=True).start()

    def _loaded(self, e: Entry, srv: A.Server) -> None:
        if srv.llm is None:
            A.close(srv)
            e.status, e.error = "unloaded", srv.error
        else:
            e.srv, e.app, e.status, e.last_used = srv, A.build_app(srv), "loaded", time.monotonic()
        self._notify()

    def _unload(self, e: Entry) -> None:
        e.status = "unloading"
        self.loop.create_task(self._unloading(e))

    async def _unloading(self, e: Entry) -> None:
        while e.in_flight:
            await self._wait()
        srv = e.srv
        await asyncio.to_thread(A.stop, srv)   # joins the scheduler thread: off the loop
        A.close(srv)
        e.srv = e.app = None
        e.status = "unloaded"
        self._notify()

    def close(self) -> None:
        """At shutdown: every loaded model's scheduler stops."""
        for e in self.entries.values():
            if e.srv is not None:
                A.stop(e.srv)
                A.close(e.srv)

    def running(self) -> List[Entry]:
        return [e for e in self.entries.values() if e.status != "unloaded"]
