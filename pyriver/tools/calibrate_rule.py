"""`pyriver calibrate`'s exit rule: at the lossy setting it chose, every exit rule (checked,
predicted, guarded) measured on this device, teacher-forced as the grid was (sweep.measure, the
rules' points interleaved in rotated order), and the fastest meeting the calibration's fidelity
target recorded for this device (backends.device_key). `Llama` takes it when exit_rule is not
named (Llama.river.calibrated_rule); a device with no record of its own gets checked."""
from __future__ import annotations

import copy
import statistics
import sys
import time
from typing import Dict, Optional

from pyriver.engine import EXIT_RULES

from pyriver.tools import sweep


def measure(a, setting: Dict) -> Optional[Dict]:
    """Each rule's figures at the setting on this device: {"device", "repeats", "measured": {rule:
    {top1_agreement, decode_tok_s (median), speed_vs_checked, ...}}}; None when interrupted."""
    b = copy.copy(a)
    b.river, b.tau, b.min_exit_layer = [setting["river"]], [setting["tau"]], [setting["min_exit_layer"]]
    b.exit_rule, b.no_uniform = [r for r in EXIT_RULES if r in a.exit_rules], True
    res = sweep.measure(b, kind="calibrate-rules")
    pts = {p["exit_rule"]: p for p in res["points"] if p["kind"] == "river"}
    if res["interrupted"] or set(pts) != set(b.exit_rule):
        return None
    ref = pts["checked"]["decode_tok_s"]["values"]
    # each repeat's ratio, the two rules measured seconds apart: the machine's spells fall on both
    ratios = {r: [x / y for x, y in zip(p["decode_tok_s"]["values"], ref)] for r, p in pts.items()}
    return {"device": pts["checked"]["device"], "repeats": len(ref), "measured": {r: {
        "top1_agreement": p["top1_agreement"], "decode_tok_s": p["decode_tok_s"]["median"],
        "speed_vs_checked": statistics.median(ratios[r]), "ratios_to_checked": ratios[r],
        "graphs_per_step": p.get("graphs_per_step"), "mean_exit_layer": p.get("mean_exit_layer"),
        "forecast_hit": p.get("forecast_hit")} for r, p in pts.items()}}


def choose(measured: Dict[str, Dict], target: float, margin: float) -> Dict:
    """The fastest rule (speed_vs_checked) whose top1_agreement meets target; checked, the runtime's
    default, gives way only to a rule faster by more than margin. rule None: none meets the target.
    Pure, so tests can recheck it."""
    ok = {r: m for r, m in measured.items() if m["top1_agreement"] >= target}
    if not ok:
        return {"rule": None, "reason": f"no exit rule reaches top-1 agreement {target} at this setting"}
    best = max(ok, key=lambda r: ok[r]["speed_vs_checked"])
    if best != "checked" and "checked" in ok and ok[best]["speed_vs_checked"] <= margin:
        return {"rule": "checked", "reason": f"{best} {ok[best]['speed_vs_checked']:.3f}x checked, not above the "
                                             f"required factor {margin}"}
    m = ok[best]
    return {"rule": best, "reason": f"{best}: {m['speed_vs_checked']:.3f}x checked, top-1 {m['top1_agreement']:.4f} "
                                    f">= {target}"}


def record(a, setting: Dict) -> Dict:
    """{device: {rule, reason, measured, repeats, utc}} for the calibration record; {} when there is
    nothing to choose among or the measurement was interrupted."""
    if len(a.exit_rules) < 2 or "checked" not in a.exit_rules:
        return {}
    try:
        m = measure(a, setting)
    except KeyboardInterrupt:
        m = None
    if m is None:
        print("exit rules: measurement interrupted, none recorded (checked stays the rule)", file=sys.stderr)
        return {}
    c = choose(m["measured"], a.target_fidelity, a.rule_margin)
    print(f"exit rule on {m['device']}: {c['rule'] or 'none'} ({c['reason']}; "
          + ", ".join(f"{r} {x['speed_vs_checked']:.3f}x top-1 {x['top1_agreement']:.4f}" for r, x in m["measured"].items())
          + f"; {m['repeats']} repeats)")
    if c["rule"] is None:
        return {}
    return {m["device"]: dict(c, measured=m["measured"], repeats=m["repeats"],
                              utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))}


def merged(old: Optional[Dict], setting: Dict, new: Dict) -> Dict:
    """The exit rules to store: this run's, beside other devices' rules of an old record of the
    same setting (each was measured at it); a changed setting drops them."""
    old = old or {}
    keep = (old.get("exit_rules") or {}) if old.get("setting") == setting else {}
    return {**keep, **new}


def add_args(k) -> None:
    k.add_argument("--exit-rules", nargs="+", choices=list(EXIT_RULES), default=list(EXIT_RULES),
                   help="exit rules measured at the chosen lossy setting on this device; the fastest meeting "
                        "--target-fidelity is recorded for this device (only checked: none measured)")
    k.add_argument("--rule-margin", type=float, default=1.05,
                   help="another rule replaces checked only when faster than it by more than this factor (median "
                        "of the ratios within each repeat; the default as --min-speedup's, above the spread)")
