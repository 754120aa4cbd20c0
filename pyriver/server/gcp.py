"""llama-server's Google Cloud Vertex AI compatibility (server-http.cpp, register_gcp_compat): with
AIP_MODE=PREDICTION in the environment, POST AIP_PREDICT_ROUTE (default /predict) takes
{"instances": [{"@requestFormat": FORMAT, ...fields}, ...]} and answers {"predictions": [...]}, one
per instance in their order, each the JSON the server's own route gives for the instance's fields
(an error object included: a bad instance does not fail the others). FORMAT is a route's path
("/v1/chat/completions") or its camelCase name ("chatCompletions": the path without /v1, words
joined). Instances run concurrently, as separate requests; streaming is off for them. AIP_HEALTH_ROUTE
adds a GET route that is /health; AIP_HTTP_PORT (default 8080) is the port the server listens on."""
from __future__ import annotations

import asyncio
import json
import os
from typing import Dict, List, Optional

from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse
from starlette.routing import Route

from pyriver.server.schema import APIError

MAX_INSTANCES = 128   # llama-server's


def enabled(env=os.environ) -> bool:
    return env.get("AIP_MODE", "") == "PREDICTION"


def _route(env, name: str, default: str) -> str:
    v = env.get(name) or default
    return v if not v or v.startswith("/") else "/" + v


def port(env=os.environ) -> Optional[int]:
    """The port AIP_MODE=PREDICTION listens on (AIP_HTTP_PORT, default 8080), else None."""
    if not enabled(env):
        return None
    try:
        return int(env.get("AIP_HTTP_PORT") or 8080)
    except ValueError:
        raise ValueError(f"AIP_HTTP_PORT must be a port number, got {env.get('AIP_HTTP_PORT')!r}") from None


def gcp_format(path: str) -> str:
    """llama-server's path_to_gcp_format: "/v1/chat/completions" -> "chatCompletions",
    "/apply-template" -> "applyTemplate" (up to a path parameter)."""
    s = path[3:] if path.startswith("/v1") and len(path) > 3 else path
    s = s[1:] if s.startswith("/") else s
    out, cap = [], False
    for c in s.split("{", 1)[0].split(":", 1)[0]:
        if c in "/-_":
            cap = True
        else:
            out.append(c.upper() if cap else c)
            cap = False
    return "".join(out)


def _error(message: str, type_: str = "invalid_request_error", status: int = 400) -> Dict:
    return APIError(status, message, type_=type_).body()


def routes(srv, app_ref: List, existing: List[Route], env=os.environ) -> List[Route]:
    """The predict route (and AIP_HEALTH_ROUTE) over the app's own routes; app_ref[0] is the app,
    set once built. A predict route that is one of the server's own is a ValueError (llama-server exits)."""
    if not enabled(env):
        return []
    path_predict = _route(env, "AIP_PREDICT_ROUTE", "/predict")
    paths = {r.path: r for r in existing if isinstance(r, Route)}
    if path_predict in paths:
        raise ValueError(f"AIP_PREDICT_ROUTE={path_predict} conflicts with an existing route")
    aliases: Dict[str, Route] = {}
    for r in existing:
        if isinstance(r, Route):
            aliases.setdefault(gcp_format(r.path), r)   # the first wins, as llama-server's

    async def one(req: HTTPRequest, instance) -> object:
        if not isinstance(instance, dict):
            return _error("each instance must be a JSON object")
        fmt = instance.get("@requestFormat")
        if not isinstance(fmt, str):
            return _error("each instance must include a string @requestFormat")
        route = aliases.get(fmt) or paths.get(fmt)
        if route is None or "{" in route.path:
            return _error(f"no handler registered for @requestFormat: {fmt}")
        payload = {k: v for k, v in instance.items() if k != "@requestFormat"}
        if "stream" in payload:   # llama-server: the predict route does not stream
            payload["stream"] = False
        method = "POST" if route.methods is None or "POST" in route.methods else "GET"
        return await _call(app_ref[0], req, route.path, method, json.dumps(payload).encode())

    async def predict(req: HTTPRequest):
        try:
            srv.check_key(req)
            try:
                data = json.loads(await req.body())
            except (ValueError, UnicodeDecodeError) as e:
                raise APIError(400, f"the body is not JSON: {e}") from None
            if not isinstance(data, dict):
                raise APIError(400, "request body must be a JSON object")
            instances = data.get("instances")
            if not isinstance(instances, list):
                raise APIError(400, "request body must include an array field named instances")
            if len(instances) > MAX_INSTANCES:
                raise APIError(400, f"instances array exceeds maximum size of {MAX_INSTANCES}")
        except APIError as e:
            return JSONResponse(e.body(), status_code=e.status)
        predictions = await asyncio.gather(*(one(req, i) for i in instances))
        return JSONResponse({"predictions": list(predictions)})

    out = [Route(path_predict, predict, methods=["POST"])]
    path_health = _route(env, "AIP_HEALTH_ROUTE", "")
    if path_health and path_health not in paths:
        out.append(Route(path_health, paths["/health"].endpoint, methods=["GET"]))
    return out


async def _call(app, req: HTTPRequest, path: str, method: str, body: bytes) -> object:
    """The app's answer to method path with body, the client's headers (its key) kept: its JSON
    (null when empty, the text when not JSON)."""
    headers = [(k, v) for k, v in req.scope["headers"] if k not in (b"content-length", b"content-type")]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = dict(req.scope, method=method, path=path, raw_path=path.encode(), query_string=b"", headers=headers)
    scope.pop("router", None)
    scope.pop("endpoint", None)
    scope.pop("path_params", None)
    sent = False
    chunks: List[bytes] = []

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()   # the client stays: nothing more comes
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    data = b"".join(chunks)
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")
