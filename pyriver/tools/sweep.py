"""`pyriver sweep`: the speed-fidelity plane of River on one model file, with the uniformly
requantized models as the competitor curve.

Every point is measured in one process on the same token sequences: the prompts' full-depth
greedy continuations, decoded token by token (teacher-forced). Fidelity is the top-1 agreement
with them; speed is the decode tok/s of those same single-token steps. Points: pyriver at full
depth, llama.cpp on the same file, every (river type, min exit layer, tau) of the grid, and
llama.cpp on the model requantized to each river type (`llama_model_quantize`). Repeats rotate
the order of the points, so machine noise falls on all; speeds are medians."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Dict, List, Optional

from pyriver.cli.args import device_kwargs
from pyriver.engine.backends import device_key
from pyriver.cli import TOOLS, guarded
from pyriver.api.llama import Llama
from pyriver.river.sidecar import parse_spec

from pyriver.tools import datasets
from pyriver.tools.args import add_grid_args, add_set_args
from pyriver.tools.engine import LlamaCppEngine, progress, references, teacher_forced
from pyriver.tools.quantize import requantized, uniform_ftype
from pyriver.tools.results import conditions, summary, write_json


def measure(a, kind: str = "sweep") -> Dict:
    """Shared by sweep and calibrate: the grid's points, partial on Ctrl-C (res["interrupted"])."""
    prompts = datasets.subset(datasets.load_prompts(a.prompts), a.limit)
    full = Llama(a.model, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, river=None, **device_kwargs(a))
    path, L = full.model_path, full.info["n_layer"]
    bad = [m for m in a.min_exit_layer if not 0 <= m < L - 1]
    if bad:
        raise ValueError(f"--min-exit-layer {bad[0]} is outside this model's checked blocks [0, {L - 1})")
    res: Dict = {"schema": f"pyriver.{kind}/1", "interrupted": False, "points": []}
    res["conditions"] = conditions(
        path, a.threads, prompt_set=datasets.set_name(a.prompts, a.limit), prompts=len(prompts), tokens_per_prompt=a.n,
        ctx=a.ctx, repeats=a.repeats, river_types=a.river, taus=a.tau, min_exit_layers=a.min_exit_layer,
        exit_rules=getattr(a, "exit_rule", None) or ["checked"],
        uniform_competitor=not a.no_uniform, n_layer=L, n_gpu_layers=a.n_gpu_layers,
        flash_attn=a.flash_attn)
    engines = []
    try:
        bar = progress(len(prompts) * a.n, "references")
        refs = references(full, prompts, a.n, bar)
        bar.close()
        # (name, engine, fields, setter): every point of the plane.
        cfgs = [("pyriver full depth", full, {"kind": "full", "engine": "pyriver"}, None),
                ("llama.cpp", LlamaCppEngine(path, a.ctx, a.threads, **device_kwargs(a)), {"kind": "llama.cpp", "engine": "llama.cpp"}, None)]
        engines.append(cfgs[-1][1])
        for rt in a.river:
            llm = Llama(path, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, river=rt,
                        river_force=a.river_force, exit_threshold=2.0, **device_kwargs(a))
            engines.append(llm)
            device = device_key(llm.backend.devices())   # what a calibrated exit rule is keyed by
            for mn in a.min_exit_layer:
                for tau in a.tau:
                    for rule in getattr(a, "exit_rule", None) or ["checked"]:   # checked points keep their names
                        cfgs.append((f"river {rt} tau {tau} min {mn}" + ("" if rule == "checked" else f" {rule}"), llm,
                                     {"kind": "river", "engine": "pyriver", "river": rt, "tau": tau, "min_exit_layer": mn,
                                      "exit_rule": rule, "sidecar": llm.river_path, "device": device},
                                     lambda llm=llm, tau=tau, mn=mn, rule=rule: llm.set_exit(tau, mn, exit_rule=rule)))
        uniform: List[str] = []   # file types (each once: a river with its own head shares its blocks' type) and files
        for rt in ([] if a.no_uniform else a.river):
            if uniform_ftype(rt) is None:
                print(f"no uniform competitor for {rt}: llama.cpp has no such file type", file=sys.stderr)
            elif uniform_ftype(rt) not in map(uniform_ftype, uniform):
                uniform.append(rt)
        uniform += [u for u in getattr(a, "uniform", None) or [] if u not in uniform]
        for ut in uniform:
            # a .gguf is taken as it is (the published file the backbone was requantized from)
            label = os.path.basename(ut)[:-5] if ut.endswith(".gguf") else parse_spec(ut)[0]
            u = LlamaCppEngine(ut if ut.endswith(".gguf") else requantized(path, ut), a.ctx, a.threads, **device_kwargs(a))
            engines.append(u)
            cfgs.append((f"uniform {label}", u, {"kind": "uniform", "engine": "llama.cpp", "river": label, "model": u.model_path}, None))
        runs: Dict[str, List[float]] = {}
        fid: Dict[str, Dict] = {}
        bar = progress(a.repeats * len(cfgs) * len(refs) * a.n, kind)
        for r in range(a.repeats):
            k = r % len(cfgs)
            for name, eng, fields, setter in cfgs[k:] + cfgs[:k]:
                if setter:
                    setter()
                m = teacher_forced(eng, refs, bar)
                runs.setdefault(name, []).append(m.pop("decode_tok_s"))
                fid.setdefault(name, dict(fields, name=name, **m))
        bar.close()
    except KeyboardInterrupt:
        res["interrupted"] = True
        print("\ninterrupted: reporting the points measured so far", file=sys.stderr)
    finally:
        for e in engines:
            e.close()
    base = runs.get("pyriver full depth")
    ref = runs.get("llama.cpp")
    for name, p in fid.items():
        p["decode_tok_s"] = summary(runs[name])
        p["repeats"] = len(runs[name])
        p["speedup"] = p["decode_tok_s"]["median"] / statistics.median(base) if base else None
        p["ratio_to_llama_cpp"] = p["decode_tok_s"]["median"] / statistics.median(ref) if ref else None
        res["points"].append(p)
    mark_pareto(res["points"])
    full.close()
    return res


