"""The checks of a projector file (mmproj) before libmtmd loads it: llama.cpp's clip loader throws on
missing keys and tensors (libmtmd reports that as a failed load), but a tensor of the wrong shape
reaches its warm-up graph, where ggml aborts the process. The file's bytes are checked as any file
llama.cpp loads (native.check_gguf); the keys and tensor shapes of a "gemma3" projector (the one
type checked in full) against its own hyper-parameters and the text model's embedding width. Other
projector types get the key checks; their shapes are libmtmd's to judge."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from pyriver.errors import ModelLoadError


def _fields(path: str):
    import gguf   # a dependency of pyriver (sidecars read it too)
    try:
        r = gguf.GGUFReader(path, "r")
    except Exception as e:   # the bytes passed native.check_gguf; anything else gguf-py refuses is a bad file
        raise ModelLoadError(f"{path}: not a readable GGUF projector: {e}") from None
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    shapes = {t.name: tuple(int(d) for d in t.shape) for t in r.tensors}
    return kv, shapes


def _uint(kv: Dict, key: str, path: str, default: Optional[int] = None) -> int:
    v = kv.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ModelLoadError(f"{path}: projector key {key} must be a positive integer, got {v!r}")
    return v


def projector_type(kv: Dict) -> str:
    return str(kv.get("clip.projector_type") or kv.get("clip.vision.projector_type") or
               kv.get("clip.audio.projector_type") or "")


def check(path: str, text_n_embd: int) -> str:
    """ModelLoadError naming what is wrong, else the projector type."""
    from pyriver.engine import binding as native
    native.check_gguf(path)   # the GGUF structure, every tensor's bounds
    kv, shapes = _fields(path)
    if not (kv.get("clip.has_vision_encoder") or kv.get("clip.has_audio_encoder")):
        raise ModelLoadError(f"{path}: not a multimodal projector (no clip.has_vision_encoder or "
                             "clip.has_audio_encoder): --mmproj takes the model's mmproj GGUF")
    kind = projector_type(kv)
    if not kind:
        raise ModelLoadError(f"{path}: the projector names no clip.projector_type")
    if kind == "gemma3":
        _check_gemma3(path, kv, shapes, text_n_embd)
    return kind


def _check_gemma3(path: str, kv: Dict, shapes: Dict[str, Tuple[int, ...]], text_n_embd: int) -> None:
    V = "clip.vision."
    n_embd, n_head = _uint(kv, V + "embedding_length", path), _uint(kv, V + "attention.head_count", path)
    n_ff, n_layer = _uint(kv, V + "feed_forward_length", path), _uint(kv, V + "block_count", path)
    size, patch = _uint(kv, V + "image_size", path), _uint(kv, V + "patch_size", path)
    merge = _uint(kv, V + "projector.scale_factor", path, 4)   # clip.cpp's default for gemma3
    if n_embd % n_head:
        raise ModelLoadError(f"{path}: embedding_length {n_embd} is not a multiple of head_count {n_head}")
    side = size // patch
    if size % patch or side % merge:
        raise ModelLoadError(f"{path}: image_size {size} must be a multiple of patch_size {patch}, and the "
                             f"{side} patches per side of the pooling {merge}")
    for key in (V + "image_mean", V + "image_std"):
        if len(kv.get(key) or []) < 3:
            raise ModelLoadError(f"{path}: {key} needs 3 values")

    def want(name: str, ne: Tuple[int, ...], required: bool = True) -> None:
        got = shapes.get(name)
        if got is None:
            if required:
                raise ModelLoadError(f"{path}: the projector has no tensor {name}")
            return
        if got != ne:
            raise ModelLoadError(f"{path}: tensor {name} has shape {list(got)}, expected {list(ne)}")

    want("v.patch_embd.weight", (patch, patch, 3, n_embd))
    want("v.patch_embd.bias", (n_embd,), False)
    want("v.position_embd.weight", (n_embd, side * side))
    for i in range(n_layer):
        b = f"v.blk.{i}."
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            want(b + proj + ".weight", (n_embd, n_embd))
            want(b + proj + ".bias", (n_embd,), False)
        for norm in ("ln1", "ln2"):
            want(b + norm + ".weight", (n_embd,), False)
            want(b + norm + ".bias", (n_embd,), False)
        up, down = shapes.get(b + "ffn_up.weight"), shapes.get(b + "ffn_down.weight")
        if (up, down) != ((n_embd, n_ff), (n_ff, n_embd)) and (up, down) != ((n_ff, n_embd), (n_embd, n_ff)):
            raise ModelLoadError(f"{path}: block {i}'s FFN has shapes {up} and {down}, expected up "
                                 f"{[n_embd, n_ff]} and down {[n_ff, n_embd]}")
    for name in ("v.post_ln.weight", "v.post_ln.bias"):
        want(name, (n_embd,), False)
    want("mm.soft_emb_norm.weight", (n_embd,))
    proj = shapes.get("mm.input_projection.weight")
    if proj is None or len(proj) != 2 or proj[1] != n_embd:
        raise ModelLoadError(f"{path}: mm.input_projection.weight must be [text width, {n_embd}], got {proj}")
    if proj[0] != text_n_embd:
        raise ModelLoadError(f"{path}: the projector makes embeddings of width {proj[0]}, but the model's is "
                             f"{text_n_embd}: it is the projector of another model")
