"""`pyriver calibrate`: the fastest River setting that meets a fidelity target on a calibration
set, measured, and stored in the river sidecar's metadata (`pyriver.calibration.*`), so that
`Llama(MODEL)` (river="auto", the default) and `pyriver chat MODEL` use it (reading it back is the
runtime's: pyriver.river.sidecar).

The candidates: lossy River settings of the grid whose top-1 agreement meets the target (sweep's
teacher-forced points), and lossless mode for each drafter of --draft (river: drafts under
--draft-tau; ngram: prompt lookup, once; both) on each river type, verified at full depth, its
draft length by cost with --draft-cost (a river draft's cost measured here). A lossless point
meets any target when its greedy answers equalled full depth's on every prompt; it is timed on
those answers against full depth in the same process, interleaved. The candidate
with the largest speedup over full depth wins. River stays off (every tried sidecar records
enabled = false) when that speedup is not above --min-speedup, or when llama.cpp running the model
uniformly requantized to a river type meets the target and is at least as fast.

A lossy choice then gets its exit rule, measured on this device and recorded for it
(calibrate_rule: the fastest of checked, predicted and guarded meeting the same target)."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Dict, List, Optional

from gguf import GGUFValueType as T

from pyriver.cli.args import add_draft_args, device_kwargs, positive
from pyriver.cli import TOOLS, guarded
from pyriver.speculative.draftlen import DraftCost
from pyriver.api.llama import DEFAULT_DRAFT_MAX, Llama
from pyriver.river.sidecar import CALIBRATION_PREFIX as PREFIX, read_calibration

from pyriver.tools import calibrate_rule, datasets, sweep
from pyriver.tools.args import add_grid_args, add_set_args
from pyriver.tools.engine import progress
from pyriver.tools.generation import greedy_answers
from pyriver.tools.gguf_io import rewrite_kv
from pyriver.tools.results import summary, write_json
from pyriver.tools.specbench import river_draft_cost


def store(sidecar: str, record: Dict) -> None:
    """Replace the sidecar's calibration keys; the river's own keys and tensors are unchanged."""
    vals = {PREFIX + "enabled": (bool(record["enabled"]), T.BOOL),
            PREFIX + "report": (json.dumps(record, sort_keys=True), T.STRING)}
    if record["enabled"]:
        s = record["setting"]
        vals[PREFIX + "exit_threshold"] = (float(s["tau"]), T.FLOAT32)
        vals[PREFIX + "min_exit_layer"] = (int(s["min_exit_layer"]), T.INT32)
        vals[PREFIX + "lossless"] = (bool(s["lossless"]), T.BOOL)
        if s["lossless"]:
            vals[PREFIX + "draft_max"] = (int(s["draft_max"]), T.INT32)
            vals[PREFIX + "draft"] = (str(s.get("draft", "river")), T.STRING)   # the report holds draft_cost
    rewrite_kv(sidecar, vals, drop_prefix=PREFIX)


def _lossless_settings(a, llms) -> List[Dict]:
    """The lossless candidates: each drafter of --draft on each river type (n-grams draft without
    the river: once, on the first)."""
    out = []
    for d in a.draft or ["river"]:
        for rt, llm in list(zip(a.river, llms))[:1 if d == "ngram" else None]:
            out.append(dict(draft=d, river=rt, llm=llm))
    return out


def _cost(a, s: Dict, mn: int) -> Optional[DraftCost]:
    """--draft-cost's verify table with a river draft's cost measured here (n-grams never draft on the river)."""
    if a.draft_cost is None:
        return None
    river = a.draft_cost.river_draft if s["draft"] == "ngram" else river_draft_cost(s["llm"], a.draft_tau, mn)
    return DraftCost.from_dict({**a.draft_cost.to_dict(), "river_draft": river})   # its sizes and contexts kept


def measure_lossless(a, model_path: str) -> List[Dict]:
    """One lossless point per drafter and river type: greedy answers to the calibration prompts in
    lossless mode and at full depth, each repeat running every setting once in turn; medians."""
    prompts = datasets.subset(datasets.load_prompts(a.prompts), a.limit)
    mn = a.min_exit_layer[0]
    llms = []
    try:
        for rt in a.river:
            llms.append(Llama(model_path, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                              river=rt, river_force=a.river_force, exit_threshold=2.0, **device_kwargs(a)))
        sets = _lossless_settings(a, llms)
        for s in sets:
            s["cost"] = _cost(a, s, mn)
        full: List[Dict] = []
        runs: List[List[Dict]] = [[] for _ in sets]
        bar = progress(a.repeats * (len(sets) + 1) * len(prompts), "lossless (prompts)")
        for _ in range(a.repeats):
            llms[0].set_exit(2.0, mn)   # full depth; each Llama leaves lossless mode after its own run
            full.append(greedy_answers(llms[0], prompts, a.n))
            bar.update(len(prompts))
            for s, rr in zip(sets, runs):
                llm = s["llm"]
                llm.set_exit(a.draft_tau, mn)
                llm.set_lossless(True, draft_model=s["draft"], draft_max=a.draft_max, draft_cost=s["cost"])
                rr.append(greedy_answers(llm, prompts, a.n))
                llm.set_lossless(False)
                bar.update(len(prompts))
        bar.close()
    finally:
        for llm in llms:
            llm.close()
    full_tok_s = [x["tok_s"] for x in full if x["tok_s"] is not None]
    points = []
    for s, rr in zip(sets, runs):
        tok_s = [x["tok_s"] for x in rr if x["tok_s"] is not None]
        name = _label(dict(s, lossless=True, tau=a.draft_tau, min_exit_layer=mn, draft_max=a.draft_max,
                           draft_cost=s["cost"]), short=True)
        if not tok_s or not full_tok_s:   # every answer ended at once: nothing to time
            print(f"{name}: no token generated on the calibration prompts, not a candidate", file=sys.stderr)
            continue
        dr, ac, st = rr[0]["drafted"], rr[0]["accepted"], rr[0]["verify_steps"]
        points.append({"name": name, "kind": "lossless", "river": s["river"], "draft": s["draft"],
                       "draft_cost": None if s["cost"] is None else s["cost"].to_dict(),
                       "tau": a.draft_tau, "min_exit_layer": mn, "draft_max": a.draft_max,
                       "sidecar": s["llm"].river_path, "decode_tok_s": summary(tok_s),
                       "full_depth_tok_s": summary(full_tok_s),
                       "speedup": statistics.median(tok_s) / statistics.median(full_tok_s),
                       "text_equals_full_depth": all(x["texts"] == full[0]["texts"] for x in rr + full),
                       # the answers equal to full depth's in every repeat (of the prompts)
                       "prompts_equal_full_depth": sum(all(x["texts"][i] == full[0]["texts"][i] for x in rr + full)
                                                       for i in range(len(prompts))),
                       "drafted": dr, "accepted": ac, "verify_steps": st,
                       "acceptance_rate": ac / dr if dr else None, "mean_accepted_length": ac / st if st else None})
    return points


def decide(points: List[Dict], target: float, min_speedup: float, against_uniform: bool,
           lossless: List[Dict] = ()) -> Dict:
    """The choice from measured points (see the module doc); pure, so tests can recheck it."""
    cands = [dict(river=p["river"], tau=p["tau"], min_exit_layer=p["min_exit_layer"], lossless=False,
                  top1_agreement=p["top1_agreement"], decode_tok_s=p["decode_tok_s"]["median"], speedup=p["speedup"])
             for p in points if p["kind"] == "river" and p["top1_agreement"] >= target]
    cands += [dict(river=p["river"], tau=p["tau"], min_exit_layer=p["min_exit_layer"], lossless=True,
                   draft_max=p["draft_max"], top1_agreement=1.0, decode_tok_s=p["decode_tok_s"]["median"],
                   speedup=p["speedup"], **_drafter(p))
              for p in lossless if p["text_equals_full_depth"]]
    if not cands:
        why = f"no River setting reaches top-1 agreement {target}"
        return {"enabled": False, "reason": why + (" and no lossless run gave full depth's text" if lossless else "")}
    best = max(cands, key=lambda c: c["speedup"])
    setting = {k: best[k] for k in ("river", "tau", "min_exit_layer", "lossless", "draft_max", "draft", "draft_cost")
               if k in best}
    out = {"candidate": best}
    if best["speedup"] <= min_speedup:
        return dict(out, enabled=False, reason=(f"the fastest setting meeting the target ({_label(best)}, "
                                                f"{best['speedup']:.3f}x full depth) is not faster than full depth "
                                                f"by the required factor {min_speedup}"))
    if against_uniform:
        for u in points:
            if u["kind"] == "uniform" and u["top1_agreement"] >= target and u["speedup"] >= best["speedup"]:
                return dict(out, enabled=False, reason=(f"llama.cpp on the model uniformly requantized to {u['river']} "
                                                        f"meets the target ({u['top1_agreement']:.4f}) at "
                                                        f"{u['speedup']:.3f}x full depth, at least River's "
                                                        f"{best['speedup']:.3f}x"))
    return dict(out, enabled=True, setting=setting, reason=f"{_label(best)}: {best['speedup']:.3f}x full depth")


def _drafter(p: Dict) -> Dict:
    """A lossless point's drafter and draft length rule, as a setting stores them (the river drafter
    with the grow/shrink rule, the only one before, stores neither)."""
    return {**({"draft": p["draft"]} if p.get("draft", "river") != "river" else {}),
            **({"draft_cost": p["draft_cost"]} if p.get("draft_cost") is not None else {})}


def _label(c: Dict, short: bool = False) -> str:
    if not c.get("lossless"):
        return f"river {c['river']} tau {c['tau']} min layer {c['min_exit_layer']}"
    d, by_cost = c.get("draft", "river"), c.get("draft_cost") is not None
    k = f"k<={c['draft_max']} by cost" if by_cost else f"k {c['draft_max']}"
    if short:   # a point's name
        return (f"lossless ngram on {c['river']} {k}" if d == "ngram" else
                f"lossless {'' if d == 'river' else d + ' '}{c['river']} tau {c['tau']} min {c['min_exit_layer']} {k}")
    if d == "ngram":
        return f"lossless, n-gram drafts, {k} (river {c['river']} sidecar)"
    how = "n-gram drafts, else river drafts" if d == "both" else "drafts"
    return f"lossless on river {c['river']}, {how} at tau {c['tau']} min layer {c['min_exit_layer']}, {k}"


def parser() -> argparse.ArgumentParser:
    k = argparse.ArgumentParser(prog="pyriver calibrate", description=TOOLS["calibrate"][1])
    add_set_args(k, 48, 8)
    add_grid_args(k, [0.97, 0.975, 0.98, 0.985, 0.99, 0.995])
    k.add_argument("--target-fidelity", type=float, default=0.99, help="top-1 agreement to reach on the calibration set")
    k.add_argument("--min-speedup", type=float, default=1.05,
                   help="River must be faster than full depth by more than this factor (measured medians; the "
                   "default margin is above the run-to-run spread measured on a shared 2-core machine)")
    k.add_argument("--draft-tau", type=float, default=0.975, help="exit threshold of lossless mode's drafts")
    k.add_argument("--draft-max", type=positive, default=DEFAULT_DRAFT_MAX, help="lossless mode's longest draft")
    k.add_argument("--no-lossless", action="store_true", help="leave lossless mode out of the candidates")
    add_draft_args(k, many=True)   # --draft: a lossless candidate per drafter; --draft-cost: the length by cost
    calibrate_rule.add_args(k)   # --exit-rules, --rule-margin
    return k


def main(argv: Optional[List[str]] = None) -> int:
    a = parser().parse_args(argv)
    if not 0 < a.target_fidelity <= 1:
        raise ValueError("--target-fidelity must be in (0, 1]")
    res = sweep.measure(a, kind="calibrate")
    points = res["points"]
    res["lossless_points"] = []
    if not res["interrupted"] and not a.no_lossless:
        try:
            res["lossless_points"] = measure_lossless(a, res["conditions"]["model"])
        except KeyboardInterrupt:
            res["interrupted"] = True
    if res["interrupted"]:
        print("interrupted: nothing stored (a calibration needs the whole grid)", file=sys.stderr)
        res["decision"] = {"enabled": False, "reason": "interrupted", "stored": []}
        if a.json:
            write_json(a.json, res)
        return 130
    d = decide(points, a.target_fidelity, a.min_speedup, not a.no_uniform, res["lossless_points"])
    record = dict(d, target_fidelity=a.target_fidelity, min_speedup=a.min_speedup, against_uniform=not a.no_uniform,
                  calibration_set=datasets.set_name(a.prompts, a.limit), tokens_per_prompt=a.n,
                  threads=a.threads, model_sha256=res["conditions"]["model_sha256"], utc=res["conditions"]["utc"],
                  lossless_measured=[{k: p[k] for k in ("river", "draft", "tau", "draft_max", "speedup",
                                                        "acceptance_rate", "text_equals_full_depth")}
                                     for p in res["lossless_points"]])
    # the exit rule of a lossy choice, on this device (a lossless one verifies at full depth)
    rules = calibrate_rule.record(a, d["setting"]) if d["enabled"] and not d["setting"]["lossless"] else {}
    stored = []
    for p in points:
        sc = p.get("sidecar")
        if p["kind"] == "river" and sc and sc not in stored:
            chosen = d["enabled"] and p["river"] == d["setting"]["river"]
            extra = {"exit_rules": calibrate_rule.merged(read_calibration(sc), d["setting"], rules)} if chosen else {}
            store(sc, dict(record, enabled=chosen, **extra))
            stored.append(sc)
    res["decision"] = dict(record, stored=stored, exit_rules=rules)
    for p in res["lossless_points"]:
        acc = "-" if p["acceptance_rate"] is None else f"{100 * p['acceptance_rate']:.0f}%"
        print(f"{p['name']}: {p['decode_tok_s']['median']:.1f} vs {p['full_depth_tok_s']['median']:.1f} tok/s at full "
              f"depth ({p['speedup']:.2f}x), {acc} of the drafts kept, text equal to full depth: "
              f"{p['text_equals_full_depth']} ({p['prompts_equal_full_depth']}/"
              f"{res['conditions']['prompts']} prompts)")
    if d["enabled"]:
        s = d["setting"]
        where = next(p["sidecar"] for p in points if p["kind"] == "river" and p["river"] == s["river"])
        fid = "exact" if s["lossless"] else f"top-1 {d['candidate']['top1_agreement']:.4f} >= {a.target_fidelity}"
        print(f"calibrated: {_label(s)} ({fid}; {d['reason']}); stored in {where}")
    else:
        print(f"River stays off: {d['reason']}" + ("; stored in " + ", ".join(stored) if stored else ""))
    if a.json:
        write_json(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, sys.argv[1:]))
