"""BatchDecoder on an engine's own context (pyriver.engine: the llama.cpp engine's): several
sequences in one context of n_seq sequences, one step over the tokens of any of them. The same
surface as the native BatchDecoder (step, pos, truncate, close), with what such an engine lacks
said plainly: no exits (every token full depth), no batch invariance, and a memory that may not
cut part-way (partial_cuts False: a recurrent or hybrid model's, whose truncate runs the kept
tokens again; the server's scheduler then reuses a slot's cache only whole, as llama-server)."""
from __future__ import annotations

from typing import Dict, List

from .engine import ContextArgs


class EngineBatchDecoder:
    exiting = False               # no River on such an engine: every token runs at full depth
    batch_invariant = False
    can_batch_invariant = False   # llama.cpp's multi-token kernels only

    def __init__(self, llm, n_seq: int, batch_rule: str = "split"):
        self.llm = llm
        self.n_seq = n_seq
        self.n_vocab = llm.n_vocab()
        self.batch_rule = batch_rule   # a rule for exits; without exits it changes nothing
        self.before_step = None
        self._ctx = llm._engine.new_context(ContextArgs(
            llm._n_ctx, llm.n_batch, llm.n_ubatch, llm.n_threads, llm.n_threads_batch,
            bool(llm._init_args.get("flash_attn", False)), None, False, n_seq))
        self.n_ctx = self._ctx.n_ctx
        self.n_batch = self._ctx.n_batch
        self.partial_cuts = self._ctx.partial_cuts
        self._n_full = llm.info["n_layer"] - 1

    def close(self) -> None:
        ctx, self._ctx = self._ctx, None
        if ctx is not None:
            ctx.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def pos(self, seq: int) -> int:
        return self._ctx.pos(int(seq))

    def set_batch_invariant(self, on: bool) -> None:
        if on:
            raise ValueError(f"batch invariance: the {self.llm.engine} engine computes with llama.cpp's multi-token "
                             "kernels (the native engine has it)")

    def set_lora(self, scales) -> None:
        """The engine's LoRA adapters at these scales for the steps that follow (one per adapter)."""
        self._ctx.set_lora(scales)

    def truncate(self, seq: int, n_keep: int) -> None:
        self._ctx.truncate(int(n_keep), int(seq))

    def state_get(self, seq: int) -> bytes:
        return self._ctx.state_get(int(seq))

    def state_set(self, seq: int, blob: bytes) -> None:
        self._ctx.state_set(blob, int(seq))

    def step(self, feeds) -> Dict[int, tuple]:
        """As BatchDecoder.step; every token's exit block is the last (full depth)."""
        if self._ctx is None:
            raise RuntimeError("this BatchDecoder is closed")
        toks: List[int] = []
        seqs: List[int] = []
        pos: List[int] = []
        want: List[int] = []
        for f in feeds:
            if not f.tokens:
                raise ValueError(f"sequence {f.seq}: a feed needs at least one token")
            n, p0 = len(f.tokens), self._ctx.pos(int(f.seq))
            toks.extend(f.tokens)
            seqs.extend([int(f.seq)] * n)
            pos.extend(range(p0, p0 + n))
            want.extend([1 if f.all_logits else 0] * (n - 1) + [1 if f.logits or f.all_logits else 0])
        if self.before_step is not None:
            self.before_step()
        rows = self._ctx.decode_batch(toks, seqs, pos, want, [0] * len(toks))
        out, row = {}, 0
        for f in feeds:
            k = len(f.tokens)
            logits = None
            if f.all_logits:
                logits, row = rows[row:row + k], row + k
            elif f.logits:
                logits, row = rows[row], row + 1
            out[f.seq] = (logits, [self._n_full] * k)
        return out
