"""`Llama.drafts` (a part of `pyriver.Llama`): lossless mode, drafts verified by the backbone at
full depth (pyriver.speculative)."""
from __future__ import annotations

from typing import Optional

from pyriver.speculative.draft import drafter
from pyriver.speculative.draftlen import AUTO, parse_cost
from pyriver.speculative.lossless import Speculator

# Lossless mode's longest draft (README, Lossless mode: 2 beat 4 on every model measured there), and
# with the measured cost table (draft_cost="auto"), where the length rule cuts each draft itself.
DEFAULT_DRAFT_MAX = 2
DEFAULT_DRAFT_MAX_BY_COST = 64
# The text the automatic verify cost table is measured after (any text of a few hundred tokens)
COST_PROMPT = ("Rename the variable `cnt` to `count` in this code and reply with the whole code.\n\n"
               "def word_counts(path):\n    cnt = {}\n    with open(path) as f:\n        for line in f:\n"
               "            for word in line.lower().split():\n                cnt[word] = cnt.get(word, 0) + 1\n"
               "    return cnt\n") * 2


class Drafts:
    """`speculator`: lossless mode's draft-and-verify rules (pyriver.speculative.lossless.Speculator),
    None while lossless mode is off."""

    def __init__(self, llm):
        self.llm = llm
        self.speculator: Optional[Speculator] = None

    def set_lossless(self, on: bool, *, draft_model=None, draft_max: Optional[int] = None,
                     draft_p_min: float = 0.0, draft_cost=None) -> None:
        """Lossless mode on or off between calls (pyriver.speculative.lossless): drafts from draft_model (a
        callable as llama-cpp-python's draft models, or a drafter's name: "river", "ngram",
        "both") or, without one, on the River path under the exit rule; every emitted token is
        verified by the backbone at full depth. draft_cost: None (the draft length grows and shrinks
        by one), or by cost: a pyriver.speculative.draftlen.DraftCost, "default" (the table measured on the CPU) or a
        `pyriver bench --verify-cost --json` file (pyriver.speculative.draftlen.parse_cost)."""
        L = self.llm
        if isinstance(draft_model, str):
            draft_model = drafter(draft_model)
            if draft_model is None and not on:
                return self.set_lossless(False)
        with L.lock:
            if not on:
                if draft_model is not None:
                    raise ValueError("draft_model drafts for lossless mode; it cannot be used with lossless=False")
                self.speculator = None
                return
            if (draft_model is None or getattr(draft_model, "river_fallback", False)) and L.river_path is None:
                if not L.backend.supports_river:
                    raise L.backend.no_river("lossless mode with river drafts (pass draft_model='ngram')")
                raise ValueError("lossless mode drafts with a river (river='q4_0', ...) or a draft_model "
                                 "(pyriver.PromptLookupDecoding(), ...)")
            if L.prefill_exit:
                raise ValueError("lossless mode verifies at full depth; prefill_exit=True runs prompts on the river")
            keep = self.speculator.draft_max if self.speculator is not None else DEFAULT_DRAFT_MAX
            cost = parse_cost(draft_cost)
            if cost == AUTO:   # this model's own verify cost table (measured once, cached)
                from pyriver.speculative.costcurve import auto
                cost, tile = auto(L, L.tokenize(COST_PROMPT.encode()))
                L.context.set_verify_tile_rows(tile)   # the verify steps the table was measured with
                keep = DEFAULT_DRAFT_MAX_BY_COST if draft_max is None else keep
            self.speculator = Speculator(draft_model, keep if draft_max is None else draft_max, draft_p_min, cost)
