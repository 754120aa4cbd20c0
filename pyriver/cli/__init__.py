"""The `pyriver` command. run, chat, models and rpc-server are the runtime's; eval, sweep, calibrate
and bench are tools (pyriver.tools), each with its own argument parser, imported only when that
command runs. May import: everything under pyriver (it is the outermost door)."""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, List, Optional

from pyriver import models
from pyriver.cli.args import (add_cache_type_args, add_draft_args, add_flash_attn_arg, add_layout_arg, add_rope_args,
                              device_kwargs, layout_kwargs, require_lossless, rope_kwargs)

# Tool commands: the module that parses and runs each (its main(argv)), and its line in --help.
TOOLS = {
    "eval": ("pyriver.tools.eval", "fidelity of River against full depth: top-1 agreement, perplexity, exits"),
    "sweep": ("pyriver.tools.sweep", "speed-fidelity plane over river types, tau and min exit layer, with the "
              "uniformly requantized models; Pareto frontier, PNG, markdown"),
    "calibrate": ("pyriver.tools.calibrate", "store the fastest River setting meeting a fidelity target in the sidecar"),
    "bench": ("pyriver.tools.bench", "pyriver vs llama.cpp on one GGUF: prefill, decode, RSS"),
    "compare": ("pyriver.tools.compare", "several files of a model, its requantizations and River settings: KLD, "
                "top-1 and speed paired with llama.cpp per point; table (md, CSV, JSON) and PNG plane, resumable"),
    # not a tool: the server extra, which depends on the runtime (imported by name only when it runs)
    "serve": ("pyriver.server", "OpenAI-compatible server, many requests decoded in one batch (pyriver[server])"),
}


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", default=None, help="GGUF path, registry name or hf:REPO/FILE (default: SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--threads", "-t", type=int, default=None, help="decode threads")
    p.add_argument("--ctx", type=int, default=2048, help="context length (n_ctx)")
    p.add_argument("--n-gpu-layers", type=int, default=0, help="last blocks (and the head) on devices; -1 = all")
    p.add_argument("--rpc-servers", default=None, help="host:port,... of ggml RPC servers (pyriver rpc-server)")
    p.add_argument("--tensor-split", default=None, help="share of the blocks per device, e.g. 1,1")
    _add_engine_arg(p)


def _add_engine_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=("auto", "native", "llama.cpp"), default="auto",
                   help="what computes: pyriver's graphs (native, with River), llama.cpp's own (llama.cpp), or "
                        "native where pyriver builds the architecture (auto)")


def _add_river_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--river", default=None, help="river type (q4_0, iq4_nl, ...) or sidecar path; off by default")
    p.add_argument("--tau", type=float, default=None, help="exit threshold (cosine similarity)")
    p.add_argument("--min-exit-layer", type=int, default=None)
    p.add_argument("--force-exit-layer", type=int, default=-1, help="debug: every token exits after this block")
    p.add_argument("--exit-rule", choices=["checked", "predicted", "guarded"], default=None,
                   help="how a decode step finds its exit block: checked after every few blocks, predicted from the "
                   "recent exits in one graph, or guarded (one check at the forecast); docs/river.md. Default: the "
                   "rule `pyriver calibrate` measured on this device for a calibrated setting, else checked")
    p.add_argument("--river-force", action="store_true", help="build a river even if not cheaper than the backbone")


def _river_kwargs(a) -> dict:
    lossless = getattr(a, "lossless", False)
    draft, cost = getattr(a, "draft", None), getattr(a, "draft_cost", None)
    if hasattr(a, "draft"):
        require_lossless(a, "--draft and --draft-cost")
    if getattr(a, "no_lossless", False) and lossless:
        raise ValueError("--lossless and --no-lossless exclude each other")
    if a.river is None and not lossless:   # river="auto": a calibrated setting, if any, and its rule unless named
        rule = {} if getattr(a, "exit_rule", None) is None else {"exit_rule": a.exit_rule}
        if getattr(a, "no_lossless", False):
            return rule
        from pyriver.speculative.draft import DEFAULT_DRAFTING  # n-grams draft where they pay
        return dict(DEFAULT_DRAFTING, **rule, **({} if getattr(a, "draft_max", None) is None else {"draft_max": a.draft_max}))
    from pyriver.api.llama import DEFAULT_RIVER  # the river /river on builds; lossless drafts on it
    # n-gram drafts need no river: none is built unless --river names one
    river = a.river or (None if draft == "ngram" else DEFAULT_RIVER)
    kw = dict(river=river, exit_threshold=a.tau, min_exit_layer=a.min_exit_layer,
              force_exit_layer=a.force_exit_layer, river_force=a.river_force, exit_rule=a.exit_rule)
    if lossless:   # the drafter drafts (the river by default), full depth verifies
        kw.update(lossless=True, draft_model=draft, draft_cost=cost,
                  **({} if a.draft_max is None else {"draft_max": a.draft_max}))
    return kw


def _write_stats(llm, out) -> None:
    rs = llm.river_stats()
    if rs is None:
        out.write("[river off: every token runs all blocks]\n")
        return
    if rs.get("lossless") is not None:
        from pyriver.speculative.lossless import describe
        out.write(f"[{describe(rs['lossless'])}]\n")
        return
    hist = " ".join(f"{k}:{v}" for k, v in sorted(rs["histogram"].items()))
    mean = rs["mean_exit_layer"] if rs["mean_exit_layer"] is not None else float("nan")
    out.write(f"[river {rs['river']} tau {rs['exit_threshold']:.4g} min layer {rs['min_exit_layer']} | "
              f"mean exit block {mean:.2f} | river work {100 * rs['river_work_share']:.1f}% | exits {hist}]\n")


