"""Several sequences decoded together: one engine context with n_seq sequences on a Llama's model,
and one step over the tokens of any of them (Context.decode_batch). The Llama keeps its own
single-sequence context; this one has the same parameters and exit rule. What an engine lacks is
said by its context: no exits (every token full depth), no batch invariance (can_batch_invariant),
a memory that cannot be cut part-way (partial_cuts False: a recurrent or hybrid model's, whose
truncate runs the kept tokens again; the server's scheduler then reuses a slot's cache only whole,
as llama-server)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence

from pyriver.engine import BATCH_RULES, VERIFY, kv_types


@dataclass
class Feed:
    """Tokens of one sequence in a step: a prompt chunk (full depth) or one decode-step token."""
    seq: int
    tokens: Sequence[int]
    prompt: bool = False
    logits: bool = True   # the logits of its last token are wanted
    all_logits: bool = False   # the logits of every token (a lossless verify step), [n, n_vocab]
    media: object = None   # an engine.mtmd.Media for its positions (tokens: NULL_TOKEN each); no logits


class BatchDecoder:
    def __init__(self, llm, n_seq: int, batch_rule: str = "split"):
        if n_seq < 1:
            raise ValueError(f"n_seq must be >= 1, got {n_seq}")
        if batch_rule not in BATCH_RULES:
            raise ValueError(f"batch_rule must be one of {', '.join(BATCH_RULES)}, got {batch_rule!r}")
        if getattr(llm, "backend", None) is None:
            raise ValueError("BatchDecoder needs a loaded Llama (not vocab_only, not closed)")
        self._ectx = None
        self.llm = llm
        self.n_seq = n_seq
        self.n_vocab = llm.n_vocab()
        self._engine = llm.backend   # with _ectx, where pyriver.engine.debug finds a context
        # the Llama's context size as its engine made it (llama.cpp rounds n_ctx up), per sequence
        self._ectx = llm.backend.new_context(replace(llm.context.args, n_ctx=llm.n_ctx(), n_seq_max=n_seq, embedding=False))
        self.n_ctx = self._ectx.n_ctx
        self.n_batch = self._ectx.n_batch
        self.partial_cuts = self._ectx.partial_cuts
        self.can_batch_invariant = self._ectx.can_batch_invariant
        self.batch_rule = batch_rule
        self.exiting = False
        self.before_step = None   # called right before each step (the server's hand-over to its event loop)
        if llm.river.exit is not None:
            self._ectx.set_exit(llm.river.exit, batch_rule)
            self.exiting = llm.river.exit.exits

    def kv_cache(self) -> Optional[Dict]:
        """The slots' KV cache: its types and bytes (Llama.kv_cache's shape); None once closed."""
        if self._ectx is None:
            return None
        a = self.llm.context.args
        return kv_types.describe(a.type_k, a.type_v, *self._ectx.kv_bytes())

    def close(self) -> None:
        ctx, self._ectx = self._ectx, None   # cleared first, as Llama.close
        if ctx is not None:
            ctx.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def pos(self, seq: int) -> int:
        """Tokens of sequence seq in the cache."""
        return self._ectx.pos(int(seq))

    @property
    def batch_invariant(self) -> bool:
        return self._ectx.batch_invariant

    def set_batch_invariant(self, on: bool) -> None:
        """Batch invariance for the steps that follow."""
        self._ectx.set_batch_invariant(on)

    def set_lora(self, scales) -> None:
        """The engine's LoRA adapters at these scales for the steps that follow (one per adapter)."""
        self._ectx.set_lora(scales)

    def truncate(self, seq: int, n_keep: int) -> None:
        self._ectx.truncate(int(n_keep), int(seq))

    @property
    def can_shift(self) -> bool:
        """Whether drop moves cached rows (the engine's Context.can_shift)."""
        return self._ectx.can_shift

    def drop(self, seq: int, p0: int, p1: int) -> None:
        """Removes positions [p0, p1) of seq, the later rows moved down (Context.drop)."""
        self._ectx.drop(int(seq), int(p0), int(p1))

    def state_get(self, seq: int) -> bytes:
        """Sequence seq's cache as bytes (state_set loads them into any sequence of this decoder)."""
        return self._ectx.state_get(int(seq))

    def state_set(self, seq: int, blob: bytes) -> None:
        self._ectx.state_set(blob, int(seq))

    def step(self, feeds: List[Feed]) -> Dict[int, tuple]:
        """Runs one step over the feeds (one per sequence, at most n_batch tokens in all; a media
        feed's chunk is decoded first, on its own). Returns {seq: (logits of its last token or None,
        or of every token with all_logits, exit block of each of its tokens)}."""
        if self._ectx is None:
            raise RuntimeError("this BatchDecoder is closed")
        toks: List[int] = []
        seqs: List[int] = []
        pos: List[int] = []
        want: List[int] = []
        prompt: List[int] = []
        media = [f for f in feeds if f.media is not None]
        if media and self.before_step is not None:
            self.before_step()
        for f in media:   # each its own decode before the step's, as llama-server runs a media chunk
            self._ectx.decode_media(f.media, int(f.seq))
        feeds = [f for f in feeds if f.media is None]
        out = {f.seq: (None, []) for f in media}
        if not feeds:
            return out
        for f in feeds:
            if not f.tokens:
                raise ValueError(f"sequence {f.seq}: a feed needs at least one token")
            n, p0 = len(f.tokens), self._ectx.pos(int(f.seq))
            toks.extend(int(t) for t in f.tokens)
            seqs.extend([int(f.seq)] * n)
            pos.extend(range(p0, p0 + n))
            want.extend([1 if f.all_logits else 0] * (n - 1) + [1 if f.logits or f.all_logits else 0])
            prompt.extend([VERIFY if f.all_logits else 1 if f.prompt else 0] * n)   # all_logits: a verify step
        if self.before_step is not None:
            self.before_step()
        rows = self._ectx.decode_batch(toks, seqs, pos, want, prompt)
        exits = self._ectx.exit_layers(len(toks))
        row, at = 0, 0
        for f in feeds:
            k = len(f.tokens)
            logits = None
            if f.all_logits:
                logits, row = rows[row:row + k], row + k
            elif f.logits:
                logits, row = rows[row], row + 1
            out[f.seq] = (logits, exits[at:at + k])
            at += k
        return out
