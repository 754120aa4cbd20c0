"""Lossless mode's draft length by cost: before each step, the k (0..cap) that maximizes the
expected tokens a step emits per unit of time, from the acceptance measured so far in this
generation (per draft source) and what a step costs (DraftCost). k = 0 is a plain full-depth
step, so where drafts do not pay, lossless mode runs at about full depth's speed.

The choice reads token counts only (never the clock): a call's k sequence, hence its output on a
context that is not batch-invariant, depends only on the call (each generation starts afresh)."""
from __future__ import annotations

import heapq
import json
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple


# ggml's CPU flash attention runs a product of this many queries or more on its tiled kernel and one
# of fewer a query at a time (ggml-cpu/ops.cpp, GGML_FA_TILE_Q). A table's step is one sequence, so
# its 64 rows are one tiled product; a server step of 64 rows over several sequences attends in
# groups of fewer and costs what the sizes below 64 say (SmolLM2 after 324 tokens: 64 rows of one
# sequence 287 ms, 61 of one and three single rows 541 ms, 48 of one 402 ms).
FA_TILE = 64

# How far past its far context a two-context table still grows, in distances between the two
# (the 1.5B's automatic table, 144 and 1152 tokens: to about 8200).
MAX_FAR = 8.0


class DraftCost:
    """What a lossless step costs, in single decode steps: the cost of one full-depth step of n
    tokens with logits for every row (`pyriver bench --verify-cost` measures it), and of one river
    draft token (a decode step under the exit rule). n-gram drafts cost nothing. verify is a list
    (n = 1, 2, ...) or {n: cost} for the sizes measured (Llama's draft_cost="auto" measures a few:
    pyriver.speculative.costcurve); a step of a size between them is not taken. The table is kept as measured:
    a longer step can cost less than a shorter one (ggml's multi-token kernels pay from about 16
    rows on), and the draft length rule then drafts the longer. Beyond the table a step's cost grows
    by the table's mean increment.

    A table measured at two contexts (the tokens the cache holds before the step: context, and
    far's (context, verify, single) with single the far context's single step in this one's) is
    read at the context of each choice (at): every row of a step attends over the whole context,
    so a long step's cost over a single step's grows with it (the 1.5B Q4_K_M's 32 rows: 6.3
    single steps at 144 tokens, 7.3 at 1152, 8.7 at 2016; docs/lossless.md). Between and beyond
    the two, each step's seconds are linear in the context (to MAX_FAR times the distance).

    untiled: the same table with the verify steps attended a row at a time, where this one's are tiled
    from some size on (pyriver.speculative.costcurve: the padding to a 64-row tile is a sequence's, so a step of
    several sequences, each verifying or decoding a token, is read from it: several())."""

    def __init__(self, verify, river_draft: float, context: Optional[int] = None, far=None,
                 untiled: Optional["DraftCost"] = None):
        pts = ({int(n): float(c) for n, c in verify.items()} if isinstance(verify, dict)
               else {i + 1: float(c) for i, c in enumerate(verify)})
        if 1 not in pts or any(not c > 0 for c in pts.values()) or any(n < 1 for n in pts):
            raise ValueError(f"verify costs must be positive and include a step of 1 token, got {verify}")
        if river_draft < 0:
            raise ValueError(f"river_draft must be >= 0, got {river_draft}")
        self.points = dict(sorted(pts.items()))
        self.river_draft = float(river_draft)
        self.untiled = untiled
        self._last = max(self.points)
        self.context, self.far, self._at, self._small, self._floors, self._plain = None, None, {}, None, {}, {}
        if far is not None:
            c1, v1, single = far
            v1 = {int(n): float(c) for n, c in v1.items()}
            if context is None or not 0 <= int(context) < int(c1) or not float(single) > 0 or 1 not in v1 \
                    or any(not c > 0 for c in v1.values()):
                raise ValueError(f"a far table needs 0 <= context < its context, a positive single step and "
                                 f"positive costs with a step of 1 token, got context {context}, far {far}")
            self.context, self.far = int(context), (int(c1), v1, float(single))

    def at(self, context: Optional[int]) -> "DraftCost":
        """The table at a context (the tokens the cache holds before the step): itself where it was
        measured at one context; None: the table as measured (the near context)."""
        if self.far is None or context is None:
            return self
        c0, (c1, v1, single) = self.context, self.far
        t = min(max((context - c0) / (c1 - c0), 0.0), MAX_FAR)
        key = round(t * 32)   # a step of 1/32 of the distance: one table per few tokens of context
        got = self._at.get(key)
        if got is None:
            t = key / 32
            q = max(single, 1.0)   # a longer context never makes a single step cheaper (a noisy far measurement can)
            one = 1.0 + (q - 1.0) * t
            got = self._at[key] = DraftCost({n: (c + (v1[n] * q - c) * t) / one for n, c in self.points.items()
                                             if n in v1}, self.river_draft,
                                            untiled=None if self.untiled is None else self.untiled.at(context))
        return got

    def several(self) -> "DraftCost":
        """The table a step of several sequences reads: the untiled one where there is one."""
        return self if self.untiled is None else self.untiled

    @property
    def verify(self) -> List[float]:
        """The costs of the sizes measured, in order."""
        return list(self.points.values())

    def step(self, n_verify: int, largest: Optional[int] = None) -> Optional[float]:
        """The cost of a step of n_verify tokens; None where the table skips that size. largest: the
        rows of the step's largest sequence where it holds several (FA_TILE)."""
        if self._split(n_verify, largest):
            return self._below_tile().step(n_verify)
        p = self.points
        if n_verify in p:
            return p[n_verify]
        if n_verify < self._last:
            return None
        return p[self._last] + self._inc() * (n_verify - self._last)

    def _inc(self) -> float:
        """A row's cost beyond the table: the table's mean increment."""
        p = self.points
        return (p[self._last] - p[1]) / (self._last - 1) if self._last > 1 else p[1]

    def floor(self, n_verify: int) -> float:
        """The least a step of n_verify rows or more costs, priced either way (FA_TILE): where even
        that cannot pay for the drafts left, the length rules stop looking."""
        got = self._floors.get(n_verify)
        if got is None:
            got = self._floors[n_verify] = min(self.least(n_verify), self._below_tile().least(max(n_verify, FA_TILE)))
        return got

    def plain(self, seqs: int, rows: int) -> Tuple[float, float]:
        """(the tokens per cost of a step without drafts: seqs tokens over rows, and the expected
        tokens a step of one row more must beat to pay, at the least it could cost: floor) for
        choose_together, kept per table (most of a chat's steps ask only this)."""
        got = self._plain.get((seqs, rows))
        if got is None:
            rate = seqs / self.interp(max(rows, 1))
            got = self._plain[seqs, rows] = (rate, (rate + 1e-12) * self.floor(rows + 1))
        return got

    def least(self, n_verify: int) -> float:
        """The least a step of n_verify rows or more costs in this table (0.0: no bound)."""
        if self._inc() < 0:   # a table cheaper at its end than at one row: no bound
            return 0.0
        tail = self.points[self._last] + self._inc() * max(0, n_verify - self._last)   # grows from there on
        return min([c for n, c in self.points.items() if n >= n_verify] + [tail])

    @staticmethod
    def _split(n_verify: int, largest: Optional[int]) -> bool:
        """Whether a step of n_verify rows over several sequences has no tiled flash-attention product."""
        return largest is not None and largest < FA_TILE <= n_verify

    def _below_tile(self) -> "DraftCost":
        if self._small is None:
            self._small = DraftCost({n: c for n, c in self.points.items() if n < FA_TILE}, self.river_draft)
        return self._small

    def interp(self, n_verify: int, largest: Optional[int] = None) -> float:
        """step(n_verify, largest), linear between the measured sizes around it where the table skips it."""
        if self._split(n_verify, largest):
            return self._below_tile().interp(n_verify)
        c = self.step(n_verify)
        if c is not None:
            return c
        lo = max(n for n in self.points if n < n_verify)
        hi = min(n for n in self.points if n > n_verify)
        return self.points[lo] + (self.points[hi] - self.points[lo]) * (n_verify - lo) / (hi - lo)

    def __repr__(self) -> str:
        far = "" if self.far is None else f", context={self.context}, far={self.far}"
        return f"DraftCost(verify={self.points}, river_draft={self.river_draft}{far})"

    def to_dict(self) -> Dict:
        dense = list(self.points) == list(range(1, self._last + 1))
        d = {"verify": self.verify if dense else {str(n): c for n, c in self.points.items()},
             "river_draft": self.river_draft}
        if self.far is not None:
            c1, v1, single = self.far
            d.update(context=self.context, far={"context": c1, "verify": {str(n): c for n, c in v1.items()},
                                                "single": single})
        if self.untiled is not None:
            d["untiled"] = self.untiled.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Dict) -> "DraftCost":
        """to_dict's inverse (a calibration's draft_cost)."""
        far = d.get("far")
        untiled = d.get("untiled")
        return cls(d["verify"], d["river_draft"], d.get("context"),
                   None if far is None else (far["context"], far["verify"], far["single"]),
                   None if untiled is None else cls.from_dict({**untiled, "river_draft": d["river_draft"]}))


