"""The native engine: pyriver's own ggml graphs (native/, through pyriver.engine.binding's cffi binding).
The only engine with River: it builds and binds rivers (engine/river.py) and runs exit rules. Its
handles (`model`, `Context.handle`) are for the rest of this package (river.py, debug.py) and the
tests that reach the C API."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from pyriver.errors import PyriverError
from pyriver.engine.binding import check, ffi, last_error, lib, read_text
from pyriver.engine import interrupts, river
from pyriver.engine.base import BATCH_RULES, EXIT_RULES, VERIFY, Context, ContextArgs, Engine, ExitRule, ModelArgs


# pr_model_params.progress: nonzero cancels the load. Kept for the process: a load over RPC runs in a
# thread that may outlive its caller.
@ffi.callback("int32_t(int32_t, int32_t, void *)", error=1)
def _load_progress(done, total, user):
    return 1 if interrupts.caught() else 0


# pr_context_set_abort_callback's, for a long prompt (NativeContext._stoppable).
@ffi.callback("int32_t(void *)", error=1)
def _abort(user):
    return 1 if interrupts.caught() else 0


class NativeContext(Context):
    def __init__(self, engine: "NativeEngine", args: ContextArgs):
        cp = ffi.new("pr_context_params *", lib.pr_context_default_params())
        cp.n_ctx = int(args.n_ctx)
        cp.n_batch = min(int(args.n_batch), int(args.n_ubatch))   # the native n_batch is a graph's tokens
        cp.n_threads, cp.n_threads_batch = int(args.n_threads), int(args.n_threads_batch)
        cp.flash_attn = 1 if args.flash_attn else 0
        cp.batch_invariant = -1 if args.batch_invariant is None else (1 if args.batch_invariant else 0)
        cp.n_seq_max = int(args.n_seq_max)
        cp.type_k, cp.type_v = int(args.type_k), int(args.type_v)
        self.can_batch_invariant = not args.flash_attn   # the native context refuses both together
        self.can_shift = True   # every native arch has one position per token (pr_seq_drop rotates by it)
        out = ffi.new("pr_context **")
        with interrupts.held():   # llama.cpp's log lines run Python: see interrupts
            status = lib.pr_context_new(engine.model, cp, out)
        check(status)
        self.handle = out[0]
        self.params = cp
        self.n_vocab = engine.info["n_vocab"]
        self.n_embd = engine.info["n_embd"]
        self.n_ctx = lib.pr_n_ctx(self.handle)
        self.n_seq_max = int(args.n_seq_max)
        self.n_batch = cp.n_batch
        if args.wide_prompt_rows is not None:
            self.set_wide_prompt_rows(args.wide_prompt_rows)
        if args.verify_tile_rows:
            self.set_verify_tile_rows(args.verify_tile_rows)

    @property
    def batch_invariant(self) -> bool:
        return bool(lib.pr_context_batch_invariant(self.handle))

    def set_batch_invariant(self, on: bool) -> None:
        check(lib.pr_context_set_batch_invariant(self.handle, 1 if on else 0))

    def kv_bytes(self):
        k, v = ffi.new("int64_t *"), ffi.new("int64_t *")
        check(lib.pr_context_kv_bytes(self.handle, k, v))
        return int(k[0]), int(v[0])

    def set_wide_prompt_rows(self, n: int) -> None:
        check(lib.pr_context_set_wide_prompt_rows(self.handle, int(n)))

    def set_verify_tile_rows(self, n: int) -> None:
        check(lib.pr_context_set_verify_tile_rows(self.handle, int(n)))

    def set_exit(self, rule: ExitRule, batch_rule: str = "split") -> ExitRule:
        p = ffi.new("pr_exit_params *", lib.pr_exit_default_params())
        p.exit_threshold = float(rule.exit_threshold)
        p.min_exit_layer = int(rule.min_exit_layer)
        p.prefill_exit = 1 if rule.prefill_exit else 0
        p.batch_rule = BATCH_RULES.index(batch_rule)
        p.exit_rule = EXIT_RULES.index(rule.rule)
        d = ffi.new("pr_exit_debug_params *", lib.pr_exit_debug_default_params())
        d.force_exit_layer = int(rule.force_exit_layer)
        d.check_chunk = int(rule.check_chunk)
        d.host_checks = -1 if rule.host_checks else 0
        d.device_carry = -1 if rule.device_carry else 0
        d.predict = 1 if rule.predict else 0
        default = lib.pr_exit_debug_default_params()
        if all(getattr(d, k) == getattr(default, k) for k in dir(default)):
            check(lib.pr_context_set_exit(self.handle, p))
        else:   # the testing and benchmark knobs (pyriver_debug.h)
            check(lib.pr_context_set_exit_debug(self.handle, p, d))
        return replace(rule, exit_threshold=p.exit_threshold, min_exit_layer=p.min_exit_layer)   # as C holds them

    def _rows(self, n_out: int, width: int, get) -> np.ndarray:
        if n_out == 0:   # a step that keeps no rows (a prompt chunk before the last)
            return np.zeros((0, width), dtype=np.float32)
        ptr = get(self.handle, 0)
        if ptr == ffi.NULL:
            raise PyriverError(last_error())
        return np.frombuffer(ffi.buffer(ptr, 4 * width * n_out), dtype=np.float32).reshape(n_out, width).copy()

    def decode(self, tokens: Sequence[int], logits_all: bool, prompt: bool) -> np.ndarray:
        arr = ffi.new("int32_t[]", list(tokens))
        kind = VERIFY if prompt == VERIFY else (1 if prompt else 0)
        check(self._stoppable(len(tokens), lambda: lib.pr_decode(self.handle, arr, len(tokens), 1 if logits_all else 0,
                                                                   kind)))
        return self._rows(lib.pr_n_outputs(self.handle), self.n_vocab, lib.pr_logits)

    def decode_batch(self, tokens, seqs, pos, logits, prompt) -> np.ndarray:
        arr = lambda v: ffi.new("int32_t[]", [int(x) for x in v])   # noqa: E731
        check(lib.pr_decode_batch(self.handle, arr(tokens), arr(seqs), arr(pos), arr(logits), arr(prompt), len(tokens)))
        return self._rows(sum(1 for x in logits if x), self.n_vocab, lib.pr_logits)

    def exit_layers(self, n: int) -> List[int]:
        buf = ffi.new("int32_t[]", max(n, 1))
        got = lib.pr_exit_layers(self.handle, buf, n)
        return list(buf[0:min(got, n)])

    def pos(self, seq: int = 0) -> int:
        if seq == 0 and self.n_seq_max == 1:
            return lib.pr_kv_pos(self.handle)
        n = lib.pr_seq_pos(self.handle, int(seq))
        if n < 0:
            raise ValueError(last_error())
        return n

    def truncate(self, n_keep: int, seq: int = 0) -> None:
        if seq == 0 and self.n_seq_max == 1:
            check(lib.pr_kv_truncate(self.handle, int(n_keep)))
        else:
            check(lib.pr_seq_truncate(self.handle, int(seq), int(n_keep)))

    def drop(self, seq: int, p0: int, p1: int) -> None:
        check(lib.pr_seq_drop(self.handle, int(seq), int(p0), int(p1)))

    def copy(self, src: int, dst: int, n: int) -> None:
        raise NotImplementedError("the native engine copies no sequences (its cache is a region per sequence)")

    def clear(self) -> None:
        check(lib.pr_kv_clear(self.handle))

    def state_get(self, seq: int = 0) -> bytes:
        return state_get(self.handle, seq)

    def state_set(self, blob: bytes, seq: int = 0) -> None:
        state_set(self.handle, blob, seq)

    def embed(self, tokens: Sequence[int]) -> np.ndarray:
        check(lib.pr_kv_clear(self.handle))
        arr = ffi.new("int32_t[]", list(tokens))
        check(self._stoppable(len(tokens), lambda: lib.pr_embed(self.handle, arr, len(tokens))))
        return self._rows(len(tokens), self.n_embd, lib.pr_embeddings)

    def _stoppable(self, n: int, call) -> int:
        """call()'s status. A call of n tokens runs n_batch at a time: where that is more than one graph,
        Ctrl-C stops it after the graph in flight (_abort), as llama_cpp.Llama's eval stops between its
        batches; the graphs that ran stay in the cache, and Llama's bookkeeping cuts them
        (Context.reconcile). The callback is set for such a call only: from another thread than the
        main one (the server's) it would wait for the GIL between graphs, for nothing."""
        if n <= self.n_batch:
            return call()
        with interrupts.held() as stops:
            if stops:
                check(lib.pr_context_set_abort_callback(self.handle, _abort, ffi.NULL))
            try:
                return call()
            finally:
                if stops:
                    lib.pr_context_set_abort_callback(self.handle, ffi.NULL, ffi.NULL)

    def close(self) -> None:
        h, self.handle = self.handle, ffi.NULL   # cleared first: an interrupt leaks, never double-frees
        if h:
            lib.pr_context_free(h)


class NativeEngine(Engine):
    name = "native"
    supports_river = True

    def __init__(self, path: str, args: ModelArgs):
        mp = ffi.new("pr_model_params *", lib.pr_model_default_params())
        # llama.cpp's context overrides, 0 / negative = the file's (LangChain passes 10000 and 1.0 whatever the model)
        for k, v in args.rope_params().items():
            setattr(mp, k, v)
        mp.n_gpu_layers = int(args.n_gpu_layers)
        mp.use_mmap = 1 if args.use_mmap else 0
        mp.batch_layout = 1 if args.batch_layout else 0
        mp.split_mode, mp.main_gpu = int(args.split_mode), int(args.main_gpu)
        if args.tensor_split is not None:
            if len(args.tensor_split) > len(mp.tensor_split):
                raise ValueError(f"tensor_split has {len(args.tensor_split)} entries; at most {len(mp.tensor_split)} devices")
            for i, v in enumerate(args.tensor_split):
                mp.tensor_split[i] = float(v)
        self._servers_c = ffi.new("char[]", args.rpc_servers.encode()) if args.rpc_servers else ffi.NULL
        mp.rpc_servers = self._servers_c
        mp.rpc_timeout_ms = int(args.rpc_timeout * 1000)
        mp.progress = _load_progress   # Ctrl-C cancels the load (interrupts)
        self.params = mp
        out = ffi.new("pr_model **")
        with interrupts.held():
            status = lib.pr_model_load(path.encode(), mp, out)
        check(status)
        self.model = out[0]
        info = ffi.new("pr_model_info *")
        check(lib.pr_model_get_info(self.model, info))
        self.info = {k: (ffi.string(getattr(info, k)).decode() if k in ("arch", "name") else getattr(info, k))
                     for k in dir(info)}

    def new_context(self, args: ContextArgs) -> NativeContext:
        return NativeContext(self, args)

    def meta(self, key: str) -> Optional[str]:
        try:
            return read_text(lambda buf, size, needed: lib.pr_model_meta(self.model, key.encode(), buf, size, needed))
        except ValueError:
            return None

    def devices(self) -> List[str]:
        return read_text(lambda buf, size, needed: lib.pr_model_devices(self.model, buf, size, needed)).splitlines()

    def prepare_river(self, model_path: str, river_spec: str, **kw) -> Path:
        return river.prepare(self.model, model_path, river_spec, **kw)

    def close(self) -> None:
        m, self.model = self.model, ffi.NULL
        if m:
            lib.pr_model_free(m)


def state_get(handle, seq: int) -> bytes:
    """Sequence seq's cache of a native context as bytes (pr_state_get)."""
    size = ffi.new("size_t *")
    check(lib.pr_state_size(handle, int(seq), size))
    buf = ffi.new("uint8_t[]", size[0])
    check(lib.pr_state_get(handle, int(seq), buf, size[0], size))
    return bytes(ffi.buffer(buf, size[0]))


def state_set(handle, blob: bytes, seq: int) -> None:
    check(lib.pr_state_set(handle, int(seq), blob, len(blob)))   # checked natively before it writes
