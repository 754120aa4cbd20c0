"""CORS as llama-server answers it (tools/server/server-http.cpp), so a browser page that talks to
llama-server talks to pyriver the same way. `--cors-origins`: "*" (the default, with credentials:
the request's Origin is echoed back), "localhost" (only an Origin whose host is localhost,
127.0.0.1 or ::1 is echoed), or a value sent as it is. An OPTIONS request (a browser's preflight,
which carries no API key) is answered 200 at once with the allowed methods and headers.

Starlette's CORSMiddleware answers differently (a preflight from an origin not listed is a 400,
and it echoes the requested headers instead of llama-server's "*"), hence this small middleware."""
from __future__ import annotations

from typing import List, Optional, Tuple
from urllib.parse import urlsplit

METHODS = "GET, POST, DELETE, OPTIONS"
HEADERS = "*"


def is_localhost(origin: str) -> bool:
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host in ("localhost", "127.0.0.1", "::1")


def allow_origin(origins: str, origin: Optional[str]) -> Optional[str]:
    """The Access-Control-Allow-Origin value for a request from `origin`, or None for no header."""
    if origins == "*":
        return origin or ""
    if origins == "localhost":
        return origin if origin and is_localhost(origin) else None
    return origins


class CORS:
    """ASGI middleware: the Allow-Origin header on every HTTP response, OPTIONS answered here.
    Header names go out in llama-server's case: clients that read them from a plain dict (llama.cpp's
    own server tests do) look them up so."""

    def __init__(self, app, origins: str = "*"):
        self.app, self.origins = app, origins

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        origin = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"origin"), None)
        allow = allow_origin(self.origins, origin)
        extra: List[Tuple[bytes, bytes]] = [] if allow is None else [(b"Access-Control-Allow-Origin",
                                                                      allow.encode("latin-1"))]
        if scope["method"] == "OPTIONS":
            extra += [(b"Access-Control-Allow-Credentials", b"true"),   # llama-server's default
                      (b"Access-Control-Allow-Methods", METHODS.encode()),
                      (b"Access-Control-Allow-Headers", HEADERS.encode()),
                      (b"content-type", b"text/html"), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 200, "headers": extra})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with(msg):
            if msg["type"] == "http.response.start" and extra:
                msg = dict(msg, headers=[*msg.get("headers", []), *extra])
            await send(msg)
        await self.app(scope, receive, send_with)
