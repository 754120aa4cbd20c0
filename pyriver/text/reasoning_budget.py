"""llama.cpp's reasoning-budget sampler (common/reasoning-budget.cpp, llama-server's
--reasoning-budget N and a request's reasoning_budget_tokens), ported: it lives in llama.cpp's
libcommon, which llama-cpp-python does not bind, so this is its state machine token for token.

IDLE until the start tag's tokens (the generation prompt's count: a template that opens thinking
starts it COUNTING); COUNTING down the budget with each token until an end tag closes the block
(DONE) or the budget runs out, then (once the token's text is complete UTF-8) FORCING the forced
sequence (the reasoning_budget_message's tokens, then the first end tag's) one token at a time, by
setting every other logit to -inf before the request's chain runs (so a chain that draws still
draws, as llama.cpp's); DONE re-arms on a new start tag. Tags match as llama.cpp's matcher: the
longest sequence ending at a token, the match restarting after each."""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

IDLE, COUNTING, FORCING, WAITING_UTF8, DONE = range(5)


class _Matcher:
    """token_matcher: the index of the longest sequence ending at this token (-1: none); after a
    match (or reset) earlier tokens take part in no match."""

    def __init__(self, seqs: Sequence[Sequence[int]]):
        self.seqs: List[List[int]] = []
        for s in seqs:
            if s and list(s) not in self.seqs:
                self.seqs.append(list(s))
        self.buf: List[int] = []
        self.longest = max((len(s) for s in self.seqs), default=0)

    def advance(self, tok: int) -> int:
        self.buf = (self.buf + [tok])[-self.longest:] if self.longest else []
        best = -1
        for i, s in enumerate(self.seqs):
            if len(s) <= len(self.buf) and self.buf[-len(s):] == s and (best < 0 or len(s) > len(self.seqs[best])):
                best = i
        if best >= 0:
            self.buf = []
        return best

    def reset(self) -> None:
        self.buf = []


def utf8_complete(piece: bytes) -> bool:
    """common_utf8_is_complete: the bytes do not end inside a multi-byte character."""
    n = len(piece)
    for back in range(1, min(4, n) + 1):
        c = piece[n - back]
        if c & 0xC0 == 0x80:   # a continuation byte: look further back for its lead
            continue
        need = 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 else 4 if c & 0xF8 == 0xF0 else 1
        return back >= need
    return True


class Budget:
    """The state machine (common_reasoning_budget_ctx), fed accepted tokens."""

    def __init__(self, start: List[int], ends: List[List[int]], forced: List[int], budget: int, piece=None):
        self.start, self.end = _Matcher([start]), _Matcher(ends)
        self.forced, self.budget, self.piece = list(forced), int(budget), piece
        self.state, self.remaining, self.pos = IDLE, self.budget, 0

    def _count_from_start(self) -> None:
        self.state, self.remaining = COUNTING, self.budget
        if self.remaining <= 0:
            self.state, self.pos = FORCING, 0

    def accept(self, tok: int) -> None:
        s = self.state
        if s == IDLE:
            if self.start.advance(tok) >= 0:
                self._count_from_start()
        elif s in (COUNTING, WAITING_UTF8):
            if self.end.advance(tok) >= 0:
                self.state = DONE
                return
            complete = True if self.piece is None else utf8_complete(self.piece(tok))
            if s == WAITING_UTF8:
                if complete:
                    self.state, self.pos = FORCING, 0
                    self.end.reset()
            else:
                self.remaining -= 1
                if self.remaining <= 0:
                    self.state = FORCING if complete else WAITING_UTF8
                    self.pos = 0
                    self.end.reset()
        elif s == FORCING:
            self.end.advance(tok)
            self.pos += 1
            if self.pos >= len(self.forced):
                self.state = DONE
        elif self.start.advance(tok) >= 0:   # DONE: a new thinking block gets a fresh budget
            self.end.reset()
            self._count_from_start()

    def forcing(self) -> Optional[int]:
        """The token it forces now, or None."""
        if self.state == FORCING and self.pos < len(self.forced):
            return self.forced[self.pos]
        return None


class BudgetSampler:
    """A request's sampler under a reasoning budget: the budget fed the prefill (the generation
    prompt's tokens) and then the generated tokens (history[n_prompt:]); a rewound history (a
    rejected draft) replays it from the start."""

    def __init__(self, sampler, make_budget, prefill: Sequence[int], n_prompt: int):
        self.inner, self.make, self.prefill, self.n_prompt = sampler, make_budget, list(prefill), int(n_prompt)
        self._restart()

    def __getattr__(self, name):   # p, rng, greedy and whatever else the sampler has
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _restart(self) -> None:
        self.budget, self.fed = self.make(), []
        for t in self.prefill:
            self.budget.accept(t)

    def _sync(self, history: Sequence[int]) -> None:
        gen = [int(t) for t in history[self.n_prompt:]]
        k = len(self.fed)
        if len(gen) < k or gen[:k] != self.fed:
            self._restart()
            k = 0
        for t in gen[k:]:
            self.budget.accept(t)
        self.fed = gen

    def _masked(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        self._sync(history)
        tok = self.budget.forcing()
        if tok is None:
            return logits
        x = np.full(np.asarray(logits).shape, -np.inf, dtype=np.float32)
        x[tok] = np.asarray(logits, dtype=np.float32)[tok]
        return x

    def sample(self, logits: np.ndarray, history: Sequence[int] = (), *args, **kwargs) -> int:
        return self.inner.sample(self._masked(logits, history), history, *args, **kwargs)

    def greedy_scores(self, logits: np.ndarray, history: Sequence[int] = (), *args, **kwargs):
        f = getattr(self.inner, "greedy_scores", None)
        return None if f is None else f(self._masked(logits, history), history, *args, **kwargs)

    def distribution(self, logits: np.ndarray, history: Sequence[int] = (), *args, **kwargs) -> np.ndarray:
        return self.inner.distribution(self._masked(logits, history), history, *args, **kwargs)
