"""The server's n-gram drafting (one slot, the draft store learning between requests) replayed on the
answers scripts/workload_trace.py recorded, priced by a verify cost table: what a draft rule would
give issue 71's batch jobs and agent loops, without running the model (as scripts/draft_sim.py for
the code edits and chats).

    python scripts/workload_replay.py trace.json COST.json [--rule current|oracle|copy|bonus|pooled|fixed7:4|
                                                                   remaining2|resync8 ...]
                                                           [--per-row 0.44] [--margin 0.05] [--top-bucket 32] [--denied]

Per kind: the steps, the drafts kept, and the decode-only speed over plain decoding (answer tokens
over the steps' summed cost in single steps), and with the recorded prefill seconds the end-to-end
speed over plain decoding (the 1-row step's recorded median ms as the unit). Rules:
- current: the server's (StoreLookup, DraftLength by cost chosen as choose_together of one slot);
- oracle: the same proposals, each cut to exactly the drafts the answer keeps, where that beats a
  plain step (what any length rule could reach with these proposals);
- copy: a drafter that knew the answer: every run of tokens whose 4-gram occurs earlier drafted
  whole in one step where that pays (a bound no n-gram drafter passes)."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Dict, List

from pyriver.speculative import costcurve, draftlen
from pyriver.speculative.draftlen import (NGRAM_MARGIN, DraftCost, DraftLength, _prior_counts, bucket,
                                          choose_together, prior)
from pyriver.speculative.lossless import proposal_key
from pyriver.speculative.draft import proposal
from pyriver.speculative.store import DraftStore, StoreLookup


def n_kept(drafts, ans, i):
    k = 0
    while k < len(drafts) and i + k < len(ans) and drafts[k] == ans[i + k]:
        k += 1
    return k


class Pooled(DraftLength):
    """A variant tried: the continuation chance (a) pooled over a place's match lengths (a copy run's
    match grows from bucket to bucket, each starting at its prior), the first-draft chance per bucket."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.pool: Dict[str, List[float]] = {}

    def lead(self, source, cap):
        key = bucket(source)
        self._forget(key)
        c, pr = self._get(key), _prior_counts(key)
        p = self.pool.get(key.rstrip("0123456789"), [0.0, 0.0])
        return c[0] / (c[0] + c[1]), (pr[2] + p[0]) / (pr[2] + pr[3] + p[0] + p[1]), max(0, min(self.draft_max, cap))

    def update(self, source, n_drafted, n_kept):
        super().update(source, n_drafted, n_kept)
        if n_drafted > 0 and n_kept > 0:
            p = self.pool.setdefault(bucket(source).rstrip("0123456789"), [0.0, 0.0])
            p[0] += n_kept - 1
            p[1] += 1.0 if n_kept < n_drafted else 0.0


# rule name -> (DraftLength class, learns from the step's own token whether the next proposed one would be kept)
VARIANTS = {"bonus": (DraftLength, True), "pooled": (Pooled, False), "pooled+bonus": (Pooled, True)}


