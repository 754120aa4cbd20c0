"""`pyriver.Llama`: the high-level API, shaped like llama-cpp-python's `Llama`, over an engine's
model and context (pyriver.engine: pyriver's own ggml graphs, or llama.cpp's) and llama.cpp's tokenizer.

A Llama holds its parts, each with its own state, and its public methods (llama-cpp-python's
names and signatures, then pyriver's own) hand each call to one of them:
  context      generation.Context: the engine's context, its KV cache bookkeeping, decode steps and
               the decode loop (the step interface drafts, River and the server use)
  sampling     low_level.Sampling: llama_cpp's eval, sample and generate
  completions  completion.Completion: create_completion
  chats        chat.Chat: the chat template and create_chat_completion
  embeddings   embedding.Embeddings: embed and create_embedding
  states       state.State: save_state and load_state
  river        river.River: the bound River and its exit rule
  drafts       drafts.Drafts: lossless mode
The constructor keeps llama-cpp-python's flat keyword arguments; `settings` holds them in groups
(settings.Settings: model, context, chat, river, lossless)."""
from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import sys
import threading
from collections import deque
from typing import Dict, List, Optional, Sequence, Tuple

import llama_cpp
import numpy as np

from pyriver import models
from pyriver.api.chat import Chat
from pyriver.api.completion import Completion
from pyriver.api.ctor_args import check_chat_format, check_inert, handler_engine, inert_attrs, lora_specs
from pyriver.api.drafts import COST_PROMPT, DEFAULT_DRAFT_MAX, DEFAULT_DRAFT_MAX_BY_COST, Drafts  # noqa: F401 (re-exported)
from pyriver.api.embedding import Embeddings
from pyriver.api.generation import Context
from pyriver.api.low_level import PyriverTokenizer, Sampling
from pyriver.api.river import River
from pyriver.api.settings import ContextSettings, ModelSettings, Settings
from pyriver.api.state import State
from pyriver.engine import ContextArgs, ModelArgs, check_exit_rule, kv_types, load as load_engine
from pyriver.engine.logs import set_verbose
from pyriver.speculative.lossless import Speculator
from pyriver.engine.vocab import Vocab


# Defaults of the exit rule (see README: chosen by `pyriver eval` measurements on SmolLM2), and
# the river type built when a river is asked for without one (chat's /river on, eval).
DEFAULT_TAU = 0.985
DEFAULT_MIN_EXIT_LAYER = 4
DEFAULT_RIVER = "q4_0"


def _to(part: str, method):
    """A public method of Llama that hands the call to the same-named method of one of its parts
    (same signature and docstring: inspect.signature follows __wrapped__)."""
    name = method.__name__

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        return getattr(getattr(self, part), name)(*args, **kwargs)
    return call


