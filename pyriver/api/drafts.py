"""`Llama.drafts` (a part of `pyriver.Llama`): lossless mode, drafts verified by the backbone at
full depth (pyriver.speculative)."""
from __future__ import annotations

import os
from typing import Optional

from pyriver.speculative.draft import SuffixLookup, drafter
from pyriver.speculative.draftlen import AUTO, parse_cost
from pyriver.speculative.lossless import Speculator
from pyriver.speculative.store import DraftStore, StoreLookup, open_store

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
        self.store: Optional[DraftStore] = None   # drafts across requests (pyriver.speculative.store)
        self.store_path: Optional[str] = None     # where close() keeps it

    def bind_store(self, store, max_bytes: Optional[int] = None) -> None:
        """Llama(draft_store=...): None/False none; True a new store of this model's; a DraftStore (of
        this model's vocabulary: shareable between Llamas of the same model); a file's path (read if it
        exists, DraftStoreError when refused; written back by close() and save_store()). The n-gram
        drafter ("ngram", "both") then drafts from it too, and every lossless generation teaches it."""
        fp = self.llm.vocab.fingerprint() if store not in (None, False) else None
        if store is None or store is False:
            self.store = None
        elif store is True:
            self.store = DraftStore(fp) if max_bytes is None else DraftStore(fp, max_bytes)
        elif isinstance(store, DraftStore):
            if store.model != fp:
                raise ValueError("draft_store: a store of another model (its vocabulary differs); a store never "
                                 "drafts for another model")
            self.store = store
        elif isinstance(store, (str, os.PathLike)):
            path = os.fspath(store)
            self.store = open_store(path, fp, max_bytes, n_vocab=self.llm.n_vocab())
            self.store_path = path
        else:
            raise TypeError(f"draft_store must be None, True, a DraftStore or a file's path, not {type(store).__name__}")
        sp = self.speculator   # lossless mode on already: its n-gram drafter drafts from the store from now on
        if sp is not None and self.store is not None:
            inner = getattr(sp.draft_model, "ngram", sp.draft_model)
            if type(inner) in (SuffixLookup, StoreLookup):
                wrapped = StoreLookup(self.store, inner.max_ngram_size, inner.num_pred_tokens)
                if inner is sp.draft_model:
                    sp.draft_model = wrapped
                else:
                    sp.draft_model.ngram = wrapped

    def save_store(self, path: Optional[str] = None) -> None:
        """Writes the store to path (default: the file it was opened from)."""
        path = path or self.store_path
        if self.store is None or path is None:
            raise ValueError("no draft store to save" if self.store is None else "save_store needs a path")
        self.store.save(path)

    def close(self) -> None:
        if self.store is not None and self.store_path is not None:
            self.save_store()
            self.store_path = None

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
            if self.store is not None and type(getattr(draft_model, "ngram", draft_model)) is SuffixLookup:
                if hasattr(draft_model, "ngram"):
                    draft_model.ngram = StoreLookup(self.store)
                else:
                    draft_model = StoreLookup(self.store)
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
