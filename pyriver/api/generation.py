"""`Llama.context` (a part of `pyriver.Llama`): the engine's context with its KV cache bookkeeping
(which tokens are cached and how each was computed), decode steps and the decode loop. Its public
methods are the step interface that lossless drafts (pyriver.speculative), River's measurements and
the server's scheduler use: truncate, sync_prefix, decode_logits, version."""
from __future__ import annotations

import itertools
import time
from dataclasses import replace
from typing import Iterator, List, Optional, Sequence, Union

import numpy as np

from pyriver.engine.mtmd import NULL_TOKEN
from pyriver.errors import ContextFullError
from pyriver.text.logprobs import entry as logprob_entry
from pyriver.engine.sampling import Sampler


class TokenLimit:
    """The most tokens a generation may make, which its consumer may raise as it goes: llama_cpp's
    completion samples past max_tokens while its text ends inside a UTF-8 character
    (completion_api.multibyte_fix), and its generator runs a token only when the next is asked for."""

    def __init__(self, n: int):
        self.n = int(n)


class Context:
    """The Llama's context: `engine` is the engine's context (pyriver.engine: native or llama.cpp's),
    `args` the ContextArgs it was made from (what a BatchDecoder on the same model starts from),
    `tokens` the tokens whose K/V are in the cache, in order, `kinds` how each was computed
    (PROMPT_LIKE or STEP), `version` a count of the cache's changes, whoever made them."""

    # How a cached token was computed. PROMPT_LIKE: at full depth. STEP: a decode step under an exit
    # rule, whose K/V are not full depth's; it is never reused as a prompt token. A full-depth
    # decode step is PROMPT_LIKE on every context: on a batch-invariant one its bits are a
    # prompt's; on the default one any matching prefix is reused, as llama_cpp.Llama reuses it,
    # so that the same calls give llama.cpp's bits (a chat's next turn reuses the answer).
    PROMPT_LIKE, STEP = 0, 1

    def __init__(self, llm, engine, args, logits_all: bool):
        self.llm = llm
        self.engine = engine            # the engine's context (None once closed)
        self.args = args                # ContextArgs
        self.n_ctx = engine.n_ctx       # as the engine made it (llama.cpp rounds n_ctx up)
        self.logits_all = bool(logits_all)
        self.tokens: List[int] = []     # the tokens whose K/V are in the cache, in order
        self.kinds: List[int] = []      # for each: PROMPT_LIKE, or STEP (see step_kind)
        self.last_logits = None         # logits of the last evaluated token
        self.requires_eval = True       # no live logits for the last cached token (llama_cpp's flag)
        self.version = 0                # counts the changes of the cache, whoever made them
        self.ids = np.zeros(self.n_ctx, dtype=np.intc)   # input_ids
        if self.logits_all:   # pages are touched only as rows are written
            self.scores_all = np.zeros((self.n_ctx, llm.n_vocab()), dtype=np.single)

    def close(self) -> None:
        ctx, self.engine = self.engine, None   # cleared before it is freed (Llama.close)
        if ctx is not None:
            ctx.close()

    def set_wide_prompt_rows(self, n: int) -> None:
        """From how many rows a prompt step reads batch_layout's second layout, kept in the context
        arguments, so that a BatchDecoder's context (the server's) reads it too."""
        self.engine.set_wide_prompt_rows(n)   # a negative n: the native check's ValueError
        self.args = replace(self.args, wide_prompt_rows=int(n))

    def set_verify_tile_rows(self, n: int) -> None:
        """From how many rows verify steps attend tiled (engine Context.set_verify_tile_rows; 0:
        never), kept in the context arguments as wide_prompt_rows is."""
        self.engine.set_verify_tile_rows(n)
        self.args = replace(self.args, verify_tile_rows=int(n))
        self.llm.verify_tile_rows = int(n)

    def note_logits(self, n_new: int, rows: np.ndarray) -> None:
        """After a decode of n_new tokens ending at n_tokens: the last row, and every row into
        scores with logits_all. A single row is kept as it is (decode_logits made it a fresh copy;
        llama_cpp's processors too write into the scores they are given); a row of many is copied
        so that it does not keep the others alive."""
        self.last_logits = rows[-1] if rows.shape[0] == 1 else rows[-1].copy()
        self.requires_eval = False
        if self.logits_all:
            end = len(self.tokens)
            self.scores_all[end - rows.shape[0]:end] = rows

    # -- evaluation -------------------------------------------------------------------------
    def set_n_tokens(self, n: int) -> None:
        """llama_cpp code rewinds by assigning n_tokens; the cache keeps the first n. A larger n is
        what llama-cpp-python's multimodal chat handlers set after libmtmd decoded an image on the
        context itself: the engine checks that its cache holds n positions, the new ones media
        (NULL_TOKEN in input_ids, as llama-server keeps them)."""
        with self.llm.lock:
            n = int(n)
            if n > len(self.tokens) and self.engine is not None:
                self.engine.note_external(n)   # a ValueError unless the cache holds exactly n
                self.version += 1
                k = n - len(self.tokens)
                self.tokens += [NULL_TOKEN] * k
                self.kinds += [self.PROMPT_LIKE] * k   # full depth, reusable by a prompt that holds them
                self.last_logits = None
            if not 0 <= n <= len(self.tokens):
                raise ValueError(f"n_tokens must be in [0, {len(self.tokens)}], got {n}")
            if n < len(self.tokens):
                self.truncate(n)
            self.requires_eval = True


    def reset(self) -> None:
        with self.llm.lock:
            self.llm.check_live()
            self.version += 1   # before the change: an interrupt after it must not hide it
            self.requires_eval = True
            self.engine.clear()
            self.tokens = []
            self.kinds = []

    def reconcile(self) -> None:
        """Make tokens agree with the native cache again: a KeyboardInterrupt can land between
        a native step (decode, truncate) and the bookkeeping after it. The shorter side wins."""
        n = self.engine.pos()
        del self.kinds[len(self.tokens):]
        if len(self.tokens) > n:
            self.version += 1
            self.requires_eval = True
            del self.tokens[n:]
            del self.kinds[n:]
        elif len(self.tokens) < n:
            self.version += 1
            self.engine.truncate(len(self.tokens))

    def truncate(self, n_keep: int) -> None:
        self.version += 1
        if n_keep < len(self.tokens):
            self.requires_eval = True   # the last logits were of a token now cut
        self.engine.truncate(n_keep)
        del self.tokens[n_keep:]
        del self.kinds[n_keep:]

    def step_kind(self) -> int:
        return self.STEP if self.llm.river.exiting else self.PROMPT_LIKE

    def decode_logits(self, tokens: Sequence[int], logits_all: bool = False, prompt: bool = False) -> np.ndarray:
        """Append tokens to the cache and run them. Returns logits [n_outputs, n_vocab]: every
        token's with logits_all, else the last token's. prompt marks a single token as a prompt
        (pr_decode's prompt rule: a prompt runs at full depth, a decode step under the exits);
        engine.VERIFY marks a lossless verify step (Context.set_verify_tile_rows)."""
        with self.llm.lock:
            self.llm.check_live()
            toks = [int(t) for t in tokens]
            if not toks:
                raise ValueError("eval needs at least one token")
            self.reconcile()
            self.version += 1
            # every row with logits_all=True at construction (llama-cpp-python's scores)
            all_rows = logits_all or self.logits_all
            rows = self.engine.decode(toks, all_rows, prompt)
            self.tokens.extend(toks)
            step = len(toks) == 1 and not prompt   # pr_decode's prompt rule
            self.kinds.extend([self.step_kind() if step else self.PROMPT_LIKE] * len(toks))
            self.llm.last_exits = self.engine.exit_layers(len(toks))
            self.note_logits(len(toks), rows)
            return rows if logits_all else rows[-1:]

    def sync_prefix(self, tokens: List[int], n_prompt: int, need_logits: bool = True):
        """Bring the cache to hold exactly `tokens`: the first n_prompt a prompt, the rest this
        generation's own tokens. Returns the last token's logits (with need_logits, the last token
        is run again when cached; else None when nothing ran), how many tokens were evaluated and
        the exit blocks of those evaluated as decode steps.
        A cached token is reused unless an exit rule computed it (step_kind) or it was computed
        under another rule than now. This generation's own tokens are re-run one decode step each,
        as they were first computed, except on a batch-invariant context without exits, where a
        step's bits do not depend on its size and one prompt step runs them all (what each
        context guarantees: the comment above PROMPT_LIKE)."""
        self.reconcile()
        step_kind = self.step_kind()
        want = lambda i: self.PROMPT_LIKE if i < n_prompt else step_kind   # noqa: E731
        n = 0
        # keep >= 1 token to run for the logits, as llama_cpp does: the last one when all are cached
        limit = min(len(tokens) - need_logits, len(self.tokens))
        while n < limit and self.tokens[n] == tokens[n] and self.kinds[n] == want(n):
            n += 1
        if n < len(self.tokens) and not self.engine.partial_cuts:
            n = 0   # a recurrent state is not cut part-way: the prompt runs whole, as llama_cpp runs it
        self.truncate(n)
        # Generated tokens are decode steps again, unless a decode step computes what a prompt does.
        split = len(tokens) if step_kind == self.PROMPT_LIKE and self.engine.batch_invariant else max(n_prompt, n)
        logits = self.decode_logits(tokens[n:split], prompt=True)[-1] if split > n else None
        step_exits = []   # (index in tokens, exit block) of the decode steps
        for i in range(split, len(tokens)):
            logits = self.decode_logits([tokens[i]])[-1]
            step_exits.append((i, self.llm.last_exits[0]))
        return logits, len(tokens) - n, step_exits

    # -- generation -------------------------------------------------------------------------
    def generate_tokens(self, tokens: Sequence[int], sampler: Sampler, max_new: Union[int, "TokenLimit"],
                         logprobs: Optional[int] = None) -> Iterator[int]:
        """Yield sampled tokens after the prompt `tokens`, until max_new (a TokenLimit: as its consumer
        has it when asking for the next token) or the context ends.
        Each step holds the lock and re-syncs the cache, so interleaved users stay correct.
        Timings of the call go to Llama.last_stats."""
        seq = [int(t) for t in tokens]
        if len(seq) > self.n_ctx:
            raise ContextFullError(f"Requested tokens ({len(seq)}) exceed context window of {self.n_ctx}")
        st = self.llm.last_stats = {"prompt_tokens": len(seq), "prompt_eval_tokens": 0, "prompt_s": 0.0,
                                "decode_tokens": 0, "decode_s": 0.0, "exits": [], "logprobs": []}
        lim = max_new if isinstance(max_new, TokenLimit) else TokenLimit(max_new)
        if self.llm.speculator is not None:
            yield from self.llm.speculator.generate(self.llm, seq, sampler, lim, logprobs, st)
            return
        n_prompt = len(seq)
        gen_exits = st["exits"]   # exit block of each generated token, by position
        logits = None
        mine = -1   # the cache version when this generation last had the cache as it left it
        for k in itertools.count():
            if k >= lim.n:
                return
            with self.llm.lock:
                self.llm.check_live()
                if logits is None or self.version != mine:   # another caller used the cache
                    t0 = time.perf_counter()
                    logits, n_eval, step_exits = self.sync_prefix(seq, n_prompt)
                    st["prompt_s"] += time.perf_counter() - t0
                    st["prompt_eval_tokens"] += n_eval
                    for i, e in step_exits:
                        self.note_exit(gen_exits, i - n_prompt, e)
                tok = sampler.sample(logits, seq)
                if self.llm.vocab.is_eog(tok):
                    return
                if logprobs is not None:
                    st["logprobs"].append(logprob_entry(logits, tok, logprobs))
                st["logits"] = logits   # what chose tok (stopping criteria read it)
                mine = self.version
                yield tok
                # Another generation on this thread may have used the cache while this one was
                # suspended (the lock is reentrant): then the token runs with the next re-sync.
                seq.append(tok)
                if len(seq) >= self.n_ctx or k >= lim.n - 1:   # the last token is not run, as in llama_cpp
                    return
                if self.version != mine:
                    continue
                t0 = time.perf_counter()
                logits = self.decode_logits([tok])[-1]
                mine = self.version
                st["decode_s"] += time.perf_counter() - t0
                st["decode_tokens"] += 1
                self.note_exit(gen_exits, len(seq) - 1 - n_prompt, self.llm.last_exits[0])

    @staticmethod
    def note_exit(exits: List[int], j: int, e: int) -> None:
        """The exit block of generated token j (a re-run token gets its first exit again)."""
        if j == len(exits):
            exits.append(e)
        elif j < len(exits):
            exits[j] = e

