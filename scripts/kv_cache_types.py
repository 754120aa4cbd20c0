"""KV cache types against f16 (docs/kv-cache-types.md): each (context, type, engine) one measurement in a
fresh process (pyriver.tools.worker: fixed prose prefilled to fill the context, then greedy decode, the
first 8 steps untimed), flash attention on, K and V of the same type; the types interleaved in a
rotating order every repeat, f16 the anchor of each context. Prints and writes JSON: prefill and
decode tok/s (medians), their ratio to f16 of the same engine and context, pyriver's KV MiB, peak RSS.

    python scripts/kv_cache_types.py [--model NAME] [--contexts 4096 16384] [--types f16 q8_0 q4_0]
        [--engines native llama.cpp] [--repeats 3] [--gen 32] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

from pyriver import models
from pyriver.engine import kv_types
from pyriver.tools.results import conditions
from pyriver.tools.worker import WARMUP, run_worker


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--contexts", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--types", nargs="+", default=["f16", "q8_0", "q4_0"])
    ap.add_argument("--engines", nargs="+", default=["native", "llama.cpp"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    path = str(models.resolve(a.model, progress=True))
    runs = {}
    for ctx in a.contexts:
        n_prompt = ctx - a.gen - WARMUP - 8   # the worker's n_ctx: prompt + gen + warm-up + 8
        cfgs = []
        for t in a.types:
            tid = kv_types.type_id(t)
            for e in a.engines:
                cfg = {"name": f"{e} {t}", "model": path, "threads": a.threads, "n_prompt": n_prompt, "n_gen": a.gen,
                       "flash_attn": True, "type_k": tid, "type_v": tid}
                cfg.update({"engine": "pyriver", "pyriver_engine": "native"} if e == "native" else {"engine": "llama.cpp"})
                cfgs.append(cfg)
        for r in range(a.repeats):
            k = r % len(cfgs)
            for cfg in cfgs[k:] + cfgs[:k]:
                res = run_worker(cfg)
                runs.setdefault((ctx, cfg["name"]), []).append(res)
                print(f"ctx {ctx} {cfg['name']}: {json.dumps(res)}", file=sys.stderr, flush=True)
    table = {}
    for (ctx, name), rr in runs.items():
        d = {m: statistics.median(x[m] for x in rr) for m in ("prefill_tok_s", "decode_tok_s", "peak_rss_mib")}
        d["kv_mib"] = rr[0].get("kv_mib")
        d["values"] = rr
        table[f"{ctx} {name}"] = d
    print(f"{'context':>8} {'engine type':<18}{'KV MiB':>9}{'prefill tok/s':>22}{'decode tok/s':>22}{'peak RSS MiB':>14}")
    for key, d in table.items():
        ctx, e, t = key.split(" ")
        f16 = table.get(f"{ctx} {e} {a.types[0]}")
        pf = f"{d['prefill_tok_s']:.1f} ({d['prefill_tok_s'] / f16['prefill_tok_s']:.2f}x)"
        dc = f"{d['decode_tok_s']:.1f} ({d['decode_tok_s'] / f16['decode_tok_s']:.2f}x)"
        kv = f"{d['kv_mib']:.1f}" if d["kv_mib"] else "-"
        print(f"{ctx:>8} {e + ' ' + t:<18}{kv:>9}{pf:>22}{dc:>22}{d['peak_rss_mib']:>14.0f}")
    print(f"medians of {a.repeats} repeats; (ratio to {a.types[0]} of the same engine and context)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema": "pyriver.kv_cache_types/1",
                       "conditions": conditions(path, a.threads, contexts=a.contexts, types=a.types, engines=a.engines,
                                                repeats=a.repeats, gen=a.gen, flash_attn=True),
                       "results": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