# The commands that need the native library import it when they run: --help and `pyriver models`
# need none.
def cmd_run(a) -> int:
    from pyriver.api.llama import Llama
    llm = Llama(a.model, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, seed=a.seed, verbose=a.verbose,
                rpc_servers=a.rpc_servers, engine=a.engine, **device_kwargs(a), **layout_kwargs(a), **rope_kwargs(a),
                **_river_kwargs(a))
    kw = dict(max_tokens=a.n, temperature=a.temp, seed=a.seed, stream=True)
    out = sys.stdout
    if a.chat:
        for ch in llm.create_chat_completion([{"role": "user", "content": a.prompt}], **kw):
            out.write(ch["choices"][0]["delta"].get("content", ""))
            out.flush()
    else:
        for ch in llm(a.prompt, **kw):
            out.write(ch["choices"][0]["text"])
            out.flush()
    s = llm.last_stats
    pf = s["prompt_eval_tokens"] / s["prompt_s"] if s["prompt_s"] else 0.0
    dc = s["decode_tokens"] / s["decode_s"] if s["decode_s"] else 0.0
    out.write(f"\n\n[prompt {s['prompt_eval_tokens']} tok, {pf:.1f} tok/s | decode {s['decode_tokens']} tok, {dc:.1f} tok/s]\n")
    if a.stats:
        _write_stats(llm, out)
    llm.close()
    return 0


def cmd_chat(a) -> int:
    from pyriver.chat import app as chat_app
    return chat_app.run(a)


def cmd_models(a) -> int:
    return models.main_models(a.rest)


def cmd_rpc_server(a) -> int:
    from pyriver.engine import rpc
    rpc.start_server(a.host, a.port, a.threads, a.cache_dir or "")
    return 1


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pyriver", description="GGUF models on ggml with River early exit")
    sub = ap.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="generate from a prompt, streaming")
    r.add_argument("prompt")
    _add_model_args(r)
    r.add_argument("-n", type=int, default=128, help="tokens to generate")
    r.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    r.add_argument("--temp", type=float, default=0.0, help="temperature (0 = greedy)")
    r.add_argument("--seed", type=int, default=None)
    r.add_argument("--verbose", action="store_true")
    r.add_argument("--stats", action="store_true", help="print River exit (or lossless draft) statistics after the answer")
    r.add_argument("--lossless", action="store_true",
                   help="drafts (--draft; the river q4_0 unless --river), full depth verifies: exactly full depth's output")
    r.add_argument("--no-lossless", action="store_true",
                   help="no drafts: every token one decode step (by default n-grams draft where the measured cost says "
                   "they pay)")
    r.add_argument("--draft-max", type=int, default=None, help="lossless: longest draft in tokens (default 2; 64 for "
                   "the default n-gram drafts)")
    add_draft_args(r)   # --draft river|ngram|both, --draft-cost default|FILE.json
    add_flash_attn_arg(r)
    add_cache_type_args(r)
    add_layout_arg(r)
    add_rope_args(r)
    _add_river_args(r)
    r.set_defaults(fn=cmd_run)

    c = sub.add_parser("chat", help="interactive chat in the terminal (or one message a line from a pipe)")
    c.add_argument("model", nargs="?", default=None)
    _add_engine_arg(c)
    c.add_argument("--threads", "-t", type=int, default=None)
    c.add_argument("--ctx", type=int, default=4096)
    c.add_argument("-n", type=int, default=512, help="longest answer in tokens")
    c.add_argument("--temp", type=float, default=0.0)
    c.add_argument("--system", default=None)
    c.add_argument("--river", default=None, help="river type or sidecar; /river on builds q4_0 if none")
    c.add_argument("--tau", type=float, default=None)
    c.add_argument("--min-exit-layer", type=int, default=None)
    c.add_argument("--river-force", action="store_true")
    c.add_argument("--no-lossless", action="store_true",
                   help="no drafts (by default n-grams draft where the measured cost says they pay; /lossless off)")
    c.add_argument("--batch-invariant", action="store_true",
                   help="a token's logits never depend on how it reached the cache (slower prompts; docs/determinism.md)")
    add_flash_attn_arg(c)
    add_cache_type_args(c)
    add_layout_arg(c)
    add_rope_args(c)
    c.set_defaults(fn=cmd_chat)

    m = sub.add_parser("models", help="list or fetch registry models (models fetch NAME)")
    m.add_argument("rest", nargs=argparse.REMAINDER)
    m.set_defaults(fn=cmd_models)

    for name, (_, help_text) in TOOLS.items():   # parsed by the tool itself (see main)
        sub.add_parser(name, help=help_text, add_help=False)

    s = sub.add_parser("rpc-server", help="serve this machine's devices to pyriver and llama.cpp over TCP (ggml RPC)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback only)")
    s.add_argument("--port", "-p", type=int, default=50052)
    s.add_argument("--threads", "-t", type=int, default=2, help="CPU threads of the served CPU device")
    s.add_argument("--cache-dir", default=None, help="cache large tensors here (ggml-rpc's -c)")
    s.set_defaults(fn=cmd_rpc_server)

    return ap


def guarded(fn: Callable[..., int], *args) -> int:
    """Runs a command: Ctrl-C is exit 130, a clear error one line on stderr and exit 1."""
    try:
        return fn(*args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, RuntimeError) as e:
        print(f"pyriver: error: {e}", file=sys.stderr)
        return 1


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in TOOLS:
        tool = importlib.import_module(TOOLS[argv[0]][0])
        return guarded(tool.main, argv[1:])
    a = parser().parse_args(argv)
    return guarded(a.fn, a)