# Measured on the 2-core EPYC (docs/lossless.md, verify cost): Qwen2.5-Coder-1.5B requantized to
# Q8_0, llama.cpp's kernels (docs/results/lossless/verify-cost-qwen1.5b-q8_0.json); a river draft at tau
# 0.95 min layer 4 costs about 0.77 of a step (issue 29's run). Other models and devices differ:
# `pyriver bench --verify-cost` measures a table for DraftCost.
DEFAULT_COST = DraftCost([1.0, 1.46, 1.66, 1.95, 2.89, 3.04, 3.04, 3.04], river_draft=0.77)


def verify_table(path: str) -> Dict[int, float]:
    """The verify costs (in decode steps, {k: cost}) of a `pyriver bench --verify-cost --json` file."""
    try:
        with open(path) as f:
            k = json.load(f)["k"]
        return {n: float(k[str(n)]["decode_steps"]) for n in sorted(map(int, k))}
    except OSError as e:
        raise ValueError(f"draft cost {path!r}: not 'default' and not a readable file ({e.strerror})") from None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"draft cost {path!r}: not a `pyriver bench --verify-cost --json` file (no k table of "
                         "decode_steps)") from None


AUTO = "auto"


def parse_cost(spec):
    """What every front end's draft_cost / --draft-cost means: None (the draft length grows and
    shrinks by one), a DraftCost, {"verify", "river_draft"} (as a calibration stores it), "default"
    (DEFAULT_COST), "auto" (returned as it is: the Llama measures its own table, pyriver.speculative.costcurve)
    or the path of a `pyriver bench --verify-cost --json` file (its table, with DEFAULT_COST's river draft)."""
    if spec is None or isinstance(spec, DraftCost) or spec == AUTO:
        return spec
    if isinstance(spec, dict) and {"verify", "river_draft"} <= set(spec) <= {"verify", "river_draft", "context", "far",
                                                                              "untiled"}:
        return DraftCost.from_dict(spec)
    if isinstance(spec, str):
        return DEFAULT_COST if spec == "default" else DraftCost(verify_table(spec), DEFAULT_COST.river_draft)
    raise TypeError(f"draft_cost must be None, 'default', 'auto', a verify-cost JSON path or a DraftCost, got {spec!r}")