def replay(items, cost, rule: str, store_on: bool = True, draft_max: int = 64):
    """Per item: (steps, drafted, kept, spent in single steps, answer tokens). rule: current, oracle,
    a VARIANTS name, "fixed<k>:<m>" (k drafts wherever the prompt has a match of m tokens or more),
    "remaining<w>" (the length that maximizes the expected tokens per cost under the distribution of
    the remaining run measured on the request's earlier proposals of the same place, w pseudo-counts of
    the prior) or "resync<w>" (the rule, a prompt match of 2+ tokens that starts at most w tokens after
    where the last copy left its source keyed as a match of 16)."""
    cls, bonus = VARIANTS.get(rule, (DraftLength, False))
    if rule in VARIANTS:
        rule = "current"
    fixed = tuple(int(x) for x in rule[5:].split(":")) if rule.startswith("fixed") else None
    remaining = float(rule[9:]) if rule.startswith("remaining") else None
    resync = int(rule[6:]) if rule.startswith("resync") else None
    store = DraftStore("replay")
    out = []
    for it in items:
        hist, n_prompt = it["history"], it["n_prompt"]
        prompt, ans = hist[:n_prompt], hist[n_prompt:]
        dm = StoreLookup(store) if store_on else StoreLookup(DraftStore("none"))
        dl = cls(cost, draft_max)
        i = steps = drafted = kept = 0
        spent = 0.0
        past: List = []   # remaining: (start, proposal, place) of the request's proposals so far
        left = None       # resync: the source index where the last copy left off
        while i < len(ans):
            h = prompt + ans[:i]
            room = len(ans) - i   # the answer's own end (max_tokens or an end token) bounds a step
            prop = proposal(dm, h)[:max(0, min(draft_max, room - 1))]
            key = proposal_key(dm, n_prompt)
            end = -1 if dm.from_store else dm.match_end
            if resync is not None and prop and left is not None and dm.match_size >= 2 and 0 < end - left <= resync:
                key = "ngram16"
            if remaining is not None:
                k = _by_remaining(prop, key, past, ans, i, cost.at(len(h) - 1), remaining)
            elif rule == "current" or resync is not None:
                k = choose_together([(dl, key, len(prop))], cost, context=len(h) - 1)[0] if prop else 0
            elif fixed is not None:
                k = min(fixed[0], len(prop)) if prop and key.startswith("ngram") and dm.match_size >= fixed[1] else 0
                while k and cost.at(len(h) - 1).step(k + 1) is None:
                    k -= 1
            elif rule == "oracle":
                w = n_kept(prop, ans, i)
                k = w if w and (w + 1) / cost.at(len(h) - 1).interp(w + 1) > 1.0 else 0
                while k and cost.at(len(h) - 1).step(k + 1) is None:
                    k -= 1   # a size the table skips: the next smaller it holds
            else:
                raise ValueError(rule)
            d = prop[:k]
            m = n_kept(d, ans, i)
            if prop and end >= 0:   # what the step shows of the copy: the kept drafts and the step's own token
                seen = m + (1 if m == len(d) and m < len(prop) and i + m < len(ans) and prop[m] == ans[i + m] else 0)
                left = end + seen if seen else left
            if bonus and prop:   # the step's own token tells whether the next proposed one would have been kept
                nd = min(len(prop), len(d) + 1) if m == len(d) else len(d)
                dl.update(key, nd, m + (1 if m == len(d) and m < len(prop) and i + m < len(ans) and prop[m] == ans[i + m] else 0))
            elif d:
                dl.update(key, len(d), m)
            spent += cost.at(len(h) - 1).interp(len(d) + 1)
            steps += 1
            drafted += len(d)
            kept += m
            i += m + 1
        if store_on:
            store.add(hist)
        out.append((steps, drafted, kept, spent, len(ans)))
    return out


def _by_remaining(prop, key, past, ans, i, cost, w: float) -> int:
    """remaining<w>'s draft length: the survival of the remaining run (how many tokens of a proposal
    the answer follows) from the request's earlier proposals of the same place (censored where the
    answer has not left them yet), w pseudo-counts of the key's prior (p1, a) at each length."""
    if not prop:
        return 0
    place = key.rstrip("0123456789")
    samples = []
    for s0, p, pl in past:
        if pl == place:
            v = n_kept(p, ans[s0:i], 0)
            samples.append((v, v == i - s0 and v < len(p)))   # (run, still running: censored)
    past.append((i, prop, place))
    p1, a = prior(bucket(key))
    base, best, expect, surv = (1.0 + NGRAM_MARGIN) / cost.interp(1), 0, 1.0, 1.0
    for j in range(1, len(prop) + 1):
        risk = sum(1 for v, _ in samples if v >= j - 1)
        stop = sum(1 for v, c in samples if v == j - 1 and not c)
        surv *= (risk - stop + w * (p1 if j == 1 else a)) / (risk + w)
        expect += surv
        c = cost.step(j + 1)
        if c is not None and expect / c > base + 1e-12:
            best, base = j, expect / c
    return best


def denied(items, cost, draft_max: int = 64) -> None:
    """The rule's proposals by kind and key (bucket): how many, how many it drafted nothing of, and of
    those how often the first proposed token was right and how many tokens the answer followed on
    average (consecutive proposals of one copy run overlap: per proposal, not a sum to add up)."""
    store = DraftStore("replay")
    tab: Dict = {}
    for it in items:
        hist, n_prompt = it["history"], it["n_prompt"]
        prompt, ans = hist[:n_prompt], hist[n_prompt:]
        dm, dl, i = StoreLookup(store), DraftLength(cost, draft_max), 0
        while i < len(ans):
            h = prompt + ans[:i]
            prop = proposal(dm, h)[:max(0, min(draft_max, len(ans) - i - 1))]
            key = proposal_key(dm, n_prompt)
            k = choose_together([(dl, key, len(prop))], cost, context=len(h) - 1)[0] if prop else 0
            m = n_kept(prop[:k], ans, i)
            if k:
                dl.update(key, k, m)
            if prop:
                w = n_kept(prop, ans, i)
                t = tab.setdefault((it["name"].rstrip("0123456789."), bucket(key)), [0, 0, 0, 0])
                t[0] += 1
                if not k:
                    t[1], t[2], t[3] = t[1] + 1, t[2] + (w > 0), t[3] + w
            i += m + 1
        store.add(hist)
    for (kind, key), (n, d, first, follow) in sorted(tab.items()):
        print(f"{kind:<6} {key:<9} proposals {n:4d}  drafted nothing {d:4d}" +
              (f"  first right {first / d:.2f}  followed {follow / d:5.1f} tokens" if d else ""))


