"""`pyriver bench`: pyriver (River off and on) against llama.cpp (llama-cpp-python) on the same
GGUF and threads, and against llama.cpp running the model requantized to the river type.

Every repeat of every engine runs in a fresh process (pyriver.tools.worker: so peak RSS is that
engine's alone), and the engines rotate within each repeat (so machine noise falls on all).
Reported: medians, min and max, and ratios to llama.cpp on the same file. Timings exclude model
loading. --paired puts pyriver and llama.cpp in one process, steps alternated (paired.py);
--overhead, --inprocess and --chat-turns measure in one process (inprocess.py),
--systems a synthetic 1B or 8B model (systems.py). llama-bench's lists (-p, -n, -pg, -d, -ngl, -fa,
-b, -ub, -o) or --grid: llama-bench's grid and output formats (grid.py)."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Dict, List, Optional

from tqdm import tqdm

from pyriver import models
from pyriver.cli.args import add_cache_type_args, add_draft_args, add_layout_arg, cache_kwargs, layout_kwargs, tensor_split
from pyriver.cli import TOOLS, guarded
from pyriver.engine import ENGINES
from pyriver.api.llama import DEFAULT_TAU, Llama

from pyriver.tools import inprocess, paired, specbench, systems, verifycost
from pyriver.tools.args import apply_calibration
from pyriver.tools.grid_args import wants_grid
from pyriver.tools.quantize import requantized
from pyriver.tools.results import conditions, summary, write_json
from pyriver.tools.worker import METRICS, run_worker


def parser() -> argparse.ArgumentParser:
    b = argparse.ArgumentParser(prog="pyriver bench", description=TOOLS["bench"][1],
                                epilog="llama-bench's grid: any of its lists (-p, -n, -pg, -d, -ngl, -fa, -b, -ub, -o) "
                                       "or --grid; its flags: pyriver bench --grid --help")
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
    b.add_argument("--paired", action="store_true", help="pyriver (full depth) and llama.cpp in one process, prompts "
                   "and decode steps alternated one by one: their speed ratio to ~1%% on a noisy machine (no peak RSS)")
    b.add_argument("--overhead", action="store_true", help="cost of the exit checks alone, in one process")
    b.add_argument("--inprocess", action="store_true", help="River vs full depth in one process on the model's own chat answer")
    b.add_argument("--chunks", type=int, nargs="+", default=None,
                   help="check chunks (blocks per graph) to try with --inprocess / --overhead (default: the device's)")
    b.add_argument("--carry", choices=["on", "off", "both"], default="on",
                   help="--inprocess / --overhead: keep a token's hidden state on the device between graphs")
    b.add_argument("--predict", choices=["on", "off", "both"], default="off",
                   help="--inprocess: the first graph runs to the previous token's exit block")
    b.add_argument("--flash-attn", action="store_true", help="flash attention, both engines (--serve, --spec-serve: every server; else off)")
    add_cache_type_args(b)   # -ctk/-ctv: both engines' KV cache types (a quantized V needs --flash-attn)
    b.add_argument("--engine", choices=ENGINES, default="auto", help="what computes pyriver's side (its Llama, "
                   "--paired; its server, --serve): pyriver's graphs (native), llama.cpp's own (llama.cpp), or auto")
    b.add_argument("--batched", action="store_true",
                   help="also pyriver with batch_invariant=False (llama.cpp's kernels for multi-token steps; the "
                        "default, kept for old command lines)")
    b.add_argument("--batch-invariant", action="store_true",
                   help="also pyriver with batch_invariant=True (one-token products): the cost of batch invariance; "
                        "serve: also pyriver's server with --batch-invariant; lossless: verify batch-invariantly")
    b.add_argument("--lossless", action="store_true", help="lossless mode vs full depth, lossy River and llama.cpp, "
                   "in one process on chat answers (--tau, --draft-max, --prompts)")
    b.add_argument("--verify-cost", action="store_true", help="lossless: one full-depth step of k tokens vs k "
                   "single steps, k = 1..8, in one process")
    b.add_argument("--spec-serve", action="store_true", help="pyriver serve's drafting against llama-server plain and "
                   "with --spec-type ngram-simple/ngram-mod/ngram-map-k, end to end through chat completions")
    b.add_argument("--edit-prompts", type=int, default=8, help="--spec-serve: code-edit prompts (of 10)")
    b.add_argument("--long-edit-prompts", type=int, default=0,
                   help="--spec-serve: code edits of a longer file, 900 to 1200 tokens (of 4)")
    b.add_argument("--chat-prompts", type=int, default=4, help="--spec-serve: chat prompts (of 6)")
    b.add_argument("--batch-prompts", type=int, default=0,
                   help="--spec-serve: batch-job requests, one instruction over many items (of 24; pyriver.tools.workloads)")
    b.add_argument("--agent-sessions", type=int, default=0,
                   help="--spec-serve: agent loops, sessions of --agent-turns turns fed back (pyriver.tools.workloads)")
    b.add_argument("--agent-turns", type=int, default=4, help="--spec-serve: turns per agent session")
    b.add_argument("--llama-spec-types", nargs="*", default=None, metavar="TYPE",
                   help="--spec-serve: llama-server's --spec-type settings to run (default: ngram-simple ngram-mod "
                        "ngram-map-k; 'none', or no TYPE: plain llama-server only)")
    b.add_argument("--pyriver-setting", action="append", default=None, metavar="FLAGS",
                   help="--spec-serve: another pyriver serve to run, with these flags (repeatable)")
    b.add_argument("--llama-server-setting", action="append", default=None, metavar="FLAGS",
                   help="--spec-serve: another llama-server to run, with these flags (repeatable; e.g. --no-repack)")
    b.add_argument("--verify-k-max", type=int, default=64, help="--verify-cost: the longest step measured")
    b.add_argument("--draft-max", type=int, nargs="+", default=None, help="lossless: longest drafts to run (default 2 4)")
    b.add_argument("--prompts", type=int, default=6, help="lossless: prompts per set per repeat")
    b.add_argument("--prompt-set", choices=["chat", "code-edit", "both"], default="chat",
                   help="lossless: built-in chat prompts, code-edit prompts (the answer repeats the prompt's code) or both")
    b.add_argument("--fixed-k", action="store_true", help="lossless: the old draft length (grow/shrink by one up to "
                   "--draft-max) instead of by cost")
    add_draft_args(b, many=True)   # --draft, --draft-cost (without: DEFAULT_COST's table, unless --fixed-k)
    add_layout_arg(b)   # the layouts pyriver serve loads by default (the default mode, --verify-cost, --lossless)
    b.add_argument("--no-llama-cpp", action="store_true", help="lossless: no llama.cpp row")
    b.add_argument("--not-batch-invariant", action="store_true",
                   help="serve: also pyriver's server with --not-batch-invariant (the default; lossless: the default too)")
    b.add_argument("--serve", action="store_true", help="servers under 1/2/4/8 concurrent streams: pyriver's (River "
                   "off, and on under each --batch-rules with --river) and, with --competitor, llama-cpp-python's server, its "
                   "sdist's batched examples/server/server.py and llama.cpp's llama-server (built once into the cache)")
    b.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8], help="--serve: concurrent streams")
    b.add_argument("--json-schema", default=None, metavar="FILE|builtin",
                   help="--serve: also every request under this JSON schema (llama.cpp's json_schema field), "
                        "interleaved with the plain ones: the grammar's cost and its ratio to llama-server")
    b.add_argument("--chat", action="store_true",
                   help="--serve: streamed chat completions of the code-edit and chat prompts, end-to-end tok/s "
                        "(prompt, template and HTTP included; --gen-tokens per request); --competitor: llama-server alone")
    b.add_argument("--requests-per-stream", type=int, default=2,
                   help="--serve --chat: requests each stream sends one after the other (code edit, chat, ...)")
    b.add_argument("--batch-rules", nargs="+", default=["split", "minimum", "all"], help="--serve: batch exit rules")
    b.add_argument("--exit-rules", nargs="+", choices=["checked", "predicted", "guarded"], default=["checked"],
                   help="--serve: exit rules, each a River server under every --batch-rules (docs/river.md, Predicted exits)")
    b.add_argument("--chat-turns", action="store_true", help="second chat turn's time to first token, with and without prefix reuse")
    b.add_argument("--counts", action="store_true", help="GPU costs counted on the CPU: host syncs, CUDA graph changes "
                   "(ggml-cuda's rule), device-to-host copies and bytes and whether they land in the output buffer (pinned), "
                   "nodes per token, a JSON line per mode (counts.py)")
    b.add_argument("--count-tokens", "-n", type=int, default=32, help="--counts: tokens (steps) per mode after warm-up")
    b.add_argument("--systems", action="store_true", help="synthetic ~1B model, forced exit: measured vs byte-predicted speedup")
    b.add_argument("--systems-dtype", default="q8_0", choices=["f16", "q8_0"], help="backbone type of the synthetic model")
    b.add_argument("--systems-size", default="1b", choices=["1b", "8b"], help="synthetic llama of this size (8b: Llama 3.1 8B's shape)")
    b.add_argument("--exit-blocks", type=int, nargs="+", default=None,
                   help="--systems: forced exit blocks (default: after L/2; 'quarters' of the depth with --systems-size 8b)")
    return b


def engines_for(a, path: str) -> List[Dict]:
    base = {"model": path, "threads": a.threads, "n_prompt": a.prompt_tokens, "n_gen": a.gen_tokens,
            "n_gpu_layers": a.n_gpu_layers, "rpc_servers": a.rpc_servers, "flash_attn": a.flash_attn,
            "tensor_split": tensor_split(a.tensor_split), **cache_kwargs(a, a.flash_attn)}
    # pyriver with the layouts `pyriver run` and serve load (--no-batch-layout: llama.cpp's one)
    es = [dict(base, name="llama.cpp", engine="llama.cpp"), dict(base, name="pyriver", engine="pyriver",
                                                                 pyriver_engine=a.engine, **layout_kwargs(a))]
    if a.batched:
        es.append(dict(base, name="pyriver batched", engine="pyriver", batch_invariant=False))
    if a.batch_invariant:
        es.append(dict(base, name="pyriver batch-invariant", engine="pyriver", batch_invariant=True))
    if a.river:
        for tau in a.tau:
            es.append(dict(base, name=f"pyriver river={a.river} tau={tau}", engine="pyriver", river=a.river, tau=tau,
                           min_exit_layer=a.min_exit_layer, force_exit_layer=a.force_exit_layer,
                           river_force=a.river_force))
        if a.competitor:
            es.append(dict(base, name=f"llama.cpp {a.river}", engine="llama.cpp", model=requantized(path, a.river)))
    return es


def processes(a) -> int:
    """Every engine, every repeat, in a fresh process (see the module doc)."""
    path = str(models.resolve(a.model, progress=True))
    apply_calibration(a, path, tau_list=False)
    engines = engines_for(a, path)
    if a.river:
        # Build the sidecar once, outside the timed workers.
        Llama(path, n_ctx=16, verbose=False, river=a.river, river_force=a.river_force).close()
    runs: Dict[str, List[Dict]] = {e["name"]: [] for e in engines}
    interrupted = False
    bar = tqdm(total=a.repeats * len(engines), desc="bench", unit="run", file=sys.stderr)
    try:
        for r in range(a.repeats):
            k = r % len(engines)
            for e in engines[k:] + engines[:k]:
                runs[e["name"]].append(run_worker(e))
                bar.update(1)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: reporting the repeats that finished", file=sys.stderr)
    finally:
        bar.close()
    n = min(len(v) for v in runs.values())
    if n == 0:
        print("no complete repeat", file=sys.stderr)
        return 130 if interrupted else 1
    res = {
        "schema": "pyriver.bench/1", "interrupted": interrupted,
        "conditions": conditions(path, a.threads, prompt_tokens=a.prompt_tokens, gen_tokens=a.gen_tokens, repeats=n,
                                 prompt_set="bench.TEXT (fixed prose, repeated to length)", river=a.river, tau=a.tau,
                                 min_exit_layer=a.min_exit_layer, force_exit_layer=a.force_exit_layer,
                                 calibrated=a.calibrated, n_gpu_layers=a.n_gpu_layers, rpc_servers=a.rpc_servers,
                                 tensor_split=a.tensor_split, flash_attn=a.flash_attn, cache_type_k=a.cache_type_k,
                                 cache_type_v=a.cache_type_v, **layout_kwargs(a)),
        "engines": {},
    }
    for e in engines:
        rr = runs[e["name"]][:n]
        d = {m: summary([x[m] for x in rr]) for m in METRICS}
        d["mean_exit_layer"] = statistics.median(x["mean_exit_layer"] for x in rr) if "mean_exit_layer" in rr[0] else None
        d["model"] = e["model"]
        d["kv_mib"] = rr[0].get("kv_mib")   # pyriver's KV cache (-ctk/-ctv), the worker's n_ctx
        res["engines"][e["name"]] = d
    ref = res["engines"]["llama.cpp"]
    base = res["engines"]["pyriver"]
    for name, d in res["engines"].items():
        d["ratio_to_llama_cpp"] = {m: d[m]["median"] / ref[m]["median"] for m in METRICS}
        d["ratio_to_pyriver_full_depth"] = {m: d[m]["median"] / base[m]["median"] for m in METRICS}
    print(f"\nmodel {os.path.basename(path)}  threads {a.threads}  prompt {a.prompt_tokens}  gen {a.gen_tokens}  repeats {n}"
          f"  KV cache K {a.cache_type_k} V {a.cache_type_v}" + (f" ({base['kv_mib']:.1f} MiB)" if base.get("kv_mib") else ""))
    if a.rpc_servers:
        print(f"rpc_servers {a.rpc_servers}  n_gpu_layers {a.n_gpu_layers}  tensor_split {a.tensor_split or 'by free memory'}")
    print(f"{'engine':<34}{'prefill tok/s':>20}{'decode tok/s':>20}{'TTFT ms':>18}{'peak RSS MiB':>18}{'exit':>6}")
    for name, d in res["engines"].items():
        cells = [f"{d[m]['median']:.1f} ({d['ratio_to_llama_cpp'][m]:.2f}x)" for m in METRICS]
        ex = f"{d['mean_exit_layer']:.1f}" if d["mean_exit_layer"] is not None else ""
        print(f"{name:<34}{cells[0]:>20}{cells[1]:>20}{cells[2]:>18}{cells[3]:>18}{ex:>6}")
    print("medians over repeats; (ratio to llama.cpp on the same file). min..max and all values in --json.")
    if a.json:
        write_json(a.json, res)
    return 130 if interrupted else 0


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if wants_grid(argv):   # llama-bench's lists (-p, -n, -pg, -d, ...) or --grid: its grid (grid.py)
        from pyriver.tools import grid
        return grid.main(argv)
    a = parser().parse_args(argv)
    if a.tau is None and a.inprocess:
        a.tau = [DEFAULT_TAU]
    modes = (("counts", _counts), ("paired", paired.paired), ("systems", systems.main), ("spec_serve", _spec_serve), ("serve", _serve), ("overhead", inprocess.overhead),
             ("chat_turns", inprocess.chat_turns), ("verify_cost", verifycost.main), ("lossless", specbench.main), ("inprocess", inprocess.inprocess))
    for flag, run in modes:   # the first mode asked for; else engines in their own processes
        if getattr(a, flag):
            return run(a)
    return processes(a)


def _counts(a) -> int:
    from pyriver.tools import counts
    return counts.main(a)


def _spec_serve(a) -> int:
    from pyriver.tools import spec_serve
    return spec_serve.main(a)


def _serve(a) -> int:
    from pyriver.tools import serve_bench  # imports the server's dependencies (the [server] extra)
    return serve_bench.main(a)


if __name__ == "__main__":
    sys.exit(guarded(main, sys.argv[1:]))