# The most token counts a window of skipped proposals spans (DraftLength.cut_short): the table could
# change beyond (checked at both ends).
SKIP_MAX = 8
NO_WINDOW = (0, 0, -1)

# How much of the counts beyond the prior a choice keeps (acceptance changes along a text: copied
# code, then new lines), and the prior's weight in pseudo-observations.
MEMORY = 0.8
PRIOR_WEIGHT = 8.0
# n-gram matches are pooled by length: 1, 2, 3, 4-5, 6-8, 9-15, 16 and more
NGRAM_BUCKETS = (1, 2, 3, 4, 6, 9, 16)


# What n-gram drafts must promise over a plain step to be drafted: expected tokens per cost at least
# 1 + NGRAM_MARGIN times a plain step's. The priors are means over code, math and prose; where a short
# match's drafts promise a few percent (SmolLM2's table: a match of 2 in the prompt 2-4%, of 3 in the
# answer 7-10%), what a chat keeps is below them (SmolLM2's 6 chats: an answer's match of 3 first
# kept 0.44 and then 0.40, a prompt's of 2 0.22-0.50, against the priors' 0.52 and 0.67-0.75), and
# drafting them ran chat at 0.93x-0.99x plain decoding. Longer matches promise 15% and more and are
# drafted as before; river drafts (not free) are chosen without it.
NGRAM_MARGIN = 0.12


