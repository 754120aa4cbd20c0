"""Arguments the measurement tools share: the prompt set and engine settings (eval, sweep,
calibrate), the grid (sweep, calibrate), and defaults taken from a stored calibration (bench,
eval)."""
from __future__ import annotations

import argparse
import sys

from pyriver.cli.args import positive
from pyriver.api.llama import DEFAULT_MIN_EXIT_LAYER, DEFAULT_TAU
from pyriver.river.sidecar import find_calibration


def add_set_args(p: argparse.ArgumentParser, n_default: int, limit_default) -> None:
    p.add_argument("model", nargs="?", default=None, help="GGUF path or registry name (default: SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--prompts", default=None, help="builtin (24 chat/code/math/prose prompts), humaneval, code-edit (6 prompts "
                   "that ask for a small change to the code they give: where lossless n-gram drafts pay), or a JSONL "
                   "file with one {\"prompt\": ...} a line")
    p.add_argument("--limit", type=positive, default=limit_default, help="use this many prompts, round-robin over categories")
    p.add_argument("-n", type=positive, default=n_default, help="reference tokens per prompt")
    p.add_argument("--threads", "-t", type=positive, default=2)
    p.add_argument("--ctx", "-c", type=int, default=1024, help="context size (eval with -f: the chunk size, default 512)")
    p.add_argument("--river-force", action="store_true", help="allow a river not cheaper than the backbone")
    p.add_argument("--n-gpu-layers", type=int, default=0, help="last blocks (and the head) on devices, every engine; -1 = all")
    p.add_argument("--flash-attn", action="store_true", help="flash attention, every engine")
    p.add_argument("--json", default=None, help="write the results (with their conditions) to this file")


def add_grid_args(p: argparse.ArgumentParser, taus) -> None:
    p.add_argument("--river", nargs="+", default=["q4_0", "iq4_nl"], help="river types")
    p.add_argument("--tau", type=float, nargs="+", default=taus)
    p.add_argument("--min-exit-layer", type=int, nargs="+", default=[4, 8])
    p.add_argument("--repeats", "-r", type=positive, default=3, help="timed passes of the grid, in rotated order")
    p.add_argument("--no-uniform", action="store_true", help="leave out llama.cpp on the uniformly requantized models")


def apply_calibration(a, model_path: str, tau_list: bool) -> None:
    """`bench` / `eval` without --river measure the calibrated setting when there is one; unset
    --tau / --min-exit-layer fall back to the calibration, then to Llama's defaults."""
    cal = find_calibration(model_path) if a.river is None else None
    a.calibrated = cal is not None
    if cal is not None:
        s = cal["setting"]
        a.river = s["river"]
        a.tau = a.tau if a.tau is not None else [s["tau"]]
        if a.min_exit_layer is None:
            a.min_exit_layer = [s["min_exit_layer"]] if tau_list else s["min_exit_layer"]
        print(f"using the calibrated setting: river {s['river']} tau {s['tau']} min layer {s['min_exit_layer']} "
              f"({cal['sidecar']})" + (" (a lossless calibration: its tau is the drafts', measured here lossy)"
                                       if s.get("lossless") else ""), file=sys.stderr)
    if a.tau is None:
        a.tau = [DEFAULT_TAU]
    if tau_list and a.min_exit_layer is None:
        a.min_exit_layer = [DEFAULT_MIN_EXIT_LAYER]
