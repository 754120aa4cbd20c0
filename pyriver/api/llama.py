"""`pyriver.Llama`: the high-level API, shaped like llama-cpp-python's `Llama`, over an engine's
model and context (pyriver.engine: pyriver's own ggml graphs, or llama.cpp's) and llama.cpp's tokenizer. This module holds
construction, loading, the context and the River / lossless settings; the rest is composed from
mixins: generation.py (eval, the decode loop, the cache bookkeeping), completion_api.py
(create_completion) and chat_api.py (create_chat_completion)."""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import warnings
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

import llama_cpp
import llama_cpp._logger as _lg
import numpy as np

from pyriver import models
from pyriver.api.chat import ChatMixin
from pyriver.api.completion import CompletionMixin
from pyriver.api.ctor_args import check_chat_format, check_inert, handler_engine, inert_attrs, lora_specs
from pyriver.api.embedding import EmbeddingMixin
from pyriver.api.generation import GenerationMixin
from pyriver.api.low_level import LlamaCppMixin, PyriverTokenizer
from pyriver.api.state import StateMixin
from pyriver.engine import ContextArgs, ExitRule, ModelArgs, check_exit_rule, load as load_engine
from pyriver.engine.backends import device_key
from pyriver.speculative.draft import drafter
from pyriver.speculative.draftlen import AUTO, parse_cost
from pyriver.speculative.lossless import Speculator
from pyriver.river.sidecar import calibrated_exit_rule, find_calibration
from pyriver.engine.vocab import Vocab


# Defaults of the exit rule (see README: chosen by `pyriver eval` measurements on SmolLM2), and
# the river type built when a river is asked for without one (chat's /river on, eval).
DEFAULT_TAU = 0.985
DEFAULT_MIN_EXIT_LAYER = 4
DEFAULT_RIVER = "q4_0"
# Lossless mode's longest draft (README, Lossless mode: 2 beat 4 on every model measured there), and
# with the measured cost table (draft_cost="auto"), where the length rule cuts each draft itself.
DEFAULT_DRAFT_MAX = 2
DEFAULT_DRAFT_MAX_BY_COST = 64
# The text the automatic verify cost table is measured after (any text of a few hundred tokens)
COST_PROMPT = ("Rename the variable `cnt` to `count` in this code and reply with the whole code.\n\n"
               "def word_counts(path):\n    cnt = {}\n    with open(path) as f:\n        for line in f:\n"
               "            for word in line.lower().split():\n                cnt[word] = cnt.get(word, 0) + 1\n"
               "    return cnt\n") * 2