def parse_ngram(source: str) -> Optional[Tuple[str, int]]:
    """("ngram", "repeat" or "store", n) of an n-gram source's key with its match length n; None otherwise."""
    for kind in ("ngram", "repeat", "store"):
        if source.startswith(kind) and source[len(kind):].isdigit():
            return kind, int(source[len(kind):])
    return None


# The chance that an n-gram proposal's first draft is kept, by the match's bucket (NGRAM_BUCKETS)
# and place: a copy of the prompt ("ngram") or the answer repeating itself ("repeat"). Measured
# (`python scripts/draft_sim.py places`) on held-out greedy answers, not the benchmark's: the 1.5B
# Q4_K_M and SmolLM2 on the 6 CODE_EDIT_PROMPTS and the code, math and prose PROMPTS (4,665
# proposals). The form n / (n + 1) it replaces read a match of one token at 0.5 (measured 0.16) and
# a repeat of 3 at 0.67 (0.52): chat's short matches, drafted at a loss (docs/lossless.md).
FIRST_KEPT = {"ngram": {1: 0.16, 2: 0.52, 3: 0.59, 4: 0.90, 6: 0.92, 9: 0.93, 16: 0.98},
              "repeat": {1: 0.21, 2: 0.42, 3: 0.52, 4: 0.72, 6: 0.74, 9: 0.91, 16: 0.98}}
# A match in an earlier request's text (pyriver.speculative.store): not measured apart; text that is
# not this prompt's, as the answer repeating itself is, so repeat's chances until its counts learn.
FIRST_KEPT["store"] = FIRST_KEPT["repeat"]


def prior(source: str) -> Tuple[float, float]:
    """(p1, a) before a generation has seen a draft of source: the chance the first draft is kept,
    and that each next one is kept once the one before was. An n-gram match of n tokens (in the
    prompt, "ngram<n>", or in the generated text, "repeat<n>"): p1 as measured for its bucket and
    place (FIRST_KEPT), a = n / (n + 1) (a long match is a stretch the answer copies; the form the
    replays chose, scripts/draft_sim.py: the measured next-draft rates, 0.56 to 0.98, draft long
    runs that end at the edits and replay 4 to 11% slower on code edits); a river draft 0.75 and
    0.75; a draft model that says nothing 0.5."""
    if source == "river":
        return 0.75, 0.75
    ng = parse_ngram(source)
    if ng is not None:
        kind, n = ng
        return FIRST_KEPT[kind][max(b for b in NGRAM_BUCKETS if b <= max(n, 1))], n / (n + 1.0)
    return 0.5, 0.5


@lru_cache(maxsize=None)
def bucket(source: str) -> str:
    """The key an n-gram source's counts are pooled under (ngram<n> / repeat<n>: the bucket's shortest n)."""
    ng = parse_ngram(source)
    if ng is not None:
        kind, n = ng
        return kind + str(max(b for b in NGRAM_BUCKETS if b <= max(n, 1)))
    return source


