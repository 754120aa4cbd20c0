"""pyriver's OpenAI-compatible server (`pyriver serve`, `python -m pyriver.server`): continuous
batching of many requests over the slots of one context, River included. It depends on the
runtime; the runtime never imports it. Needs the extra: pip install "pyriver[server]"."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pyriver serve", description="OpenAI-compatible server with batched decoding")
    p.add_argument("model", nargs="?", default=None, help="GGUF path or registry name (default: SmolLM2-135M-Instruct)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--parallel", "-np", type=int, default=4, help="slots: requests decoded together")
    p.add_argument("--ctx", type=int, default=2048, help="context length of each slot")
    p.add_argument("--threads", "-t", type=int, default=None)
    p.add_argument("--queue", type=int, default=64, help="requests that may wait for a slot; beyond: 503")
    p.add_argument("--prompt-chunk", type=int, default=64, help="prompt tokens per slot and step")
    p.add_argument("--river", default=None, help="river type (q4_0, ...) or sidecar path; off by default")
    p.add_argument("--tau", type=float, default=None, help="exit threshold")
    p.add_argument("--min-exit-layer", type=int, default=None)
    p.add_argument("--lossless", action="store_true",
                   help="the river drafts, the backbone verifies: every stream's tokens are full depth's (needs --river)")
    p.add_argument("--draft-max", type=int, default=None, help="lossless: most tokens drafted per step")
    p.add_argument("--batch-rule", choices=["split", "minimum", "all"], default="split",
                   help="how a step of several sequences exits (see README: Server)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="every product computed one token at a time, so that a stream's text never depends on its "
                   "batch-mates, prompt chunks or prefix reuse (slower: docs/bench/default-cpu.md)")
    p.add_argument("--not-batch-invariant", action="store_true",
                   help="llama.cpp's multi-token kernels, as llama-server runs them (the default)")
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY on /v1/*")
    p.add_argument("--alias", default=None, help="the model name /v1/models reports (default: the file name)")
    p.add_argument("--no-webui", action="store_true", help="do not serve the chat page at /")
    p.add_argument("--verbose", action="store_true")
    return p


def settings(a: argparse.Namespace) -> dict:
    if a.parallel < 1 or a.queue < 0 or a.prompt_chunk < 1 or a.ctx < 16:
        raise ValueError("--parallel and --prompt-chunk must be >= 1, --queue >= 0, --ctx >= 16")
    kw = {"river": None}
    if a.river is not None:
        kw = dict(river=a.river, exit_threshold=a.tau, min_exit_layer=a.min_exit_layer)
    elif a.tau is not None or a.min_exit_layer is not None or a.lossless:
        raise ValueError("--tau, --min-exit-layer and --lossless need --river")
    if a.lossless:
        kw.update(lossless=True, **({} if a.draft_max is None else {"draft_max": a.draft_max}))
    elif a.draft_max is not None:
        raise ValueError("--draft-max needs --lossless")
    if a.batch_invariant and a.not_batch_invariant:
        raise ValueError("--batch-invariant and --not-batch-invariant exclude each other")
    if a.batch_invariant or a.not_batch_invariant:
        kw["batch_invariant"] = bool(a.batch_invariant)
    return dict(model=a.model, n_ctx=a.ctx, threads=a.threads, parallel=a.parallel, queue=a.queue,
                prompt_chunk=a.prompt_chunk, batch_rule=a.batch_rule, api_key=a.api_key, alias=a.alias,
                verbose=a.verbose, webui=not a.no_webui, llama_kwargs=kw)


def main(argv: Optional[List[str]] = None) -> int:
    a = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        s = settings(a)
        import uvicorn
    except ImportError as e:
        print(f"pyriver serve needs the server extra (pip install \"pyriver[server]\"): {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"pyriver serve: error: {e}", file=sys.stderr)
        return 2
    from .app import Server, build_app
    uvicorn.run(build_app(Server(s)), host=a.host, port=a.port, log_level="info" if a.verbose else "warning")
    return 0
