"""llama.cpp's grammar sampler (llama_sampler_init_grammar and its lazy form, through
llama-cpp-python): `GrammarSampler` owns one sampler handle and is all pyriver.text.grammar, which
keeps the grammar's rules (triggers, rewinds, what a token may be), asks of llama.cpp: make one from
GBNF text, clone it, apply it to candidates (an array of TOKEN_DATA), accept a token, free it."""
from __future__ import annotations

import ctypes
from typing import Optional, Sequence

import llama_cpp
import numpy as np

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])   # llama_token_data


class GrammarSampler:
    """One llama.cpp grammar sampler (a grammar state); made by strict(), lazy() or clone()."""

    def __init__(self, handle):
        self.handle = handle   # llama_sampler_p (None once closed)
        self._one = np.zeros(1, dtype=TOKEN_DATA)

    @classmethod
    def strict(cls, vocab, text: str, root: str) -> Optional["GrammarSampler"]:
        """The grammar text (GBNF, start rule root) over vocab (a pyriver Vocab); None when llama.cpp
        refuses it (it logs why)."""
        h = llama_cpp.llama_sampler_init_grammar(vocab.handle, text.encode("utf-8"), root.encode("utf-8"))
        return cls(h) if h else None

    @classmethod
    def lazy(cls, vocab, text: str, root: str, patterns: Sequence[str],
             tokens: Sequence[int]) -> Optional["GrammarSampler"]:
        """llama.cpp's lazy grammar: free until one of the trigger tokens or patterns; None when
        llama.cpp refuses it (a pattern that does not compile)."""
        c_pats = (ctypes.c_char_p * max(1, len(patterns)))(*[p.encode("utf-8") for p in patterns])
        c_toks = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
        h = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
            vocab.handle, text.encode("utf-8"), root.encode("utf-8"), c_pats, len(patterns), c_toks, len(tokens))
        return cls(h) if h else None

    def clone(self) -> "GrammarSampler":
        return GrammarSampler(llama_cpp.llama_sampler_clone(self.handle))

    def apply(self, arr: np.ndarray) -> None:
        """Set the logit of every candidate in arr (TOKEN_DATA) the grammar forbids to -inf, in place."""
        ta = llama_cpp.llama_token_data_array(data=arr.ctypes.data_as(llama_cpp.llama_token_data_p),
                                              size=arr.size, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(self.handle, ctypes.byref(ta))

    def allows(self, tok: int) -> bool:
        """Whether the grammar allows token tok next (a one-candidate array: cheap)."""
        one = self._one
        one["id"], one["logit"] = int(tok), 0.0
        self.apply(one)
        return bool(np.isfinite(one["logit"][0]))

    def accept(self, tok: int) -> None:
        """Advance by tok (llama.cpp aborts the process on a token its grammar forbids: check first)."""
        llama_cpp.llama_sampler_accept(self.handle, int(tok))

    def close(self) -> None:
        h, self.handle = self.handle, None
        if h:
            llama_cpp.llama_sampler_free(h)
