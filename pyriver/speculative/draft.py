"""Draft models for lossless (speculative) decoding that cost no model work: pyriver's n-gram
lookup (SuffixLookup) and llama-cpp-python's prompt lookup rule (PromptLookupDecoding). Any callable with llama-cpp-python's draft-model signature works in its place
(`draft(input_ids: np.ndarray[intc]) -> np.ndarray` of proposed next tokens), including
llama-cpp-python's own `LlamaPromptLookupDecoding`."""
from __future__ import annotations

from typing import Any, List, Tuple

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


class SuffixLookup:
    """pyriver's n-gram drafter (the "ngram" drafter of lossless mode and the server): the longest
    suffix of the text, up to max_ngram_size tokens, that occurred earlier, at its most recent
    occurrence (llama-server's ngram-simple searches backwards too); the up to num_pred_tokens
    tokens that followed it are the proposal. Unlike a fixed n-gram it drafts as soon as one token
    matches and says how long the match was (match_size) and where (match_end): lossless mode's
    draft length by cost learns how often drafts of each match length and place are kept (a long
    match is a long, likely draft: a stretch of the prompt the answer copies; a match in the answer
    itself is a weaker one) and cuts the proposal where more would not pay."""

    def __init__(self, max_ngram_size: int = 32, num_pred_tokens: int = 64):
        if max_ngram_size < 1 or num_pred_tokens < 1:
            raise ValueError("max_ngram_size and num_pred_tokens must be >= 1")
        self.max_ngram_size = int(max_ngram_size)
        self.num_pred_tokens = int(num_pred_tokens)
        self.match_size = 0
        self.match_end = -1   # the index of the last token of the earlier occurrence matched (-1: none)

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        return np.asarray(self.propose(np.asarray(input_ids).reshape(-1).tolist()), dtype=np.intc)

    def propose(self, tokens: List[int]) -> List[int]:
        """The proposal for a list of token ids, as a list: what the server's batch step and lossless
        mode call each step (no arrays: right after a model step the caches are cold, and a pure
        Python scan then costs a fifth of the numpy calls that did the same, measured in docs/lossless.md)."""
        out, self.match_size, self.match_end = _suffix_match(tokens, self.max_ngram_size, self.num_pred_tokens)
        return out

    def __repr__(self) -> str:
        return f"SuffixLookup(max_ngram_size={self.max_ngram_size}, num_pred_tokens={self.num_pred_tokens})"


def occurrences(ids: List[int], tok: int, start: int, stop: int) -> List[int]:
    """The positions of tok in ids[start:stop], in order: list.index does the scan in C (the n-gram
    lookups' candidates; a numpy array of the text costs more right after a model step)."""
    out, i = [], start - 1
    try:
        while True:
            i = ids.index(tok, i + 1, stop)
            out.append(i)
    except ValueError:
        return out


def suffix_lookup(tokens: List[int], max_ngram_size: int, num_pred_tokens: int) -> Tuple[List[int], int]:
    """(the tokens after the most recent earlier occurrence of the text's longest repeated suffix
    of at most max_ngram_size tokens, at most num_pred_tokens of them; that suffix's length, 0: none)."""
    return _suffix_match(tokens, max_ngram_size, num_pred_tokens)[:2]


def _suffix_match(tokens: List[int], max_ngram_size: int, num_pred_tokens: int) -> Tuple[List[int], int, int]:
    """suffix_lookup's proposal and match length, and the index of the matched occurrence's last token (-1: none)."""
    ids = tokens if isinstance(tokens, list) else np.asarray(tokens).reshape(-1).tolist()
    n = len(ids)
    if n < 2:
        return [], 0, -1
    best, end = 0, -1
    # where an earlier copy of the suffix would end, the most recent first: of equal matches it is kept
    for e in reversed(occurrences(ids, ids[-1], 0, n - 1)):
        m = 1
        while m < max_ngram_size and m <= e and ids[e - m] == ids[n - 1 - m]:
            m += 1
        if m > best:
            best, end = m, e
            if m == max_ngram_size:
                break
    return (ids[end + 1:end + 1 + num_pred_tokens], best, end) if best else ([], 0, -1)


class NgramOrRiver:
    """The combined drafter: the n-gram drafter's proposal where the text has a match, else (an
    empty proposal) lossless mode drafts on the River path (`river_fallback`). Called alone it is
    the n-gram drafter, so it keeps llama-cpp-python's draft-model signature."""

    river_fallback = True

    def __init__(self, ngram=None):
        self.ngram = SuffixLookup() if ngram is None else ngram

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        return self.ngram(input_ids, **kwargs)

    def propose(self, tokens: List[int]) -> List[int]:
        return proposal(self.ngram, tokens)

    @property
    def match_size(self) -> int:
        return getattr(self.ngram, "match_size", 0)

    @property
    def match_end(self) -> int:
        return getattr(self.ngram, "match_end", -1)

    def __repr__(self) -> str:
        return f"NgramOrRiver({self.ngram!r})"


def proposal(draft_model, tokens: List[int]) -> List[int]:
    """A draft model's proposal for a list of token ids, as a list: its propose() where it has one
    (pyriver's drafters), else its llama-cpp-python call on an array."""
    if hasattr(draft_model, "propose"):
        return draft_model.propose(tokens)
    return np.asarray(draft_model(np.asarray(tokens, dtype=np.intc)), dtype=np.int64).reshape(-1).tolist()


DRAFTERS = ("river", "ngram", "both")
# What the server and the chat draft without flags (and Llama where asked, or calibrated): n-gram
# lookup, each draft cut by this machine's measured verify cost (pyriver.speculative.costcurve), so drafts run
# only where they are expected to pay. The text is full depth's as its multi-token steps compute it,
# the guarantee of llama.cpp's speculative decoding (bit-exact to plain decoding with batch_invariant).
DEFAULT_DRAFTING = {"lossless": True, "draft_model": "ngram", "draft_cost": "auto"}


def drafter(name: str):
    """The draft model for a drafter's name: "river" (None: lossless mode drafts on the River
    path), "ngram" (SuffixLookup) or "both" (NgramOrRiver)."""
    if name == "river":
        return None
    if name == "ngram":
        return SuffixLookup()
    if name == "both":
        return NgramOrRiver()
    raise ValueError(f"unknown drafter {name!r}: one of {', '.join(DRAFTERS)}")
