"""`pyriver calibrate`: the fastest River setting that meets a fidelity target on a calibration
set, measured, and stored in the river sidecar's metadata (`pyriver.calibration.*`), so that
`Llama(MODEL)` (river="auto", the default) and `pyriver chat MODEL` use it (reading it back is the
runtime's: pyriver.sidecar).

River stays off (every tried sidecar records enabled = false) when no setting meeting the target
is faster than full depth, or when llama.cpp running the model uniformly requantized to a river
type meets the target and is at least as fast."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, List, Optional

from gguf import GGUFValueType as T

from pyriver.cli import TOOLS, guarded
from pyriver.sidecar import CALIBRATION_PREFIX as PREFIX

from . import datasets, sweep
from .args import add_grid_args, add_set_args
from .gguf_io import rewrite_kv
from .results import write_json


def store(sidecar: str, record: Dict) -> None:
    """Replace the sidecar's calibration keys; the river's own keys and tensors are unchanged."""
    vals = {PREFIX + "enabled": (bool(record["enabled"]), T.BOOL),
            PREFIX + "report": (json.dumps(record, sort_keys=True), T.STRING)}
    if record["enabled"]:
        vals[PREFIX + "exit_threshold"] = (float(record["setting"]["tau"]), T.FLOAT32)
        vals[PREFIX + "min_exit_layer"] = (int(record["setting"]["min_exit_layer"]), T.INT32)
    rewrite_kv(sidecar, vals, drop_prefix=PREFIX)


def decide(points: List[Dict], target: float, min_speedup: float, against_uniform: bool) -> Dict:
    """The choice from measured sweep points (see the module doc); pure, so tests can recheck it."""
    full = next(p for p in points if p["kind"] == "full")
    meets = [p for p in points if p["kind"] == "river" and p["top1_agreement"] >= target]
    if not meets:
        return {"enabled": False, "reason": f"no River setting reaches top-1 agreement {target}"}
    best = max(meets, key=lambda p: p["decode_tok_s"]["median"])
    speed = best["decode_tok_s"]["median"]
    setting = {k: best[k] for k in ("river", "tau", "min_exit_layer")}
    out = {"candidate": dict(setting, top1_agreement=best["top1_agreement"], decode_tok_s=speed,
                             speedup=best["speedup"])}
    if speed <= full["decode_tok_s"]["median"] * min_speedup:
        return dict(out, enabled=False, reason=(f"the fastest setting meeting the target ({_label(best)}, {speed:.1f} tok/s) "
                                                f"is not faster than full depth ({full['decode_tok_s']['median']:.1f} tok/s) "
                                                f"by the required factor {min_speedup}"))
    if against_uniform:
        for u in points:
            if u["kind"] == "uniform" and u["top1_agreement"] >= target and u["decode_tok_s"]["median"] >= speed:
                return dict(out, enabled=False, reason=(f"llama.cpp on the model uniformly requantized to {u['river']} "
                                                        f"meets the target ({u['top1_agreement']:.4f}) at "
                                                        f"{u['decode_tok_s']['median']:.1f} tok/s, at least River's {speed:.1f}"))
    return dict(out, enabled=True, setting=setting, reason=f"{_label(best)}: {best['speedup']:.3f}x full depth")


def _label(p: Dict) -> str:
    return f"river {p['river']} tau {p['tau']} min layer {p['min_exit_layer']}"


def parser() -> argparse.ArgumentParser:
    k = argparse.ArgumentParser(prog="pyriver calibrate", description=TOOLS["calibrate"][1])
    add_set_args(k, 48, 8)
    add_grid_args(k, [0.97, 0.975, 0.98, 0.985, 0.99, 0.995])
    k.add_argument("--target-fidelity", type=float, default=0.99, help="top-1 agreement to reach on the calibration set")
    k.add_argument("--min-speedup", type=float, default=1.05,
                   help="River must be faster than full depth by more than this factor (measured medians; the "
                   "default margin is above the run-to-run spread measured on a shared 2-core machine)")
    return k


def main(argv: Optional[List[str]] = None) -> int:
    a = parser().parse_args(argv)
    if not 0 < a.target_fidelity <= 1:
        raise ValueError("--target-fidelity must be in (0, 1]")
    res = sweep.measure(a, kind="calibrate")
    points = res["points"]
    if res["interrupted"]:
        print("interrupted: nothing stored (a calibration needs the whole grid)", file=sys.stderr)
        res["decision"] = {"enabled": False, "reason": "interrupted", "stored": []}
        if a.json:
            write_json(a.json, res)
        return 130
    d = decide(points, a.target_fidelity, a.min_speedup, not a.no_uniform)
    record = dict(d, target_fidelity=a.target_fidelity, min_speedup=a.min_speedup, against_uniform=not a.no_uniform,
                  calibration_set=datasets.set_name(a.prompts, a.limit), tokens_per_prompt=a.n,
                  threads=a.threads, model_sha256=res["conditions"]["model_sha256"], utc=res["conditions"]["utc"])
    stored = []
    for p in points:
        sc = p.get("sidecar")
        if p["kind"] == "river" and sc and sc not in stored:
            chosen = d["enabled"] and p["river"] == d["setting"]["river"]
            store(sc, dict(record, enabled=chosen))
            stored.append(sc)
    res["decision"] = dict(record, stored=stored)
    if d["enabled"]:
        s = d["setting"]
        where = next(p["sidecar"] for p in points if p["kind"] == "river" and p["river"] == s["river"])
        print(f"calibrated: river {s['river']} tau {s['tau']} min layer {s['min_exit_layer']} "
              f"(top-1 {d['candidate']['top1_agreement']:.4f} >= {a.target_fidelity}; {d['reason']}); stored in {where}")
    else:
        print(f"River stays off: {d['reason']}" + ("; stored in " + ", ".join(stored) if stored else ""))
    if a.json:
        write_json(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, sys.argv[1:]))
