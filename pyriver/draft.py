"""Draft models for lossless (speculative) decoding that cost no model work: pyriver's n-gram
prompt lookup. Any callable with llama-cpp-python's draft-model signature works in its place
(`draft(input_ids: np.ndarray[intc]) -> np.ndarray` of proposed next tokens), including
llama-cpp-python's own `LlamaPromptLookupDecoding`."""
from __future__ import annotations

from typing import Any

import numpy as np


class PromptLookupDecoding:
    """Proposes the tokens that followed an earlier occurrence of the text's last n-gram (the
    longest n <= max_ngram_size that occurred before, its first occurrence), at most
    num_pred_tokens of them: the rule of llama-cpp-python's LlamaPromptLookupDecoding, so that
    either gives the same drafts. Pays where the answer repeats its prompt or itself (code edits,
    quotes, summaries)."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10):
        if max_ngram_size < 1 or num_pred_tokens < 1:
            raise ValueError("max_ngram_size and num_pred_tokens must be >= 1")
        self.max_ngram_size = int(max_ngram_size)
        self.num_pred_tokens = int(num_pred_tokens)
        self.match_size = 0   # the n of the last call's match (0: none); lossless mode's draft length reads it

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        out, self.match_size = _lookup(input_ids, self.max_ngram_size, self.num_pred_tokens)
        return out

    @staticmethod
    def find_candidate_pred_tokens(input_ids: np.ndarray, max_ngram_size: int, num_pred_tokens: int) -> np.ndarray:
        """The drafts for input_ids (llama-cpp-python's static method of the same name)."""
        return _lookup(input_ids, max_ngram_size, num_pred_tokens)[0]

    def __repr__(self) -> str:
        return f"PromptLookupDecoding(max_ngram_size={self.max_ngram_size}, num_pred_tokens={self.num_pred_tokens})"


def _lookup(input_ids: np.ndarray, max_ngram_size: int, num_pred_tokens: int):
    """PromptLookupDecoding's drafts and the length of the n-gram they matched (0: none)."""
    ids = np.asarray(input_ids).reshape(-1)
    n = ids.size
    for size in range(min(max_ngram_size, n - 1), 0, -1):
        # Earlier windows only: an occurrence ending the text has nothing after it.
        windows = np.lib.stride_tricks.sliding_window_view(ids[:n - 1], size)
        hits = np.flatnonzero((windows == ids[n - size:]).all(axis=1))
        if hits.size:
            start = int(hits[0]) + size
            return ids[start:start + num_pred_tokens].astype(np.intc), size
    return np.empty(0, dtype=np.intc), 0


class NgramOrRiver:
    """The combined drafter: the n-gram drafter's proposal where the text has a match, else (an
    empty proposal) lossless mode drafts on the River path (`river_fallback`). Called alone it is
    the n-gram drafter, so it keeps llama-cpp-python's draft-model signature."""

    river_fallback = True

    def __init__(self, ngram=None):
        self.ngram = PromptLookupDecoding() if ngram is None else ngram

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        return self.ngram(input_ids, **kwargs)

    @property
    def match_size(self) -> int:
        return getattr(self.ngram, "match_size", 0)

    def __repr__(self) -> str:
        return f"NgramOrRiver({self.ngram!r})"


DRAFTERS = ("river", "ngram", "both")


def drafter(name: str):
    """The draft model for a drafter's name: "river" (None: lossless mode drafts on the River
    path), "ngram" (PromptLookupDecoding) or "both" (NgramOrRiver)."""
    if name == "river":
        return None
    if name == "ngram":
        return PromptLookupDecoding()
    if name == "both":
        return NgramOrRiver()
    raise ValueError(f"unknown drafter {name!r}: one of {', '.join(DRAFTERS)}")
