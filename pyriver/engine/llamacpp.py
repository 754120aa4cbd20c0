"""The llama.cpp engine: llama.cpp's own model and context, through llama-cpp-python's low-level API
(llama_decode over a llama_batch of any sequences, logits per output row, the memory API for cuts,
copies and clears, llama_state_* for states). It runs every architecture llama.cpp loads, with the
same steps as llama_cpp.Llama (a call's tokens decoded n_batch at a time, n_ubatch per graph), so
the same calls give llama-cpp-python's logits. No River: llama.cpp's graphs have no exits.

llama.cpp aborts the process on some bad input (a token id out of range, a position that is not
the next one, a tokenizer with a token twice): every file is checked before llama.cpp loads it
(native.check_gguf) and every batch before it reaches llama_decode."""
from __future__ import annotations

import ctypes
import struct
from typing import List, Optional, Sequence

import llama_cpp
import numpy as np

from pyriver.engine import binding as native
from pyriver.errors import ContextFullError, ModelLoadError, PyriverError
from pyriver.engine import interrupts, kv_types, lora
from pyriver.engine.base import Context, ContextArgs, Engine, ModelArgs
from pyriver.engine.mtmd import NULL_TOKEN

_HIST = struct.Struct("<Q")   # a state's token count, before its tokens (int32) and llama.cpp's bytes


def logits_ith(ctx, i: int, n_vocab: int) -> np.ndarray:
    """A copy [1, n_vocab] of the logits of output row i (-1: the last) of a llama.cpp context
    (a llama_context_p, e.g. llama_cpp.Llama's ctx) after its last decode."""
    ptr = llama_cpp.llama_get_logits_ith(ctx, i)
    return np.ctypeslib.as_array(ptr, shape=(1, n_vocab)).copy()


