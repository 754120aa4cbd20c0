"""Grammar-constrained sampling with llama.cpp's own grammar engine (llama_sampler_init_grammar,
through llama-cpp-python) over the vocabulary pyriver already loads; pyriver parses no grammar.

`Grammar` is one grammar state (a llama.cpp grammar sampler). `ConstrainedSampler` wraps a
pyriver Sampler under a grammar and has its interface (sample, distribution, p, rng): the
generation loops (Llama.generate, lossless mode, the server's scheduler) call it as they call a
Sampler. It keeps the grammar state of each position of the history it is asked about (the
prompt, then the tokens generated so far, in lossless mode also drafts), so a rejected draft
rewinds by dropping states, and every token is accepted into a state only after the grammar
allowed it (llama.cpp aborts the process on accepting a token its grammar forbids)."""
from __future__ import annotations

import ctypes
from typing import Dict, Sequence, Union

import llama_cpp
import numpy as np

from .errors import PyriverError

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])   # llama_token_data
# States kept behind the newest: a lossless rewind goes back at most a draft's length.
_KEEP = 64


class GrammarError(PyriverError, ValueError):
    """A grammar that does not parse, or a point of generation where it allows no token."""


def gbnf_text(grammar) -> tuple:
    """(GBNF text, root rule) of a llama_cpp.LlamaGrammar or a GBNF string."""
    if isinstance(grammar, str):
        return grammar, "root"
    text = getattr(grammar, "_grammar", None)
    if not isinstance(text, str):
        raise TypeError(f"grammar must be a llama_cpp.LlamaGrammar or a GBNF string, got {type(grammar).__name__}")
    return text, getattr(grammar, "_root", "root") or "root"


class Grammar:
    """One state of a GBNF grammar over a pyriver Vocab."""

    def __init__(self, vocab, grammar: Union[str, object] = None, *, _smpl=None):
        self.vocab = vocab
        if _smpl is not None:
            self._smpl = _smpl
            return
        text, root = gbnf_text(grammar)
        if not text.strip():
            raise GrammarError("the grammar is empty")
        self._smpl = llama_cpp.llama_sampler_init_grammar(vocab._vocab, text.encode("utf-8"), root.encode("utf-8"))
        if not self._smpl:   # llama.cpp logs why (a syntax error, an undefined rule, left recursion)
            raise GrammarError(f"the grammar does not parse (llama.cpp's GBNF: a syntax error, an undefined rule, "
                               f"left recursion or no rule '{root}'): {text[:200]!r}")
        self._one = np.zeros(1, dtype=_TOKEN_DATA)
        if not self.mask_allows_any():
            self.close()
            raise GrammarError(f"the grammar allows no token of this vocabulary at its start: {text[:200]!r}")

    def clone(self) -> "Grammar":
        g = Grammar(self.vocab, _smpl=llama_cpp.llama_sampler_clone(self._smpl))
        g._one = np.zeros(1, dtype=_TOKEN_DATA)
        return g

    def close(self) -> None:
        smpl, self._smpl = getattr(self, "_smpl", None), None
        if smpl:
            llama_cpp.llama_sampler_free(smpl)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _apply(self, arr: np.ndarray) -> None:
        ta = llama_cpp.llama_token_data_array(data=arr.ctypes.data_as(llama_cpp.llama_token_data_p),
                                              size=arr.size, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(self._smpl, ctypes.byref(ta))

    def allows(self, tok: int) -> bool:
        """Whether the grammar allows token tok next (a one-candidate array: cheap)."""
        one = self._one
        one["id"], one["logit"] = int(tok), 0.0
        self._apply(one)
        return bool(np.isfinite(one["logit"][0]))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of logits with every token the grammar forbids at -inf; GrammarError when it allows none."""
        arr = np.empty(logits.size, dtype=_TOKEN_DATA)
        arr["id"] = np.arange(logits.size, dtype=np.int32)
        arr["logit"] = logits
        self._apply(arr)
        out = arr["logit"].copy()
        if not np.isfinite(out).any():
            raise GrammarError("the grammar allows no token here (a dead end of the grammar for this vocabulary)")
        return out

    def mask_allows_any(self) -> bool:
        try:
            self.mask(np.zeros(self.vocab.n_vocab, dtype=np.float32))
            return True
        except GrammarError:
            return False

    def accept(self, tok: int) -> None:
        """Advance by token tok, which must be allowed. An end-of-generation token leaves the state as it is."""
        if not self.allows(tok):
            raise GrammarError(f"token {tok} ({self.vocab.piece(tok)!r}) is not allowed by the grammar here")
        if not self.vocab.is_eog(tok):
            llama_cpp.llama_sampler_accept(self._smpl, int(tok))


class ConstrainedSampler:
    """A Sampler under a grammar. sample() does what llama.cpp's common sampler does: the
    sampler's token first, checked alone against the grammar; only when the grammar forbids it,
    the grammar applied to every candidate and the sampler run again (greedy gives the
    grammar's argmax either way). distribution() (lossless mode's p and q) is the sampler's
    distribution over the allowed tokens."""

    def __init__(self, sampler, grammar: Grammar, n_prompt: int):
        self.inner = sampler
        self.n_prompt = int(n_prompt)
        self._states: Dict[int, Grammar] = {0: grammar}   # state after i generated tokens
        self._tokens: list = []   # the generated tokens the states were built from

    def __getattr__(self, name):   # p, rng and whatever else the sampler has
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def state(self, history: Sequence[int]) -> Grammar:
        """The grammar state after history (the prompt, then generated tokens)."""
        gen = [int(t) for t in history[self.n_prompt:]]
        n = 0
        while n < min(len(gen), len(self._tokens)) and gen[n] == self._tokens[n]:
            n += 1
        for i in [i for i in self._states if i > n]:   # a rejected draft: its states go
            self._states.pop(i).close()
        del self._tokens[n:]
        if n not in self._states:   # further back than kept: replay from the start
            base = self._states[0].clone()
            for t in self._tokens[:n]:
                base.accept(t)
            self._states[n] = base
        for t in gen[n:]:
            g = self._states[len(self._tokens)].clone()
            g.accept(t)
            self._tokens.append(t)
            self._states[len(self._tokens)] = g
            old = len(self._tokens) - _KEEP
            if old > 0 and old in self._states:
                self._states.pop(old).close()
        return self._states[len(self._tokens)]

    def sample(self, logits: np.ndarray, history: Sequence[int] = (), *args, **kwargs) -> int:
        g = self.state(history)
        tok = self.inner.sample(logits, history, *args, **kwargs)
        if g.allows(tok):
            return tok
        return self.inner.sample(g.mask(np.asarray(logits, dtype=np.float32)), history, *args, **kwargs)

    def distribution(self, logits: np.ndarray, history: Sequence[int] = (), *args, **kwargs) -> np.ndarray:
        g = self.state(history)
        return self.inner.distribution(g.mask(np.asarray(logits, dtype=np.float32)), history, *args, **kwargs)

    def close(self) -> None:
        for g in self._states.values():
            g.close()
        self._states = {}


def constrain(sampler, vocab, grammar, n_prompt: int):
    """sampler under grammar (a llama_cpp.LlamaGrammar, a GBNF string, or None: sampler itself)."""
    if grammar is None:
        return sampler
    return ConstrainedSampler(sampler, Grammar(vocab, grammar), n_prompt)
