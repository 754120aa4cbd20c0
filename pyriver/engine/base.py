"""The engine seam: what computes under `Llama`. An engine is a loaded model (facts, metadata,
devices) that makes contexts; a context decodes tokens of one or more sequences into logits rows
and keeps their KV cache (cut, copy, clear, save, load). Everything above it (sampling, the
tokenizer, chat templates, grammars, lossless drafting) is the same code whatever the engine.
River is a capability: only an engine with `supports_river` builds and binds rivers
(Engine.prepare_river) and runs exit rules (Context.set_exit); another engine's no_river is the
error that says so."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np


@dataclass
class ModelArgs:
    """What loading a model takes (Llama's constructor arguments of the same names)."""
    n_gpu_layers: int = 0
    use_mmap: bool = True
    split_mode: int = 1
    main_gpu: int = 0
    tensor_split: Optional[Sequence[float]] = None
    rpc_servers: Optional[str] = None
    rpc_timeout: float = 300.0
    rope_freq_base: float = 0.0
    rope_freq_scale: float = 0.0
    lora: Tuple[Tuple[str, float], ...] = ()   # LoRA adapters (path, scale): the llama.cpp engine's (engine/lora.py)
    batch_layout: bool = False   # the native engine's pr_model_params.batch_layout (docs/lossless.md)
    # RoPE scaling as llama_context_params takes it (llama_cpp.Llama's defaults: the file's, check_rope)
    rope_scaling_type: int = -1
    yarn_ext_factor: float = -1.0
    yarn_attn_factor: float = 1.0
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    yarn_orig_ctx: int = 0

    def rope_params(self) -> Dict[str, float]:
        """The RoPE fields of llama_context_params (and pr_model_params), checked: llama.cpp takes
        any value and computes garbage (NaN frequencies) from bad ones, so they are refused here."""
        rst = -1 if self.rope_scaling_type is None else self.rope_scaling_type
        if isinstance(rst, bool) or not isinstance(rst, int) or not -1 <= rst <= 3:
            raise ValueError(f"rope_scaling_type must be -1 (unspecified: the file's), 0 (none), 1 (linear), "
                             f"2 (yarn) or 3 (longrope), got {self.rope_scaling_type!r}")
        out: Dict[str, float] = {"rope_scaling_type": rst}
        for name in ("rope_freq_base", "rope_freq_scale"):
            v = float(getattr(self, name) or 0.0)
            if not (math.isfinite(v) and v >= 0.0):
                raise ValueError(f"{name} must be finite and >= 0 (0: the file's), got {v}")
            out[name] = v
        for name in ("yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow"):
            v = float(getattr(self, name))
            if not math.isfinite(v):
                raise ValueError(f"{name} must be finite (negative: the file's), got {v}")
            out[name] = v
        orig = self.yarn_orig_ctx
        if isinstance(orig, bool) or not isinstance(orig, int) or not 0 <= orig < 1 << 24:
            raise ValueError(f"yarn_orig_ctx must be an int >= 0 (0: the file's), got {orig!r}")
        out["yarn_orig_ctx"] = orig
        return out


@dataclass
class ContextArgs:
    """What making a context takes. n_batch: the most tokens one decode call is handed; n_ubatch:
    the most one graph computes (llama_cpp's meaning of both)."""
    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_threads: int
    n_threads_batch: int
    flash_attn: bool = False
    batch_invariant: Optional[bool] = None
    embedding: bool = False
    n_seq_max: int = 1
    type_k: int = 1   # KV cache types, ggml type ids (engine.kv_types: llama.cpp's; 1 = f16)
    type_v: int = 1
    wide_prompt_rows: Optional[int] = None   # with a batch layout, prompt steps of more rows read it (None: 16)
    verify_tile_rows: Optional[int] = None   # verify steps of more tokens attend tiled (None: never; costcurve)


# A prompt flag's value for a lossless verify step (pyriver.h's PR_VERIFY): a prompt (full depth) whose
# every row checks a draft; an engine may compute it with other kernels than a prompt of its size
# (Context.set_verify_tile_rows). Any other true value is a prompt.
VERIFY = 2

# How a step over several sequences exits (pyriver.h's pr_exit_params.batch_rule, in its order):
# each sequence at its own block, the whole step at the first block where all reach tau, or all
# where the last of them first reached it.
BATCH_RULES = ("split", "minimum", "all")

# How a decode step finds its exit block (pr_exit_params.exit_rule, in this order; docs/river.md,
# Predicted exits): every candidate block checked, the block forecast from the last exits, or the
# forecast with one check at it.
EXIT_RULES = ("checked", "predicted", "guarded")


def check_exit_rule(name) -> None:
    if name not in EXIT_RULES:
        raise ValueError(f"exit_rule must be one of {', '.join(EXIT_RULES)}, got {name!r}")


@dataclass
class ExitRule:
    """When a token leaves the backbone for the river (Llama.set_exit). force_exit_layer,
    check_chunk, host_checks, device_carry and predict are testing and benchmark knobs."""
    exit_threshold: float
    min_exit_layer: int
    prefill_exit: bool = False
    force_exit_layer: int = -1
    check_chunk: int = 0
    host_checks: bool = True
    device_carry: bool = True
    predict: bool = False
    rule: str = "checked"   # how a step finds its exit block: one of EXIT_RULES

    @property
    def exits(self) -> bool:
        """Whether any token can leave early under this rule."""
        return self.force_exit_layer >= 0 or self.exit_threshold <= 1.0


class Context:
    """A KV cache of n_seq_max sequences of n_ctx rows each and the steps that fill it."""
    n_ctx: int
    n_seq_max: int = 1
    batch_invariant: bool = False
    n_batch: int                # the most tokens one decode_batch takes
    partial_cuts: bool = True   # truncate keeps a prefix in place; False: it runs the kept tokens again
    can_batch_invariant: bool = False   # set_batch_invariant(True) is possible
    # drop() moves cached rows to new positions (llama.cpp's K-shift: keys rotated again); the native
    # engine's cache cannot: its context shift and prompt reuse compute the moved tokens again
    can_shift: bool = False

    def decode(self, tokens: Sequence[int], logits_all: bool, prompt: bool) -> np.ndarray:
        """Append tokens to sequence 0 and run them: logits [n_out, n_vocab] (every token's with
        logits_all, else the last's). prompt: full depth (only an engine with exits tells apart);
        VERIFY: a verify step's."""
        raise NotImplementedError

    def decode_batch(self, tokens: Sequence[int], seqs: Sequence[int], pos: Sequence[int],
                     logits: Sequence[int], prompt: Sequence[int]) -> np.ndarray:
        """One step over tokens of several sequences (token i of seqs[i] at pos[i], its next free
        position): the rows of the tokens with logits[i] != 0, in batch order."""
        raise NotImplementedError

    def exit_layers(self, n: int) -> List[int]:
        """Exit block of each token of the last decode (n_layer - 1: full depth)."""
        raise NotImplementedError

    def set_exit(self, rule: ExitRule, batch_rule: str = "split") -> ExitRule:
        """Apply an exit rule to the steps that follow (batch_rule: one of BATCH_RULES); returns it
        as the engine holds it. Only an engine with supports_river has one."""
        raise NotImplementedError

    def set_batch_invariant(self, on: bool) -> None:
        """Batch invariance for the steps that follow (where can_batch_invariant)."""
        raise NotImplementedError

    def set_verify_tile_rows(self, n: int) -> None:
        """Verify steps (prompt VERIFY) of n to 63 tokens attend through flash attention's tiled
        kernel (0: never; pyriver.h's pr_context_set_verify_tile_rows): the native engine's."""
        if n:
            raise ValueError("verify_tile_rows: only the native engine attends verify steps tiled")

    def kv_bytes(self) -> Tuple[int, int]:
        """Bytes of the K and of the V cache, all blocks and sequences (llama.cpp's "K (q8_0): MiB")."""
        raise NotImplementedError

    def pos(self, seq: int = 0) -> int:
        """Tokens of seq in the cache."""
        raise NotImplementedError

    def truncate(self, n_keep: int, seq: int = 0) -> None:
        """Keep the first n_keep tokens of seq."""
        raise NotImplementedError

    def drop(self, seq: int, p0: int, p1: int) -> None:
        """Removes positions [p0, p1) of seq; the rows after them move down by p1 - p0, their keys
        rotated to the new positions (llama_memory_seq_rm + seq_add, as llama-server's context shift
        and --cache-reuse). Only where can_shift."""
        raise ValueError(f"the {type(self).__name__} cannot move cached rows (can_shift is False)")

    def copy(self, src: int, dst: int, n: int) -> None:
        """Sequence dst holds the first n tokens of src (dst's old rows dropped)."""
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError

    def state_get(self, seq: int = 0) -> bytes:
        """Sequence seq's cache as bytes (state_set takes them back, on a context of the same model
        and shape, into any sequence)."""
        raise NotImplementedError

    def state_set(self, blob: bytes, seq: int = 0) -> None:
        """Restore state_get's bytes into sequence seq; bytes of another model or context are a
        ValueError that leaves the cache as it was."""
        raise NotImplementedError

    def embed(self, tokens: Sequence[int]) -> np.ndarray:
        """Run tokens as a prompt into an empty sequence 0: each token's hidden state after the
        final norm, [n, n_embd] (llama.cpp's embeddings before pooling)."""
        raise NotImplementedError

    def set_lora(self, scales: Sequence[float]) -> None:
        """The steps that follow apply the engine's LoRA adapters at these scales (one per adapter)."""
        raise ValueError("this engine has no LoRA adapters")

    def decode_media(self, media, seq: int = 0) -> None:
        """Evaluate a media chunk (engine.mtmd.Media: an image's or audio's embeddings) into sequence
        seq at its next free positions, each held as mtmd.NULL_TOKEN; no logits (a prompt goes on
        with text). Only an engine with a projector (Engine.load_projector) has it."""
        raise ValueError("multimodal input runs on the llama.cpp engine with a projector (mmproj)")

    def note_external(self, n: int, seq: int = 0) -> None:
        """Sequence seq holds n positions after its caller decoded on the engine's own llama.cpp
        context (llama-cpp-python's multimodal chat handlers evaluate images with libmtmd there):
        the positions past the known tokens are media (mtmd.NULL_TOKEN)."""
        raise ValueError("this engine has no llama.cpp context for a caller to decode on")

    def close(self) -> None:
        raise NotImplementedError


class Engine:
    """A loaded model. name: "native" or "llama.cpp"; info: pr_model_info's fields as a dict."""
    name: str
    supports_river: bool = False
    supports_lora: bool = False
    adapters: Sequence = ()   # engine.lora.Adapter of each LoRA adapter loaded (ModelArgs.lora)
    recurrent = hybrid = False   # a memory that keeps only its last state (llama.cpp's recurrent models)
    info: Dict

    def new_context(self, args: ContextArgs) -> Context:
        raise NotImplementedError

    def meta(self, key: str) -> Optional[str]:
        """A GGUF metadata value as text; None when absent."""
        raise NotImplementedError

    def devices(self) -> List[str]:
        """The device of each block, then of the head."""
        raise NotImplementedError

    def prepare_river(self, model_path: str, river: str, *, force: bool = False, rebuild: bool = False,
                      progress: bool = True, use_mmap: bool = True, verbose: bool = False) -> Path:
        """Bind river (a type name, built when missing, or a sidecar path) to this model; returns
        the sidecar's path. Only an engine with supports_river has rivers."""
        raise self.no_river("a river")

    def load_projector(self, path: str, *, n_threads: int, marker: str, flash_attn: bool = False,
                       verbose: bool = False):
        """Load a multimodal projector (mmproj) for this model: an engine.mtmd.Projector that the
        contexts' decode_media use. Only the llama.cpp engine has libmtmd."""
        raise ValueError(f"a multimodal projector (mmproj) runs on the llama.cpp engine (libmtmd over llama.cpp's "
                         f"context); the {self.name} engine has none")

    def no_river(self, what: str) -> ValueError:
        """The error for asking this engine for River (what: the argument or method asked)."""
        return ValueError(f"{what}: River needs pyriver's own graphs; the {self.name} engine has none")

    def close(self) -> None:
        raise NotImplementedError
