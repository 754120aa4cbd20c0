"""Lossless mode's draft length by cost: before each step, the k (0..cap) that maximizes the
expected tokens a step emits per unit of time, from the acceptance measured so far in this
generation (per draft source) and what a step costs (DraftCost). k = 0 is a plain full-depth
step, so where drafts do not pay, lossless mode runs at about full depth's speed.

The choice reads token counts only (never the clock): a call's k sequence, hence its output on a
context that is not batch-invariant, depends only on the call (each generation starts afresh)."""
from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence, Tuple


class DraftCost:
    """What a lossless step costs, in single decode steps: verify[n - 1] for one full-depth step of
    n tokens with logits for every row (`pyriver bench --verify-cost` measures it), and one river
    draft token (a decode step under the exit rule). n-gram drafts cost nothing. Beyond the table
    a step's cost grows by the table's mean increment."""

    def __init__(self, verify: Sequence[float], river_draft: float):
        v = [float(x) for x in verify]
        if not v or any(x <= 0 for x in v):
            raise ValueError(f"verify costs must be positive, got {verify}")
        for i in range(1, len(v)):   # a longer step never costs less (measured noise aside)
            v[i] = max(v[i], v[i - 1])
        if river_draft < 0:
            raise ValueError(f"river_draft must be >= 0, got {river_draft}")
        self.verify = v
        self.river_draft = float(river_draft)

    def step(self, n_verify: int) -> float:
        v = self.verify
        if n_verify <= len(v):
            return v[n_verify - 1]
        inc = (v[-1] - v[0]) / (len(v) - 1) if len(v) > 1 else v[-1]
        return v[-1] + inc * (n_verify - len(v))

    def __repr__(self) -> str:
        return f"DraftCost(verify={self.verify}, river_draft={self.river_draft})"

    def to_dict(self) -> Dict:
        return {"verify": list(self.verify), "river_draft": self.river_draft}


# Measured on the 2-core EPYC (docs/lossless.md, verify cost): Qwen2.5-Coder-1.5B requantized to
# Q8_0, llama.cpp's kernels (docs/lossless/verify-cost-qwen1.5b-q8_0.json); a river draft at tau
# 0.95 min layer 4 costs about 0.77 of a step (issue 29's run). Other models and devices differ:
# `pyriver bench --verify-cost` measures a table for DraftCost.
DEFAULT_COST = DraftCost([1.0, 1.46, 1.66, 1.95, 2.89, 3.04, 3.04, 3.04], river_draft=0.77)


def verify_table(path: str) -> List[float]:
    """The verify costs (in decode steps, k = 1..) of a `pyriver bench --verify-cost --json` file."""
    try:
        with open(path) as f:
            k = json.load(f)["k"]
        return [float(k[str(n)]["decode_steps"]) for n in sorted(map(int, k))]
    except OSError as e:
        raise ValueError(f"draft cost {path!r}: not 'default' and not a readable file ({e.strerror})") from None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"draft cost {path!r}: not a `pyriver bench --verify-cost --json` file (no k table of "
                         "decode_steps)") from None


def parse_cost(spec) -> Optional[DraftCost]:
    """What every front end's draft_cost / --draft-cost means: None (the draft length grows and
    shrinks by one), a DraftCost, {"verify", "river_draft"} (as a calibration stores it), "default"
    (DEFAULT_COST) or the path of a `pyriver bench --verify-cost --json` file (its table, with
    DEFAULT_COST's river draft)."""
    if spec is None or isinstance(spec, DraftCost):
        return spec
    if isinstance(spec, dict) and set(spec) == {"verify", "river_draft"}:
        return DraftCost(spec["verify"], spec["river_draft"])
    if isinstance(spec, str):
        return DEFAULT_COST if spec == "default" else DraftCost(verify_table(spec), DEFAULT_COST.river_draft)
    raise TypeError(f"draft_cost must be None, 'default', a verify-cost JSON path or a DraftCost, got {spec!r}")


# Beta pseudo-counts (kept, rejected) each generation starts from, per source; and how much of
# the counts beyond them a step keeps (acceptance changes along a text: copied code, then new lines).
PRIOR = {"ngram": (1.0, 1.0), "river": (3.0, 1.0)}
MEMORY = 0.8


class DraftLength:
    """Acceptance per draft source in one generation and the draft length it buys. A source is
    "river", "ngram" or "ngram<n>" (an n-gram drafter that says the length n of its match: longer
    matches are kept more often). Counts are kept apart by whether the source's previous step kept
    all its drafts: n-gram drafts come in runs (a copied stretch of code is kept whole, then a
    changed line rejects). Each choice first moves the source's counts back toward the prior by
    MEMORY, so a source whose drafts stopped paying (k = 0, nothing more to learn from) is tried
    again a few steps later."""

    def __init__(self, cost: DraftCost, draft_max: int, memory: float = MEMORY):
        self.cost = cost
        self.draft_max = int(draft_max)
        self.memory = float(memory)
        self.counts: Dict[Tuple[str, bool], Tuple[float, float]] = {}
        self.last_full: Dict[str, bool] = {}

    @staticmethod
    def _prior(source: str) -> Tuple[float, float]:
        return PRIOR["river" if source == "river" else "ngram"]

    def _counts(self, source: str) -> Tuple[Tuple[str, bool], Tuple[float, float]]:
        key = (source, self.last_full.get(source, False))
        return key, self.counts.get(key, self._prior(source))

    def acceptance(self, source: str) -> float:
        """The chance that a draft is kept given the ones before it were (kept / (kept + rejections)),
        in the source's current state."""
        kept, rej = self._counts(source)[1]
        return kept / (kept + rej)

    def _forget(self, source: str) -> None:
        pk, pr = self._prior(source)
        for key, (k, r) in self.counts.items():
            if key[0] == source:
                self.counts[key] = (pk + self.memory * (k - pk), pr + self.memory * (r - pr))

    def choose(self, source: str, cap: Optional[int] = None) -> int:
        """The k in 0..min(draft_max, cap) with the most expected tokens per cost."""
        self._forget(source)
        a = self.acceptance(source)
        per_draft = self.cost.river_draft if source == "river" else 0.0
        top = self.draft_max if cap is None else min(self.draft_max, cap)
        best, best_rate, expect = 0, -1.0, 0.0
        for k in range(top + 1):
            expect += a ** k   # tokens a step emits: the drafts kept plus the backbone's own
            rate = expect / (self.cost.step(k + 1) + k * per_draft)
            if rate > best_rate + 1e-12:
                best, best_rate = k, rate
        return best

    def update(self, source: str, n_drafted: int, n_kept: int) -> None:
        if n_drafted <= 0:
            return
        key, (kept, rej) = self._counts(source)
        self.counts[key] = (kept + n_kept, rej + (1.0 if n_kept < n_drafted else 0.0))
        self.last_full[source] = n_kept == n_drafted
