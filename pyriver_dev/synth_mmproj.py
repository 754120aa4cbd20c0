"""A synthetic multimodal model: a Gemma 3 text GGUF (pyriver_dev.synth) and a projector GGUF
(mmproj) with random weights for llama.cpp's clip loader (tools/mtmd/clip.cpp, clip-impl.h), the
local stand-in of llama.cpp's test model ggml-org/tinygemma3-GGUF. The projector is type "gemma3":
a small SigLIP-style vision tower (patch convolution, learned positions, pre-norm blocks with GELU
FFNs, a final norm), an average pool of n_merge x n_merge patches, an RMS norm and the projection
into the text model's embedding width. Only numpy and gguf do the work, as in synth.py.

    python -m pyriver_dev.synth_mmproj OUT_DIR [--text-embd 64] [--image-size 32 --patch-size 4 --merge 2]

writes OUT_DIR/tinygemma3.gguf and OUT_DIR/mmproj-tinygemma3.gguf. png_bytes() makes a test image
(a PNG, no imaging package needed)."""
from __future__ import annotations

import argparse
import math
import os
import pathlib
import struct
import sys
import zlib
from typing import Optional, Tuple

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

from pyriver.tools.gguf_io import KV, Plan, Tensor, rewrite_kv, write_plan

F32, F16 = GGMLQuantizationType.F32, GGMLQuantizationType.F16

# A Gemma-style chat template of this project's own (the Gemma 3 270M file carries none): turns, and
# a message's content as a string or a list of text parts (llama-cpp-python's MTMDChatHandler hands
# the media marker as a text part). No newline follows a block tag, so it renders the same with or
# without jinja's trim_blocks / lstrip_blocks.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "<start_of_turn>{{ role }}\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] | trim }}"
    "{% endif %}{% endfor %}{% endif %}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")

# The text model: small Gemma 3 blocks, Q8_0 as the hub's tinygemma3 file, Gemma 3's vocabulary.
TEXT_SPEC = dict(arch="gemma3", n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_embd_head=32, n_ff=128,
                 tied_output=True, seed=21, rope_freq_base=1000000.0, rms_eps=1e-6, sliding_window=32,
                 swa_pattern=2, rope_freq_base_swa=10000.0, dtype="q8_0", n_ctx_train=4096)


def _rand(name: str, ne: Tuple[int, ...], qtype: GGMLQuantizationType, rng: np.random.Generator, std: float,
          mean: float = 0.0) -> Tensor:
    """A tensor of mean + std * N(0, 1), drawn now (the tower is small) in the file's order."""
    x = rng.standard_normal(tuple(reversed(ne)), dtype=np.float32) * np.float32(std) + np.float32(mean)
    data = x.astype(np.float16) if qtype == F16 else x
    return Tensor(name, tuple(int(d) for d in ne), qtype, lambda d=data: iter([d]))