class Llama(LlamaCppMixin, GenerationMixin, StateMixin, CompletionMixin, ChatMixin, EmbeddingMixin):
    def __init__(self, model_path: Optional[str] = None, *, n_gpu_layers: int = 0, split_mode: int = 1,
                 main_gpu: int = 0, tensor_split: Optional[Sequence[float]] = None, vocab_only: bool = False,
                 use_mmap: bool = True, seed: int = llama_cpp.LLAMA_DEFAULT_SEED, n_ctx: int = 512,
                 n_batch: int = 512, n_ubatch: int = 512, n_threads: Optional[int] = None,
                 n_threads_batch: Optional[int] = None, logits_all: bool = False, embedding: bool = False,
                 pooling_type: int = llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED, flash_attn: bool = False,
                 last_n_tokens_size: int = 64, chat_format: Optional[str] = None, chat_handler=None,
                 draft_model=None, tokenizer=None, spm_infill: bool = False, verbose: bool = True,
                 rope_freq_base: float = 0.0, rope_freq_scale: float = 0.0, lora_base: Optional[str] = None,
                 lora_scale: float = 1.0, lora_path: Optional[str] = None,
                 # pyriver's own
                 rpc_servers: Optional[str] = None, rpc_timeout: float = 300.0, river: Optional[str] = "auto",
                 exit_threshold: Optional[float] = None, min_exit_layer: Optional[int] = None,
                 force_exit_layer: int = -1, prefill_exit: bool = False, river_force: bool = False,
                 river_rebuild: bool = False, batch_invariant: Optional[bool] = None, exit_rule: Optional[str] = None,
                 lossless: Optional[bool] = None, draft_max: Optional[int] = None, draft_cost=None,
                 engine: Optional[str] = "auto", lora_adapters: Optional[Sequence[Tuple[str, float]]] = None,
                 batch_layout: bool = False, wide_prompt_rows: Optional[int] = None, tiled_verify: bool = True,
                 **llama_cpp_args):
        # what __getstate__ re-creates this Llama from (llama_cpp pickles its arguments, not its tokenizer)
        self._init_args = {**{k: v for k, v in locals().items() if k not in ("self", "llama_cpp_args", "tokenizer")},
                           **llama_cpp_args}
        check_inert(llama_cpp_args, verbose)   # the rest of llama_cpp's arguments: inert values only; others ignored
        self.__dict__.update(inert_attrs(llama_cpp_args))   # kv_overrides, lora_path, ... as llama_cpp keeps them
        self.spm_infill, self.tensor_split = bool(spm_infill), tensor_split
        self.lora_base, self.lora_scale, self.lora_path = lora_base, lora_scale, lora_path   # as llama_cpp keeps them
        self.lora_adapters, self._lora_adapter = [], None   # the loaded ones (engine.lora.Adapter), set by _load
        if last_n_tokens_size < 0:
            raise ValueError(f"last_n_tokens_size must be >= 0, got {last_n_tokens_size}")
        if exit_rule is not None:
            check_exit_rule(exit_rule)   # a bad name fails before the model loads
        self.exit_rule = exit_rule or "checked"   # None: the calibrated rule of this device, set once River binds
        _lg.set_verbose(verbose)  # llama.cpp's (and ggml's) log lines, as llama-cpp-python does
        self.verbose = verbose
        self._lock = threading.RLock()
        self._stack = contextlib.ExitStack()   # llama_cpp's: what closes with the Llama (a chat handler's libmtmd)
        self._engine = self._ectx = None   # what computes (pyriver.engine) and its context
        self.projector = None   # load_projector's (engine.mtmd.Projector): multimodal prompts
        self.model_path = str(models.resolve(model_path))
        if not os.path.isfile(self.model_path):
            raise FileNotFoundError(f"model file not found: {self.model_path}")
        self.vocab_only = bool(vocab_only)
        self._seed = llama_cpp.LLAMA_DEFAULT_SEED if seed is None else int(seed)   # see ctor_args.rng_seed
        self.last_n_tokens_size = int(last_n_tokens_size)
        self._logits_all = bool(logits_all)
        self.cache = None                # set_cache: a llama_cpp.BaseLlamaCache
        self.draft_model = draft_model
        self._tokens: List[int] = []     # the tokens whose K/V are in the cache, in order
        self._kinds: List[int] = []      # for each: PROMPT_LIKE, or STEP (see _step_kind)
        self._last_logits = None         # logits of the last evaluated token
        self._requires_eval = True       # no live logits for the last cached token (llama_cpp's flag)
        self._sampler = None             # generate's chain while it samples
        self._template = None
        self.chat_format, self.chat_handler = chat_format, chat_handler
        check_chat_format(chat_format, chat_handler)
        engine = handler_engine(chat_handler, engine)   # a multimodal handler: the llama.cpp engine
        if self.vocab_only:   # a tokenizer only, as llama_cpp's vocab_only=True
            self.vocab = Vocab(self.model_path)
            self.info = {"n_vocab": self.vocab.n_vocab}
            self.metadata = self.vocab.metadata()
            self.tokenizer_ = tokenizer or PyriverTokenizer(self)
            self.river_path = self.calibration = self._spec = self.engine = None
            self.batch_layout = False
            return
        self._load(engine, ModelArgs(n_gpu_layers, use_mmap, split_mode, main_gpu, tensor_split, rpc_servers or None,
                                     rpc_timeout, rope_freq_base, rope_freq_scale,
                                     lora_specs(lora_path, lora_scale, lora_adapters), bool(batch_layout)))
        exit_threshold, min_exit_layer = self._bind_river(river, exit_threshold, min_exit_layer, river_force,
                                                          river_rebuild, use_mmap, verbose, lossless)
        if exit_rule is None and self.calibration is not None and self.river_path is not None:
            self._calibrated_rule(verbose)
        self.vocab = Vocab(self.model_path, checked=True)   # the engine's load checked the file
        if self.vocab.n_vocab != self.info["n_vocab"]:
            raise ValueError(f"tokenizer has {self.vocab.n_vocab} tokens but the model {self.info['n_vocab']}")
        self.metadata = self.vocab.metadata()
        self.tokenizer_ = tokenizer or PyriverTokenizer(self)
        self._new_context(n_ctx, n_batch, n_ubatch, n_threads, n_threads_batch, flash_attn, batch_invariant, embedding)
        self._init_embedding(embedding, pooling_type)   # embed, create_embedding: pyriver/api/embedding.py
        self._ids = np.zeros(self._n_ctx, dtype=np.intc)   # input_ids
        if self._logits_all:   # pages are touched only as rows are written
            self._scores_all = np.zeros((self._n_ctx, self.n_vocab()), dtype=np.single)
        self._version = 0                # counts the changes of the cache, whoever made them
        self._exiting = False            # an exit rule is on (set_exit)
        self._exit: Optional[ExitRule] = None   # the exit rule of the last set_exit, as the engine holds it
        self.last_exits: List[int] = []  # exit block of each token of the last eval
        self.exit_threshold = DEFAULT_TAU if exit_threshold is None else float(exit_threshold)
        # The default first checked block, kept inside shallow (synthetic) models.
        self.min_exit_layer = (min(DEFAULT_MIN_EXIT_LAYER, max(0, self.info["n_layer"] - 2)) if min_exit_layer is None
                               else int(min_exit_layer))
        if self.river_path is None and (exit_threshold is not None or min_exit_layer is not None or force_exit_layer >= 0
                                        or exit_rule not in (None, "checked")):
            raise ValueError("exit_threshold, min_exit_layer, force_exit_layer and exit_rule need a river (river='q4_0', ...)")
        if self.river_path is not None:
            self.set_exit(self.exit_threshold, self.min_exit_layer, force_exit_layer, prefill_exit)
        self.last_stats: Dict = {}
        self._n_generated = 0
        self.prefill_exit = prefill_exit
        self.wide_prompt_rows: Optional[int] = None   # a prompt step of more rows reads batch_layout's layout
        self.tiled_verify = bool(tiled_verify)   # the automatic verify table may take tiled verify steps
        self.verify_tile_rows = 0   # a verify step of more rows attends tiled (lossless mode's automatic table)
        if self.batch_layout and not self.batch_invariant:
            self._set_wide_prompt_rows(wide_prompt_rows)
        self._spec: Optional[Speculator] = None   # lossless mode (set_lossless)
        cal = self.calibration["setting"] if self.calibration is not None else {}
        if lossless is None:   # on with a draft model, as llama-cpp-python's draft_model is, or as calibrated
            lossless = draft_model is not None or (cal.get("lossless", False) and not prefill_exit)
        if cal.get("lossless") and lossless:   # the calibrated drafter and draft length rule, unless given
            draft_max = cal["draft_max"] if draft_max is None else draft_max
            draft_model = cal.get("draft", "river") if draft_model is None else draft_model
            draft_cost = cal.get("draft_cost") if draft_cost is None else draft_cost
        self.set_lossless(bool(lossless), draft_model=draft_model, draft_max=draft_max, draft_cost=draft_cost)

    def _load(self, engine: Optional[str], args: ModelArgs) -> None:
        """The engine for the file (pyriver.engine.load: native where pyriver builds the
        architecture, llama.cpp's own graphs on request or where it does not)."""
        self.rpc_servers = args.rpc_servers
        self._engine = load_engine(self.model_path, engine, args, self.verbose)
        self.engine = self._engine.name
        self.info = self._engine.info
        self.model_params = self._engine.params   # the engine's (native: pr_model_params; llama.cpp's llama_model_params)
        # whether products of many rows read matrices in a second layout (ModelArgs.batch_layout took)
        self.batch_layout = self.info.get("n_wide", 0) > 0
        self._is_recurrent, self._is_hybrid = self._engine.recurrent, self._engine.hybrid
        # llama_cpp's handle of its one adapter (lora_path); pyriver's list of them all (lora_adapters)
        self.lora_adapters = list(self._engine.adapters)
        self._lora_adapter = self.lora_adapters[0].handle if self.lora_adapters else None

    @property
    def _native_model(self):
        """The native engine's model handle (None on another engine or closed): for tests that reach
        the C API (pyriver.engine.binding) and pyriver.engine.river.build."""
        return getattr(self._engine, "model", None) if getattr(self._engine, "supports_river", False) else None

    @property
    def _native_ctx(self):
        """The native engine's context handle, as _native_model."""
        return getattr(self._ectx, "handle", None)

    def _bind_river(self, river, exit_threshold, min_exit_layer, force, rebuild, use_mmap, verbose, lossless):
        """river="auto" (the default): the setting `pyriver calibrate` stored in a sidecar of this
        model, if any; River off otherwise. river=None is always full depth, and so is a lossless
        calibration with lossless=False (its tau was chosen for drafts, not for lossy fidelity).
        Returns the exit threshold and min exit layer to use (None: the defaults)."""
        self.river_path = None
        self.calibration = None
        if river == "auto" and not self._engine.supports_river:
            river = None   # a calibration is of the native engine's River
        if river is not None and not self._engine.supports_river:
            raise self._engine.no_river(f"river={river!r}")
        if river == "auto":
            river = None
            cal = find_calibration(self.model_path)
            if cal is not None and not (cal["setting"].get("lossless") and lossless is False):
                self.calibration = cal
                s = cal["setting"]
                if s.get("draft") != "ngram":   # n-gram drafts need no river: it stays unbound
                    river = cal["sidecar"]
                    exit_threshold = s["tau"] if exit_threshold is None else exit_threshold
                    min_exit_layer = s["min_exit_layer"] if min_exit_layer is None else min_exit_layer
                if verbose:
                    at = "" if river is None else f" at tau {exit_threshold} min layer {min_exit_layer}"
                    how = (f"lossless, {s.get('draft', 'river')} drafts{at} k {s['draft_max']}" if s.get("lossless")
                           else f"tau {exit_threshold} min layer {min_exit_layer} (top-1 "
                           f"{cal['candidate']['top1_agreement']:.4f} >= {cal['target_fidelity']})")
                    print(f"pyriver: River on from calibration: {s['river']} {how}; {cal['sidecar']}; "
                          f"river=None turns it off", file=sys.stderr)
        if river is not None:
            try:
                self.river_path = str(self._engine.prepare_river(self.model_path, river, force=force, rebuild=rebuild,
                                                                 progress=True, use_mmap=use_mmap, verbose=verbose))
            except Exception as e:
                if self.calibration is None:
                    raise
                # a stale calibrated sidecar must not stop the model from loading
                warnings.warn(f"calibrated river not usable, River off: {e}")
                self.calibration = None
                exit_threshold = min_exit_layer = None
        return exit_threshold, min_exit_layer

    def _calibrated_rule(self, verbose: bool) -> None:
        """The exit rule `pyriver calibrate` measured fastest for the calibrated setting on the
        device this model runs on; checked when it measured none there."""
        device = device_key(self._engine.devices())
        rule = calibrated_exit_rule(self.calibration, device)
        if rule is not None:
            self.exit_rule = rule
            if verbose:
                print(f"pyriver: exit rule {rule} from calibration on {device}; exit_rule= overrides it", file=sys.stderr)

    def _new_context(self, n_ctx, n_batch, n_ubatch, n_threads, n_threads_batch, flash_attn, batch_invariant,
                     embedding=False) -> None:
        n_ctx = int(n_ctx) if n_ctx > 0 else int(self.info["n_ctx_train"])
        if n_batch < 1 or n_ubatch < 1:
            raise ValueError(f"n_batch and n_ubatch must be >= 1, got {n_batch} and {n_ubatch}")
        # llama_cpp's: eval hands n_batch tokens at a time; a graph computes n_ubatch of them
        n_batch = min(n_ctx, int(n_batch))
        self.n_threads = int(n_threads or max(multiprocessing.cpu_count() // 2, 1))
        self.n_threads_batch = int(n_threads_batch or multiprocessing.cpu_count())
        # batch_invariant: the default (False) computes each step as llama.cpp does, so the same steps
        # give llama.cpp's bits: a prompt in steps of min(n_batch, n_ubatch) tokens, as llama_cpp.Llama's
        # decode splits it. True: a token's logits do not depend on the step it was computed in, at a
        # cost in prompt speed (docs/default-cpu.md; pr_context_params.batch_invariant).
        args = ContextArgs(n_ctx, n_batch, n_ubatch, self.n_threads, self.n_threads_batch, bool(flash_attn),
                           batch_invariant, bool(embedding))
        self._ectx = self._engine.new_context(args)
        self._context_args = args   # what a BatchDecoder (pyriver.api.batch) on this model starts from
        self.context_params = self._ectx.params   # the engine's (native: pr_context_params; llama.cpp's llama_context_params)
        self.batch_invariant = self._ectx.batch_invariant
        self._n_ctx = self._ectx.n_ctx
        self.n_batch, self.n_ubatch = n_batch, min(n_batch, int(n_ubatch))

    def _set_wide_prompt_rows(self, n: Optional[int]) -> None:
        """From how many rows a prompt step reads the second layout: n, or None: this machine's
        (pyriver.engine.widerows, measured once and cached); kept in the context arguments, so that a
        BatchDecoder's context (the server's) reads it too."""
        if n is None:
            from pyriver.engine.widerows import auto
            n = auto(self, self.tokenize(COST_PROMPT.encode()))
        self._ectx.set_wide_prompt_rows(n)   # a negative n: the native check's ValueError
        self._context_args = replace(self._context_args, wide_prompt_rows=int(n))
        self.wide_prompt_rows = int(n)

    def _set_verify_tile_rows(self, n: int) -> None:
        """From how many rows verify steps attend tiled (engine Context.set_verify_tile_rows; 0:
        never), kept in the context arguments as wide_prompt_rows is."""
        self._ectx.set_verify_tile_rows(n)
        self._context_args = replace(self._context_args, verify_tile_rows=int(n))
        self.verify_tile_rows = int(n)

    def attach_river(self, river: str, *, force: bool = False, rebuild: bool = False) -> str:
        """Bind a river to this model after loading (once); exits stay off until set_exit."""
        with self._lock:
            self._live()
            if self.river_path is not None:
                raise ValueError(f"a river is already attached: {self.river_path}")
            if not self._engine.supports_river:
                raise self._engine.no_river("attach_river")
            self.river_path = str(self._engine.prepare_river(self.model_path, river, force=force, rebuild=rebuild))
            return self.river_path

    def set_exit(self, exit_threshold: float, min_exit_layer: Optional[int] = None, force_exit_layer: int = -1,
                 prefill_exit: bool = False, check_chunk: int = 0, host_checks: bool = True,
                 device_carry: bool = True, predict: bool = False, exit_rule: Optional[str] = None) -> None:
        """Change the exit rule between calls (tau > 1 never exits; force_exit_layer >= 0 exits
        every token after that block; check_chunk: blocks per graph, 0 = 2 on the CPU, 8 over
        RPC, 16 on a GPU; device_carry: a token's hidden state stays on the device between graphs;
        predict: the first graph runs to the previous token's exit block; exit_rule: "checked",
        "predicted" or "guarded", None keeps the current one)."""
        check_exit_rule(self.exit_rule if exit_rule is None else exit_rule)
        with self._lock:
            self._live()
            if not self._engine.supports_river:
                raise self._engine.no_river("set_exit")
            if prefill_exit and getattr(self, "_spec", None) is not None:
                raise ValueError("lossless mode verifies at full depth; prefill_exit=True runs prompts on the river")
            rule = ExitRule(float(exit_threshold), int(self.min_exit_layer if min_exit_layer is None else min_exit_layer),
                            bool(prefill_exit), int(force_exit_layer), int(check_chunk), bool(host_checks),
                            bool(device_carry), bool(predict), self.exit_rule if exit_rule is None else exit_rule)
            self._exit = rule = self._ectx.set_exit(rule)   # a BatchDecoder on this model applies the same rule
            self.exit_threshold, self.min_exit_layer, self.exit_rule = rule.exit_threshold, rule.min_exit_layer, rule.rule
            self._exiting = rule.exits
            self.prefill_exit = prefill_exit

    def set_lossless(self, on: bool, *, draft_model=None, draft_max: Optional[int] = None,
                     draft_p_min: float = 0.0, draft_cost=None) -> None:
        """Lossless mode on or off between calls (pyriver.speculative.lossless): drafts from draft_model (a
        callable as llama-cpp-python's draft models, or a drafter's name: "river", "ngram",
        "both") or, without one, on the River path under the exit rule; every emitted token is
        verified by the backbone at full depth. draft_cost: None (the draft length grows and shrinks
        by one), or by cost: a pyriver.speculative.draftlen.DraftCost, "default" (the table measured on the CPU) or a
        `pyriver bench --verify-cost --json` file (pyriver.speculative.draftlen.parse_cost)."""
        if isinstance(draft_model, str):
            draft_model = drafter(draft_model)
            if draft_model is None and not on:
                return self.set_lossless(False)
        with self._lock:
            if not on:
                if draft_model is not None:
                    raise ValueError("draft_model drafts for lossless mode; it cannot be used with lossless=False")
                self._spec = None
                return
            if (draft_model is None or getattr(draft_model, "river_fallback", False)) and self.river_path is None:
                if not self._engine.supports_river:
                    raise self._engine.no_river("lossless mode with river drafts (pass draft_model='ngram')")
                raise ValueError("lossless mode drafts with a river (river='q4_0', ...) or a draft_model "
                                 "(pyriver.PromptLookupDecoding(), ...)")
            if self.prefill_exit:
                raise ValueError("lossless mode verifies at full depth; prefill_exit=True runs prompts on the river")
            keep = self._spec.draft_max if self._spec is not None else DEFAULT_DRAFT_MAX
            cost = parse_cost(draft_cost)
            if cost == AUTO:   # this model's own verify cost table (measured once, cached)
                from pyriver.speculative.costcurve import auto
                cost, tile = auto(self, self.tokenize(COST_PROMPT.encode()))
                self._set_verify_tile_rows(tile)   # the verify steps the table was measured with
                keep = DEFAULT_DRAFT_MAX_BY_COST if draft_max is None else keep
            self._spec = Speculator(draft_model, keep if draft_max is None else draft_max, draft_p_min, cost)

    def load_projector(self, path: str, marker: str = "<__media__>"):
        """A multimodal projector (mmproj) for this model: libmtmd over the llama.cpp engine's
        context (pyriver.engine.mtmd.Projector; the server's --mmproj). marker: the text that stands
        for a media file in a prompt. A second projector, or the native engine, is a ValueError."""
        with self._lock:
            self._live()
            self.projector = self._engine.load_projector(path, n_threads=self.n_threads, marker=marker,
                                                          flash_attn=self._context_args.flash_attn,
                                                          verbose=self.verbose)
            return self.projector

    @property
    def lossless(self) -> bool:
        return self._spec is not None

    @property
    def speculator(self) -> Optional[Speculator]:
        """Lossless mode's draft-and-verify rules (draft length, acceptance), or None."""
        return self._spec

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: Optional[str], additional_files: Optional[List] = None,
                        local_dir=None, local_dir_use_symlinks="auto", cache_dir=None, **kwargs) -> "Llama":
        """llama_cpp's: the one file of a hub repository that matches the glob `filename` (and
        additional_files), through huggingface_hub; a clear error when the hub cannot be reached."""
        from pyriver.models.pretrained import download
        return cls(model_path=download(repo_id, filename, additional_files, local_dir, local_dir_use_symlinks,
                                       cache_dir), **kwargs)

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        # Each handle is cleared before it is freed: a Ctrl-C (KeyboardInterrupt between two
        # bytecodes) inside close must leave at worst a leak, never a handle that __del__ frees again.
        with self._lock:
            stack = getattr(self, "_stack", None)
            if stack is not None:   # a chat handler's libmtmd context, before the model it was made for
                stack.close()
            ctx, self._ectx = getattr(self, "_ectx", None), None
            if ctx is not None:
                ctx.close()
            engine, self._engine = getattr(self, "_engine", None), None
            if engine is not None:
                engine.close()
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
        if self.vocab_only:
            raise RuntimeError("this Llama was made with vocab_only=True: it tokenizes, it has no weights to run")
        if self._ectx is None:
            raise RuntimeError("this Llama is closed")

    # -- llama.cpp's handles, as llama_cpp.Llama has them ------------------------------------
    @property
    def _model(self) -> "LlamaCppModel":
        """llama_cpp's `_model` (a LlamaModel): `.model` is the llama_model_p of the vocabulary
        pyriver loads from the same file (libraries read its vocab through it, as outlines does), or
        on the llama.cpp engine the model its context computes with (libmtmd reads it)."""
        eng = getattr(self, "_engine", None)
        return LlamaCppModel(self.vocab, getattr(eng, "model", None) if getattr(eng, "name", "") == "llama.cpp" else None)

    @property
    def model(self):
        """llama_cpp's `model`: a llama_model_p of this file (the vocabulary's on the native engine,
        which computes with its own weights; the llama.cpp engine's own model there)."""
        return self._model.model

    @property
    def _ctx(self) -> "LlamaCppContext":
        return LlamaCppContext(self)

    @property
    def ctx(self):
        return self._ctx.ctx

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
        self._live()
        return self._engine.devices()

    def meta(self, key: str) -> Optional[str]:
        """A GGUF metadata value as text, read by pyriver; None when the file has no such key
        (`metadata` is llama_cpp's dict of llama.cpp's view of them)."""
        self._live()
        return self._engine.meta(key)

    def token_nl(self) -> int:
        return self.vocab.nl

    def n_embd(self) -> int:
        self._live()
        return self.info["n_embd"]

    def tokenizer(self) -> PyriverTokenizer:
        return PyriverTokenizer(self)

    # -- tokens -----------------------------------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        return self.tokenizer_.tokenize(text, add_bos, special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes:
        return self.tokenizer_.detokenize(list(tokens), prev_tokens=prev_tokens, special=special)



class LlamaCppModel:
    """What llama_cpp's internals.LlamaModel offers libraries, over pyriver's Vocab."""

    def __init__(self, vocab: Vocab, weights=None):
        self._v, self._weights = vocab, weights

    @property
    def model(self):
        self._v._vocab   # raises when closed
        return self._weights or self._v._model

    @property
    def vocab(self):
        return self._v._vocab

    def n_vocab(self) -> int:
        return self._v.n_vocab

    def token_get_text(self, token: int) -> str:
        return self._v.token_text(token)

    def token_bos(self) -> int:
        return self._v.bos

    def token_eos(self) -> int:
        return self._v.eos


class LlamaCppContext:
    """llama_cpp's `_ctx`. A vocab_only Llama has a real llama.cpp context over its vocabulary, as
    llama_cpp's has (made when first asked for); a Llama with weights computes with pyriver's own
    graphs and has no llama.cpp context to hand out."""

    def __init__(self, llama: "Llama"):
        self._llama = llama

    @property
    def ctx(self):
        L = self._llama
        if getattr(L._ectx, "ctx", None) is not None:   # the llama.cpp engine's own context
            return L._ectx.ctx
        if not L.vocab_only:
            raise AttributeError("pyriver.Llama has no llama.cpp context (llama_context_p): it computes with its "
                                 "own ggml graphs (the native context is Llama._native_ctx); tokenize, detokenize "
                                 "and Llama.model (llama.cpp's llama_model_p of the vocabulary) are there")
        return L.vocab.context()

    def kv_cache_clear(self) -> None:
        """llama_cpp's: the cache emptied (and the Llama's record of it)."""
        self._llama.reset()

