"""`pyriver.Llama`'s constructor settings in groups: the flat keyword arguments of llama-cpp-python's
`Llama.__init__` (and pyriver's own after them) stay the public face; inside, each part of the Llama
reads its own group (`Llama.settings`)."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Dict, Optional, Sequence, Tuple


@dataclass(frozen=True)
class ModelSettings:
    """The file, where its weights go and which engine computes with them (pyriver.engine.load)."""
    model_path: Optional[str] = None
    vocab_only: bool = False
    engine: Optional[str] = "auto"
    n_gpu_layers: int = 0
    split_mode: int = 1
    main_gpu: int = 0
    tensor_split: Optional[Sequence[float]] = None
    use_mmap: bool = True
    rpc_servers: Optional[str] = None
    rpc_timeout: float = 300.0
    rope_freq_base: float = 0.0
    rope_freq_scale: float = 0.0
    rope_scaling_type: Optional[int] = -1
    yarn_ext_factor: float = -1.0
    yarn_attn_factor: float = 1.0
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    yarn_orig_ctx: int = 0
    lora_base: Optional[str] = None
    lora_scale: float = 1.0
    lora_path: Optional[str] = None
    lora_adapters: Optional[Sequence[Tuple[str, float]]] = None
    batch_layout: bool = False


@dataclass(frozen=True)
class ContextSettings:
    """The context (generation.Context), its sampling defaults and its embeddings."""
    n_ctx: int = 512
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: Optional[int] = None
    n_threads_batch: Optional[int] = None
    flash_attn: bool = False
    type_k: Optional[int] = None   # KV cache types: ggml type ids or names (engine.kv_types), None: f16
    type_v: Optional[int] = None
    batch_invariant: Optional[bool] = None
    logits_all: bool = False
    embedding: bool = False
    pooling_type: int = -1
    seed: Optional[int] = None
    last_n_tokens_size: int = 64
    wide_prompt_rows: Optional[int] = None
    tiled_verify: bool = True


@dataclass(frozen=True)
class ChatSettings:
    """How prompts are made: the chat format or handler, the tokenizer, infill's order."""
    chat_format: Optional[str] = None
    chat_handler: Any = None
    tokenizer: Any = None
    spm_infill: bool = False


@dataclass(frozen=True)
class RiverSettings:
    """River: which river ("auto": a calibrated one, if any) and its exit rule."""
    river: Optional[str] = "auto"
    exit_threshold: Optional[float] = None
    min_exit_layer: Optional[int] = None
    force_exit_layer: int = -1
    prefill_exit: bool = False
    river_force: bool = False
    river_rebuild: bool = False
    exit_rule: Optional[str] = None


@dataclass(frozen=True)
class LosslessSettings:
    """Lossless mode: drafts (draft_model) verified at full depth (pyriver.speculative)."""
    lossless: Optional[bool] = None
    draft_model: Any = None
    draft_max: Optional[int] = None
    draft_cost: Any = None
    draft_store: Any = None


def _pick(cls, args: Dict[str, Any]):
    return cls(**{f.name: args[f.name] for f in fields(cls) if f.name in args})


@dataclass(frozen=True)
class Settings:
    """Every group, and llama-cpp-python's other keywords (ctor_args.INERT: accepted at inert values)."""
    model: ModelSettings
    context: ContextSettings
    chat: ChatSettings
    river: RiverSettings
    lossless: LosslessSettings
    verbose: bool = True
    extra: Tuple[Tuple[str, Any], ...] = ()

    @classmethod
    def from_kwargs(cls, args: Dict[str, Any], extra: Dict[str, Any]) -> "Settings":
        """From Llama.__init__'s flat keyword arguments."""
        return cls(_pick(ModelSettings, args), _pick(ContextSettings, args), _pick(ChatSettings, args),
                   _pick(RiverSettings, args), _pick(LosslessSettings, args), bool(args.get("verbose", True)),
                   tuple(extra.items()))