def write_mmproj(path: "str | os.PathLike[str]", *, text_n_embd: int, n_embd: int = 32, n_head: int = 2,
                 n_ff: int = 64, n_layer: int = 2, image_size: int = 32, patch_size: int = 4, n_merge: int = 2,
                 eps: float = 1e-6, seed: int = 0, projection_dim: Optional[int] = None) -> pathlib.Path:
    """A gemma3 projector for a text model of width text_n_embd; its images become
    (image_size / patch_size / n_merge)^2 embeddings. projection_dim: the projection's output width
    (default text_n_embd; another width makes a projector that does not fit the model, for tests)."""
    side = image_size // patch_size if patch_size > 0 else 0
    if patch_size <= 0 or image_size % patch_size or side % max(n_merge, 1) or n_merge < 1:
        raise ValueError(f"image_size {image_size} must be a multiple of patch_size {patch_size}, and the patches "
                         f"per side ({side}) of n_merge {n_merge}")
    if n_embd % n_head or n_ff == n_embd:   # clip swaps a gemma3 FFN whose down matrix is n_embd wide
        raise ValueError("n_embd must be a multiple of n_head, and n_ff differ from n_embd")
    out_dim = int(projection_dim or text_n_embd)
    rng = np.random.Generator(np.random.PCG64(seed))
    U32, F, STR, BOOL, ARR = (GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING,
                              GGUFValueType.BOOL, GGUFValueType.ARRAY)
    V = "clip.vision."
    kv = {"general.architecture": KV("clip", STR), "general.type": KV("mmproj", STR),
          "general.name": KV(f"pyriver-synth-mmproj-gemma3-E{n_embd}-L{n_layer}-I{image_size}-P{patch_size}"
                             f"-M{n_merge}-s{seed}", STR),
          "general.file_type": KV(1, U32),
          "clip.projector_type": KV("gemma3", STR), "clip.has_vision_encoder": KV(True, BOOL),
          "clip.has_audio_encoder": KV(False, BOOL), "clip.use_gelu": KV(True, BOOL),
          V + "embedding_length": KV(n_embd, U32), V + "feed_forward_length": KV(n_ff, U32),
          V + "block_count": KV(n_layer, U32), V + "projection_dim": KV(out_dim, U32),
          V + "attention.head_count": KV(n_head, U32), V + "attention.layer_norm_epsilon": KV(float(eps), F),
          V + "image_size": KV(image_size, U32), V + "patch_size": KV(patch_size, U32),
          V + "projector.scale_factor": KV(n_merge, U32),
          V + "image_mean": KV([0.5, 0.5, 0.5], ARR, F), V + "image_std": KV([0.5, 0.5, 0.5], ARR, F)}
    mat = lambda name, n_in, n_out: _rand(name, (n_in, n_out), F16, rng, 1.0 / math.sqrt(n_in))  # noqa: E731
    vec = lambda name, n, std, mean=0.0: _rand(name, (n,), F32, rng, std, mean)  # noqa: E731
    ts = [_rand("v.patch_embd.weight", (patch_size, patch_size, 3, n_embd), F16, rng,
                1.0 / math.sqrt(3 * patch_size * patch_size)),
          vec("v.patch_embd.bias", n_embd, 0.1),
          _rand("v.position_embd.weight", (n_embd, side * side), F32, rng, 0.5)]
    for i in range(n_layer):
        b = f"v.blk.{i}."
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            ts += [mat(b + proj + ".weight", n_embd, n_embd), vec(b + proj + ".bias", n_embd, 0.1)]
        ts += [vec(b + "ln1.weight", n_embd, 0.1, 1.0), vec(b + "ln1.bias", n_embd, 0.1),
               mat(b + "ffn_up.weight", n_embd, n_ff), vec(b + "ffn_up.bias", n_ff, 0.1),
               mat(b + "ffn_down.weight", n_ff, n_embd), vec(b + "ffn_down.bias", n_embd, 0.1),
               vec(b + "ln2.weight", n_embd, 0.1, 1.0), vec(b + "ln2.bias", n_embd, 0.1)]
    ts += [vec("v.post_ln.weight", n_embd, 0.1, 1.0), vec("v.post_ln.bias", n_embd, 0.1),
           vec("mm.soft_emb_norm.weight", n_embd, 0.1, 1.0),
           # ggml order: the projection is applied transposed, out = W^T x, W [out_dim, n_embd]
           _rand("mm.input_projection.weight", (out_dim, n_embd), F32, rng, 1.0 / math.sqrt(n_embd))]
    return write_plan(path, Plan(kv=kv, tensors=ts))


def write_text_model(path: "str | os.PathLike[str]", tokenizer_from: "str | os.PathLike[str]", **spec) -> pathlib.Path:
    """The Gemma 3 text half (TEXT_SPEC, overridden by spec) with CHAT_TEMPLATE."""
    from pyriver_dev.synth import write_model
    p = write_model(path, tokenizer_from=tokenizer_from, **{**TEXT_SPEC, **spec})
    return rewrite_kv(p, {"tokenizer.chat_template": (CHAT_TEMPLATE, GGUFValueType.STRING)})


def gemma_tokenizer() -> str:
    """Gemma 3's vocabulary (with <start_of_image>, <end_of_image>): the registry's Gemma 3 270M file."""
    from pyriver import models
    return str(models.resolve("gemma3-270m", progress=True))


def ensure_tinygemma3(folder: "str | os.PathLike[str]", tokenizer_from: "str | os.PathLike[str] | None" = None
                      ) -> Tuple[str, str]:
    """(text model, mmproj) in folder, written once: the local tinygemma3."""
    d = pathlib.Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    text, proj = d / "tinygemma3.gguf", d / "mmproj-tinygemma3.gguf"
    if not text.is_file():
        write_text_model(text, tokenizer_from or gemma_tokenizer())
    if not proj.is_file():
        write_mmproj(proj, text_n_embd=TEXT_SPEC["n_embd"])
    return str(text), str(proj)


def png_bytes(width: int = 24, height: int = 20, seed: int = 0) -> bytes:
    """A PNG of random RGB pixels (8-bit, no filter): an image any decoder reads."""
    px = np.random.Generator(np.random.PCG64(seed)).integers(0, 256, (height, width, 3), dtype=np.uint8)
    raw = b"".join(b"\0" + px[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyriver_dev.synth_mmproj", description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--tokenizer-from", default=None, help="a GGUF with Gemma 3's vocabulary (default: gemma3-270m)")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--patch-size", type=int, default=4)
    ap.add_argument("--merge", type=int, default=2, help="patches pooled per side into one embedding")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    d = pathlib.Path(a.out_dir)
    d.mkdir(parents=True, exist_ok=True)
    text = write_text_model(d / "tinygemma3.gguf", a.tokenizer_from or gemma_tokenizer())
    proj = write_mmproj(d / "mmproj-tinygemma3.gguf", text_n_embd=TEXT_SPEC["n_embd"], image_size=a.image_size,
                        patch_size=a.patch_size, n_merge=a.merge, seed=a.seed)
    print(text)
    print(proj)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
