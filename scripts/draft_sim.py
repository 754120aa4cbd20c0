"""Lossless n-gram drafting simulated on a model's recorded greedy answers, in single decode steps:
each step the policy proposes drafts from the text so far, the answer keeps the longest prefix that
matches, and the step costs the verify cost table's entry for its size. No model runs in the
simulation, so a draft policy (drafter, draft length rule, priors) is compared in seconds; it is
how pyriver.speculative.draftlen's priors were chosen, and the oracle (a policy that knows how many drafts will
be kept) bounds what any length rule can reach with a drafter and a cost curve.

    python scripts/draft_sim.py record MODEL answers.json [other]  # greedy answers to SERVE_EDIT_PROMPTS + chat
                                                                    # (other: CODE_EDIT_PROMPTS, code, math, prose)
    python scripts/draft_sim.py run answers.json verify-cost.json   # `pyriver bench --verify-cost --json`'s or the auto table
    python scripts/draft_sim.py hazard answers.json MODEL           # where the code edits' copied runs end
    python scripts/draft_sim.py places answers.json [more.json]     # first drafts kept by match length and place

`run` also replays the server's slots verifying together (choose_together), the answers of a kind
in groups of 4, as the benchmark's 4 streams send them.
"""
from __future__ import annotations

import json
import statistics
import sys

import numpy as np

from pyriver.speculative import costcurve
from pyriver.speculative.draft import PromptLookupDecoding, SuffixLookup, proposal, suffix_lookup
from pyriver.speculative.draftlen import DEFAULT_COST, DraftCost, DraftLength, bucket, choose_together, parse_ngram
from pyriver.speculative.lossless import cut_proposal, proposal_key
from pyriver.server.drafting import lookup


def record(model: str, out: str, other: bool = False) -> None:
    from pyriver import Llama
    from pyriver import models
    from pyriver.tools.prompts import CODE_EDIT_PROMPTS, PROMPTS, SERVE_EDIT_PROMPTS
    llm = Llama(str(models.resolve(model)), n_ctx=2048, verbose=False, river=None, logits_all=True)
    items = []
    prompts = (SERVE_EDIT_PROMPTS + [x for x in PROMPTS if x[0] == "chat"][:6] if not other else
               [("code-edit", p) for _, p in CODE_EDIT_PROMPTS] + [x for x in PROMPTS if x[0] != "chat"])
    for kind, p in prompts:
        r = llm.create_chat_completion([{"role": "user", "content": p}], max_tokens=256, temperature=0,
                                       logprobs=True, top_logprobs=2)
        n = r["usage"]["prompt_tokens"]
        top = [[t["logprob"] for t in c["top_logprobs"]] for c in r["choices"][0]["logprobs"]["content"]]
        items.append({"kind": kind, "prompt": list(llm._tokens[:n]), "answer": list(llm._tokens[n:]),
                      "margin": [t[0] - t[1] if len(t) > 1 else 99.0 for t in top]})   # top-1 minus top-2 log-prob
    with open(out, "w") as f:
        json.dump(items, f)


def cost_table(path: str) -> DraftCost:
    """A `pyriver bench --verify-cost --json` file's table, or the automatic one's (`<cache>/verify-cost/`:
    read at each step's context where it was measured at two)."""
    d = json.load(open(path))
    if d.get("schema") == costcurve.SCHEMA:
        return costcurve.read(path)[0]
    steps = d["steps"] if "steps" in d else {n: v["decode_steps"] for n, v in d["k"].items()}
    return DraftCost({int(n): float(c) for n, c in steps.items()}, DEFAULT_COST.river_draft)


def n_kept(drafts, ans, i: int) -> int:
    """How many of drafts the answer keeps from its position i on (the prefix that matches)."""
    kept = 0
    while kept < len(drafts) and i + kept < len(ans) and drafts[kept] == ans[i + kept]:
        kept += 1
    return kept


def simulate(items, policy, cost: DraftCost):
    """{kind: [decode-only speed over plain decoding, one per answer]}."""
    out = {}
    for it in items:
        prompt, ans = it["prompt"], it["answer"]
        i, spent, state = 0, 0.0, policy["start"]()
        while i < len(ans):
            d = policy["draft"](state, prompt + ans[:i])
            kept = n_kept(d, ans, i)
            policy["update"](state, len(d), kept)
            spent += cost.at(len(prompt) + i).interp(len(d) + 1)
            i += kept + 1
        out.setdefault(it["kind"], []).append(len(ans) / spent)
    return out


