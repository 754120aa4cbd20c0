"""`pyriver bench --lossless`: lossless mode against full depth (and lossy River, llama.cpp) on one
model, in one process. Each repeat runs every setting once, in turn (interleaved), over each
prompt set (greedy, the model's own answers); medians over repeats of decode tok/s and of the
ratio to full depth within each repeat. Lossless rows also give acceptance, mean accepted
length (drafts kept per verify step) and on how many prompts their text was full depth's.

--draft picks the drafters (river, ngram, both: pyriver.speculative.draft.drafter); --prompt-set chat (the
built-in chat prompts), code-edit (prompts.CODE_EDIT_PROMPTS) or both; the draft length is by
cost (pyriver.speculative.draftlen) unless --fixed-k, with the verify table of --draft-cost (a
`--verify-cost` JSON) and a river draft's cost measured here before the first repeat."""
from __future__ import annotations

import statistics
import time
from typing import Dict, List

from pyriver import models
from pyriver.cli.args import device_kwargs, layout_kwargs
from pyriver.speculative.draftlen import DEFAULT_COST, DraftCost
from pyriver.api.llama import DEFAULT_RIVER, Llama

from pyriver.tools.generation import greedy_answers
from pyriver.tools.prompts import CODE_EDIT_PROMPTS, PROMPTS
from pyriver.tools.results import write_json


def _settings(a) -> List[Dict]:
    """Full depth, lossy River at each tau (with the river drafter), and lossless for each drafter,
    tau and longest draft."""
    taus = a.tau or [0.975]
    drafts = a.draft or ["river"]
    out = [dict(name="full depth", tau=2.0, lossless=False)]
    if "river" in drafts:
        out += [dict(name=f"river tau {t} (lossy)", tau=t, lossless=False) for t in taus]
    how = "k" if a.fixed_k else "k<="
    for k in a.draft_max or ([2, 4] if a.fixed_k else [8]):
        for d in drafts:
            for t in (taus if d != "ngram" else [2.0]):
                tau = f" tau {t}" if d != "ngram" else ""
                out.append(dict(name=f"lossless {d}{tau} {how}{k}", tau=t, lossless=True, k=k, draft=d))
    return out


def _prompt_sets(a) -> Dict[str, List[Dict]]:
    sets = {"chat": [p for c, p in PROMPTS if c == "chat"], "code-edit": [p for _, p in CODE_EDIT_PROMPTS]}
    names = list(sets) if a.prompt_set == "both" else [a.prompt_set]
    return {n: [{"prompt": p, "chat": True} for p in sets[n][:a.prompts]] for n in names}


def _llama_cpp(a, path):
    import llama_cpp
    return llama_cpp.Llama(path, n_ctx=2048, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                           n_gpu_layers=a.n_gpu_layers)


def river_draft_cost(llm, tau: float, min_exit_layer, steps: int = 12) -> float:
    """A decode step under the exit rule (a river draft) over a full-depth one, measured on a
    short prompt (medians of 3 interleaved runs of `steps` steps each)."""
    toks = llm.tokenize(CODE_EDIT_PROMPTS[1][1].encode())
    n0 = len(toks) - steps
    llm.set_lossless(False)
    ratios = []
    for _ in range(3):
        t = []
        for th in (2.0, tau):
            llm.set_exit(th, min_exit_layer)
            llm.reset()
            llm.decode_logits(toks[:n0], prompt=True)
            t0 = time.perf_counter()
            for x in toks[n0:]:
                llm.decode_logits([x])
            t.append(time.perf_counter() - t0)
        ratios.append(t[1] / t[0])
    llm.reset()
    return statistics.median(ratios)


