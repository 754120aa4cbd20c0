"""Where a River decode step's time goes, per component (docs/river-qwen1.5b.md, "Per component").

Bytes: every tensor of the backbone and of the river sidecars (GGUF sizes). Time: one process,
teacher-forced decode of the same full-depth continuations, each point a run over every prompt,
the points in rotated order per repeat, medians. A token forced to exit after block b runs
b + 1 backbone blocks and L - 1 - b river blocks, so the slope of step time over b is (backbone
block - river block), and the same b with and without the river's own head gives (backbone head -
low-bit head). Exits at each tau: which blocks the tokens leave at, and the top-1 agreement of the
logits they produce (a step's logits judge the next position).

    python scripts/river_components.py MODEL_Q8_0 --river q4_0 --limit 4 -n 32 -r 3 --json out.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict

import gguf

from pyriver.api.llama import Llama
from pyriver.tools.results import write_json
from pyriver.tools import datasets
from pyriver.tools.engine import feed, references

ATTN = ("attn_q.", "attn_k.", "attn_v.", "attn_output.")
FFN = ("ffn_gate.", "ffn_up.", "ffn_down.")


def tensor_bytes(path: str) -> dict:
    out = {}
    for t in gguf.GGUFReader(path, "r").tensors:
        out[t.name] = int(t.n_bytes)
    return out


def component_bytes(sizes: dict, n_layer: int) -> dict:
    blk = [sum(v for k, v in sizes.items() if k.startswith(f"blk.{i}.")) for i in range(n_layer)]
    attn = sum(v for k, v in sizes.items() if k.startswith("blk.") and any(a in k for a in ATTN))
    ffn = sum(v for k, v in sizes.items() if k.startswith("blk.") and any(a in k for a in FFN))
    head = sizes.get("output.weight", sizes.get("token_embd.weight", 0))
    return {"block_mean": sum(blk) / n_layer, "attn_per_block": attn / n_layer, "ffn_per_block": ffn / n_layer,
            "head": head, "total": sum(sizes.values())}


def timed(llm, refs):
    """(seconds per decode step, [(exit block, hit)] of the judged positions after a decode step)."""
    s = n = 0
    pairs = []
    for r in refs:
        cont = r["continuation"]
        hit = {}
        run = feed(llm, r["tokens"], cont, before_step=lambda i, lg: hit.__setitem__(i, int(lg.argmax()) == cont[i]))
        s += run.decode_s
        n += len(cont)
        # the logits judging position i (i >= 1) came from step i - 1
        pairs += [(run.exits[i - 1] if run.exits else llm.info["n_layer"] - 1, hit[i]) for i in range(1, len(cont))]
    return s / n, pairs


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--river", default="q4_0")
    p.add_argument("--limit", type=int, default=4)
    p.add_argument("-n", type=int, default=32)
    p.add_argument("-r", "--repeats", type=int, default=3)
    p.add_argument("--force", type=int, nargs="+", default=[4, 14, 26])
    p.add_argument("--tau", type=float, nargs="+", default=[0.95, 0.97, 0.98])
    p.add_argument("--min-exit-layer", type=int, default=4)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    kw = dict(n_ctx=2048, n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    full = Llama(a.model, river=None, **kw)
    L = full.info["n_layer"]
    prompts = datasets.subset(datasets.load_prompts(None), a.limit)
    refs = references(full, prompts, a.n)
    plain = Llama(a.model, river=a.river, exit_threshold=2.0, **kw)
    head = Llama(a.model, river=f"{a.river}+head-{a.river}", exit_threshold=2.0, **kw)
    res = {"model": a.model, "river": a.river, "n_layer": L, "prompts": len(refs), "tokens": a.n,
           "bytes": {"backbone": component_bytes(tensor_bytes(a.model), L),
                     "river": component_bytes(tensor_bytes(plain.river_path), L),
                     "river_head": component_bytes(tensor_bytes(head.river_path), L)}}
    pts = [("full", full, None)]
    for b in a.force:
        pts += [(f"force {b}", plain, b), (f"force {b} +head", head, b)]
    times = defaultdict(list)
    for r in range(a.repeats):
        k = r % len(pts)
        for name, llm, b in pts[k:] + pts[:k]:
            if b is not None:
                llm.set_exit(2.0, a.min_exit_layer, force_exit_layer=b)
            times[name].append(timed(llm, refs)[0])
    res["ms_per_step"] = {k: 1000 * statistics.median(v) for k, v in times.items()}
    res["ms_per_step_runs"] = {k: [1000 * x for x in v] for k, v in times.items()}
    ms = res["ms_per_step"]
    f = sorted(a.force)
    res["derived_ms"] = {
        "backbone_block_minus_river_block": (ms[f"force {f[-1]}"] - ms[f"force {f[0]}"]) / (f[-1] - f[0]),
        "backbone_head_minus_low_bit_head": statistics.median(ms[f"force {b}"] - ms[f"force {b} +head"] for b in f),
    }
    exits = {}
    for tau in a.tau:
        for name, llm in (("plain", plain), ("+head", head)):
            llm.set_exit(tau, a.min_exit_layer)
            _, pairs = timed(llm, refs)
            buckets = defaultdict(lambda: [0, 0])
            for e, h in pairs:
                key = "full depth" if e >= L - 1 else f"{(e // 4) * 4}-{(e // 4) * 4 + 3}"
                buckets[key][0] += 1
                buckets[key][1] += int(h)
            exits[f"tau {tau} {name}"] = {k: {"tokens": v[0], "top1": v[1] / v[0]} for k, v in sorted(buckets.items())}
    res["exits"] = exits
    for o in (full, plain, head):
        o.close()
    print(json.dumps(res, indent=1))
    if a.json:
        write_json(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
