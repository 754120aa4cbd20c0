"""Architecture metadata and tensors: what each arch reads is validated before any graph (a bad
file is a ModelLoadError naming the problem), and the sliding-window layer pattern in both of
its GGUF forms runs as llama.cpp runs it."""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from helpers import ARCH_SPECS
from pyriver import Llama, ModelLoadError
from pyriver.tools import gguf_io
from pyriver_dev import synth
from pyriver.tools.engine import LlamaCppEngine, StepwiseEngine


def _rewrite(src, dst, kv=None, drop=(), reshape=None):
    """A copy of src with metadata keys replaced (name -> (value, type) or None to delete),
    tensors dropped, or one tensor's first dimension halved."""
    reader = gguf.GGUFReader(src, "r")
    plan = gguf_io.plan_from_file(reader)
    for k, v in (kv or {}).items():
        if v is None:
            plan.kv.pop(k, None)
        else:
            plan.kv[k] = gguf_io.KV(*v)
    plan.tensors = [t for t in plan.tensors if t.name not in drop]
    if reshape:
        t = plan.tensor(reshape)
        gguf_io.reshape_prefix(plan, reader, reshape, (t.ne[0] // 2,) + tuple(t.ne[1:]))
    return str(gguf_io.write_plan(dst, plan))


def test_unsupported_architecture_is_named(arch_paths, tmp_path):
    p = _rewrite(arch_paths["qwen3"], tmp_path / "qwen3next.gguf",
                 kv={"general.architecture": ("qwen3next", gguf.GGUFValueType.STRING)})
    with pytest.raises(ModelLoadError, match=r"unsupported architecture 'qwen3next' \(supported: llama, qwen2, qwen3, "
                                             r"gemma3, mistral3, gemma2, smollm3, olmo2, phi3, qwen3moe\)"):
        Llama(p, verbose=False)


@pytest.mark.parametrize("name,tensor", [
    ("gemma3", "blk.2.post_ffw_norm.weight"),
    ("gemma3", "blk.0.attn_q_norm.weight"),
    ("qwen3", "blk.1.attn_k_norm.weight"),
    ("mistral3", "blk.3.ffn_gate.weight"),
    ("gemma2", "blk.1.post_attention_norm.weight"),
    ("smollm3", "blk.7.attn_v.weight"),
    ("olmo2", "blk.0.attn_k_norm.weight"),
    ("olmo2", "output.weight"),                  # OLMo 2's head is never tied
    ("phi3", "blk.2.ffn_up.weight"),
    ("phi3", "blk.1.attn_qkv.weight"),           # neither fused nor separate Q/K/V: attn_q is missing
    ("qwen3moe", "blk.0.ffn_gate_inp.weight"),   # the router
    ("qwen3moe", "blk.3.ffn_down_exps.weight"),
])
def test_missing_arch_tensor(arch_paths, tmp_path, name, tensor):
    p = _rewrite(arch_paths[name], tmp_path / "m.gguf", drop=[tensor])
    missing = "blk.1.attn_q.weight" if tensor == "blk.1.attn_qkv.weight" else tensor
    with pytest.raises(ModelLoadError, match=f"'{missing}' is missing"):
        Llama(p, verbose=False)


@pytest.mark.parametrize("name,tensor", [
    ("qwen3", "blk.0.attn_q_norm.weight"),      # per-head: key_length wide
    ("qwen2", "blk.3.attn_k.bias"),
    ("gemma3", "blk.5.post_attention_norm.weight"),
    ("mistral3", "blk.0.attn_q.weight"),         # key_length 48, not n_embd / n_head
    ("gemma2", "blk.3.ffn_down.weight"),
    ("olmo2", "blk.1.attn_q_norm.weight"),       # over the whole projection, not per head
    ("phi3", "blk.0.attn_qkv.weight"),
    ("phi3", "blk.1.ffn_up.weight"),             # 2 x n_ff
    ("phi3", "rope_factors_long.weight"),        # n_rot / 2
    ("qwen3moe", "blk.2.ffn_up_exps.weight"),    # [n_embd, n_ff_exp, n_expert]
    ("qwen3moe", "blk.1.ffn_gate_inp.weight"),   # [n_embd, n_expert]
])
def test_wrong_arch_tensor_shape(arch_paths, tmp_path, name, tensor):
    p = _rewrite(arch_paths[name], tmp_path / "m.gguf", reshape=tensor)
    with pytest.raises(ModelLoadError, match=f"'{tensor}' has shape"):
        Llama(p, verbose=False)


def test_bad_sliding_window_pattern(arch_paths, tmp_path):
    ARR, BOOL = gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL
    key = "gemma3.attention.sliding_window_pattern"
    p = _rewrite(arch_paths["gemma3"], tmp_path / "short.gguf", kv={key: ([True, False], ARR, BOOL)})
    with pytest.raises(ModelLoadError, match="has 2 entries for 6 layers"):
        Llama(p, verbose=False)
    p = _rewrite(arch_paths["gemma3"], tmp_path / "neg.gguf",
                 kv={"gemma3.attention.sliding_window": (-4, gguf.GGUFValueType.INT32)})
    with pytest.raises(ModelLoadError, match="sliding_window"):
        Llama(p, verbose=False)


def _teacher_forced_equal(path, text):
    """llama.cpp's logits of every token (one token per step) and pyriver's (one batch-invariant
    step): they must be equal bit for bit."""
    ref = StepwiseEngine(LlamaCppEngine(path, 256, 2, logits_all=True))
    toks = ref.tokenize(text.encode(), add_bos=True, special=True)
    a = ref.decode_logits(toks, logits_all=True)
    ref.close()
    with Llama(path, n_ctx=256, n_threads=2, verbose=False, batch_invariant=True) as llm:
        b = llm.decode_logits(toks, logits_all=True)
    return len(toks), a, b


@pytest.mark.parametrize("pattern", [[True, False, True, True, False, True], 0, 2])
def test_sliding_window_patterns_match_llama_cpp(smol_path, tmp_path, pattern):
    """Per-layer booleans; 0 (every layer local); 2 (alternating). The window (8) is far shorter
    than the text, so a wrong layer choice shows in the logits. (Pattern 1, no local layer at
    all, aborts llama.cpp itself: GGML_ASSERT(hparams.is_swa_any()).)"""
    spec = dict(ARCH_SPECS["gemma3"], sliding_window=8, swa_pattern=pattern)
    p = synth.write_model(tmp_path / "g.gguf", tokenizer_from=smol_path, **spec)
    text = "The river runs from the mountains to the sea, past towns, mills and bridges, " * 3
    n, a, b = _teacher_forced_equal(str(p), text)
    assert n > 40
    assert np.array_equal(a, b)


def test_window_changes_the_result(smol_path, tmp_path):
    """Control for the test above: the window matters on this text (else it could not fail)."""
    outs = []
    for w in (8, 4096):
        p = synth.write_model(tmp_path / f"g{w}.gguf", tokenizer_from=smol_path,
                              **dict(ARCH_SPECS["gemma3"], sliding_window=w, swa_pattern=0))
        with Llama(str(p), n_ctx=256, n_threads=2, verbose=False) as llm:
            outs.append(llm.decode_logits(llm.tokenize(b"The river runs from the mountains to the sea, " * 4))[-1])
    assert np.abs(outs[0] - outs[1]).max() > 1e-2


@pytest.mark.parametrize("name,key,value,match", [
    ("mistral3", "mistral3.expert_count", (8, gguf.GGUFValueType.UINT32), "with experts"),
    ("gemma2", "gemma2.attn_logit_softcapping", (0.0, gguf.GGUFValueType.FLOAT32), "attn_logit_softcapping"),
    ("gemma2", "gemma2.final_logit_softcapping", (0.0, gguf.GGUFValueType.FLOAT32), "final_logit_softcapping"),
    ("mistral3", "mistral3.attention.temperature_scale", (float("nan"), gguf.GGUFValueType.FLOAT32), "temperature_scale"),
    ("qwen3moe", "qwen3moe.expert_used_count", (9, gguf.GGUFValueType.UINT32), r"expert_used_count' = 9 is out of range \[1, 8\]"),
    ("qwen3moe", "qwen3moe.expert_used_count", (0, gguf.GGUFValueType.UINT32), "expert_used_count' = 0 is out of range"),
    ("qwen3moe", "qwen3moe.expert_used_count", None, "expert_used_count' is missing"),
    ("qwen3moe", "qwen3moe.expert_count", (0, gguf.GGUFValueType.UINT32), "needs expert_count > 0"),
    # The tensors hold 8 experts: a file that says 4 (or another width) is caught at its shapes.
    ("qwen3moe", "qwen3moe.expert_count", (4, gguf.GGUFValueType.UINT32), r"'blk.0.ffn_gate_inp.weight' has shape \[128, 8, 1, 1\], expected \[128, 4, 1\]"),
    ("qwen3moe", "qwen3moe.expert_feed_forward_length", (64, gguf.GGUFValueType.UINT32), "'blk.0.ffn_gate_exps.weight' has shape"),
])
def test_bad_arch_key(arch_paths, tmp_path, name, key, value, match):
    """Keys llama.cpp would divide by or misread are refused before any graph."""
    p = _rewrite(arch_paths[name], tmp_path / "m.gguf", kv={key: value})
    with pytest.raises(ModelLoadError, match=match):
        Llama(p, verbose=False)


def test_gemma2_flash_attention_soft_cap_matches_llama_cpp(arch_paths):
    """Gemma 2's attention soft-cap on the flash path (ggml_flash_attn_ext's logit_softcap, the
    parity tests run the other path): a batched prompt against llama.cpp's, bit for bit."""
    path = arch_paths["gemma2"]
    text = "The river runs from the mountains to the sea, past towns, mills and bridges, " * 3
    ref = LlamaCppEngine(path, 256, 2, logits_all=True, flash_attn=True)
    toks = ref.tokenize(text.encode(), add_bos=True, special=True)
    a = ref.decode_logits(toks, logits_all=True)
    ref.close()
    with Llama(path, n_ctx=256, n_threads=2, verbose=False, flash_attn=True, batch_invariant=False) as llm:
        b = llm.decode_logits(toks, logits_all=True)
    assert len(toks) > 40   # past the window of 16
    assert np.array_equal(a, b)