def mark_pareto(points: List[Dict], fidelity=lambda p: p["top1_agreement"],
                speed=lambda p: p["decode_tok_s"]["median"]) -> None:
    """A point is on the frontier when no other point is at least as faithful and as fast, and
    better in one of the two (fidelity and speed: larger is better; `pyriver compare` reads
    fidelity as minus the mean KLD)."""
    for p in points:
        f, s = fidelity(p), speed(p)
        p["pareto"] = not any(q is not p and fidelity(q) >= f and speed(q) >= s and (fidelity(q) > f or speed(q) > s)
                              for q in points)


def markdown(res: Dict) -> str:
    c = res["conditions"]
    lines = [f"Model `{c['model'].rsplit('/', 1)[-1]}` (sha256 {c['model_sha256'][:12]}), {c['threads']} threads, "
             f"prompt set {c['prompt_set']} ({c['prompts']} prompts x {c['tokens_per_prompt']} tokens), "
             f"{c['repeats']} repeats; decode tok/s median [min..max]; * = Pareto frontier.", "",
             "| point | top-1 agreement | decode tok/s | vs full depth | vs llama.cpp | mean exit block | river work "
             "| graphs/step | forecast hit/early |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in sorted(res["points"], key=lambda p: -p["top1_agreement"]):
        d = p["decode_tok_s"]
        ex = "" if p.get("mean_exit_layer") is None else f"{p['mean_exit_layer']:.1f}"
        rw = f"{100 * p['river_work_share']:.0f}%" if p["kind"] == "river" else ""
        name = p["name"] + (" (llama.cpp)" if p["kind"] == "uniform" else "")
        sp = "" if p["speedup"] is None else f"{p['speedup']:.2f}x"
        rl = "" if p["ratio_to_llama_cpp"] is None else f"{p['ratio_to_llama_cpp']:.2f}x"
        gs = "" if p.get("graphs_per_step") is None else f"{p['graphs_per_step']:.2f}"
        fh = "" if p.get("forecast_hit") is None else f"{p['forecast_hit']:.2f}/{p['forecast_early']:.2f}"
        lines.append(f"| {'*' if p['pareto'] else ''}{name} | {p['top1_agreement']:.3f} | {d['median']:.1f} "
                     f"[{d['min']:.1f}..{d['max']:.1f}] | {sp} | {rl} | {ex} | {rw} | {gs} | {fh} |")
    return "\n".join(lines) + "\n"


def plot(res: Dict, png: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = res["points"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=90)
    colors = {}
    for p in pts:
        x, y = p["top1_agreement"], p["decode_tok_s"]["median"]
        if p["kind"] == "river":
            c = colors.setdefault(p["river"], f"C{len(colors)}")
            rule = p.get("exit_rule", "checked")
            mk = {"predicted": "P", "guarded": "X"}.get(rule, "o" if p["min_exit_layer"] == min(res["conditions"]["min_exit_layers"]) else "^")
            ax.scatter(x, y, color=c, marker=mk, s=28,
                       label=f"River {p['river']} min layer {p['min_exit_layer']}" + ("" if rule == "checked" else f" {rule}"))
        elif p["kind"] == "uniform":
            c = colors.setdefault(p["river"], f"C{len(colors)}")
            ax.scatter(x, y, color=c, marker="*", s=140, edgecolor="k", label=f"llama.cpp uniform {p['river']}")
        else:
            ax.scatter(x, y, color="k", marker="s" if p["kind"] == "full" else "D", s=36,
                       label="pyriver full depth" if p["kind"] == "full" else "llama.cpp full depth")
    c = res["conditions"]
    finish(fig, ax, [(p["top1_agreement"], p["decode_tok_s"]["median"]) for p in pts if p["pareto"]],
           "top-1 agreement with full depth (teacher-forced)", "decode tok/s (median)",
           f"{c['model'].rsplit('/', 1)[-1]}: {c['threads']} threads, {c['prompts']}x{c['tokens_per_prompt']} tokens, "
           f"{c['repeats']} repeats", png)


def finish(fig, ax, front, xlabel: str, ylabel: str, title: str, png: str) -> None:
    """The plane's frontier (its points' (x, y), joined in x order), legend, labels, and the PNG;
    shared by `pyriver compare`."""
    import matplotlib.pyplot as plt
    front = sorted(front)
    ax.plot([x for x, _ in front], [y for _, y in front], "k--", lw=0.8, label="Pareto frontier")
    h, l = ax.get_legend_handles_labels()
    seen = dict(zip(l, h))
    ax.legend(seen.values(), seen.keys(), fontsize=6.5, loc="best")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    w = argparse.ArgumentParser(prog="pyriver sweep", description=TOOLS["sweep"][1])
    add_set_args(w, 48, 8)
    add_grid_args(w, [0.97, 0.975, 0.98, 0.985, 0.99])
    w.add_argument("--uniform", nargs="+", default=[], metavar="FTYPE_OR_GGUF",
                   help="more uniform competitors run by llama.cpp: file types the model is requantized to "
                        "(q4_k_m, q6_k, ...) or GGUF files taken as they are")
    w.add_argument("--exit-rule", nargs="+", choices=["checked", "predicted", "guarded"], default=["checked"],
                   help="exit rules measured at every river point (docs/river.md, Predicted exits)")
    w.add_argument("--png", default=None, help="write the plot here")
    w.add_argument("--markdown", default=None, help="write the table here")
    return w


def main(argv: Optional[List[str]] = None) -> int:
    a = parser().parse_args(argv)
    if a.png:
        try:   # before the measurement, not after it
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("--png needs matplotlib: pip install \"pyriver[eval]\"") from None
    res = measure(a)
    if not res["points"]:
        print("no point measured", file=sys.stderr)
        return 130 if res["interrupted"] else 1
    md = markdown(res)
    print(md)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md)
    if a.png:
        plot(res, a.png)
    if a.json:
        write_json(a.json, res)
    return 130 if res["interrupted"] else 0


if __name__ == "__main__":
    sys.exit(guarded(main, sys.argv[1:]))
