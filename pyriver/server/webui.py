"""The chat page `pyriver serve` serves at / (off with --no-webui): static files shipped in the
package (pyriver/server/webui/), no build step, no CDN. The page is a client of the server's own
OpenAI endpoints like any other; GET /river tells it (and anyone) how this server runs River."""
from __future__ import annotations

import os
from typing import Callable, List

from starlette.requests import Request as HTTPRequest
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Route

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "webui")
FILES = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
# The page loads only its own files and talks only to this server.
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
           "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                      "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"}


def river_info(srv) -> dict:
    """The server's River settings: fixed at start-up (pyriver serve --river/--tau/--lossless), the
    same for every request; and the engine that computes (native: pyriver's graphs; llama.cpp)."""
    llm, s = srv.llm, srv.settings
    spec = llm.speculator
    on = llm.river_path is not None
    return {"model": srv.model_id, "engine": llm.engine, "n_layer": llm.info["n_layer"], "n_ctx": srv.sched.n_ctx,
            "slots": s["parallel"], "batch_rule": s["batch_rule"],
            "river": {"on": on, "sidecar": os.path.basename(llm.river_path) if on else None,
                      "exit_threshold": llm.exit_threshold if on else None,
                      "min_exit_layer": llm.min_exit_layer if on else None,
                      "lossless": spec is not None, "draft_max": spec.draft_max if spec is not None else None,
                      "draft": spec.source if spec is not None else None,
                      "per_request": False}}


def webui_routes(srv, guarded: Callable) -> List[Route]:
    async def river(req: HTTPRequest):
        async def h(_):
            return JSONResponse(river_info(srv))
        return await guarded(req, h)

    routes = [Route("/river", river, methods=["GET"])]
    return routes + (page_routes() if srv.settings.get("webui", True) else [])


def page_routes() -> List[Route]:
    """The page's static files: one model's server and the router (--models-dir) serve the same page,
    which asks /props whether it talks to a router and then lets the user pick the model."""
    def page(name: str):
        async def serve(_req: HTTPRequest):
            return FileResponse(os.path.join(HERE, name), media_type=FILES[name], headers=HEADERS)
        return serve

    return [Route("/", page("index.html"), methods=["GET"]),
            *[Route(f"/webui/{name}", page(name), methods=["GET"]) for name in FILES]]
