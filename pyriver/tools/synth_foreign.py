"""Synthetic GGUFs of architectures llama.cpp runs and pyriver has no builder for (the llama.cpp
engine's test files): random weights drawn as synth.py draws them, a real tokenizer, the tensor
names and keys of llama.cpp 0.3.36's loaders (vendor/llama.cpp/src/models/<arch>.cpp).

- ``granite``: llama's block and four scales (embedding, residual, attention, logit).
- ``lfm2``: a hybrid: short-convolution blocks (``shortconv.*``, a recurrent state in llama.cpp's
  memory) and attention blocks with Q/K norms where ``attention.head_count_kv`` of the layer is
  nonzero; the final norm is ``token_embd_norm``.

    write_foreign(path, arch="lfm2", n_layer=4, ...)
"""
from __future__ import annotations

import math
import os
import pathlib

from gguf import GGMLQuantizationType, GGUFValueType

from . import synth
from .gguf_io import KV, Plan, write_plan

F32 = GGMLQuantizationType.F32
ARCHS = ("granite", "lfm2")


def _llama_plan(**kw):
    """synth's llama model: its metadata and tensors, the base the others are rewritten from."""
    m = synth._Model(arch="llama", **kw)
    head_dim = m.check()
    tok = m.tokenizer_from if m.tokenizer_from is not None else synth.models.resolve(None)
    tok_kv = synth._tokenizer_kv(tok)
    n_vocab = len(tok_kv["tokenizer.ggml.tokens"].value)
    return m, head_dim, m.metadata(head_dim, tok_kv), m.tensors(head_dim, n_vocab)


def _rename(kv: dict, arch: str) -> dict:
    out = {(arch + k[len("llama"):] if k.startswith("llama.") else k): v for k, v in kv.items()}
    out["general.architecture"] = KV(arch, GGUFValueType.STRING)
    out["general.name"] = KV(kv["general.name"].value.replace("llama", arch), GGUFValueType.STRING)
    return out


def _granite(kw):
    m, head_dim, kv, tensors = _llama_plan(**kw)
    kv = _rename(kv, "granite")
    for key, v in (("logit_scale", 0.5), ("residual_scale", 0.8), ("embedding_scale", 0.5),
                   ("attention.scale", 1.0 / head_dim)):
        kv["granite." + key] = KV(float(v), GGUFValueType.FLOAT32)
    return kv, tensors


def _lfm2(kw, attn_layers=(2,), l_cache=3):
    m, head_dim, kv, tensors = _llama_plan(**kw)
    kv = _rename(kv, "lfm2")
    n = m.n_layer
    kv["lfm2.attention.head_count_kv"] = KV([m.n_head_kv if i in attn_layers else 0 for i in range(n)],
                                            GGUFValueType.ARRAY, GGUFValueType.UINT32)
    kv["lfm2.shortconv.l_cache"] = KV(int(l_cache), GGUFValueType.UINT32)
    conv_names = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight")
    out, e, seed = [], m.n_embd, m.seed
    wtype = synth._GGML_TYPES[m.dtype]
    branch = synth.RESIDUAL_STD / math.sqrt(2 * n)
    for t in tensors:
        if t.name == "output_norm.weight":   # llama.cpp's name for LFM2's final norm
            t = synth._random_tensor("token_embd_norm.weight", t.ne, F32, seed, 0.1, 1.0)
        parts = t.name.split(".")
        if parts[0] == "blk" and int(parts[1]) not in attn_layers and ".".join(parts[2:]) in conv_names:
            continue   # a convolution block has no attention
        out.append(t)
        if parts[0] == "blk" and parts[2:] == ["attn_norm", "weight"]:
            i = int(parts[1])
            p = f"blk.{i}."
            if i in attn_layers:
                out += [synth._random_tensor(p + f"attn_{x}_norm.weight", (head_dim,), F32, seed, 0.1, 1.0) for x in "qk"]
            else:
                out += [synth._random_tensor(p + "shortconv.conv.weight", (l_cache, e), F32, seed, 1.0 / math.sqrt(l_cache)),
                        synth._random_tensor(p + "shortconv.in_proj.weight", (e, 3 * e), wtype, seed, 1.0 / math.sqrt(e)),
                        synth._random_tensor(p + "shortconv.out_proj.weight", (e, e), wtype, seed, branch / math.sqrt(e))]
    return kv, out


_WRITERS = {"granite": _granite, "lfm2": _lfm2}


def write_foreign(path: str | os.PathLike[str], arch: str, **kw) -> pathlib.Path:
    """Write a synthetic `arch` file (one of ARCHS); the other arguments are synth.write_model's
    llama ones (n_layer, n_embd, n_head, n_head_kv, n_ff, dtype, seed, tokenizer_from, ...)."""
    if arch not in _WRITERS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    kv, tensors = _WRITERS[arch](kw)
    return write_plan(pathlib.Path(path), Plan(kv=kv, tensors=tensors))
