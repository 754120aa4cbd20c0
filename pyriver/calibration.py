"""`pyriver calibrate`: the fastest River setting that meets a fidelity target on a calibration
set, measured, and stored in the river sidecar's metadata (`pyriver.calibration.*`), so that
`Llama(MODEL)` (river="auto", the default) and `pyriver chat MODEL` use it.

River stays off (every tried sidecar records enabled = false) when no setting meeting the target
is faster than full depth, or when llama.cpp running the model uniformly requantized to a river
type meets the target and is at least as fast."""
from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

PREFIX = "pyriver.calibration."


def store(sidecar: str, record: Dict) -> None:
    """Replace the sidecar's calibration keys; the river's own keys and tensors are unchanged."""
    from gguf import GGUFValueType as T

    from .synth import rewrite_kv
    vals = {PREFIX + "enabled": (bool(record["enabled"]), T.BOOL),
            PREFIX + "report": (json.dumps(record, sort_keys=True), T.STRING)}
    if record["enabled"]:
        vals[PREFIX + "exit_threshold"] = (float(record["setting"]["tau"]), T.FLOAT32)
        vals[PREFIX + "min_exit_layer"] = (int(record["setting"]["min_exit_layer"]), T.INT32)
    rewrite_kv(sidecar, vals, drop_prefix=PREFIX)


def read(sidecar: str) -> Optional[Dict]:
    """The calibration record stored in a sidecar, or None."""
    import gguf
    try:
        r = gguf.GGUFReader(sidecar, "r")
    except (OSError, ValueError):
        return None
    f = r.fields.get(PREFIX + "report")
    if f is None:
        return None
    try:
        return json.loads(bytes(f.parts[f.data[0]]).decode("utf-8"))
    except (ValueError, IndexError):
        return None


def sidecars(model_path: str) -> List[str]:
    """Every river sidecar of this model: next to it, or in the cache when its folder is read-only."""
    from . import models
    mp = Path(model_path).resolve()
    found = glob.glob(glob.escape(str(mp.parent / f"{mp.stem}.river-")) + "*.gguf")
    if not os.access(mp.parent, os.W_OK):
        from .river import file_sha256
        d = models.cache_dir() / "rivers"
        found += glob.glob(glob.escape(str(d / f"{file_sha256(str(mp))[:16]}-{mp.stem}.river-")) + "*.gguf")
    return sorted(found)


def find(model_path: str) -> Optional[Dict]:
    """The enabled calibration of this model (the newest if several), with its sidecar path."""
    best = None
    for sc in sidecars(model_path):
        rec = read(sc)
        if rec and rec.get("enabled") and (best is None or rec.get("utc", "") > best.get("utc", "")):
            best = dict(rec, sidecar=sc)
    return best


def apply_to_args(a, model_path: str, tau_list: bool) -> None:
    """`bench` / `eval` without --river measure the calibrated setting when there is one; unset
    --tau / --min-exit-layer fall back to the calibration, then to Llama's defaults."""
    from .llama import DEFAULT_MIN_EXIT_LAYER, DEFAULT_TAU
    cal = find(model_path) if a.river is None else None
    a.calibrated = cal is not None
    if cal is not None:
        s = cal["setting"]
        a.river = s["river"]
        a.tau = a.tau if a.tau is not None else [s["tau"]]
        if a.min_exit_layer is None:
            a.min_exit_layer = [s["min_exit_layer"]] if tau_list else s["min_exit_layer"]
        print(f"using the calibrated setting: river {s['river']} tau {s['tau']} min layer {s['min_exit_layer']} "
              f"({cal['sidecar']})", file=sys.stderr)
    if a.tau is None:
        a.tau = [DEFAULT_TAU]
    if tau_list and a.min_exit_layer is None:
        a.min_exit_layer = [DEFAULT_MIN_EXIT_LAYER]


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


def main(a) -> int:
    from . import datasets, sweep
    from .results import write_json
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