class Llama:
    def __init__(self, model_path: Optional[str] = None, *, n_gpu_layers: int = 0, split_mode: int = 1,
                 main_gpu: int = 0, tensor_split: Optional[Sequence[float]] = None, vocab_only: bool = False,
                 use_mmap: bool = True, seed: int = llama_cpp.LLAMA_DEFAULT_SEED, n_ctx: int = 512,
                 n_batch: int = 512, n_ubatch: int = 512, n_threads: Optional[int] = None,
                 n_threads_batch: Optional[int] = None, logits_all: bool = False, embedding: bool = False,
                 pooling_type: int = llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED, flash_attn: bool = False,
                 type_k: Optional[int] = None, type_v: Optional[int] = None,
                 last_n_tokens_size: int = 64, chat_format: Optional[str] = None, chat_handler=None,
                 draft_model=None, tokenizer=None, spm_infill: bool = False, verbose: bool = True,
                 rope_scaling_type: Optional[int] = llama_cpp.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
                 rope_freq_base: float = 0.0, rope_freq_scale: float = 0.0, yarn_ext_factor: float = -1.0,
                 yarn_attn_factor: float = 1.0, yarn_beta_fast: float = 32.0, yarn_beta_slow: float = 1.0,
                 yarn_orig_ctx: int = 0, lora_base: Optional[str] = None,
                 lora_scale: float = 1.0, lora_path: Optional[str] = None,
                 # pyriver's own
                 rpc_servers: Optional[str] = None, rpc_timeout: float = 300.0, river: Optional[str] = "auto",
                 exit_threshold: Optional[float] = None, min_exit_layer: Optional[int] = None,
                 force_exit_layer: int = -1, prefill_exit: bool = False, river_force: bool = False,
                 river_rebuild: bool = False, batch_invariant: Optional[bool] = None, exit_rule: Optional[str] = None,
                 lossless: Optional[bool] = None, draft_max: Optional[int] = None, draft_cost=None, draft_store=None,
                 engine: Optional[str] = "auto", lora_adapters: Optional[Sequence[Tuple[str, float]]] = None,
                 batch_layout: bool = False, wide_prompt_rows: Optional[int] = None, tiled_verify: bool = True,
                 **llama_cpp_args):
        # what __getstate__ re-creates this Llama from (llama_cpp pickles its arguments, not its tokenizer)
        self._init_args = {**{k: v for k, v in locals().items() if k not in ("self", "llama_cpp_args", "tokenizer")},
                           **llama_cpp_args}
        self.settings = s = Settings.from_kwargs(locals(), llama_cpp_args)
        self._lock = threading.RLock()
        self._stack = contextlib.ExitStack()   # llama_cpp's: what closes with the Llama (a chat handler's libmtmd)
        self._engine = None   # what computes (pyriver.engine.load's): `backend`
        self.context: Optional[Context] = None   # the engine's context and its cache (generation.Context)
        self.sampling, self.completions, self.chats = Sampling(self), Completion(self), Chat(self)
        self.states, self.river, self.drafts = State(self), River(self), Drafts(self)
        self.embeddings: Optional[Embeddings] = None
        check_inert(llama_cpp_args, verbose)   # the rest of llama_cpp's arguments: inert values only; others ignored
        self.__dict__.update(inert_attrs(llama_cpp_args))   # kv_overrides, lora_path, ... as llama_cpp keeps them
        m, c, r = s.model, s.context, s.river
        kv_types.check(c.type_k, c.type_v, bool(c.flash_attn))   # a bad cache type fails before the model loads
        self.spm_infill, self.tensor_split = bool(s.chat.spm_infill), m.tensor_split
        self.lora_base, self.lora_scale, self.lora_path = m.lora_base, m.lora_scale, m.lora_path   # as llama_cpp keeps them
        self.lora_adapters, self._lora_adapter = [], None   # the loaded ones (engine.lora.Adapter), set by _load
        if c.last_n_tokens_size < 0:
            raise ValueError(f"last_n_tokens_size must be >= 0, got {c.last_n_tokens_size}")
        if r.exit_rule is not None:
            check_exit_rule(r.exit_rule)   # a bad name fails before the model loads
        self.exit_rule = r.exit_rule or "checked"   # None: the calibrated rule of this device, set once River binds
        set_verbose(verbose)  # llama.cpp's (and ggml's) log lines, as llama-cpp-python does
        self.verbose = verbose
        self.projector = None   # load_projector's (engine.mtmd.Projector): multimodal prompts
        self.model_path = str(models.resolve(m.model_path))
        if not os.path.isfile(self.model_path):
            raise FileNotFoundError(f"model file not found: {self.model_path}")
        self.vocab_only = bool(m.vocab_only)
        self._seed = llama_cpp.LLAMA_DEFAULT_SEED if c.seed is None else int(c.seed)   # see ctor_args.rng_seed
        self.last_n_tokens_size = int(c.last_n_tokens_size)
        self._logits_all = bool(c.logits_all)
        self.cache = None                # set_cache: a llama_cpp.BaseLlamaCache
        self.draft_model = draft_model
        self.chat_format, self.chat_handler = s.chat.chat_format, s.chat.chat_handler
        check_chat_format(self.chat_format, self.chat_handler)
        if self.vocab_only:   # a tokenizer only, as llama_cpp's vocab_only=True
            self.vocab = Vocab(self.model_path)
            self.info = {"n_vocab": self.vocab.n_vocab}
            self.metadata = self.vocab.metadata()
            self.tokenizer_ = s.chat.tokenizer or PyriverTokenizer(self)
            self.river_path = self.calibration = self.engine = None
            self.batch_layout = False
            return
        self._load(handler_engine(self.chat_handler, m.engine), m)   # a multimodal handler: the llama.cpp engine
        exit_threshold, min_exit_layer = self.river.bind(r.river, r.exit_threshold, r.min_exit_layer, r.river_force,
                                                         r.river_rebuild, m.use_mmap, verbose, s.lossless.lossless)
        if r.exit_rule is None and self.calibration is not None and self.river_path is not None:
            self.river.calibrated_rule(verbose)
        self.vocab = Vocab(self.model_path, checked=True)   # the engine's load checked the file
        if self.vocab.n_vocab != self.info["n_vocab"]:
            raise ValueError(f"tokenizer has {self.vocab.n_vocab} tokens but the model {self.info['n_vocab']}")
        self.metadata = self.vocab.metadata()
        self.tokenizer_ = s.chat.tokenizer or PyriverTokenizer(self)
        self._new_context(c)
        self.embeddings = Embeddings(self, c.embedding, c.pooling_type)   # embed, create_embedding
        self.last_exits: List[int] = []  # exit block of each token of the last eval
        self.exit_threshold = DEFAULT_TAU if exit_threshold is None else float(exit_threshold)
        # The default first checked block, kept inside shallow (synthetic) models.
        self.min_exit_layer = (min(DEFAULT_MIN_EXIT_LAYER, max(0, self.info["n_layer"] - 2)) if min_exit_layer is None
                               else int(min_exit_layer))
        if self.river_path is None and (exit_threshold is not None or min_exit_layer is not None
                                        or r.force_exit_layer >= 0 or r.exit_rule not in (None, "checked")):
            raise ValueError("exit_threshold, min_exit_layer, force_exit_layer and exit_rule need a river (river='q4_0', ...)")
        if self.river_path is not None:
            self.set_exit(self.exit_threshold, self.min_exit_layer, r.force_exit_layer, r.prefill_exit)
        self.last_stats: Dict = {}
        self.prefill_exit = r.prefill_exit
        self.wide_prompt_rows: Optional[int] = None   # a prompt step of more rows reads batch_layout's layout
        self.tiled_verify = bool(c.tiled_verify)   # the automatic verify table may take tiled verify steps
        self.verify_tile_rows = 0   # a verify step of more rows attends tiled (lossless mode's automatic table)
        if self.batch_layout and not self.batch_invariant:
            self._set_wide_prompt_rows(c.wide_prompt_rows)
        self.drafts.bind_store(s.lossless.draft_store)
        self._lossless_on(s.lossless)

    def _lossless_on(self, ls) -> None:
        """Lossless mode as the constructor asks for it: on with a draft model, as llama-cpp-python's
        draft_model is, or as calibrated (with the calibrated drafter and draft length rule, unless given)."""
        lossless, draft_model, draft_max, draft_cost = ls.lossless, ls.draft_model, ls.draft_max, ls.draft_cost
        cal = self.calibration["setting"] if self.calibration is not None else {}
        if lossless is None:
            lossless = draft_model is not None or (cal.get("lossless", False) and not self.prefill_exit)
        if cal.get("lossless") and lossless:
            draft_max = cal["draft_max"] if draft_max is None else draft_max
            draft_model = cal.get("draft", "river") if draft_model is None else draft_model
            draft_cost = cal.get("draft_cost") if draft_cost is None else draft_cost
        self.set_lossless(bool(lossless), draft_model=draft_model, draft_max=draft_max, draft_cost=draft_cost)

    def _load(self, engine: Optional[str], m: ModelSettings) -> None:
        """The engine for the file (pyriver.engine.load: native where pyriver builds the
        architecture, llama.cpp's own graphs on request or where it does not)."""
        args = ModelArgs(m.n_gpu_layers, m.use_mmap, m.split_mode, m.main_gpu, m.tensor_split, m.rpc_servers or None,
                         m.rpc_timeout, m.rope_freq_base, m.rope_freq_scale,
                         lora_specs(m.lora_path, m.lora_scale, m.lora_adapters), bool(m.batch_layout),
                         m.rope_scaling_type, m.yarn_ext_factor, m.yarn_attn_factor, m.yarn_beta_fast,
                         m.yarn_beta_slow, m.yarn_orig_ctx)
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

    def _new_context(self, c: ContextSettings) -> None:
        n_ctx = int(c.n_ctx) if c.n_ctx > 0 else int(self.info["n_ctx_train"])
        if c.n_batch < 1 or c.n_ubatch < 1:
            raise ValueError(f"n_batch and n_ubatch must be >= 1, got {c.n_batch} and {c.n_ubatch}")
        # llama_cpp's: eval hands n_batch tokens at a time; a graph computes n_ubatch of them
        n_batch = min(n_ctx, int(c.n_batch))
        self.n_threads = int(c.n_threads or max(multiprocessing.cpu_count() // 2, 1))
        self.n_threads_batch = int(c.n_threads_batch or multiprocessing.cpu_count())
        # batch_invariant: the default (False) computes each step as llama.cpp does, so the same steps
        # give llama.cpp's bits: a prompt in steps of min(n_batch, n_ubatch) tokens, as llama_cpp.Llama's
        # decode splits it. True: a token's logits do not depend on the step it was computed in, at a
        # cost in prompt speed (docs/default-cpu.md; pr_context_params.batch_invariant).
        # llama.cpp's KV cache types and its rules for them, on either engine (engine.kv_types)
        type_k, type_v = kv_types.check(c.type_k, c.type_v, bool(c.flash_attn), int(self.info.get("n_embd_head") or 0))
        args = ContextArgs(n_ctx, n_batch, c.n_ubatch, self.n_threads, self.n_threads_batch, bool(c.flash_attn),
                           c.batch_invariant, bool(c.embedding), type_k=type_k, type_v=type_v)
        self.context = Context(self, self._engine.new_context(args), args, self._logits_all)
        self.context_params = self.context.engine.params   # the engine's (native: pr_context_params; llama.cpp's llama_context_params)
        if self.verbose and self.engine == "native":   # llama.cpp's own log says it on the llama.cpp engine
            print(f"pyriver: {kv_types.line(self.kv_cache())} ({n_ctx} cells)", file=sys.stderr)
        self.batch_invariant = self.context.engine.batch_invariant
        self._n_ctx = self.context.n_ctx
        self.n_batch, self.n_ubatch = n_batch, min(n_batch, int(c.n_ubatch))

    def kv_cache(self) -> Dict:
        """pyriver's: the context's KV cache types and bytes ({"type_k": "q8_0", "type_v": ..., "k_bytes": ...,
        "v_bytes": ..., "bytes": ...})."""
        self.check_live()
        a = self.context.args
        return kv_types.describe(a.type_k, a.type_v, *self.context.engine.kv_bytes())

    def _set_wide_prompt_rows(self, n: Optional[int]) -> None:
        """From how many rows a prompt step reads the second layout: n, or None: this machine's
        (pyriver.engine.widerows, measured once and cached); kept in the context arguments, so that a
        BatchDecoder's context (the server's) reads it too."""
        if n is None:
            from pyriver.engine.widerows import auto
            n = auto(self, self.tokenize(COST_PROMPT.encode()))
        self.context.set_wide_prompt_rows(n)
        self.wide_prompt_rows = int(n)

    # -- the parts' public members, for whoever steps the model (drafts, River, the server) ---------
    @property
    def backend(self):
        """The loaded engine (pyriver.engine.load's: devices, River support, new contexts); None
        when vocab_only or closed."""
        return self._engine

    @property
    def lock(self) -> threading.RLock:
        """The Llama's reentrant lock: whoever steps its context holds it."""
        return self._lock

    def check_live(self) -> None:
        """Raise unless this Llama can compute (vocab_only, or closed: RuntimeError)."""
        if self.vocab_only:
            raise RuntimeError("this Llama was made with vocab_only=True: it tokenizes, it has no weights to run")
        if self.context is None or self.context.engine is None:
            raise RuntimeError("this Llama is closed")

    @property
    def init_args(self) -> dict:
        """The constructor's arguments, as given (what pickling re-creates the Llama from)."""
        return self._init_args

    @property
    def seed(self) -> int:
        """The seed the next sampler chain starts from (llama_cpp's `_seed`; set_seed sets it)."""
        return self._seed

    @seed.setter
    def seed(self, seed: int) -> None:
        self._seed = int(seed)

    # -- River and lossless mode ---------------------------------------------------------------
    attach_river = _to("river", River.attach)
    set_exit = _to("river", River.set_exit)
    set_lossless = _to("drafts", Drafts.set_lossless)

    @property
    def lossless(self) -> bool:
        return self.drafts.speculator is not None

    @property
    def draft_store(self):
        """The draft store (pyriver.speculative.store.DraftStore) lossless mode's n-gram drafts learn in, or None."""
        return self.drafts.store

    @property
    def speculator(self) -> Optional[Speculator]:
        """Lossless mode's draft-and-verify rules (draft length, acceptance), or None."""
        return self.drafts.speculator

    def load_projector(self, path: str, marker: str = "<__media__>"):
        """A multimodal projector (mmproj) for this model: libmtmd over the llama.cpp engine's
        context (pyriver.engine.mtmd.Projector; the server's --mmproj). marker: the text that stands
        for a media file in a prompt. A second projector, or the native engine, is a ValueError."""
        with self._lock:
            self.check_live()
            self.projector = self._engine.load_projector(path, n_threads=self.n_threads, marker=marker,
                                                          flash_attn=self.context.args.flash_attn,
                                                          verbose=self.verbose)
            return self.projector

    # -- the cache and llama_cpp's low-level API -------------------------------------------------
    _is_recurrent = False   # pyriver's architectures are all transformers
    _is_hybrid = False

    @property
    def n_tokens(self) -> int:
        return len(self.context.tokens) if self.context is not None else 0

    @n_tokens.setter
    def n_tokens(self, n: int) -> None:
        """llama_cpp code rewinds by assigning n_tokens (generation.Context.set_n_tokens)."""
        self.context.set_n_tokens(n)

    @property
    def input_ids(self) -> np.ndarray:
        """llama_cpp's input_ids: n_ctx token ids, valid up to n_tokens."""
        ctx = self.context
        n = len(ctx.tokens)
        ctx.ids[:n] = ctx.tokens
        return ctx.ids

    @property
    def _input_ids(self) -> np.ndarray:
        return self.input_ids[: self.n_tokens]

    @property
    def scores(self) -> np.ndarray:
        """[n_ctx, n_vocab] float32: with logits_all=True every evaluated token's logits, else
        the last evaluated token's row (llama_cpp keeps none then)."""
        ctx = self.context
        if ctx.logits_all:
            return ctx.scores_all
        out = np.zeros((self._n_ctx, self.n_vocab()), dtype=np.single)   # pages untouched until written
        if ctx.last_logits is not None and ctx.tokens:
            out[len(ctx.tokens) - 1] = ctx.last_logits
        return out

    @property
    def _requires_eval(self) -> bool:
        """llama_cpp's flag: no live logits for the last cached token (context.requires_eval)."""
        return self.context.requires_eval if self.context is not None else True

    @_requires_eval.setter
    def _requires_eval(self, v: bool) -> None:
        self.context.requires_eval = bool(v)

    @property
    def _sampler(self):
        """llama_cpp's: the sampler chain of the running generate (sampling.running), else None."""
        return self.sampling.running

    @property
    def _scores(self) -> np.ndarray:
        return self.scores[: self.n_tokens, :]

    @property
    def eval_tokens(self) -> deque:
        return deque(self.context.tokens, maxlen=self._n_ctx)

    @property
    def eval_logits(self) -> deque:
        return deque(self._scores.tolist(), maxlen=self._n_ctx if self._logits_all else 1)

    logits_to_logprobs = staticmethod(llama_cpp.Llama.logits_to_logprobs)
    longest_token_prefix = staticmethod(llama_cpp.Llama.longest_token_prefix)

    reset = _to("context", Context.reset)
    decode_logits = _to("context", Context.decode_logits)
    eval = _to("sampling", Sampling.eval)
    sample = _to("sampling", Sampling.sample)
    generate = _to("sampling", Sampling.generate)

    # -- completions, chats, embeddings, states ---------------------------------------------------
    create_completion = _to("completions", Completion.create_completion)
    __call__ = create_completion
    river_stats = _to("completions", Completion.river_stats)

    @property
    def n_generated(self) -> int:
        """Tokens the last completion generated (streamed ones as far as they were read)."""
        return self.completions.n_generated

    create_chat_completion = _to("chats", Chat.create_chat_completion)
    create_chat_completion_openai_v1 = _to("chats", Chat.create_chat_completion_openai_v1)
    chat_tokens = _to("chats", Chat.chat_tokens)
    chat_prompt = _to("chats", Chat.chat_prompt)
    chat_stops = _to("chats", Chat.chat_stops)

    embed = _to("embeddings", Embeddings.embed)
    embed_tokens = _to("embeddings", Embeddings.embed_tokens)
    create_embedding = _to("embeddings", Embeddings.create_embedding)
    pooling_type = _to("embeddings", Embeddings.pooling_type)

    save_state = _to("states", State.save_state)
    load_state = _to("states", State.load_state)

    def set_cache(self, cache) -> None:
        """A llama_cpp.BaseLlamaCache (LlamaRAMCache, LlamaDiskCache): create_completion restores
        the longest cached prefix of a prompt from it, and stores its state after."""
        self.cache = cache

    def set_seed(self, seed: int) -> None:
        self._seed = int(seed)

    def __getstate__(self) -> dict:
        """llama_cpp's pickling: the constructor's arguments (with the current seed); unpickling
        loads the model again from model_path. The cache, the tokens and any setting changed
        after construction (set_exit, set_lossless, ...) are not carried, as in llama_cpp."""
        return {**self._init_args, "model_path": self.model_path, "seed": self._seed}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    # -- pyriver's test hooks ------------------------------------------------------------------
    @property
    def _native_model(self):
        """The native engine's model handle (None on another engine or closed): for tests that reach
        the C API (pyriver.engine.binding) and pyriver.engine.river.build."""
        return getattr(self._engine, "model", None) if getattr(self._engine, "supports_river", False) else None

    @property
    def _native_ctx(self):
        """The native engine's context handle, as _native_model."""
        return getattr(self._ectx, "handle", None)

    @property
    def _ectx(self):
        """The engine's context (context.engine), where pyriver.engine.debug finds it."""
        return self.context.engine if self.context is not None else None

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
            drafts = getattr(self, "drafts", None)
            if drafts is not None:   # a draft store opened from a file is written back
                drafts.close()
            stack = getattr(self, "_stack", None)
            if stack is not None:   # a chat handler's libmtmd context, before the model it was made for
                stack.close()
            if getattr(self, "context", None) is not None:
                self.context.close()
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

    # -- llama.cpp's handles, as llama_cpp.Llama has them ------------------------------------
    @property
    def _model(self) -> "LlamaCppModel":
        """llama_cpp's `_model` (a LlamaModel): `.model` is the llama_model_p of the vocabulary
        pyriver loads from the same file (libraries read its vocab through it, as outlines does), or
        on the llama.cpp engine the model its context computes with (libmtmd reads it)."""
        eng = self._engine
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
        self.check_live()
        return self._engine.devices()

    def meta(self, key: str) -> Optional[str]:
        """A GGUF metadata value as text, read by pyriver; None when the file has no such key
        (`metadata` is llama_cpp's dict of llama.cpp's view of them)."""
        self.check_live()
        return self._engine.meta(key)

    def token_nl(self) -> int:
        return self.vocab.nl

    def n_embd(self) -> int:
        self.check_live()
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
        vocab = self._v.handle   # raises when closed
        return self._weights or self._v.model_handle

    @property
    def vocab(self):
        return self._v.handle

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
        ectx = L.context.engine if L.context is not None else None
        if getattr(ectx, "ctx", None) is not None:   # the llama.cpp engine's own context
            return ectx.ctx
        if not L.vocab_only:
            raise AttributeError("pyriver.Llama has no llama.cpp context (llama_context_p): it computes with its "
                                 "own ggml graphs (the native context is Llama._native_ctx); tokenize, detokenize "
                                 "and Llama.model (llama.cpp's llama_model_p of the vocabulary) are there")
        return L.vocab.context()

    def kv_cache_clear(self) -> None:
        """llama_cpp's: the cache emptied (and the Llama's record of it)."""
        self._llama.reset()