def main(a) -> int:
    path = str(models.resolve(a.model, progress=True))
    need_river = set(a.draft or ["river"]) != {"ngram"}   # n-grams alone draft without one
    llm = Llama(path, n_ctx=2048, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                river=(a.river or DEFAULT_RIVER) if need_river else None, river_force=a.river_force,
                exit_threshold=2.0 if need_river else None,
                batch_invariant=True if getattr(a, "batch_invariant", False) else None, **device_kwargs(a), **layout_kwargs(a))
    ref = None if a.no_llama_cpp else _llama_cpp(a, path)
    settings = _settings(a)
    sets = _prompt_sets(a)
    verify = (a.draft_cost or DEFAULT_COST).verify   # --draft-cost: pyriver.cli.args.draft_cost
    costs = {}
    for t in sorted({s["tau"] for s in settings if s.get("lossless") and s["draft"] != "ngram"}):
        costs[t] = DraftCost(verify, river_draft_cost(llm, t, a.min_exit_layer))
    costs[2.0] = DraftCost(verify, DEFAULT_COST.river_draft)   # n-gram drafts never draft on the river
    names = [s["name"] for s in settings] + ([] if ref is None else ["llama.cpp"])
    runs: Dict[str, Dict[str, List[Dict]]] = {n: {p: [] for p in sets} for n in names}
    for r in range(a.repeats):
        for pset, prompts in sets.items():
            for s in settings:
                llm.set_lossless(False)
                llm.set_exit(s["tau"], a.min_exit_layer)
                if s["lossless"]:
                    llm.set_lossless(True, draft_model=s["draft"], draft_max=s["k"],
                                     draft_cost=None if a.fixed_k else costs[s["tau"]])
                runs[s["name"]][pset].append(greedy_answers(llm, prompts, a.gen_tokens))
            if ref is not None:
                runs["llama.cpp"][pset].append(greedy_answers(ref, prompts, a.gen_tokens))
    res = {"schema": "pyriver.bench.lossless/2", "model": path, "threads": a.threads, "river": llm.river_path,
           "min_exit_layer": llm.min_exit_layer, "prompts": {p: len(v) for p, v in sets.items()},
           "gen_tokens": a.gen_tokens, "repeats": a.repeats, "batch_invariant": llm.batch_invariant, "batch_layout": llm.batch_layout,
           "draft_cost": {str(t): repr(c) for t, c in costs.items()}, "fixed_k": a.fixed_k, "sets": {}}
    print(f"model {path}  river {llm.river_path}  threads {a.threads}  {a.gen_tokens} tokens  repeats "
          f"{a.repeats}  batch-invariant {llm.batch_invariant}  batch layout {llm.batch_layout}")
    print("draft cost: " + "; ".join(f"tau {t}: {c!r}" for t, c in costs.items()))
    for pset in sets:
        res["sets"][pset] = _report(pset, len(sets[pset]), {n: runs[n][pset] for n in names})
    if a.json:
        write_json(a.json, res)
    return 0


def _report(pset: str, n_prompts: int, runs: Dict[str, List[Dict]]) -> Dict:
    full = runs["full depth"]
    print(f"\n{pset}: {n_prompts} prompts")
    print(f"{'setting':<34}{'tok/s':>8}{'vs full':>9}{'accepted':>10}{'mean acc len':>14}{'text = full depth':>19}")
    out = {}
    for name, rr in runs.items():
        vals = [x["tok_s"] for x in rr if x["tok_s"] is not None]
        if not vals:
            print(f"{name:<34}{'-':>8}   (no tokens generated)")
            out[name] = {"tok_s": [], "median_tok_s": None}
            continue
        ratio = statistics.median(x["tok_s"] / f["tok_s"] for x, f in zip(rr, full))   # within each repeat
        same = [sum(a == b for a, b in zip(x["texts"], f["texts"])) for x, f in zip(rr, full)]
        d = {"tok_s": [x["tok_s"] for x in rr], "median_tok_s": statistics.median(vals), "ratio_to_full_depth": ratio,
             "texts_equal_full_depth": same, "texts": rr[0]["texts"]}
        dr, ac, st = rr[0]["drafted"], rr[0]["accepted"], rr[0]["verify_steps"]
        if st:
            d.update(drafted=dr, accepted=ac, verify_steps=st, acceptance_rate=ac / dr if dr else None,
                     mean_accepted_length=ac / st)
        out[name] = d
        acc = f"{100 * d['acceptance_rate']:.0f}%" if d.get("acceptance_rate") is not None else ""
        mal = f"{d['mean_accepted_length']:.2f}" if st else ""
        eq = f"{min(same)}/{n_prompts}"
        print(f"{name:<34}{d['median_tok_s']:>8.1f}{ratio:>8.2f}x{acc:>10}{mal:>14}{eq:>19}")
    return out
