"""llama-server's LoRA adapters on `pyriver serve` (tools/server: --lora, --lora-scaled,
--lora-init-without-apply; GET/POST /lora-adapters; a request's `lora`):

- the adapters load with the model (pyriver.Llama's lora_adapters, on the llama.cpp engine), each at
  scale 1 (--lora), its own (--lora-scaled FILE:SCALE) or 0 (--lora-init-without-apply, as
  llama-server's README says; its 0.3.36 build applies them anyway);
- GET /lora-adapters lists them with the scales a request without `lora` gets; POST sets those
  scales (an adapter left out: 0), for the requests that start after it;
- a request's `lora: [{id, scale}]` (/completion, /infill, /v1/completions, /v1/chat/completions)
  is its own configuration, an adapter left out at 0; an empty list is the server's. The scheduler
  runs the slots of one configuration per step (server/scheduler.py).

Where llama-server ignores a bad entry (an unknown id, a scale that is not a number), pyriver
answers 400 naming it."""
from __future__ import annotations

import asyncio
import json
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse
from starlette.routing import Route

from pyriver.server.schema import APIError


def from_args(flags: Sequence[Tuple[str, str]], init_without_apply: bool) -> List[Tuple[str, float]]:
    """(path, scale) of each adapter of the command line, in its order (the ids): flags are
    ("lora", "FILE,...") and ("lora-scaled", "FILE:SCALE,...") as given (comma lists, as llama.cpp's)."""
    out = []
    for kind, value in flags:
        for item in (x.strip() for x in value.split(",") if x.strip()):
            if kind == "lora":
                out.append((item, 1.0))
                continue
            path, sep, scale = item.rpartition(":")
            try:
                if not sep or not path:
                    raise ValueError
                out.append((path, float(scale)))
            except ValueError:
                raise ValueError(f"--lora-scaled: {item!r} is not FILE:SCALE") from None
    for path, _ in out:
        if not os.path.isfile(path):
            raise ValueError(f"--lora: no such file: {path}")
    if init_without_apply:
        out = [(p, 0.0) for p, _ in out]
    return out


def parse(value: Any, n: int, param: str = "lora") -> Dict[int, float]:
    """{id: scale} of a list of {id, scale} objects; APIError 400 for anything else."""
    if not isinstance(value, list):
        raise APIError(400, f"'{param}' must be an array of objects with 'id' and 'scale' fields", param=param)
    out = {}
    for e in value:
        i, s = (e.get("id"), e.get("scale")) if isinstance(e, dict) else (None, None)
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n:
            raise APIError(400, f"'{param}': {json.dumps(e)[:80]}: 'id' must be the id of a loaded adapter "
                           f"(0 to {n - 1}; GET /lora-adapters lists them)" if n else
                           f"'{param}': this server has no LoRA adapters (start it with --lora FILE)", param=param)
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            raise APIError(400, f"'{param}': {json.dumps(e)[:80]}: 'scale' must be a finite number", param=param)
        out[i] = float(s)
    return out


def scales(entries: Dict[int, float], n: int) -> Tuple[float, ...]:
    """Every adapter's scale: the listed ones', 0 for the others (llama-server's construct_lora_list)."""
    return tuple(entries.get(i, 0.0) for i in range(n))


def request_scales(srv, value: Any) -> Optional[Tuple[float, ...]]:
    """A request's `lora` as the scales it runs with; None (absent or []): the server's when it starts."""
    if value is None or value == []:
        return None
    n = len(srv.llm.lora_adapters)
    return scales(parse(value, n), n)


def listing(srv, config: Sequence[float]) -> List[Dict[str, Any]]:
    """llama-server's entries (server_task_result_get_lora): each adapter at the scale config gives it."""
    return [{"id": i, "path": a.path, "scale": float(s), "task_name": a.task_name, "prompt_prefix": a.prompt_prefix}
            for i, (a, s) in enumerate(zip(srv.llm.lora_adapters, config))]


def brief(config: Sequence[float]) -> List[Dict[str, Any]]:
    """A configuration as [{id, scale}] (llama-server's task params' `lora`): the adapters it applies."""
    return [{"id": i, "scale": float(s)} for i, s in enumerate(config) if s != 0]


def routes(srv, guarded) -> List[Route]:
    async def get(req: HTTPRequest):
        async def h(_):
            return JSONResponse(listing(srv, srv.sched.lora))
        return await guarded(req, h)

    async def post(req: HTTPRequest):
        async def h(req):
            try:
                body = json.loads(await req.body())
            except (ValueError, RecursionError) as e:
                raise APIError(400, f"the request body is not valid JSON: {str(e)[:200]}") from None
            if not isinstance(body, list):
                raise APIError(400, "Request body must be an array")   # llama-server's words
            n = len(srv.llm.lora_adapters)
            new = scales(parse(body, n, param="body"), n)   # checked before anything changes

            def apply():
                srv.sched.lora = new
            await asyncio.wrap_future(srv.sched.call(apply))   # between two steps, on the scheduler's thread
            return JSONResponse({"success": True})
        return await guarded(req, h)

    return [Route("/lora-adapters", get, methods=["GET"]), Route("/lora-adapters", post, methods=["POST"])]
