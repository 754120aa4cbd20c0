"""`pyriver compare`'s outputs: the frontier, the table (markdown and CSV, one row a point; the JSON
is the results themselves) and the PNG plane: mean KLD against pyriver's decode speed as a multiple of
llama.cpp's on the first MODEL (the anchor timed beside every point)."""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Dict, List

from pyriver.atomic import write_text
from pyriver.tools.sweep import finish, mark_pareto

COLUMNS = ("point", "kind", "file", "MiB", "mean_kld", "mean_kld_unc", "same_top_p_pct", "same_top_p_unc_pct",
           "ppl_ratio", "rms_dp_pct", "pyriver_pp_ts", "pyriver_tg_ts", "llama_cpp_pp_ts", "llama_cpp_tg_ts",
           "pp_ratio", "tg_ratio", "pp_vs_anchor", "tg_vs_anchor", "frontier")


def complete(p: Dict) -> bool:
    return "kld" in p and "speed" in p


def decode(p: Dict) -> float:
    """pyriver's decode on the point over llama.cpp's on the first MODEL (median of per-repeat ratios)."""
    return p["speed"]["ratio_to_anchor"]["decode_tok_s"]["median"]


def mark(points: List[Dict]) -> None:
    """The frontier over the measured points: sweep's rule, fidelity read as minus the mean KLD."""
    done = [p for p in points if complete(p)]
    mark_pareto(done, fidelity=lambda p: -p["kld"]["kld"], speed=decode)
    for p in points:
        p.setdefault("pareto", False)
        if not complete(p):
            p["pareto"] = False


def row(p: Dict) -> Dict[str, str]:
    k, s = p.get("kld"), p.get("speed")
    r = {c: "" for c in COLUMNS}
    r.update(point=p["name"], kind=p["kind"], file=Path(p["model"]).name, frontier="*" if p.get("pareto") else "")
    if p.get("bytes"):
        r["MiB"] = f"{p['bytes'] / 2**20:.1f}"
    if k:
        r.update(mean_kld=f"{k['kld']:.6f}".replace("-0.000000", "0.000000"),   # the base's 16-bit rounding
                 mean_kld_unc=f"{k['kld_unc']:.6f}", same_top_p_pct=f"{100 * k['same_top']:.3f}",
                 same_top_p_unc_pct=f"{100 * k['same_top_unc']:.3f}", ppl_ratio=f"{k['ppl_ratio']:.6f}",
                 rms_dp_pct=f"{100 * k['rms_p_diff']:.3f}")
    if s:
        e, rr = s["engines"], s["ratio_to_llama_cpp"]
        r.update(pyriver_pp_ts=f"{e['pyriver']['prefill_tok_s']['median']:.2f}",
                 pyriver_tg_ts=f"{e['pyriver']['decode_tok_s']['median']:.2f}",
                 llama_cpp_pp_ts=f"{e['llama.cpp']['prefill_tok_s']['median']:.2f}",
                 llama_cpp_tg_ts=f"{e['llama.cpp']['decode_tok_s']['median']:.2f}",
                 pp_ratio=f"{rr['prefill_tok_s']['median']:.3f}", tg_ratio=f"{rr['decode_tok_s']['median']:.3f}",
                 pp_vs_anchor=f"{s['ratio_to_anchor']['prefill_tok_s']['median']:.3f}",
                 tg_vs_anchor=f"{s['ratio_to_anchor']['decode_tok_s']['median']:.3f}")
    return r


def line(p: Dict) -> str:
    """One point's figures, as it is measured (stderr)."""
    r = row(p)
    return (f"{r['point']}: mean KLD {r['mean_kld']} ± {r['mean_kld_unc']}, Same top p {r['same_top_p_pct']} %, "
            f"pyriver pp {r['pyriver_pp_ts']} tg {r['pyriver_tg_ts']} t/s, llama.cpp pp {r['llama_cpp_pp_ts']} "
            f"tg {r['llama_cpp_tg_ts']} t/s; pyriver pp {r['pp_vs_anchor']}x tg {r['tg_vs_anchor']}x llama.cpp on the first file")


def markdown(res: Dict) -> str:
    c = res["conditions"]
    chunks = "all" if c["chunks"] is None or c["chunks"] < 0 else c["chunks"]
    lines = [f"Reference `{Path(c['reference']).name}` (sha256 {c['reference_sha256'][:12]}): chunks of {c['ctx']} "
             f"tokens ({chunks}); speed: prompt {c['prompt_tokens']}, {c['gen_tokens']} decode steps, {c['repeats']} "
             f"repeats, {c['threads']} threads: pyriver on the point, llama.cpp on its file and llama.cpp on "
             f"`{Path(c['model']).name}` (the anchor) alternated step by step; tok/s medians, ratios medians of the "
             "per-repeat ratios; * = frontier (mean KLD against pyriver's tg / anchor)."
             + (" Lossless points: pyriver in lossless mode and the anchor take turns generation by generation."
                if any(p["kind"] == "lossless" for p in res["points"]) else ""), "",
             "| point | MiB | mean KLD | Same top p | PPL ratio | pyriver pp t/s | pyriver tg t/s | llama.cpp pp t/s "
             "| llama.cpp tg t/s | pp / llama.cpp | tg / llama.cpp | pp / anchor | tg / anchor |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in res["points"]:
        r = row(p)
        kl = f"{r['mean_kld']} ± {r['mean_kld_unc']}" if r["mean_kld"] else ""
        top = f"{r['same_top_p_pct']} ± {r['same_top_p_unc_pct']} %" if r["same_top_p_pct"] else ""
        lines.append(f"| {r['frontier']}{r['point']} | {r['MiB']} | {kl} | {top} | {r['ppl_ratio']} | {r['pyriver_pp_ts']} "
                     f"| {r['pyriver_tg_ts']} | {r['llama_cpp_pp_ts']} | {r['llama_cpp_tg_ts']} | {r['pp_ratio']} "
                     f"| {r['tg_ratio']} | {r['pp_vs_anchor']} | {r['tg_vs_anchor']} |")
    return "\n".join(lines) + "\n"


def to_csv(res: Dict) -> str:
    f = io.StringIO()
    w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for p in res["points"]:
        w.writerow(row(p))
    return f.getvalue()


def plot(res: Dict, png: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = [p for p in res["points"] if complete(p)]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=90)
    style = {"file": ("s", "k", "files"), "quantized": ("*", "C1", "requantized by llama.cpp"), "river": ("o", "C0", "River"),
             "lossless": ("D", "C2", "lossless mode")}
    for p in pts:
        mk, color, label = style[p["kind"]]
        x, y = p["kld"]["kld"], decode(p)
        ax.scatter(x, y, marker=mk, color=color, s=90 if mk == "*" else 36, label=label)
        ax.annotate(p["name"], (x, y), fontsize=5.5, xytext=(3, 3), textcoords="offset points")
    c = res["conditions"]
    finish(fig, ax, [(p["kld"]["kld"], decode(p)) for p in pts if p["pareto"]],
           f"mean KL divergence from {Path(c['reference']).name}",
           "pyriver decode / llama.cpp's on the first file",
           f"{Path(c['model']).name}: {c['threads']} threads, pp{c['prompt_tokens']} tg{c['gen_tokens']}, "
           f"{c['repeats']} repeats", png)


def write(res: Dict, out: Path, png: bool) -> None:
    """DIR/compare.md, .csv and (png) .png; compare.json is written as the points are measured."""
    write_text(out / "compare.md", markdown(res))
    write_text(out / "compare.csv", to_csv(res))
    if png:
        plot(res, str(out / "compare.png"))