def together(items, cost: DraftCost, slots: int = 4, places: bool = True):
    """{kind: [decode-only speed over plain decoding, one per group]}: the answers of a kind in groups
    of slots (overlapping by half), each group's sequences drafting and verifying in one step as the
    server's slots do (SuffixLookup, choose_together; a finished answer leaves the step)."""
    def run(group, drafts):
        pos, spent = [0] * len(group), 0.0
        dls, dms = [DraftLength(cost, 64) for _ in group], [SuffixLookup() for _ in group]
        while True:
            act = [q for q in range(len(group)) if pos[q] < len(group[q]["answer"])]
            if not act:
                return spent
            props, keys = {}, {}
            for q in act:
                props[q] = proposal(dms[q], group[q]["prompt"] + group[q]["answer"][:pos[q]]) if drafts else []
                keys[q] = proposal_key(dms[q], len(group[q]["prompt"]) if places else None)
            context = max(len(group[q]["prompt"]) + pos[q] for q in act)
            ks = (choose_together([(dls[q], keys[q], len(props[q])) for q in act], cost, context=context) if drafts
                  else [0] * len(act))
            spent += cost.at(context).interp(len(act) + sum(ks), 1 + max(ks) if len(act) > 1 else None)
            for q, k in zip(act, ks):
                kept = n_kept(props[q][:k], group[q]["answer"], pos[q])
                if k:
                    dls[q].update(keys[q], k, kept)
                pos[q] += kept + 1
    out = {}
    for kind in sorted({it["kind"] for it in items}):
        its = [it for it in items if it["kind"] == kind]
        for i in range(0, max(1, len(its) - slots + 1), max(1, slots // 2)):
            g = its[i:i + slots]
            out.setdefault(kind, []).append(run(g, False) / run(g, True))
    return out


def places(items) -> None:
    """How often SuffixLookup's first draft is kept, and how many of its first 8 drafts, by the match's
    length and place: in the prompt (P) or in the generated text (A: the answer repeating itself);
    then the first-draft rate pooled over every kind, as pyriver.speculative.draftlen.FIRST_KEPT holds it (measured
    on held-out answers: `places other-1.5b.json other-smollm2.json`, answers recorded with `other`)."""
    tab, pooled = {}, {}
    for it in items:
        prompt, ans = it["prompt"], it["answer"]
        dm = SuffixLookup()
        for i in range(len(ans)):
            d = dm.propose(prompt + ans[:i])
            if not d:
                continue
            kept = n_kept(d, ans, i)
            place, n = parse_ngram(bucket(proposal_key(dm, len(prompt))))   # pooled as the rule pools them
            for t in (tab.setdefault((it["kind"], n, "A" if place == "repeat" else "P"), [0, 0, 0]),
                      pooled.setdefault((place, n), [0, 0, 0])):
                t[0], t[1], t[2] = t[0] + 1, t[1] + (kept > 0), t[2] + min(kept, 8)
    for (kind, n, where), (c, first, k8) in sorted(tab.items()):
        print(f"{kind:<10} match >= {n:<3} {where}  proposals {c:<5} first kept {first / c:.2f}  of 8 kept {k8 / c:.2f}")
    for place in ("ngram", "repeat"):
        print(f"first kept, every kind, {place}: " + ", ".join(f"{n}: {first / c:.2f} ({c})" for (p, n), (c, first, _)
                                                               in sorted(pooled.items()) if p == place))


def fixed(n: int, m: int):
    """llama-server's ngram-simple: the last n tokens looked up, up to m drafted, all verified."""
    return {"start": lambda: None, "draft": lambda st, h: lookup(h, n, m), "update": lambda *a: None}


def by_cost(make_drafter, cost: DraftCost, draft_max: int = 64, places: bool = True):
    """pyriver's rule: a drafter's proposal cut by DraftLength (lossless mode's and the server's);
    places=False keys every match as the prompt's (the rule before repeats had their own key)."""
    def start():
        return {"dl": DraftLength(cost, draft_max), "dm": make_drafter(), "key": None, "n_prompt": None}

    def draft(st, h):
        st["n_prompt"] = len(h) if st["n_prompt"] is None else st["n_prompt"]   # the first call sees the prompt alone
        d, st["key"] = cut_proposal(st["dm"], proposal(st["dm"], list(h)), draft_max, st["dl"],
                                    st["n_prompt"] if places else None, len(h) - 1)
        return [int(t) for t in d]

    def update(st, n, k):
        if n:
            st["dl"].update(st["key"], n, k)
    return {"start": start, "draft": draft, "update": update}


class EditLookup:
    """SuffixLookup over the prompt as the answer has been seen to edit it (tried, not kept: see
    docs/lossless-drafters.md). Where the answer left the source it was copying and came back to it within
    8 tokens (a match of 3 or more), the source's tokens it skipped (old, at most 4) and the answer's
    in their place (new) make a substitution; the text before the first one is looked up with every
    substitution applied, so a rename's later occurrences are drafted renamed and the match runs on
    across them. A substitution whose tokens are rejected in a draft is dropped."""

    def __init__(self, window: int = 8, max_old: int = 4, resync: int = 3):
        self.window, self.max_old, self.resync = window, max_old, resync
        self.pairs: list = []        # (old, new), longest old first
        self.start = None            # where the edited copy begins: the first substitution's answer index
        self.spans: list = []        # (begin, end, pair) of each substitution in the looked-up text
        self.virtual = None          # the text before self.start, substituted
        self.last = None             # (history length, proposal, its source index, its index in the looked-up text)
        self.left = None             # (source index, answer index) where the answer last left its source
        self.match_size = 0

    @staticmethod
    def _end(ids, m):
        """The index after the most recent earlier occurrence of ids' last m tokens."""
        suf = ids[len(ids) - m:]
        for e in range(len(ids) - 1, m - 1, -1):
            if ids[e - m:e] == suf:
                return e
        return None

    def _substitute(self, seq):
        out, p, self.spans = [], 0, []
        while p < len(seq):
            for old, new in self.pairs:
                if tuple(seq[p:p + len(old)]) == old:
                    self.spans.append((len(out), len(out) + len(new), (old, new)))
                    out.extend(new)
                    p += len(old)
                    break
            else:
                out.append(seq[p])
                p += 1
        return out

    def __call__(self, input_ids, /, **kwargs):
        h = [int(t) for t in input_ids]
        n = len(h)
        if self.last is not None:   # where the text left the last proposal
            pn, prop, src, vsrc = self.last
            kept = 0
            while kept < len(prop) and pn + kept < n and h[pn + kept] == prop[kept]:
                kept += 1
            if kept < len(prop) and pn + kept < n:
                for a, b, pair in self.spans if vsrc is not None else ():
                    if a <= vsrc + kept < b and pair in self.pairs:
                        self.pairs.remove(pair)
                        self.virtual = None
                if src is not None:
                    self.left = (src + kept, pn + kept)
        d0, m0 = suffix_lookup(np.asarray(h), 32, 64)
        if self.left is not None and m0 >= self.resync:   # back on the source: learn what was substituted
            s0, a0 = self._end(h, m0) - m0, n - m0
            ls, la = self.left
            if 0 <= s0 - ls <= self.window and 0 <= a0 - la <= self.window and s0 < la:
                old, new = tuple(h[ls:s0]), tuple(h[la:a0])
                if old and new and old != new and len(old) <= self.max_old and (old, new) not in self.pairs:
                    self.pairs = sorted(self.pairs + [(old, new)], key=lambda x: -len(x[0]))
                    self.start = la if self.start is None else self.start
                    self.virtual = None
                self.left = None
        d, m, vsrc = d0, m0, None
        if self.pairs:
            if self.virtual is None:
                self.virtual = self._substitute(h[:self.start])
            v = self.virtual + h[self.start:]
            d, m = suffix_lookup(np.asarray(v), 32, 64)
            vsrc = self._end(v, m) if m else None
        src = self._end(h, m0) if m0 else None
        self.match_size = m
        self.last = (n, [int(t) for t in d], src, vsrc)
        return np.asarray(d, dtype=np.intc)


def by_cost_edit(cost: DraftCost, draft_max: int = 64):
    """EditLookup cut by DraftLength; what it learns from is the cut proposal, as verified."""
    inner = by_cost(EditLookup, cost, draft_max)

    def draft(st, h):
        d = inner["draft"](st, h)
        n, _, src, vsrc = st["dm"].last
        st["dm"].last = (n, d, src, vsrc)
        return d
    return {"start": inner["start"], "draft": draft, "update": inner["update"]}


def oracle(items, cost: DraftCost):
    """SuffixLookup's proposals cut where the answer diverges, where that beats a plain step."""
    out = {}
    for it in items:
        prompt, ans = it["prompt"], it["answer"]
        i, spent = 0, 0.0
        while i < len(ans):
            d, _ = suffix_lookup(np.array(prompt + ans[:i]), 32, 64)
            kept = n_kept(d, ans, i)
            at = cost.at(len(prompt) + i)
            best, rate = 0, 1.0 / at.interp(1)
            for k in range(1, len(d) + 1):
                c = at.step(k + 1)
                if c is not None and (min(k, kept) + 1) / c > rate:
                    best, rate = k, (min(k, kept) + 1) / c
            spent += at.interp(best + 1)
            i += min(best, kept) + 1
        out.setdefault(it["kind"], []).append(len(ans) / spent)
    return out


def hazard(items, model: str) -> None:
    """Whether anything a rule could read tells where a copied run ends, over the code-edit answers:
    the chance that SuffixLookup's first draft is kept by its match length (matches up to 256
    tokens), each draft's (reached along a proposal of a match of 4 or more) by whether the token
    before it ends a line, and how many of 16 drafts a match of 16 or more keeps by the margin of the
    token before the step (its top-1 over top-2 log-probability, where the answers recorded it)."""
    import llama_cpp
    vocab = llama_cpp.Llama(model, vocab_only=True, verbose=False)
    nl = {}
    edges = (1, 2, 3, 4, 6, 9, 16, 32, 64)
    first, line, margin = {}, {}, {}
    for it in (x for x in items if x["kind"] == "code-edit"):
        prompt, ans = it["prompt"], it["answer"]
        for i in range(len(ans)):
            h = prompt + ans[:i]
            d, m = suffix_lookup(np.array(h), 256, 64)
            if not len(d):
                continue
            kept = n_kept(d, ans, i)
            if m >= 16 and i and "margin" in it:
                g = margin.setdefault(it["margin"][i - 1] >= 5.0, [0, 0])
                g[0], g[1] = g[0] + 1, g[1] + (kept >= 16)
            f = first.setdefault(max(e for e in edges if e <= m), [0, 0])
            f[0], f[1] = f[0] + 1, f[1] + (kept > 0)
            for j in range(min(kept + 1, len(d)) if m >= 4 else 0):
                prev = int(d[j - 1]) if j else h[-1]
                if prev not in nl:
                    nl[prev] = b"\n" in vocab.detokenize([prev])
                c = line.setdefault(nl[prev], [0, 0])
                c[0], c[1] = c[0] + 1, c[1] + (j < kept)
    for e in sorted(first):
        print(f"match >= {e:<3} proposals {first[e][0]:<5} first draft kept {first[e][1] / first[e][0]:.3f}")
    for k in sorted(line):
        print(f"after a line end: {k!s:<5} drafts reached {line[k][0]:<6} kept {line[k][1] / line[k][0]:.3f}")
    for k in sorted(margin):
        print(f"match >= 16, margin {'>=' if k else '< '} 5: proposals {margin[k][0]:<5} 16 drafts kept {margin[k][1] / margin[k][0]:.3f}")


def main(argv):
    if argv[0] == "record":
        return record(argv[1], argv[2], argv[3:] == ["other"])
    if argv[0] == "hazard":
        return hazard(json.load(open(argv[1])), argv[2])
    if argv[0] == "places":
        return places([it for path in argv[1:] for it in json.load(open(path))])
    items, cost = json.load(open(argv[1])), cost_table(argv[2])
    rows = {"llama-server ngram-simple (12, 48)": simulate(items, fixed(12, 48), cost),
            "prompt lookup (2, 10), DEFAULT_COST k<=8": simulate(items, by_cost(PromptLookupDecoding, DEFAULT_COST, 8), cost),
            "SuffixLookup, this cost curve (pyriver)": simulate(items, by_cost(SuffixLookup, cost), cost),
            "  the same, every match as the prompt's": simulate(items, by_cost(SuffixLookup, cost, places=False), cost),
            "EditLookup, this cost curve (tried)": simulate(items, by_cost_edit(cost), cost),
            "oracle (knows what is kept)": oracle(items, cost),
            "SuffixLookup, 4 slots together (pyriver)": together(items, cost),
            "  the same, every match as the prompt's ": together(items, cost, places=False)}
    for name, res in rows.items():
        print(f"{name:<42}" + "  ".join(f"{k}: {statistics.median(v):.3f}x mean {statistics.mean(v):.3f} "
                                         f"({min(v):.2f}..{max(v):.2f})" for k, v in res.items()))
        if "-v" in argv:
            print(" " * 42 + " ".join(f"{x:.2f}" for x in res.get("code-edit", [])))


if __name__ == "__main__":
    main(sys.argv[1:])