@lru_cache(maxsize=None)
def _prior_counts(key: str) -> Tuple[float, float, float, float]:
    """A key's prior as Beta counts: [first kept, first rejected, next kept, next rejected] (PRIOR_WEIGHT)."""
    p1, a = prior(key)
    w = PRIOR_WEIGHT
    return w * p1, w * (1.0 - p1), w * a, w * (1.0 - a)


def _chances(c: Sequence[float]) -> Tuple[float, float]:
    """(p1, a) of a key's counts."""
    return c[0] / (c[0] + c[1]), c[2] / (c[2] + c[3])


class DraftLength:
    """What a generation has learned of each draft source and the draft length it buys. A source
    is "river", "ngram", "ngram<n>" (an n-gram drafter that says the length n of its match,
    pooled by bucket) or "repeat<n>" (the same, its match in the generated text). Two chances per
    source, each a Beta count from its prior: p1, that the first draft is kept, and a, that a
    draft is kept once the one before it was (copied code is kept in long runs, so a is high where
    p1 may not be). A step of k drafts then emits 1 + p1 (1 + a + ... + a^(k-1)) tokens on
    average, at the cost of a verify step of k + 1 tokens (DraftCost: the measured curve, not
    monotone per token) plus k river drafts where the source is the river. Each choice first moves
    the counts back toward the prior by MEMORY, so a source whose drafts stopped paying (k = 0:
    nothing more to learn from) is tried again a few steps later."""

    def __init__(self, cost: DraftCost, draft_max: int, memory: float = MEMORY):
        self.cost = cost
        self.draft_max = int(draft_max)
        self.memory = float(memory)
        # key -> [first kept, first rejected, next kept, next rejected]; the prior's tuple until a draft of key
        self.counts: Dict[str, Sequence[float]] = {}
        self._short: Dict[Tuple[int, DraftCost], Optional[int]] = {}   # shortest()'s answers
        self._window = NO_WINDOW   # cut_short's (token count after, up to, cap) of skipped proposals

    def _get(self, key: str) -> Sequence[float]:
        c = self.counts.get(key)
        if c is None:
            c = self.counts[key] = _prior_counts(key)   # a tuple while nothing was learned: forgetting skips it
        return c

    def chances(self, source: str) -> Tuple[float, float]:
        """(p1, a) of source now."""
        return _chances(self._get(bucket(source)))

    def acceptance(self, source: str) -> float:
        """The chance that a draft is kept given the ones before it were (a)."""
        return self.chances(source)[1]

    def _forget(self, key: str) -> None:
        c = self._get(key)
        if type(c) is tuple:   # the prior itself (most of a chat's keys): nothing to forget
            return
        p, m = _prior_counts(key), self.memory
        self.counts[key] = [p[0] + m * (c[0] - p[0]), p[1] + m * (c[1] - p[1]), p[2] + m * (c[2] - p[2]),
                            p[3] + m * (c[3] - p[3])]

    def choose(self, source: str, cap: Optional[int] = None, others: int = 0, context: Optional[int] = None) -> int:
        """The k in 0..min(draft_max, cap) with the most expected tokens per cost. others: the rows
        the same step computes for other sequences (the server's other decoding slots, a token each):
        drafts then pay only where the whole step's tokens per cost rise, since their rows slow the
        others' tokens too. context: the tokens the cache holds before the step (DraftCost.at)."""
        self._forget(bucket(source))
        p1, a = self.chances(source)
        cost = self.cost.at(context)
        if others:   # a step of several sequences (choose_together)
            cost = cost.several()
        per_draft = cost.river_draft if source == "river" else 0.0
        top = self.draft_max if cap is None else min(self.draft_max, cap)
        best, best_rate, expect, run = 0, (1.0 + others) / cost.interp(1 + others), 1.0 + others, p1
        if parse_ngram(source) is not None or source == "ngram":   # free drafts: the margin (NGRAM_MARGIN)
            best_rate *= 1.0 + NGRAM_MARGIN
        for k in range(1, top + 1):
            # no longer draft can pay where all the drafts left, kept, at the cheapest step that holds
            # them, would not: the answer is exact, and a chat's steps skip the scan (the server's step loop)
            if expect + run * (top - k + 1) <= (best_rate + 1e-12) * (cost.floor(others + k + 1) + k * per_draft):
                break
            expect += run   # the k-th draft is kept with p1 * a^(k-1)
            run *= a
            step = cost.step(others + k + 1, k + 1 if others else None)
            if step is None:
                continue
            rate = expect / (step + k * per_draft)
            if rate > best_rate + 1e-12:
                best, best_rate = k, rate
        return best

    def gains(self, source: str, cap: int) -> List[float]:
        """What each of up to min(draft_max, cap) free drafts (no per-draft cost: n-grams) adds to a
        step's expected tokens: p1, p1 a, p1 a^2, ... (non-increasing). Moves the counts toward the
        prior first, as choose does: call one of the two once per step."""
        return _series(*self.lead(source, cap))

    def lead(self, source: str, cap: int) -> Tuple[float, float, int]:
        """(p1, a, the drafts up to min(draft_max, cap)) of source, the counts moved toward the prior
        first (what gains lists)."""
        key = bucket(source)
        self._forget(key)
        p1, a = _chances(self._get(key))
        return p1, a, max(0, min(self.draft_max, cap))

    def shortest(self, cap: int, context: Optional[int] = None) -> Optional[int]:
        """The shortest n-gram match (in the prompt or in the answer) whose proposal, up to cap tokens,
        a sequence verifying alone may draft (choose_together of one at context), or whose key has
        learned (its choice would forget: skipping it would change later choices); None: none up to
        the longest. A proposal of a shorter match is cut to nothing, whatever the counts say of the
        rest (cut_short). Kept per table and cap until a key first learns."""
        cap = max(0, min(self.draft_max, cap))
        tab = self.cost.at(context)
        got = self._short.get((cap, tab), False)
        if got is False:
            got = None
            for b in NGRAM_BUCKETS:
                keys = (f"ngram{b}", f"repeat{b}")
                if any(type(self.counts.get(k, ())) is list for k in keys) or \
                        any(choose_together([(self, k, cap)], tab)[0] for k in keys):
                    got = b
                    break
            self._short[cap, tab] = got
        return got

    def skipping(self, n: int, cap: int) -> bool:
        """Whether a suffix lookup's proposal at n tokens of text, up to cap drafts, is skipped:
        cut_short opened a window of token counts over which no proposal could be drafted (at its cap
        or a smaller one)."""
        lo, hi, most = self._window
        return lo < n < hi and cap <= most

    def cut_short(self, n: int, cap: int, match: int) -> bool:
        """After a suffix lookup's (pyriver.speculative.draft.SuffixLookup) proposal at n tokens of text, of a
        match of `match` tokens, up to cap drafts: whether it is cut to nothing, as a sequence
        verifying alone would choose (choose, or choose_together of one) because no match this short
        can be drafted (shortest). Opens the window of the next token counts whose proposals would be
        too: a suffix match grows by at most one token per token added (the text's last m tokens
        occurring earlier means its m - 1 before the newest did), so the next shortest - match - 1
        counts skip it (at most SKIP_MAX, over one table: DraftCost.at changes with the context in one
        direction, so it is checked at the window's ends; a larger cap than this one's ends it). Most
        of a chat's steps then do no proposal and no choice (SmolLM2's 6 chats: 385 of 573)."""
        shortest = self.shortest(cap, n - 1)
        if shortest is not None and match >= shortest:
            self._window = NO_WINDOW
            return False
        end = n + min(SKIP_MAX, SKIP_MAX if shortest is None else shortest - match)
        ok = end > n + 1 and self.cost.at(end - 2) is self.cost.at(n - 1)
        self._window = (n, end, cap) if ok else NO_WINDOW
        return True

    def no_window(self) -> None:
        """The sequence chooses with others (the server's slots together): no window holds."""
        self._window = NO_WINDOW

    def update(self, source: str, n_drafted: int, n_kept: int) -> None:
        if n_drafted <= 0:
            return
        key = bucket(source)
        c = self._get(key)
        if type(c) is tuple:   # the first draft of key: its own counts from here on
            c = self.counts[key] = list(c)
            self._short.clear()
        if n_kept == 0:
            c[1] += 1.0
            return
        c[0] += 1.0
        c[2] += n_kept - 1
        c[3] += 1.0 if n_kept < n_drafted else 0.0


