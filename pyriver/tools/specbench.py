"""`pyriver bench --lossless`: lossless mode against full depth, lossy River and llama.cpp on one
model, in one process. Each repeat runs every setting once, in turn (interleaved), over chat
prompts (greedy, the model's own answers); medians of decode tok/s over repeats. Lossless rows
also give acceptance, mean accepted length (drafts kept per verify step) and whether their text
was full depth's on every prompt."""
from __future__ import annotations

import statistics
from typing import Dict, List

from pyriver import models
from pyriver.args import device_kwargs
from pyriver.llama import DEFAULT_RIVER, Llama

from .generation import greedy_answers
from .prompts import PROMPTS
from .results import write_json


def _settings(a) -> List[Dict]:
    """Full depth, lossy River at each tau, lossless at each tau and draft length, and lossless
    with the draft's whole stack on the river (tau 0: every draft exits at the min layer)."""
    taus = a.tau or [0.975]
    out = [dict(name="full depth", tau=2.0, lossless=False)]
    out += [dict(name=f"river tau {t} (lossy)", tau=t, lossless=False) for t in taus]
    for k in a.draft_max or [2, 4]:
        out += [dict(name=f"lossless tau {t} k {k}", tau=t, lossless=True, k=k) for t in taus]
        out.append(dict(name=f"lossless river stack k {k}", tau=0.0, lossless=True, k=k))
    return out


def _llama_cpp(a, path):
    import llama_cpp
    return llama_cpp.Llama(path, n_ctx=1024, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                           n_gpu_layers=a.n_gpu_layers)


def main(a) -> int:
    path = str(models.resolve(a.model, progress=True))
    llm = Llama(path, n_ctx=1024, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                river=a.river or DEFAULT_RIVER, river_force=a.river_force, exit_threshold=2.0,
                batch_invariant=True if getattr(a, "batch_invariant", False) else None, **device_kwargs(a))
    ref = _llama_cpp(a, path)
    settings = _settings(a)
    prompts = [{"prompt": p, "chat": True} for _, p in PROMPTS[:a.prompts]]
    runs: Dict[str, List[Dict]] = {s["name"]: [] for s in settings + [dict(name="llama.cpp")]}
    for r in range(a.repeats):
        for s in settings:
            llm.set_lossless(False)
            llm.set_exit(s["tau"], a.min_exit_layer)
            if s["lossless"]:
                llm.set_lossless(True, draft_max=s["k"])
            runs[s["name"]].append(greedy_answers(llm, prompts, a.gen_tokens))
        runs["llama.cpp"].append(greedy_answers(ref, prompts, a.gen_tokens))
    full = runs["full depth"][0]["texts"]
    base = statistics.median(x["tok_s"] for x in runs["full depth"])
    res = {"schema": "pyriver.bench.lossless/1", "model": path, "threads": a.threads, "river": llm.river_path,
           "min_exit_layer": llm.min_exit_layer, "prompts": len(prompts), "gen_tokens": a.gen_tokens,
           "repeats": a.repeats, "batch_invariant": llm.batch_invariant, "settings": {}}
    print(f"model {path}  river {llm.river_path}  threads {a.threads}  {len(prompts)} chat prompts x "
          f"{a.gen_tokens} tokens  repeats {a.repeats}  batch-invariant {llm.batch_invariant}")
    print(f"{'setting':<32}{'tok/s':>8}{'vs full':>9}{'accepted':>10}{'mean acc len':>14}{'text = full depth':>19}")
    for name, rr in runs.items():
        vals = [x["tok_s"] for x in rr if x["tok_s"] is not None]
        if not vals:
            print(f"{name:<32}{'-':>8}   (no tokens generated)")
            res["settings"][name] = {"tok_s": [], "median_tok_s": None}
            continue
        med = statistics.median(vals)
        d = {"tok_s": [x["tok_s"] for x in rr], "median_tok_s": med, "ratio_to_full_depth": med / base,
             "text_equals_full_depth": all(x["texts"] == full for x in rr)}
        dr, ac, st = rr[0]["drafted"], rr[0]["accepted"], rr[0]["verify_steps"]
        if st:
            d.update(drafted=dr, accepted=ac, verify_steps=st, acceptance_rate=ac / dr if dr else None,
                     mean_accepted_length=ac / st)
        res["settings"][name] = d
        acc = f"{100 * d['acceptance_rate']:.0f}%" if d.get("acceptance_rate") is not None else ""
        mal = f"{d['mean_accepted_length']:.2f}" if st else ""
        print(f"{name:<32}{med:>8.1f}{med / base:>8.2f}x{acc:>10}{mal:>14}{str(d['text_equals_full_depth']):>19}")
    if a.json:
        write_json(a.json, res)
    return 0