def copy_bound(items, cost):
    """The copy rule's (steps, spent) per item: runs of copyable tokens (4-gram seen before) drafted
    whole where that pays, the token after each run the step's own."""
    seen = set()
    out = []
    for it in items:
        hist, n_prompt = it["history"], it["n_prompt"]
        for j in range(3, n_prompt):
            seen.add(tuple(hist[j - 3:j + 1]))
        flags = []
        for j in range(n_prompt, len(hist)):
            g = tuple(hist[j - 3:j + 1])
            flags.append(g in seen)
            seen.add(g)
        for j in range(n_prompt, len(hist)):
            pass
        i = steps = 0
        spent = 0.0
        while i < len(flags):
            L = 0
            while i + L < len(flags) - 1 and flags[i + L] and L < 63:
                L += 1
            c = cost.at(n_prompt + i).interp(L + 1)
            if L and (L + 1) / c <= 1.0:   # not worth it: a plain step
                L, c = 0, 1.0
            spent += c
            steps += 1
            i += L + 1
        out.append((steps, 0, 0, spent, len(flags)))
    return out


def report(items, res, name):
    for kind in ("batch", "agent"):
        sel = [(it, r) for it, r in zip(items, res) if it["name"].startswith(kind)]
        if not sel:
            continue
        t1 = statistics.median(e for it, _ in sel for rows, pr, e in it["step_log"] if rows == 1 and pr == 0)
        toks = sum(r[4] for _, r in sel)
        spent = sum(r[3] for _, r in sel)
        pre = sum(it["prompt_s"] for it, _ in sel)
        e2e = [(it["prompt_s"] + r[4] * t1) / (it["prompt_s"] + r[3] * t1) for it, r in sel]
        print(f"{name:<10} {kind:<6} steps {sum(r[0] for _, r in sel):5d}  drafted {sum(r[1] for _, r in sel):5d}  "
              f"kept {sum(r[2] for _, r in sel):5d}  decode {toks / spent:5.2f}x  "
              f"end-to-end median {statistics.median(e2e):5.2f}x (total {(pre + toks * t1) / (pre + spent * t1):5.2f}x)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("cost")
    p.add_argument("--rule", nargs="*", default=["current", "oracle", "copy"])
    p.add_argument("--no-store", action="store_true")
    p.add_argument("--per-row", type=float, help="price a step of n rows 1 + PER_ROW (n - 1) single steps, at the "
                   "table's sizes (what cheaper verify rows would give)")
    p.add_argument("--denied", action="store_true", help="the rule's proposals it drafted nothing of, by key")
    p.add_argument("--margin", type=float, help="NGRAM_MARGIN for the rule (default: pyriver's)")
    p.add_argument("--top-bucket", type=int, help="a match bucket of its own from this many tokens (prior p1 0.98)")
    a = p.parse_args()
    if a.margin is not None:
        draftlen.NGRAM_MARGIN = a.margin
    if a.top_bucket is not None:
        draftlen.NGRAM_BUCKETS = draftlen.NGRAM_BUCKETS + (a.top_bucket,)
        for place in draftlen.FIRST_KEPT.values():
            place[a.top_bucket] = 0.98
        draftlen.bucket.cache_clear()
        draftlen._prior_counts.cache_clear()
    items = [it for it in json.load(open(a.trace)) if it.get("n_prompt")]
    d = json.load(open(a.cost))
    # an automatic table's file, or {"verify": {rows: single steps}} (a table quoted from docs/)
    cost = costcurve.read(a.cost)[0] if d.get("schema") else DraftCost({int(n): c for n, c in d["verify"].items()}, 0.77)
    if a.per_row is not None:
        cost = DraftCost({n: 1.0 + a.per_row * (n - 1) for n in cost.points}, cost.river_draft)
    if a.denied:
        return denied(items, cost)
    for rule in a.rule:
        res = copy_bound(items, cost) if rule == "copy" else replay(items, cost, rule, not a.no_store)
        report(items, res, rule)


if __name__ == "__main__":
    sys.exit(main())