def _series(p1: float, a: float, n: int) -> List[float]:
    """p1, p1 a, p1 a^2, ...: n terms."""
    out, run = [], p1
    for _ in range(n):
        out.append(run)
        run *= a
    return out


def choose_together(picks: List[Tuple["DraftLength", str, int]], cost: DraftCost, rows: Optional[int] = None,
                    context: Optional[int] = None) -> List[int]:
    """The draft lengths of several sequences that verify in one step (the server's decoding slots),
    chosen together: picks holds each one's (DraftLength, source, cap) for free drafts (n-grams);
    rows: the step's rows without drafts (default one a sequence). For each total of drafts the best
    split takes the largest expected gains across the sequences (each one's gains fall with its
    length, so that is each one's shortest drafts first); the total is the one with the most
    expected tokens per the cost of the whole step, where that beats a plain step's by NGRAM_MARGIN. Choosing each sequence alone against the others'
    single rows (choose(others)) lets every one of them claim the same cheap rows. context: the
    longest of the sequences' contexts (DraftCost.at: one-token rows attend over the longest)."""
    rows = len(picks) if rows is None else rows
    cost = cost.at(context)
    if len(picks) > 1:   # every sequence's verify rows pad a tile of their own: the untiled table bounds them
        cost = cost.several()
    leads = [dl.lead(src, cap) for dl, src, cap in picks]
    expect = float(len(picks))
    best_rate, bar = cost.plain(len(picks), rows)
    best_rate, bar = best_rate * (1.0 + NGRAM_MARGIN), bar * (1.0 + NGRAM_MARGIN)   # free drafts: their margin
    # where even every draft kept, at the cheapest step of one row more, would not pay, none is
    # ranked (most of a chat's steps: the step loop's Python runs on caches the model step left cold)
    most = 0.0
    for p1, a, n in leads:
        most += p1 * n if a >= 1.0 else p1 * (1.0 - a ** n) / (1.0 - a)
    if expect + most <= bar:
        return [0] * len(picks)
    best, left, taken = 0, most, []   # taken: the sequence of each gain added, in rank order
    grown, largest = [1] * len(picks), 1   # each sequence's rows as the drafts are added, the most of them
    for d, (g, i) in enumerate(_ranked(leads), 1):
        # no larger total can pay where every gain left, at the cheapest step that holds them, would not
        if expect + left <= (best_rate + 1e-12) * cost.floor(rows + d):
            break
        left -= g
        expect += g
        taken.append(i)
        grown[i] += 1
        largest = max(largest, grown[i])
        c = cost.step(rows + d, largest if rows > 1 else None)   # several sequences: FA_TILE
        if c is not None and expect / c > best_rate + 1e-12:
            best, best_rate = d, expect / c
    ks = [0] * len(picks)
    for i in taken[:best]:
        ks[i] += 1
    return ks


def _gains(p1: float, a: float, n: int, i: int):
    """Sequence i's gains (_series), each with i, made as they are asked for (a step reads a few of up to 64)."""
    run = p1
    for _ in range(n):
        yield run, i
        run *= a


def _ranked(leads: List[Tuple[float, float, int]]):
    """Every sequence's gains, largest first; equal gains in sequence order (each sequence's gains fall
    with its length, so this is a merge, made lazily)."""
    if len(leads) == 1:
        return _gains(*leads[0], 0)
    return heapq.merge(*(_gains(*lead, i) for i, lead in enumerate(leads)), key=_neg_gain)


def _neg_gain(item: Tuple[float, int]) -> float:
    return -item[0]
