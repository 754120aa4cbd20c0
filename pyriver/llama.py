"""`pyriver.Llama`: the high-level API, shaped like llama-cpp-python's `Llama`, over the native
model and context (pyriver's own ggml graphs) and llama.cpp's tokenizer."""
from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
import warnings
from typing import Dict, Iterator, List, Optional, Sequence, Union

import llama_cpp._logger as _lg
import numpy as np

from . import chat
from . import completion as C
from . import models
from .embedding import EmbeddingMixin
from .errors import ContextFullError, PyriverError
from .logprobs import as_dict as logprobs_dict
from .logprobs import entry as logprob_entry
from .native import check, ffi, last_error, lib, read_text
from .lossless import Speculator
from .lossless import stats as lossless_stats
from .river import exit_stats, prepare
from .sampling import Sampler, SamplingParams
from .sidecar import find_calibration
from .vocab import Vocab


# Defaults of the exit rule (see README: chosen by `pyriver eval` measurements on SmolLM2), and
# the river type built when a river is asked for without one (chat's /river on, eval).
DEFAULT_TAU = 0.985
DEFAULT_MIN_EXIT_LAYER = 4
DEFAULT_RIVER = "q4_0"
# Lossless mode's longest draft (README, Lossless mode: 2 beat 4 on every model measured there).
DEFAULT_DRAFT_MAX = 2


