"""The `pyriver` command: run, chat-free one-shot generation; models; bench."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", default=None, help="GGUF path, registry name or hf:REPO/FILE (default: SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--threads", "-t", type=int, default=None, help="decode threads")
    p.add_argument("--ctx", type=int, default=2048, help="context length (n_ctx)")
    p.add_argument("--n-gpu-layers", type=int, default=0, help="last blocks (and the head) on devices; -1 = all")
    p.add_argument("--rpc-servers", default=None, help="host:port,... of ggml RPC servers (pyriver rpc-server)")
    p.add_argument("--tensor-split", default=None, help="share of the blocks per device, e.g. 1,1")


def _add_river_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--river", default=None, help="river type (q4_0, iq4_nl, ...) or sidecar path; off by default")
    p.add_argument("--tau", type=float, default=None, help="exit threshold (cosine similarity)")
    p.add_argument("--min-exit-layer", type=int, default=None)
    p.add_argument("--force-exit-layer", type=int, default=-1, help="debug: every token exits after this block")
    p.add_argument("--river-force", action="store_true", help="build a river even if not cheaper than the backbone")


def _river_kwargs(a) -> dict:
    if a.river is None:
        return {}
    return dict(river=a.river, exit_threshold=a.tau, min_exit_layer=a.min_exit_layer,
                force_exit_layer=a.force_exit_layer, river_force=a.river_force)


def _device_kwargs(a) -> dict:
    split = [float(x) for x in a.tensor_split.split(",")] if getattr(a, "tensor_split", None) else None
    return dict(n_gpu_layers=a.n_gpu_layers, rpc_servers=a.rpc_servers, tensor_split=split)


def cmd_run(a) -> int:
    from . import Llama
    llm = Llama(a.model, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, seed=a.seed, verbose=a.verbose,
                **_device_kwargs(a), **_river_kwargs(a))
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
        rs = llm.river_stats()
        if rs is None:
            out.write("[river off: every token runs all blocks]\n")
        else:
            hist = " ".join(f"{k}:{v}" for k, v in sorted(rs["histogram"].items()))
            mean = rs["mean_exit_layer"] if rs["mean_exit_layer"] is not None else float("nan")
            out.write(f"[river {rs['river']} tau {rs['exit_threshold']:.4g} min layer {rs['min_exit_layer']} | "
                      f"mean exit block {mean:.2f} | river work {100 * rs['river_work_share']:.1f}% | exits {hist}]\n")
    llm.close()
    return 0


def cmd_chat(a) -> int:
    from . import chat_app
    return chat_app.run(a)


def cmd_models(a) -> int:
    from . import models
    return models.main_models(a.rest)


def cmd_eval(a) -> int:
    from .evaluate import run_eval
    return run_eval(a)


def cmd_sweep(a) -> int:
    from . import sweep
    return sweep.main(a)


def cmd_calibrate(a) -> int:
    from . import calibration
    return calibration.main(a)


def _positive(s: str) -> int:
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _add_set_args(p: argparse.ArgumentParser, n_default: int, limit_default) -> None:
    p.add_argument("model", nargs="?", default=None, help="GGUF path or registry name (default: SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--prompts", default=None, help="builtin (24 chat/code/math/prose prompts), humaneval, or a JSONL "
                   "file with one {\"prompt\": ...} a line")
    p.add_argument("--limit", type=_positive, default=limit_default, help="use this many prompts, round-robin over categories")
    p.add_argument("-n", type=_positive, default=n_default, help="reference tokens per prompt")
    p.add_argument("--threads", "-t", type=_positive, default=2)
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--river-force", action="store_true", help="allow a river not cheaper than the backbone")
    p.add_argument("--n-gpu-layers", type=int, default=0, help="last blocks (and the head) on devices, every engine; -1 = all")
    p.add_argument("--flash-attn", action="store_true", help="flash attention, every engine")
    p.add_argument("--json", default=None, help="write the results (with their conditions) to this file")


def _add_grid_args(p: argparse.ArgumentParser, taus) -> None:
    p.add_argument("--river", nargs="+", default=["q4_0", "iq4_nl"], help="river types")
    p.add_argument("--tau", type=float, nargs="+", default=taus)
    p.add_argument("--min-exit-layer", type=int, nargs="+", default=[4, 8])
    p.add_argument("--repeats", "-r", type=_positive, default=3, help="timed passes of the grid, in rotated order")
    p.add_argument("--no-uniform", action="store_true", help="leave out llama.cpp on the uniformly requantized models")


def cmd_bench(a) -> int:
    if a.tau is None and a.inprocess:
        from .llama import DEFAULT_TAU
        a.tau = [DEFAULT_TAU]
    if a.systems:
        from . import systems
        return systems.main(a)
    if a.overhead:
        from . import bench
        return bench.overhead(a)
    if a.chat_turns:
        from . import bench
        return bench.chat_turns(a)
    if a.inprocess:
        from . import bench
        return bench.inprocess(a)
    from . import bench
    return bench.main(a)


def cmd_rpc_server(a) -> int:
    from . import rpc
    rpc.start_server(a.host, a.port, a.threads, a.cache_dir or "")
    return 1


def main(argv: Optional[List[str]] = None) -> int:
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
    r.add_argument("--stats", action="store_true", help="print River exit statistics after the answer")
    _add_river_args(r)
    r.set_defaults(fn=cmd_run)

    c = sub.add_parser("chat", help="interactive chat in the terminal (or one message a line from a pipe)")
    c.add_argument("model", nargs="?", default=None)
    c.add_argument("--threads", "-t", type=int, default=None)
    c.add_argument("--ctx", type=int, default=4096)
    c.add_argument("-n", type=int, default=512, help="longest answer in tokens")
    c.add_argument("--temp", type=float, default=0.0)
    c.add_argument("--system", default=None)
    c.add_argument("--river", default=None, help="river type or sidecar; /river on builds q4_0 if none")
    c.add_argument("--tau", type=float, default=None)
    c.add_argument("--min-exit-layer", type=int, default=None)
    c.add_argument("--river-force", action="store_true")
    c.set_defaults(fn=cmd_chat)

    m = sub.add_parser("models", help="list or fetch registry models (models fetch NAME)")
    m.add_argument("rest", nargs=argparse.REMAINDER)
    m.set_defaults(fn=cmd_models)

    e = sub.add_parser("eval", help="fidelity of River against full depth: top-1 agreement, perplexity, exits")
    _add_set_args(e, 128, None)
    e.add_argument("--river", default=None, help="river type (default: the calibrated setting, if any)")
    e.add_argument("--tau", type=float, nargs="+", default=None, help="exit thresholds (default 0.985)")
    e.add_argument("--min-exit-layer", type=int, nargs="+", default=None, help="(default 4)")
    e.add_argument("--text", default=None, help="perplexity text: builtin, humaneval (prompts + canonical solutions), "
                   "or a UTF-8 file of passages separated by blank lines")
    e.add_argument("--text-tokens", type=int, default=256, help="longest passage in tokens (0: no perplexity)")
    e.add_argument("--text-limit", type=_positive, default=None, help="use this many passages, round-robin over categories")
    e.add_argument("--competitor", action="store_true", help="also llama.cpp on the model uniformly requantized to the river type")
    e.set_defaults(fn=cmd_eval)

    w = sub.add_parser("sweep", help="speed-fidelity plane over river types, tau and min exit layer, with the "
                       "uniformly requantized models; Pareto frontier, PNG, markdown")
    _add_set_args(w, 48, 8)
    _add_grid_args(w, [0.97, 0.975, 0.98, 0.985, 0.99])
    w.add_argument("--png", default=None, help="write the plot here")
    w.add_argument("--markdown", default=None, help="write the table here")
    w.set_defaults(fn=cmd_sweep)

    k = sub.add_parser("calibrate", help="store the fastest River setting meeting a fidelity target in the sidecar")
    _add_set_args(k, 48, 8)
    _add_grid_args(k, [0.97, 0.975, 0.98, 0.985, 0.99, 0.995])
    k.add_argument("--target-fidelity", type=float, default=0.99, help="top-1 agreement to reach on the calibration set")
    k.add_argument("--min-speedup", type=float, default=1.05,
                   help="River must be faster than full depth by more than this factor (measured medians; the "
                   "default margin is above the run-to-run spread measured on a shared 2-core machine)")
    k.set_defaults(fn=cmd_calibrate)

    b = sub.add_parser("bench", help="pyriver vs llama.cpp on one GGUF: prefill, decode, RSS")
    b.add_argument("model", nargs="?", default=None)
    b.add_argument("--threads", "-t", type=int, default=2)
    b.add_argument("--repeats", "-r", type=int, default=5)
    b.add_argument("--prompt-tokens", type=int, default=512)
    b.add_argument("--gen-tokens", type=int, default=128)
    b.add_argument("--json", default=None, help="write results to this file")
    b.add_argument("--river", default=None, help="also run River with this river type (q4_0, ...); default: the "
                   "calibrated setting, if any")
    b.add_argument("--tau", type=float, nargs="+", default=None, help="exit thresholds to run (default 0.985)")
    b.add_argument("--min-exit-layer", type=int, default=None)
    b.add_argument("--force-exit-layer", type=int, default=-1)
    b.add_argument("--river-force", action="store_true", help="allow a river not cheaper than the backbone")
    b.add_argument("--n-gpu-layers", type=int, default=0, help="last blocks (and the head) on devices, both engines; -1 = all")
    b.add_argument("--rpc-servers", default=None, help="host:port,... of ggml RPC servers, for both engines")
    b.add_argument("--tensor-split", default=None, help="share of the offloaded blocks per device, e.g. 1,1")
    b.add_argument("--competitor", action="store_true", help="also run llama.cpp on the model requantized to the river type")
    b.add_argument("--overhead", action="store_true", help="cost of the exit checks alone, in one process")
    b.add_argument("--inprocess", action="store_true", help="River vs full depth in one process on the model's own chat answer")
    b.add_argument("--chunks", type=int, nargs="+", default=None,
                   help="check chunks (blocks per graph) to try with --inprocess / --overhead (default: the device's)")
    b.add_argument("--carry", choices=["on", "off", "both"], default="on",
                   help="--inprocess / --overhead: keep a token's hidden state on the device between graphs")
    b.add_argument("--predict", choices=["on", "off", "both"], default="off",
                   help="--inprocess: the first graph runs to the previous token's exit block")
    b.add_argument("--flash-attn", action="store_true", help="flash attention, both engines")
    b.add_argument("--chat-turns", action="store_true", help="second chat turn's time to first token, with and without prefix reuse")
    b.add_argument("--systems", action="store_true", help="synthetic ~1B model, forced exit: measured vs byte-predicted speedup")
    b.add_argument("--systems-dtype", default="q8_0", choices=["f16", "q8_0"], help="backbone type of the synthetic model")
    b.add_argument("--systems-size", default="1b", choices=["1b", "8b"], help="synthetic llama of this size (8b: Llama 3.1 8B's shape)")
    b.add_argument("--exit-blocks", type=int, nargs="+", default=None,
                   help="--systems: forced exit blocks (default: after L/2; 'quarters' of the depth with --systems-size 8b)")
    b.set_defaults(fn=cmd_bench)

    s = sub.add_parser("rpc-server", help="serve this machine's devices to pyriver and llama.cpp over TCP (ggml RPC)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback only)")
    s.add_argument("--port", "-p", type=int, default=50052)
    s.add_argument("--threads", "-t", type=int, default=2, help="CPU threads of the served CPU device")
    s.add_argument("--cache-dir", default=None, help="cache large tensors here (ggml-rpc's -c)")
    s.set_defaults(fn=cmd_rpc_server)

    a = ap.parse_args(argv)
    try:
        return a.fn(a)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, RuntimeError) as e:
        print(f"pyriver: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
