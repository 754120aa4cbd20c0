"""Lossless n-gram drafting simulated on a model's recorded greedy answers, in single decode steps:
each step the policy proposes drafts from the text so far, the answer keeps the longest prefix that
matches, and the step costs the verify cost table's entry for its size. No model runs in the
simulation, so a draft policy (drafter, draft length rule, priors) is compared in seconds; it is
how pyriver.draftlen's priors were chosen, and the oracle (a policy that knows how many drafts will
be kept) bounds what any length rule can reach with a drafter and a cost curve.

    python scripts/draft_sim.py record MODEL answers.json        # greedy answers to SERVE_EDIT_PROMPTS + chat
    python scripts/draft_sim.py run answers.json verify-cost.json   # a `pyriver bench --verify-cost --json` file
"""
from __future__ import annotations

import json
import statistics
import sys

import numpy as np

from pyriver.draft import PromptLookupDecoding, SuffixLookup, suffix_lookup
from pyriver.draftlen import DEFAULT_COST, DraftCost, DraftLength
from pyriver.lossless import cut_proposal
from pyriver.server.drafting import lookup


def record(model: str, out: str) -> None:
    from pyriver import Llama, models
    from pyriver.tools.prompts import PROMPTS, SERVE_EDIT_PROMPTS
    llm = Llama(str(models.resolve(model)), n_ctx=2048, verbose=False, river=None)
    items = []
    for kind, p in SERVE_EDIT_PROMPTS + [x for x in PROMPTS if x[0] == "chat"][:6]:
        r = llm.create_chat_completion([{"role": "user", "content": p}], max_tokens=256, temperature=0)
        n = r["usage"]["prompt_tokens"]
        items.append({"kind": kind, "prompt": list(llm._tokens[:n]), "answer": list(llm._tokens[n:])})
    with open(out, "w") as f:
        json.dump(items, f)


def cost_table(path: str) -> DraftCost:
    k = json.load(open(path))["k"]
    return DraftCost({int(n): v["decode_steps"] for n, v in k.items()}, DEFAULT_COST.river_draft)


def simulate(items, policy, cost: DraftCost):
    """{kind: [decode-only speed over plain decoding, one per answer]}."""
    out = {}
    for it in items:
        prompt, ans = it["prompt"], it["answer"]
        i, spent, state = 0, 0.0, policy["start"]()
        while i < len(ans):
            d = policy["draft"](state, prompt + ans[:i])
            kept = 0
            while kept < len(d) and i + kept < len(ans) and d[kept] == ans[i + kept]:
                kept += 1
            policy["update"](state, len(d), kept)
            spent += cost.interp(len(d) + 1)
            i += kept + 1
        out.setdefault(it["kind"], []).append(len(ans) / spent)
    return out


def fixed(n: int, m: int):
    """llama-server's ngram-simple: the last n tokens looked up, up to m drafted, all verified."""
    return {"start": lambda: None, "draft": lambda st, h: lookup(h, n, m), "update": lambda *a: None}


def by_cost(make_drafter, cost: DraftCost, draft_max: int = 64):
    """pyriver's rule: a drafter's proposal cut by DraftLength (lossless mode's and the server's)."""
    def start():
        return {"dl": DraftLength(cost, draft_max), "dm": make_drafter(), "key": None}

    def draft(st, h):
        prop = np.asarray(st["dm"](np.asarray(h, dtype=np.intc)), dtype=np.int64)
        d, st["key"] = cut_proposal(st["dm"], prop, draft_max, st["dl"])
        return [int(t) for t in d]

    def update(st, n, k):
        if n:
            st["dl"].update(st["key"], n, k)
    return {"start": start, "draft": draft, "update": update}


def oracle(items, cost: DraftCost):
    """SuffixLookup's proposals cut where the answer diverges, where that beats a plain step."""
    out = {}
    for it in items:
        prompt, ans = it["prompt"], it["answer"]
        i, spent = 0, 0.0
        while i < len(ans):
            d, _ = suffix_lookup(np.array(prompt + ans[:i]), 32, 64)
            kept = 0
            while kept < len(d) and i + kept < len(ans) and d[kept] == ans[i + kept]:
                kept += 1
            best, rate = 0, 1.0 / cost.interp(1)
            for k in range(1, len(d) + 1):
                c = cost.step(k + 1)
                if c is not None and (min(k, kept) + 1) / c > rate:
                    best, rate = k, (min(k, kept) + 1) / c
            spent += cost.interp(best + 1)
            i += min(best, kept) + 1
        out.setdefault(it["kind"], []).append(len(ans) / spent)
    return out


def main(argv):
    if argv[0] == "record":
        return record(argv[1], argv[2])
    items, cost = json.load(open(argv[1])), cost_table(argv[2])
    rows = {"llama-server ngram-simple (12, 48)": simulate(items, fixed(12, 48), cost),
            "prompt lookup (2, 10), DEFAULT_COST k<=8": simulate(items, by_cost(PromptLookupDecoding, DEFAULT_COST, 8), cost),
            "SuffixLookup, this cost curve (pyriver)": simulate(items, by_cost(SuffixLookup, cost), cost),
            "oracle (knows what is kept)": oracle(items, cost)}
    for name, res in rows.items():
        print(f"{name:<42}" + "  ".join(f"{k}: {statistics.median(v):.2f}x ({min(v):.2f}..{max(v):.2f})"
                                         for k, v in res.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