class Llama(EmbeddingMixin):
    def __init__(self, model_path: Optional[str] = None, *, n_ctx: int = 512, n_batch: int = 512,
                 n_threads: Optional[int] = None, n_threads_batch: Optional[int] = None,
                 n_gpu_layers: int = 0, split_mode: int = 1, main_gpu: int = 0,
                 tensor_split: Optional[Sequence[float]] = None, rpc_servers: Optional[str] = None,
                 rpc_timeout: float = 300.0, seed: Optional[int] = None, use_mmap: bool = True,
                 flash_attn: bool = False, river: Optional[str] = "auto",
                 exit_threshold: Optional[float] = None, min_exit_layer: Optional[int] = None,
                 force_exit_layer: int = -1, prefill_exit: bool = False, river_force: bool = False,
                 river_rebuild: bool = False, batch_invariant: Optional[bool] = None,
                 lossless: Optional[bool] = None, draft_model=None, draft_max: Optional[int] = None,
                 chat_format: Optional[str] = None, verbose: bool = True, embedding: bool = False,
                 pooling_type: int = -1, **unsupported):
        if unsupported.pop("chat_handler", None) is not None:
            raise TypeError("pyriver.Llama does not support chat_handler; it renders the GGUF's chat template")
        if unsupported:
            names = ", ".join(sorted(unsupported))
            raise TypeError(f"pyriver.Llama does not support: {names}")
        if chat_format not in (None, "gguf"):
            raise ValueError(f"chat_format {chat_format!r} is not supported; pyriver uses the template stored in the GGUF")
        _lg.set_verbose(verbose)  # llama.cpp's (and ggml's) log lines, as llama-cpp-python does
        self.verbose = verbose
        self._lock = threading.RLock()
        self._model = self._ctx = ffi.NULL
        self.model_path = str(models.resolve(model_path))
        if not os.path.isfile(self.model_path):
            raise FileNotFoundError(f"model file not found: {self.model_path}")

        self._load(n_gpu_layers, use_mmap, split_mode, main_gpu, tensor_split, rpc_servers, rpc_timeout)
        exit_threshold, min_exit_layer = self._bind_river(river, exit_threshold, min_exit_layer, river_force,
                                                          river_rebuild, use_mmap, verbose, lossless)
        self.vocab = Vocab(self.model_path)
        if self.vocab.n_vocab != self.info["n_vocab"]:
            raise ValueError(f"tokenizer has {self.vocab.n_vocab} tokens but the model {self.info['n_vocab']}")
        self._new_context(n_ctx, n_batch, n_threads, n_threads_batch, flash_attn, batch_invariant)
        self._init_embedding(embedding, pooling_type)   # embed, create_embedding: pyriver/embedding.py
        self._seed = seed
        self.input_ids: List[int] = []   # the tokens whose K/V are in the cache, in order
        self._kinds: List[int] = []      # for each: PROMPT_LIKE, or STEP (see _step_kind)
        self._version = 0                # counts the changes of the cache, whoever made them
        self._exiting = False            # an exit rule is on (set_exit)
        self.exit_params = None          # the native exit rule of the last set_exit
        self.last_exits: List[int] = []  # exit block of each token of the last eval
        self.exit_threshold = DEFAULT_TAU if exit_threshold is None else float(exit_threshold)
        # The default first checked block, kept inside shallow (synthetic) models.
        self.min_exit_layer = (min(DEFAULT_MIN_EXIT_LAYER, max(0, self.info["n_layer"] - 2)) if min_exit_layer is None
                               else int(min_exit_layer))
        if self.river_path is None and (exit_threshold is not None or min_exit_layer is not None or force_exit_layer >= 0):
            raise ValueError("exit_threshold, min_exit_layer and force_exit_layer need a river (river='q4_0', ...)")
        if self.river_path is not None:
            self.set_exit(self.exit_threshold, self.min_exit_layer, force_exit_layer, prefill_exit)
        self.last_stats: Dict = {}
        self._n_generated = 0
        self._template = None
        self.prefill_exit = prefill_exit
        self._spec: Optional[Speculator] = None   # lossless mode (set_lossless)
        cal = self.calibration["setting"] if self.calibration is not None else {}
        if lossless is None:   # on with a draft model, as llama-cpp-python's draft_model is, or as calibrated
            lossless = draft_model is not None or (cal.get("lossless", False) and not prefill_exit)
        if draft_max is None and cal.get("lossless"):
            draft_max = cal["draft_max"]
        self.set_lossless(bool(lossless), draft_model=draft_model, draft_max=draft_max)

    def _load(self, n_gpu_layers, use_mmap, split_mode, main_gpu, tensor_split, rpc_servers, rpc_timeout) -> None:
        mp = ffi.new("pr_model_params *", lib.pr_model_default_params())
        mp.n_gpu_layers = int(n_gpu_layers)
        mp.use_mmap = 1 if use_mmap else 0
        mp.split_mode, mp.main_gpu = int(split_mode), int(main_gpu)
        if tensor_split is not None:
            if len(tensor_split) > len(mp.tensor_split):
                raise ValueError(f"tensor_split has {len(tensor_split)} entries; at most {len(mp.tensor_split)} devices")
            for i, v in enumerate(tensor_split):
                mp.tensor_split[i] = float(v)
        self.rpc_servers = rpc_servers or None
        servers = ffi.new("char[]", rpc_servers.encode()) if rpc_servers else ffi.NULL
        mp.rpc_servers = servers
        mp.rpc_timeout_ms = int(rpc_timeout * 1000)
        out = ffi.new("pr_model **")
        check(lib.pr_model_load(self.model_path.encode(), mp, out))
        self._model = out[0]
        info = ffi.new("pr_model_info *")
        check(lib.pr_model_get_info(self._model, info))
        self.info = {k: (ffi.string(getattr(info, k)).decode() if k in ("arch", "name") else getattr(info, k))
                     for k in dir(info)}

    def _bind_river(self, river, exit_threshold, min_exit_layer, force, rebuild, use_mmap, verbose, lossless):
        """river="auto" (the default): the setting `pyriver calibrate` stored in a sidecar of this
        model, if any; River off otherwise. river=None is always full depth, and so is a lossless
        calibration with lossless=False (its tau was chosen for drafts, not for lossy fidelity).
        Returns the exit threshold and min exit layer to use (None: the defaults)."""
        self.river_path = None
        self.calibration = None
        if river == "auto":
            river = None
            cal = find_calibration(self.model_path)
            if cal is not None and not (cal["setting"].get("lossless") and lossless is False):
                self.calibration = cal
                river = cal["sidecar"]
                exit_threshold = cal["setting"]["tau"] if exit_threshold is None else exit_threshold
                min_exit_layer = cal["setting"]["min_exit_layer"] if min_exit_layer is None else min_exit_layer
                if verbose:
                    s = cal["setting"]
                    how = (f"lossless, drafts at tau {exit_threshold} min layer {min_exit_layer} k {s['draft_max']}"
                           if s.get("lossless") else f"tau {exit_threshold} min layer {min_exit_layer} (top-1 "
                           f"{cal['candidate']['top1_agreement']:.4f} >= {cal['target_fidelity']})")
                    print(f"pyriver: River on from calibration: {s['river']} {how}; {cal['sidecar']}; "
                          f"river=None turns it off", file=sys.stderr)
        if river is not None:
            try:
                self.river_path = str(prepare(self._model, self.model_path, river, force=force, rebuild=rebuild,
                                              progress=True, use_mmap=use_mmap, verbose=verbose))
            except Exception as e:
                if self.calibration is None:
                    raise
                # a stale calibrated sidecar must not stop the model from loading
                warnings.warn(f"calibrated river not usable, River off: {e}")
                self.calibration = None
                exit_threshold = min_exit_layer = None
        return exit_threshold, min_exit_layer

    def _new_context(self, n_ctx, n_batch, n_threads, n_threads_batch, flash_attn, batch_invariant) -> None:
        cp = ffi.new("pr_context_params *", lib.pr_context_default_params())
        cp.n_ctx = int(n_ctx) if n_ctx > 0 else int(self.info["n_ctx_train"])
        cp.n_batch = int(n_batch)
        self.n_threads = int(n_threads or max(multiprocessing.cpu_count() // 2, 1))
        self.n_threads_batch = int(n_threads_batch or multiprocessing.cpu_count())
        cp.n_threads, cp.n_threads_batch = self.n_threads, self.n_threads_batch
        cp.flash_attn = 1 if flash_attn else 0
        cp.batch_invariant = -1 if batch_invariant is None else (1 if batch_invariant else 0)
        out = ffi.new("pr_context **")
        check(lib.pr_context_new(self._model, cp, out))
        self._ctx = out[0]
        self.context_params = cp   # what a BatchDecoder (pyriver.batch) on this model starts from
        # True when a token's logits do not depend on the step it was computed in (the CPU's
        # default; see pr_context_params.batch_invariant).
        self.batch_invariant = bool(lib.pr_context_batch_invariant(self._ctx))
        self._n_ctx = lib.pr_n_ctx(self._ctx)
        self.n_batch = cp.n_batch

    def attach_river(self, river: str, *, force: bool = False, rebuild: bool = False) -> str:
        """Bind a river to this model after loading (once); exits stay off until set_exit."""
        with self._lock:
            self._live()
            if self.river_path is not None:
                raise ValueError(f"a river is already attached: {self.river_path}")
            self.river_path = str(prepare(self._model, self.model_path, river, force=force, rebuild=rebuild))
            return self.river_path

    def set_exit(self, exit_threshold: float, min_exit_layer: Optional[int] = None, force_exit_layer: int = -1,
                 prefill_exit: bool = False, check_chunk: int = 0, host_checks: bool = True,
                 device_carry: bool = True, predict: bool = False) -> None:
        """Change the exit rule between calls (tau > 1 never exits; force_exit_layer >= 0 exits
        every token after that block; check_chunk: blocks per graph, 0 = 2 on the CPU, 8 over
        RPC, 16 on a GPU; device_carry: a token's hidden state stays on the device between graphs;
        predict: the first graph runs to the previous token's exit block)."""
        with self._lock:
            self._live()
            if prefill_exit and getattr(self, "_spec", None) is not None:
                raise ValueError("lossless mode verifies at full depth; prefill_exit=True runs prompts on the river")
            p = ffi.new("pr_exit_params *", lib.pr_exit_default_params())
            p.exit_threshold = float(exit_threshold)
            p.min_exit_layer = int(self.min_exit_layer if min_exit_layer is None else min_exit_layer)
            p.prefill_exit = 1 if prefill_exit else 0
            d = ffi.new("pr_exit_debug_params *", lib.pr_exit_debug_default_params())
            d.force_exit_layer = int(force_exit_layer)
            d.check_chunk = int(check_chunk)
            d.host_checks = -1 if host_checks else 0
            d.device_carry = -1 if device_carry else 0
            d.predict = 1 if predict else 0
            default = lib.pr_exit_debug_default_params()
            self.exit_params = (p, d)   # a BatchDecoder on this model applies the same rule
            if all(getattr(d, k) == getattr(default, k) for k in dir(default)):
                check(lib.pr_context_set_exit(self._ctx, p))
            else:   # the testing and benchmark knobs (pyriver_debug.h)
                check(lib.pr_context_set_exit_debug(self._ctx, p, d))
            self.exit_threshold, self.min_exit_layer = p.exit_threshold, p.min_exit_layer
            self._exiting = force_exit_layer >= 0 or p.exit_threshold <= 1.0
            self.prefill_exit = prefill_exit

    def set_lossless(self, on: bool, *, draft_model=None, draft_max: Optional[int] = None,
                     draft_p_min: float = 0.0) -> None:
        """Lossless mode on or off between calls (pyriver.lossless): drafts from draft_model (a
        callable as llama-cpp-python's draft models) or, without one, on the River path under
        the exit rule; every emitted token is verified by the backbone at full depth."""
        with self._lock:
            if not on:
                if draft_model is not None:
                    raise ValueError("draft_model drafts for lossless mode; it cannot be used with lossless=False")
                self._spec = None
                return
            if draft_model is None and self.river_path is None:
                raise ValueError("lossless mode drafts with a river (river='q4_0', ...) or a draft_model "
                                 "(pyriver.PromptLookupDecoding(), ...)")
            if self.prefill_exit:
                raise ValueError("lossless mode verifies at full depth; prefill_exit=True runs prompts on the river")
            keep = self._spec.draft_max if self._spec is not None else DEFAULT_DRAFT_MAX
            self._spec = Speculator(draft_model, keep if draft_max is None else draft_max, draft_p_min)

    @property
    def lossless(self) -> bool:
        return self._spec is not None

    @property
    def speculator(self) -> Optional[Speculator]:
        """Lossless mode's draft-and-verify rules (draft length, acceptance), or None."""
        return self._spec

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str, **kwargs) -> "Llama":
        """A GGUF from the Hugging Face hub (through huggingface_hub; a clear error offline)."""
        return cls(model_path=str(models.hf_download(repo_id, filename)), **kwargs)

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        # Each handle is cleared before it is freed: a Ctrl-C (KeyboardInterrupt between two
        # bytecodes) inside close must leave at worst a leak, never a handle that __del__ frees again.
        with self._lock:
            ctx, self._ctx = self._ctx, ffi.NULL
            if ctx:
                lib.pr_context_free(ctx)
            model, self._model = self._model, ffi.NULL
            if model:
                lib.pr_model_free(model)
            if getattr(self, "vocab", None):
                self.vocab.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _live(self):
        if not self._ctx:
            raise RuntimeError("this Llama is closed")

    # -- model facts ------------------------------------------------------------------------
    def n_ctx(self) -> int:
        return self._n_ctx

    def n_vocab(self) -> int:
        return self.info["n_vocab"]

    def token_bos(self) -> int:
        return self.vocab.bos

    def token_eos(self) -> int:
        return self.vocab.eos

    def devices(self) -> List[str]:
        """ggml device name of each block, then of the head ("CPU", "RPC0", ...)."""
        return read_text(lambda buf, size, needed: lib.pr_model_devices(self._model, buf, size, needed)).splitlines()

    def metadata(self, key: str) -> Optional[str]:
        """A GGUF metadata value as text; None when the file has no such key."""
        try:
            return read_text(lambda buf, size, needed: lib.pr_model_meta(self._model, key.encode(), buf, size, needed))
        except ValueError:
            return None

    # -- tokens -----------------------------------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        return self.vocab.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes:
        return self.vocab.detokenize(list(tokens), prev_tokens, special)

    # -- evaluation -------------------------------------------------------------------------
    def reset(self) -> None:
        with self._lock:
            self._live()
            self._version += 1   # before the change: an interrupt after it must not hide it
            check(lib.pr_kv_clear(self._ctx))
            self.input_ids = []
            self._kinds = []

    def _reconcile(self) -> None:
        """Make input_ids agree with the native cache again: a KeyboardInterrupt can land between
        a native step (decode, truncate) and the bookkeeping after it. The shorter side wins."""
        n = lib.pr_kv_pos(self._ctx)
        del self._kinds[len(self.input_ids):]
        if len(self.input_ids) > n:
            self._version += 1
            del self.input_ids[n:]
            del self._kinds[n:]
        elif len(self.input_ids) < n:
            self._version += 1
            check(lib.pr_kv_truncate(self._ctx, len(self.input_ids)))

    def _truncate(self, n_keep: int) -> None:
        self._version += 1
        check(lib.pr_kv_truncate(self._ctx, n_keep))
        del self.input_ids[n_keep:]
        del self._kinds[n_keep:]

    # How a cached token was computed. PROMPT_LIKE: as a prompt computes it, at full depth. STEP: a
    # decode step whose K/V a prompt would not reproduce bit for bit: one that ran under an exit
    # rule (a prompt runs at full depth), or any decode step of a context that is not
    # batch-invariant (its kernels depend on the number of tokens in a step).
    PROMPT_LIKE, STEP = 0, 1

    def _step_kind(self) -> int:
        return self.STEP if self._exiting or not self.batch_invariant else self.PROMPT_LIKE

    def eval(self, tokens: Sequence[int], logits_all: bool = False, prompt: bool = False) -> np.ndarray:
        """Append tokens to the cache and run them. Returns logits [n_outputs, n_vocab]: every
        token's with logits_all, else the last token's. prompt marks a single token as a prompt
        (pr_decode's prompt rule: a prompt runs at full depth, a decode step under the exits)."""
        with self._lock:
            self._live()
            toks = [int(t) for t in tokens]
            if not toks:
                raise ValueError("eval needs at least one token")
            self._reconcile()
            arr = ffi.new("int32_t[]", toks)
            self._version += 1
            check(lib.pr_decode(self._ctx, arr, len(toks), 1 if logits_all else 0, 1 if prompt else 0))
            self.input_ids.extend(toks)
            step = len(toks) == 1 and not prompt   # pr_decode's prompt rule
            self._kinds.extend([self._step_kind() if step else self.PROMPT_LIKE] * len(toks))
            buf = ffi.new("int32_t[]", len(toks))
            n_ex = lib.pr_exit_layers(self._ctx, buf, len(toks))
            self.last_exits = list(buf[0:min(n_ex, len(toks))])
            n_out = lib.pr_n_outputs(self._ctx)
            n_vocab = self.info["n_vocab"]
            ptr = lib.pr_logits(self._ctx, 0)
            if ptr == ffi.NULL:
                raise PyriverError(last_error())
            return np.frombuffer(ffi.buffer(ptr, 4 * n_vocab * n_out), dtype=np.float32).reshape(n_out, n_vocab).copy()

    def _sync_prefix(self, tokens: List[int], n_prompt: int, need_logits: bool = True):
        """Bring the cache to hold exactly `tokens`: the first n_prompt a prompt, the rest this
        generation's own tokens. Returns the last token's logits (with need_logits, the last token
        is run again when cached; else None when nothing ran), how many tokens were evaluated and
        the exit blocks of those evaluated as decode steps.
        A cached token is reused only when it was computed as it would be now (a prompt token as
        a prompt computes it, a generated one as a decode step), so that the result never depends
        on what else used the cache: on a batch-invariant context, the same tokens give the same
        logits bit for bit however they were reached."""
        self._reconcile()
        step_kind = self._step_kind()
        want = lambda i: self.PROMPT_LIKE if i < n_prompt else step_kind   # noqa: E731
        n = 0
        limit = min(len(tokens), len(self.input_ids)) - need_logits   # keep >= 1 token to recompute logits
        while n < limit and self.input_ids[n] == tokens[n] and self._kinds[n] == want(n):
            n += 1
        self._truncate(n)
        # Generated tokens are decode steps again, unless a decode step computes what a prompt does.
        split = len(tokens) if step_kind == self.PROMPT_LIKE else max(n_prompt, n)
        logits = self.eval(tokens[n:split], prompt=True)[-1] if split > n else None
        step_exits = []   # (index in tokens, exit block) of the decode steps
        for i in range(split, len(tokens)):
            logits = self.eval([tokens[i]])[-1]
            step_exits.append((i, self.last_exits[0]))
        return logits, len(tokens) - n, step_exits

    # -- generation -------------------------------------------------------------------------
    def generate(self, tokens: Sequence[int], sampler: Sampler, max_new: int, logprobs: Optional[int] = None) -> Iterator[int]:
        """Yield sampled tokens after the prompt `tokens`, until max_new or the context ends.
        Each step holds the lock and re-syncs the cache, so interleaved users stay correct.
        Timings of the call go to self.last_stats."""
        seq = [int(t) for t in tokens]
        if len(seq) > self._n_ctx:
            raise ContextFullError(f"Requested tokens ({len(seq)}) exceed context window of {self._n_ctx}")
        st = self.last_stats = {"prompt_tokens": len(seq), "prompt_eval_tokens": 0, "prompt_s": 0.0,
                                "decode_tokens": 0, "decode_s": 0.0, "exits": [], "logprobs": []}
        if self._spec is not None:
            yield from self._spec.generate(self, seq, sampler, max_new, logprobs, st)
            return
        n_prompt = len(seq)
        gen_exits = st["exits"]   # exit block of each generated token, by position
        logits = None
        mine = -1   # the cache version when this generation last had the cache as it left it
        for _ in range(max_new):
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
                mine = self._version
                yield tok
                # Another generation on this thread may have used the cache while this one was
                # suspended (the lock is reentrant): then the token runs with the next re-sync.
                seq.append(tok)
                if len(seq) >= self._n_ctx:
                    return
                if self._version != mine:
                    continue
                t0 = time.perf_counter()
                logits = self.eval([tok])[-1]
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

    def _prompt_tokens(self, prompt: Union[str, List[int]]) -> List[int]:
        if isinstance(prompt, str):
            toks = self.tokenize(prompt.encode("utf-8"), add_bos=True, special=True) if prompt else [self.token_bos()]
        else:
            toks = [int(t) for t in prompt]
            bad = [t for t in toks if not 0 <= t < self.n_vocab()]
            if bad:
                raise ValueError(f"token id {bad[0]} is out of range [0, {self.n_vocab()})")
        if not toks:
            raise ValueError("the prompt is empty")
        if len(toks) > self._n_ctx:
            raise ContextFullError(f"Requested tokens ({len(toks)}) exceed context window of {self._n_ctx}")
        return toks

    def create_completion(self, prompt: Union[str, List[int]], max_tokens: Optional[int] = 16,
                          temperature: float = 0.8, top_p: float = 0.95, min_p: float = 0.05,
                          typical_p: float = 1.0, stop: Optional[Union[str, List[str]]] = None,
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                          repeat_penalty: float = 1.0, top_k: int = 40, stream: bool = False,
                          seed: Optional[int] = None, echo: bool = False, logprobs: Optional[int] = None,
                          **unsupported):
        if unsupported:
            raise TypeError(f"create_completion does not support: {', '.join(sorted(unsupported))}")
        if logprobs is not None and (stream or echo):
            raise NotImplementedError("logprobs is supported without stream and echo")
        if logprobs is not None and logprobs < 0:
            raise ValueError("logprobs must be >= 0")
        prompt_tokens = self._prompt_tokens(prompt)
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                                repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                                presence_penalty=presence_penalty)
        sampler = Sampler(params, seed if seed is not None else self._seed)
        if max_tokens is None or max_tokens <= 0:
            max_tokens = self._n_ctx - len(prompt_tokens)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        stops_b = [s.encode("utf-8") for s in stops if s]
        events = self._events(prompt_tokens, sampler, max_tokens, stops_b, logprobs)
        cid, created = C.new_id("cmpl"), C.now()
        prefix = self.detokenize(prompt_tokens).decode("utf-8", "ignore") if echo else ""
        if stream:
            return self._stream(events, cid, created, prefix, len(prompt_tokens))
        parts = [prefix]
        finish = "length"
        for text, fin in events:
            parts.append(text)
            if fin:
                finish = fin
        text = "".join(parts)
        lp = (logprobs_dict(self.vocab, self.last_stats["logprobs"], text, len(prompt) if isinstance(prompt, str) else 0)
              if logprobs is not None else None)
        return C.completion_dict(cid, created, self.model_path, text, finish,
                                 C.usage_dict(len(prompt_tokens), self._n_generated), logprobs=lp,
                                 river=self.river_stats())

    __call__ = create_completion

    @property
    def n_generated(self) -> int:
        """Tokens the last completion generated (streamed ones as far as they were read)."""
        return self._n_generated

    def river_stats(self, exits: Optional[Sequence[int]] = None, lossless: Optional[Dict] = None) -> Optional[Dict]:
        """Exit statistics of the decode steps of the last generation, or of the given exit blocks
        and draft statistics (the server's requests); in lossless mode also the draft statistics
        under "lossless" (its tokens then all ran at full depth, so the exit statistics count none).
        None without a river and lossless mode."""
        if self.river_path is None and (self._spec is None or exits is not None):
            return None
        d = exit_stats(self.last_stats.get("exits", []) if exits is None else exits, self.info["n_layer"])
        d.update(river=self.river_path, exit_threshold=self.exit_threshold, min_exit_layer=self.min_exit_layer,
                 calibrated=self.calibration is not None,
                 lossless=lossless_stats(self.last_stats.get("lossless") if exits is None else lossless))
        return d

    def _events(self, prompt_tokens, sampler, max_tokens, stops, logprobs=None):
        """(text, finish_reason or None) pairs; the last pair carries the finish reason."""
        self._n_generated = 0
        state = {"eog": False}

        def pieces():
            n = 0
            for tok in self.generate(prompt_tokens, sampler, max_tokens, logprobs):
                n += 1
                self._n_generated = n
                yield self.vocab.piece(tok)
            # generate() ends by itself on EOG (stop) or on max_tokens / context end (length)
            state["eog"] = n < max_tokens and len(prompt_tokens) + n < self._n_ctx

        for text, stopped in C.text_events(pieces(), stops):
            if stopped:
                yield text, "stop"
                return
            if text:
                yield text, None
        yield "", "stop" if state["eog"] else "length"

    def _stream(self, events, cid, created, prefix, n_prompt):
        if prefix:
            yield C.completion_dict(cid, created, self.model_path, prefix, None, None)
        for text, fin in events:
            if text:
                yield C.completion_dict(cid, created, self.model_path, text, None, None)
            if fin:
                yield C.completion_dict(cid, created, self.model_path, "", fin, None)

    # -- chat -------------------------------------------------------------------------------
    def chat_tokens(self, messages: List[Dict]) -> List[int]:
        """The prompt of a chat, rendered by the GGUF's template (compiled once per Llama) with
        the generation prompt; special tokens are parsed and BOS comes from the template itself."""
        if self._template is None:
            self._template = chat.template_for(self)
        prompt = self._template.render(messages, add_generation_prompt=True)
        return self.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)

    def chat_stops(self, stop: Optional[Union[str, List[str]]]) -> List[str]:
        """A chat's stop strings: the caller's and the template's EOS text (templates that spell EOS as text)."""
        if self._template is None:
            self._template = chat.template_for(self)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if self._template.eos_token and self._template.eos_token not in stops:
            stops.append(self._template.eos_token)
        return stops

    def create_chat_completion(self, messages: List[Dict], *, stream: bool = False,
                               stop: Optional[Union[str, List[str]]] = None, max_tokens: Optional[int] = None,
                               **kwargs):
        tokens = self.chat_tokens(messages)
        stops = self.chat_stops(stop)
        cid, created = C.new_id("chatcmpl"), C.now()
        res = self.create_completion(tokens, stop=stops, max_tokens=max_tokens, stream=stream, **kwargs)
        if stream:
            return chat.chat_stream(cid, created, self.model_path, res)
        c = res["choices"][0]
        return chat.chat_dict(cid, created, self.model_path, c["text"], c["finish_reason"], res["usage"])
