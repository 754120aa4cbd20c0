"""Evaluation and token generation of `pyriver.Llama` (a mixin): the KV cache bookkeeping
(which tokens are cached and how each was computed), eval, and the decode loop."""
from __future__ import annotations

import itertools
import time
from typing import Iterator, List, Optional, Sequence, Union

import numpy as np

from pyriver.errors import ContextFullError
from pyriver.text.logprobs import entry as logprob_entry
from pyriver.engine.sampling import Sampler


class TokenLimit:
    """The most tokens a generation may make, which its consumer may raise as it goes: llama_cpp's
    completion samples past max_tokens while its text ends inside a UTF-8 character
    (completion_api.multibyte_fix), and its generator runs a token only when the next is asked for."""

    def __init__(self, n: int):
        self.n = int(n)


class GenerationMixin:
    # -- evaluation -------------------------------------------------------------------------
    def reset(self) -> None:
        with self._lock:
            self._live()
            self._version += 1   # before the change: an interrupt after it must not hide it
            self._requires_eval = True
            self._ectx.clear()
            self._tokens = []
            self._kinds = []

    def _reconcile(self) -> None:
        """Make _tokens agree with the native cache again: a KeyboardInterrupt can land between
        a native step (decode, truncate) and the bookkeeping after it. The shorter side wins."""
        n = self._ectx.pos()
        del self._kinds[len(self._tokens):]
        if len(self._tokens) > n:
            self._version += 1
            self._requires_eval = True
            del self._tokens[n:]
            del self._kinds[n:]
        elif len(self._tokens) < n:
            self._version += 1
            self._ectx.truncate(len(self._tokens))

    def _truncate(self, n_keep: int) -> None:
        self._version += 1
        if n_keep < len(self._tokens):
            self._requires_eval = True   # the last logits were of a token now cut
        self._ectx.truncate(n_keep)
        del self._tokens[n_keep:]
        del self._kinds[n_keep:]

    # How a cached token was computed. PROMPT_LIKE: at full depth. STEP: a decode step under an exit
    # rule, whose K/V are not full depth's; it is never reused as a prompt token. A full-depth
    # decode step is PROMPT_LIKE on every context: on a batch-invariant one its bits are a
    # prompt's; on the default one any matching prefix is reused, as llama_cpp.Llama reuses it,
    # so that the same calls give llama.cpp's bits (a chat's next turn reuses the answer).
    PROMPT_LIKE, STEP = 0, 1

    def _step_kind(self) -> int:
        return self.STEP if self._exiting else self.PROMPT_LIKE

    def decode_logits(self, tokens: Sequence[int], logits_all: bool = False, prompt: bool = False) -> np.ndarray:
        """Append tokens to the cache and run them. Returns logits [n_outputs, n_vocab]: every
        token's with logits_all, else the last token's. prompt marks a single token as a prompt
        (pr_decode's prompt rule: a prompt runs at full depth, a decode step under the exits);
        engine.VERIFY marks a lossless verify step (Context.set_verify_tile_rows)."""
        with self._lock:
            self._live()
            toks = [int(t) for t in tokens]
            if not toks:
                raise ValueError("eval needs at least one token")
            self._reconcile()
            self._version += 1
            # every row with logits_all=True at construction (llama-cpp-python's scores)
            all_rows = logits_all or self._logits_all
            rows = self._ectx.decode(toks, all_rows, prompt)
            self._tokens.extend(toks)
            step = len(toks) == 1 and not prompt   # pr_decode's prompt rule
            self._kinds.extend([self._step_kind() if step else self.PROMPT_LIKE] * len(toks))
            self.last_exits = self._ectx.exit_layers(len(toks))
            self._note_logits(len(toks), rows)
            return rows if logits_all else rows[-1:]

    def _sync_prefix(self, tokens: List[int], n_prompt: int, need_logits: bool = True):
        """Bring the cache to hold exactly `tokens`: the first n_prompt a prompt, the rest this
        generation's own tokens. Returns the last token's logits (with need_logits, the last token
        is run again when cached; else None when nothing ran), how many tokens were evaluated and
        the exit blocks of those evaluated as decode steps.
        A cached token is reused unless an exit rule computed it (_step_kind) or it was computed
        under another rule than now. This generation's own tokens are re-run one decode step each,
        as they were first computed, except on a batch-invariant context without exits, where a
        step's bits do not depend on its size and one prompt step runs them all (what each
        context guarantees: the comment above PROMPT_LIKE)."""
        self._reconcile()
        step_kind = self._step_kind()
        want = lambda i: self.PROMPT_LIKE if i < n_prompt else step_kind   # noqa: E731
        n = 0
        # keep >= 1 token to run for the logits, as llama_cpp does: the last one when all are cached
        limit = min(len(tokens) - need_logits, len(self._tokens))
        while n < limit and self._tokens[n] == tokens[n] and self._kinds[n] == want(n):
            n += 1
        if n < len(self._tokens) and not self._ectx.partial_cuts:
            n = 0   # a recurrent state is not cut part-way: the prompt runs whole, as llama_cpp runs it
        self._truncate(n)
        # Generated tokens are decode steps again, unless a decode step computes what a prompt does.
        split = len(tokens) if step_kind == self.PROMPT_LIKE and self.batch_invariant else max(n_prompt, n)
        logits = self.decode_logits(tokens[n:split], prompt=True)[-1] if split > n else None
        step_exits = []   # (index in tokens, exit block) of the decode steps
        for i in range(split, len(tokens)):
            logits = self.decode_logits([tokens[i]])[-1]
            step_exits.append((i, self.last_exits[0]))
        return logits, len(tokens) - n, step_exits

    # -- generation -------------------------------------------------------------------------
    def _generate_tokens(self, tokens: Sequence[int], sampler: Sampler, max_new: Union[int, "TokenLimit"],
                         logprobs: Optional[int] = None) -> Iterator[int]:
        """Yield sampled tokens after the prompt `tokens`, until max_new (a TokenLimit: as its consumer
        has it when asking for the next token) or the context ends.
        Each step holds the lock and re-syncs the cache, so interleaved users stay correct.
        Timings of the call go to self.last_stats."""
        seq = [int(t) for t in tokens]
        if len(seq) > self._n_ctx:
            raise ContextFullError(f"Requested tokens ({len(seq)}) exceed context window of {self._n_ctx}")
        st = self.last_stats = {"prompt_tokens": len(seq), "prompt_eval_tokens": 0, "prompt_s": 0.0,
                                "decode_tokens": 0, "decode_s": 0.0, "exits": [], "logprobs": []}
        lim = max_new if isinstance(max_new, TokenLimit) else TokenLimit(max_new)
        if self._spec is not None:
            yield from self._spec.generate(self, seq, sampler, lim, logprobs, st)
            return
        n_prompt = len(seq)
        gen_exits = st["exits"]   # exit block of each generated token, by position
        logits = None
        mine = -1   # the cache version when this generation last had the cache as it left it
        for k in itertools.count():
            if k >= lim.n:
                return
            with self._lock:
                self._live()
                if logits is None or self._version != mine:   # another caller used the cache
                    t0 = time.perf_counter()
                    logits, n_eval, step_exits = self._sync_prefix(seq, n_prompt)
                    st["prompt_s"] += time.perf_counter() - t0
                    st["prompt_eval_tokens"] += n_eval
                    for i, e in step_exits:
                        self._note_exit(gen_exits, i - n_prompt, e)
                tok = sampler.sample(logits, seq)
                if self.vocab.is_eog(tok):
                    return
                if logprobs is not None:
                    st["logprobs"].append(logprob_entry(logits, tok, logprobs))
                st["logits"] = logits   # what chose tok (stopping criteria read it)
                mine = self._version
                yield tok
                # Another generation on this thread may have used the cache while this one was
                # suspended (the lock is reentrant): then the token runs with the next re-sync.
                seq.append(tok)
                if len(seq) >= self._n_ctx or k >= lim.n - 1:   # the last token is not run, as in llama_cpp
                    return
                if self._version != mine:
                    continue
                t0 = time.perf_counter()
                logits = self.decode_logits([tok])[-1]
                mine = self._version
                st["decode_s"] += time.perf_counter() - t0
                st["decode_tokens"] += 1
                self._note_exit(gen_exits, len(seq) - 1 - n_prompt, self.last_exits[0])

    @staticmethod
    def _note_exit(exits: List[int], j: int, e: int) -> None:
        """The exit block of generated token j (a re-run token gets its first exit again)."""
        if j == len(exits):
            exits.append(e)
        elif j < len(exits):
            exits[j] = e