class LlamaCppContext(Context):
    def __init__(self, engine: "LlamaCppEngine", args: ContextArgs):
        if args.batch_invariant:
            raise ValueError("batch_invariant=True: the llama.cpp engine computes with llama.cpp's kernels, "
                             "whose multi-token steps are not batch-invariant (the native engine has it)")
        self.engine = engine
        p = llama_cpp.llama_context_default_params()
        self.n_seq_max = max(1, int(args.n_seq_max))
        # llama.cpp splits n_ctx among sequences of a non-unified cache: each gets n_ctx rows here
        p.n_ctx = int(args.n_ctx) * self.n_seq_max
        p.n_batch = int(args.n_batch)
        p.n_ubatch = min(int(args.n_batch), int(args.n_ubatch))
        p.n_seq_max = self.n_seq_max
        p.n_threads, p.n_threads_batch = int(args.n_threads), int(args.n_threads_batch)
        p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if args.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        for k, v in engine.rope.items():   # ModelArgs.rope_params
            setattr(p, k, v)
        p.type_k, p.type_v = int(args.type_k), int(args.type_v)
        p.embeddings = bool(args.embedding)
        if args.embedding:   # per-token rows; pyriver pools them (embedding.py)
            p.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_NONE
        with interrupts.held():   # its log lines run Python: see interrupts
            self.ctx = llama_cpp.llama_init_from_model(engine.model, p)
        if not self.ctx:
            raise PyriverError(f"llama.cpp could not make a context (n_ctx {p.n_ctx}, n_batch {p.n_batch}) for "
                               f"{engine.path}")
        self.params = p
        self.embedding = bool(args.embedding)
        self.n_ctx = llama_cpp.llama_n_ctx(self.ctx) // self.n_seq_max
        self.n_batch = int(p.n_batch)
        self.n_vocab, self.n_embd = engine.info["n_vocab"], engine.info["n_embd"]
        self.partial_cuts = not (engine.recurrent or engine.hybrid)
        self._mem = llama_cpp.llama_get_memory(self.ctx)
        self.can_shift = bool(llama_cpp.llama_memory_can_shift(self._mem)) if self.partial_cuts else False
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        if engine.adapters:   # each at its own scale, as llama_cpp.Llama applies lora_path
            self.set_lora([a.scale for a in engine.adapters])
        self._hist: List[List[int]] = [[] for _ in range(self.n_seq_max)]   # each sequence's tokens (replays)
        self._n_last = 0

    # -- steps ------------------------------------------------------------------------------
    def _check(self, tokens, seqs, pos) -> None:
        """What llama_decode would abort on, or fail on half-way, as Python exceptions first."""
        nxt = {}
        for t, s, p in zip(tokens, seqs, pos):
            if not 0 <= t < self.n_vocab:
                raise ValueError(f"token id {t} is out of range [0, {self.n_vocab})")
            if not 0 <= s < self.n_seq_max:
                raise ValueError(f"sequence {s} is out of range [0, {self.n_seq_max})")
            want = nxt.get(s, len(self._hist[s]))
            if p != want:
                raise ValueError(f"sequence {s}: position {p} is not its next free position {want}")
            if p >= self.n_ctx:
                raise ContextFullError(f"Requested tokens ({p + 1}) exceed context window of {self.n_ctx}")
            nxt[s] = p + 1

    def _step(self, tokens, seqs, pos, logits) -> None:
        """One llama_decode of at most n_batch checked tokens."""
        b = self._batch
        for i, (t, s, p, w) in enumerate(zip(tokens, seqs, pos, logits)):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, p, 1, 1 if w else 0
            b.seq_id[i][0] = s
        b.n_tokens = len(tokens)
        rc = llama_cpp.llama_decode(self.ctx, b)
        if rc == 1:
            raise ContextFullError("llama.cpp found no room in its KV cache for the step")
        if rc != 0:
            raise PyriverError(f"llama_decode failed ({rc})")
        for t, s in zip(tokens, seqs):
            self._hist[s].append(t)

    def _rows(self, n_out: int) -> np.ndarray:
        if n_out == 0:
            return np.zeros((0, self.n_vocab), dtype=np.float32)
        ptr = llama_cpp.llama_get_logits(self.ctx)
        if not ptr:
            raise PyriverError("llama.cpp kept no logits for the step")
        return np.ctypeslib.as_array(ptr, shape=(n_out * self.n_vocab,)).reshape(n_out, self.n_vocab).copy()

    def decode(self, tokens: Sequence[int], logits_all: bool, prompt: bool) -> np.ndarray:
        toks = [int(t) for t in tokens]
        p0 = len(self._hist[0])
        self._check(toks, [0] * len(toks), range(p0, p0 + len(toks)))
        out = []
        for i in range(0, len(toks), self.n_batch):   # as llama_cpp.Llama.eval hands them over
            chunk = toks[i:i + self.n_batch]
            last = i + len(chunk) == len(toks)
            want = [logits_all or (last and j == len(chunk) - 1) for j in range(len(chunk))]
            p = len(self._hist[0])
            self._step(chunk, [0] * len(chunk), range(p, p + len(chunk)), want)
            if logits_all or last:
                out.append(self._rows(sum(want)))
        self._n_last = len(toks)
        return out[0] if len(out) == 1 else np.concatenate(out)

    def decode_batch(self, tokens, seqs, pos, logits, prompt) -> np.ndarray:
        tokens, seqs, pos = [int(t) for t in tokens], [int(s) for s in seqs], [int(p) for p in pos]
        if len(tokens) > self.n_batch:
            raise ValueError(f"a step of {len(tokens)} tokens; this context takes at most n_batch {self.n_batch}")
        self._check(tokens, seqs, pos)
        self._step(tokens, seqs, pos, logits)
        self._n_last = len(tokens)
        return self._rows(sum(1 for w in logits if w))

    def exit_layers(self, n: int) -> List[int]:
        return [self.engine.info["n_layer"] - 1] * min(n, self._n_last)   # always full depth

    def set_exit(self, rule, batch_rule: str = "split"):
        raise self.engine.no_river("set_exit")

    def set_batch_invariant(self, on: bool) -> None:
        if on:
            raise ValueError(f"batch invariance: the {self.engine.name} engine computes with llama.cpp's multi-token "
                             "kernels (the native engine has it)")

    # -- the cache --------------------------------------------------------------------------
    def _seq(self, seq: int) -> int:
        if not 0 <= int(seq) < self.n_seq_max:
            raise ValueError(f"sequence {seq} is out of range [0, {self.n_seq_max})")
        return int(seq)

    def kv_bytes(self):
        """llama.cpp's cache of n_layer blocks of llama_n_ctx cells (its own sliding-window layers,
        which may keep fewer, counted at full length)."""
        info, cells, arch = self.engine.info, llama_cpp.llama_n_ctx(self.ctx), self.engine.info["arch"]
        out = []
        for t, side in ((self.params.type_k, "key"), (self.params.type_v, "value")):
            hd = int(self.engine.meta(f"{arch}.attention.{side}_length") or info["n_embd_head"])
            out.append(info["n_layer"] * cells * kv_types.row_bytes(int(t), info["n_head_kv"] * hd))
        return tuple(out)

    def pos(self, seq: int = 0) -> int:
        return len(self._hist[self._seq(seq)])

    def truncate(self, n_keep: int, seq: int = 0) -> None:
        seq, n_keep = self._seq(seq), int(n_keep)
        hist = self._hist[seq]
        if not 0 <= n_keep <= len(hist):
            raise ValueError(f"n_keep must be in [0, {len(hist)}], got {n_keep}")
        if n_keep == len(hist):
            return
        if llama_cpp.llama_memory_seq_rm(self._mem, seq, n_keep, -1):
            del hist[n_keep:]
            return
        # A recurrent state cannot be cut part-way (llama.cpp keeps only its last one): the kept
        # tokens run again from an empty sequence.
        keep = hist[:n_keep]
        llama_cpp.llama_memory_seq_rm(self._mem, seq, -1, -1)
        hist.clear()
        for i in range(0, len(keep), self.n_batch):
            chunk = keep[i:i + self.n_batch]
            self._step(chunk, [seq] * len(chunk), range(i, i + len(chunk)), [False] * len(chunk))

    def drop(self, seq: int, p0: int, p1: int) -> None:
        seq, p0, p1 = self._seq(seq), int(p0), int(p1)
        hist = self._hist[seq]
        if not self.can_shift:
            super().drop(seq, p0, p1)
        if not 0 <= p0 <= p1 <= len(hist):
            raise ValueError(f"drop [{p0}, {p1}) must lie in [0, {len(hist)}]")
        if p0 == p1:
            return
        # llama.cpp adds the shifts up per cell and rotates the keys once, at the next decode
        if not llama_cpp.llama_memory_seq_rm(self._mem, seq, p0, p1):
            raise PyriverError(f"llama.cpp could not remove positions [{p0}, {p1}) of sequence {seq}")
        llama_cpp.llama_memory_seq_add(self._mem, seq, p1, -1, p0 - p1)
        del hist[p0:p1]

    def copy(self, src: int, dst: int, n: int) -> None:
        src, dst, n = self._seq(src), self._seq(dst), int(n)
        if not 0 <= n <= len(self._hist[src]):
            raise ValueError(f"n must be in [0, {len(self._hist[src])}], got {n}")
        llama_cpp.llama_memory_seq_rm(self._mem, dst, -1, -1)
        self._hist[dst] = []
        if n:
            llama_cpp.llama_memory_seq_cp(self._mem, src, dst, 0, n)
            self._hist[dst] = self._hist[src][:n]
            if n < len(self._hist[src]) and not llama_cpp.llama_memory_seq_rm(self._mem, dst, n, -1):
                self.truncate(0, dst)   # a recurrent state copied whole cannot be cut
                raise ValueError("this model's recurrent state cannot be copied part-way")

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self._hist = [[] for _ in range(self.n_seq_max)]

    def state_get(self, seq: int = 0) -> bytes:
        """A single-sequence context's whole state (llama_state_get_data), else sequence seq's
        (llama_state_seq_get_data), after the sequence's tokens."""
        seq = self._seq(seq)
        whole = self.n_seq_max == 1
        size = llama_cpp.llama_state_get_size(self.ctx) if whole else llama_cpp.llama_state_seq_get_size(self.ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        n = (llama_cpp.llama_state_get_data(self.ctx, buf, size) if whole
             else llama_cpp.llama_state_seq_get_data(self.ctx, buf, size, seq))
        hist = np.asarray(self._hist[seq], dtype="<i4").tobytes()
        return _HIST.pack(len(self._hist[seq])) + hist + bytes(buf)[:n]

    def state_set(self, blob: bytes, seq: int = 0) -> None:
        seq = self._seq(seq)
        try:
            (n,) = _HIST.unpack_from(blob, 0)
            at = _HIST.size + 4 * n
            hist = np.frombuffer(blob[_HIST.size:at], dtype="<i4").tolist()
        except (struct.error, ValueError) as e:
            raise ValueError(f"not a state of the llama.cpp engine: {e}") from None
        if len(hist) != n or n > self.n_ctx:
            raise ValueError("not a state of the llama.cpp engine (its token count does not fit)")
        data = blob[at:]
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if self.n_seq_max == 1:
            if llama_cpp.llama_state_set_data(self.ctx, buf, len(data)) != len(data):
                self.clear()   # llama.cpp may have written part of it
                raise ValueError("llama.cpp refused the state (another model or context size?); the cache is cleared")
        else:   # the sequence empties first: llama.cpp reads a sequence's state into free cells
            llama_cpp.llama_memory_seq_rm(self._mem, seq, -1, -1)
            self._hist[seq] = []
            if llama_cpp.llama_state_seq_set_data(self.ctx, buf, len(data), seq) == 0:
                llama_cpp.llama_memory_seq_rm(self._mem, seq, -1, -1)   # it may have written part of it
                raise ValueError(f"llama.cpp refused the state of sequence {seq} (another model?); the sequence is cleared")
        self._hist[seq] = hist

    def embed(self, tokens: Sequence[int]) -> np.ndarray:
        if not self.embedding:
            raise RuntimeError("this context was made without embeddings (Llama(..., embedding=True))")
        toks = [int(t) for t in tokens]
        if len(toks) > self.n_batch:
            raise ValueError(f"Requested tokens ({len(toks)}) exceed batch size of {self.n_batch}")
        self.clear()
        self._check(toks, [0] * len(toks), range(len(toks)))
        self._step(toks, [0] * len(toks), range(len(toks)), [True] * len(toks))
        rows = np.empty((len(toks), self.n_embd), dtype=np.float32)
        for i in range(len(toks)):
            ptr = llama_cpp.llama_get_embeddings_ith(self.ctx, i)
            if not ptr:
                raise PyriverError(f"llama.cpp kept no embedding for token {i}")
            rows[i] = np.ctypeslib.as_array(ptr, shape=(self.n_embd,))
        return rows

    def set_lora(self, scales: Sequence[float]) -> None:
        lora.apply(self.ctx, self.engine.adapters, scales)

    # -- media (engine/mtmd.py) -------------------------------------------------------------
    def decode_media(self, media, seq: int = 0) -> None:
        proj = self.engine.projector
        if proj is None:
            raise ValueError("this model has no projector (mmproj) loaded: no media input")
        seq = self._seq(seq)
        p0 = len(self._hist[seq])
        if p0 + media.n_pos > self.n_ctx:
            raise ContextFullError(f"Requested tokens ({p0 + media.n_pos}) exceed context window of {self.n_ctx}")
        try:
            end = proj.eval(self.ctx, media, seq, p0, self.n_batch)
        except BaseException:   # libmtmd may have decoded some of its batches: they go
            llama_cpp.llama_memory_seq_rm(self._mem, seq, p0, -1)
            raise
        self._hist[seq].extend([NULL_TOKEN] * (end - p0))
        self._n_last = 0

    def note_external(self, n: int, seq: int = 0) -> None:
        seq, n = self._seq(seq), int(n)
        hist = self._hist[seq]
        top = llama_cpp.llama_memory_seq_pos_max(self._mem, seq)
        if n < len(hist) or n > self.n_ctx or top + 1 != n:
            raise ValueError(f"sequence {seq} holds {top + 1} positions in llama.cpp's cache, {len(hist)} known; "
                             f"n_tokens={n} does not match")
        hist.extend([NULL_TOKEN] * (n - len(hist)))

    def close(self) -> None:
        ctx, self.ctx = self.ctx, None   # cleared first, as Llama.close
        if ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(ctx)


class LlamaCppEngine(Engine):
    name = "llama.cpp"
    supports_river = False
    supports_lora = True
    asked = False   # engine="llama.cpp" was asked for (else: pyriver has no builder for the architecture)

    projector = None   # engine.mtmd.Projector once load_projector ran

    def __init__(self, path: str, args: ModelArgs):
        if args.rpc_servers:
            raise ValueError("rpc_servers: the llama.cpp engine takes no RPC servers yet (the native engine does)")
        p = llama_cpp.llama_model_default_params()
        p.n_gpu_layers = int(args.n_gpu_layers)
        # llama_model_params has load_mode, not use_mmap, in 0.3.36: llama_cpp.Llama's mapping of use_mmap
        p.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP if args.use_mmap else llama_cpp.LLAMA_LOAD_MODE_NONE
        p.split_mode, p.main_gpu = int(args.split_mode), int(args.main_gpu)
        if args.tensor_split is not None:
            if len(args.tensor_split) > llama_cpp.LLAMA_MAX_DEVICES:
                raise ValueError(f"tensor_split has {len(args.tensor_split)} entries; at most "
                                 f"{llama_cpp.LLAMA_MAX_DEVICES} devices")
            self._split = (ctypes.c_float * llama_cpp.LLAMA_MAX_DEVICES)(*args.tensor_split)
            p.tensor_split = self._split
        self.path = path
        self.rope = args.rope_params()
        self.n_gpu_layers = int(args.n_gpu_layers)
        self.params = p
        native.check_gguf(path)   # what llama.cpp's loader would abort on, as a ModelLoadError
        with interrupts.loading(p):   # Ctrl-C cancels it
            self.model = llama_cpp.llama_model_load_from_file(path.encode("utf-8"), p)
        if not self.model:
            raise ModelLoadError(f"llama.cpp could not load {path} (verbose=True shows its log)")
        m = self.model
        vocab = llama_cpp.llama_model_get_vocab(m)
        n_head = llama_cpp.llama_model_n_head(m)
        n_embd = llama_cpp.llama_model_n_embd(m)
        self.info = {"arch": self.meta("general.architecture") or "", "name": self.meta("general.name") or "",
                     "n_layer": llama_cpp.llama_model_n_layer(m), "n_embd": n_embd, "n_head": n_head,
                     "n_head_kv": llama_cpp.llama_model_n_head_kv(m),
                     "n_embd_head": n_embd // n_head if n_head else 0,
                     "n_ff": 0, "n_vocab": llama_cpp.llama_vocab_n_tokens(vocab),
                     "n_ctx_train": llama_cpp.llama_model_n_ctx_train(m),
                     "n_params": llama_cpp.llama_model_n_params(m), "n_bytes": llama_cpp.llama_model_size(m),
                     "ftype_hint": -1}
        self.recurrent = bool(llama_cpp.llama_model_is_recurrent(m))
        self.hybrid = bool(llama_cpp.llama_model_is_hybrid(m))
        try:
            self.adapters = lora.load(m, args.lora)
        except BaseException:
            self.close()
            raise

    def new_context(self, args: ContextArgs) -> LlamaCppContext:
        return LlamaCppContext(self, args)

    def load_projector(self, path: str, *, n_threads: int, marker: str, flash_attn: bool = False,
                       verbose: bool = False):
        from pyriver.engine.mtmd import Projector
        if self.projector is not None:
            raise ValueError(f"a projector is loaded already: {self.projector.path}")
        self.projector = Projector(self, path, n_threads=n_threads, marker=marker, use_gpu=True,
                                   flash_attn=flash_attn, verbose=verbose)
        return self.projector

    def meta(self, key: str) -> Optional[str]:
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def no_river(self, what: str) -> ValueError:
        how = ("engine='llama.cpp' was asked for" if self.asked else "its LoRA adapters need llama.cpp's graphs"
               if self.adapters else "pyriver has no builder for it")
        return ValueError(f"{what}: River needs pyriver's own graphs, and architecture '{self.info['arch']}' runs on "
                          f"the {self.name} engine ({how}), which runs every Llama method but River: completions, "
                          f"chat, n-gram lossless drafts, states, embeddings; use river=None")

    def devices(self) -> List[str]:
        """llama.cpp's layer rule, not read back: the last n_gpu_layers of the blocks and the head
        ("GPU"), the rest on the CPU."""
        n = self.info["n_layer"]
        ngl = n + 1 if self.n_gpu_layers < 0 else self.n_gpu_layers
        return ["GPU" if i >= n + 1 - ngl else "CPU" for i in range(n + 1)]

    def close(self) -> None:
        proj, self.projector = self.projector, None
        if proj is not None:   # before its text model
            proj.close()
        m, self.model = self.model, None
        lora.free(self.adapters)   # before their model (llama.cpp would free them with it too)
        if m:
            llama_cpp.llama_model_free(m)


def reset_graph_reuse(ctx) -> None:
    """Zero llama.cpp's perf counters of a llama_cpp context (llama_perf_context_reset)."""
    llama_cpp.llama_perf_context_reset(ctx)


def graphs_reused(ctx) -> int:
    """Graphs llama.cpp reused since the last reset (llama_perf_context().n_reused): a reused graph
    keeps its id, so ggml-cuda does not compare or capture it again."""
    return int(llama_cpp.llama_perf_context(ctx).n_reused)
