"""Several sequences decoded together: one native context with n_seq slots (a KV region each) on a
Llama's model, and one step over the tokens of any of them (pr_decode_batch). The Llama keeps its
own single-sequence context; this one has the same parameters and exit rule. A Llama on another
engine gets pyriver.batch_engine's decoder, on that engine's context."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

import numpy as np

from .native import check, ffi, last_error, lib
from .engine import native as engine_native
from .errors import PyriverError

# How a step over several sequences leaves the backbone (pr_exit_params.batch_rule).
BATCH_RULES = {"split": 0, "minimum": 1, "all": 2}


@dataclass
class Feed:
    """Tokens of one sequence in a step: a prompt chunk (full depth) or one decode-step token."""
    seq: int
    tokens: Sequence[int]
    prompt: bool = False
    logits: bool = True   # the logits of its last token are wanted
    all_logits: bool = False   # the logits of every token (a lossless verify step), [n, n_vocab]


def _check_args(n_seq: int, batch_rule: str) -> None:
    if n_seq < 1:
        raise ValueError(f"n_seq must be >= 1, got {n_seq}")
    if batch_rule not in BATCH_RULES:
        raise ValueError(f"batch_rule must be one of {', '.join(BATCH_RULES)}, got {batch_rule!r}")


class BatchDecoder:
    """On the native engine, this class (its steps straight through cffi, no engine layer in
    between); on another engine, pyriver.batch_engine's EngineBatchDecoder, same surface."""
    partial_cuts = True          # truncate keeps a prefix in place
    can_batch_invariant = True

    def __new__(cls, llm, n_seq: int, batch_rule: str = "split"):
        _check_args(n_seq, batch_rule)
        if not getattr(llm, "_native_model", None):
            if getattr(llm, "_engine", None) is None:
                raise ValueError("BatchDecoder needs a loaded Llama (not vocab_only, not closed)")
            from .batch_engine import EngineBatchDecoder
            return EngineBatchDecoder(llm, n_seq, batch_rule)   # not a BatchDecoder: __init__ is not run on it
        return super().__new__(cls)

    def __init__(self, llm, n_seq: int, batch_rule: str = "split"):
        self.llm = llm
        self.n_seq = n_seq
        self.n_vocab = llm.n_vocab()
        cp = ffi.new("pr_context_params *", llm.context_params[0])
        cp.n_seq_max = n_seq
        out = ffi.new("pr_context **")
        check(lib.pr_context_new(llm._native_model, cp, out))
        self._ctx = out[0]
        self.n_ctx = lib.pr_n_ctx(self._ctx)
        self.n_batch = cp.n_batch
        self.batch_rule = batch_rule
        self.exiting = False
        self.before_step = None   # called right before each native step (the server's hand-over to its event loop)
        if llm.exit_params is not None:
            p, d = llm.exit_params
            ep = ffi.new("pr_exit_params *", p[0])
            ep.batch_rule = BATCH_RULES[batch_rule]
            check(lib.pr_context_set_exit_debug(self._ctx, ep, d))
            self.exiting = d.force_exit_layer >= 0 or ep.exit_threshold <= 1.0

    def close(self) -> None:
        ctx, self._ctx = self._ctx, ffi.NULL   # cleared first, as Llama.close
        if ctx:
            lib.pr_context_free(ctx)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def _native_ctx(self):
        """The native context under Llama's name for its own (pyriver.debug reaches a context by it)."""
        return self._ctx

    def pos(self, seq: int) -> int:
        """Tokens of sequence seq in the cache."""
        n = lib.pr_seq_pos(self._ctx, int(seq))
        if n < 0:
            raise ValueError(last_error())
        return n

    @property
    def batch_invariant(self) -> bool:
        return bool(lib.pr_context_batch_invariant(self._ctx))

    def set_batch_invariant(self, on: bool) -> None:
        """Batch invariance for the steps that follow (pr_context_set_batch_invariant)."""
        check(lib.pr_context_set_batch_invariant(self._ctx, 1 if on else 0))

    def truncate(self, seq: int, n_keep: int) -> None:
        check(lib.pr_seq_truncate(self._ctx, int(seq), int(n_keep)))

    def state_get(self, seq: int) -> bytes:
        """Sequence seq's cache as bytes (state_set loads them into any sequence of this decoder)."""
        return engine_native.state_get(self._ctx, seq)

    def state_set(self, seq: int, blob: bytes) -> None:
        engine_native.state_set(self._ctx, blob, seq)

    def step(self, feeds: List[Feed]) -> Dict[int, tuple]:
        """Runs one step over the feeds (one per sequence, at most n_batch tokens in all). Returns
        {seq: (logits of its last token or None, or of every token with all_logits, exit block of
        each of its tokens)}."""
        if not self._ctx:
            raise RuntimeError("this BatchDecoder is closed")
        toks, seqs, pos, want, prompt = [], [], [], [], []
        for f in feeds:
            if not f.tokens:
                raise ValueError(f"sequence {f.seq}: a feed needs at least one token")
            p0 = self.pos(f.seq)
            n = len(f.tokens)
            toks.extend(int(t) for t in f.tokens)
            seqs.extend([int(f.seq)] * n)
            pos.extend(range(p0, p0 + n))
            want.extend([1 if f.all_logits else 0] * (n - 1) + [1 if f.logits or f.all_logits else 0])
            prompt.extend([1 if f.prompt else 0] * n)
        n = len(toks)
        arr = lambda v: ffi.new("int32_t[]", v)   # noqa: E731
        args = arr(toks), arr(seqs), arr(pos), arr(want), arr(prompt)
        if self.before_step is not None:
            self.before_step()
        check(lib.pr_decode_batch(self._ctx, *args, n))
        exits = ffi.new("int32_t[]", n)
        lib.pr_exit_layers(self._ctx, exits, n)
        out, row, at = {}, 0, 0
        for f in feeds:
            k = len(f.tokens)
            logits = None
            if f.all_logits:
                logits = self._rows(row, k)
                row += k
            elif f.logits:
                logits = self._row(row)
                row += 1
            out[f.seq] = (logits, list(exits[at:at + k]))
            at += k
        return out

    def _rows(self, row: int, k: int) -> np.ndarray:
        """Rows row..row+k-1 as one [k, n_vocab] copy (a verify step's: up to 64 rows of 600 KB on the
        1.5B, so one copy of the native buffer where its rows lie back to back)."""
        first, last = lib.pr_logits(self._ctx, row), lib.pr_logits(self._ctx, row + k - 1)
        if first == ffi.NULL or last == ffi.NULL or int(ffi.cast("uintptr_t", last)) - int(ffi.cast("uintptr_t", first)) \
                != 4 * self.n_vocab * (k - 1):
            return np.stack([self._row(row + i) for i in range(k)])
        return np.frombuffer(ffi.buffer(first, 4 * self.n_vocab * k), dtype=np.float32).reshape(k, self.n_vocab).copy()

    def _row(self, row: int) -> np.ndarray:
        ptr = lib.pr_logits(self._ctx, row)
        if ptr == ffi.NULL:
            raise PyriverError(last_error())
        return np.frombuffer(ffi.buffer(ptr, 4 * self.n_vocab), dtype=np.float32).copy()
