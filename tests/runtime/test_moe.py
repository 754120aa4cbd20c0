"""The River on a mixture of experts (qwen3moe, issue 16): the sidecar requantizes every expert
tensor and never the router, the type fallback and the "not cheaper" rule apply per expert tensor,
and routing is what the output depends on. Parity with llama.cpp and the River invariants for
qwen3moe are in test_parity.py and test_river.py (ARCH_SPECS, NEW_ARCHS)."""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from pyriver import Llama
from pyriver.engine import river as R
from pyriver.tools import gguf_io

EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


def _types(path):
    return {t.name: (t.tensor_type.name, tuple(int(d) for d in t.shape)) for t in gguf.GGUFReader(str(path)).tensors}


def test_sidecar_requantizes_every_expert_and_keeps_the_router(arch_paths, tmp_path):
    path = arch_paths["qwen3moe"]
    with Llama(path, n_ctx=64, verbose=False) as llm:
        L = llm.info["n_layer"]
        R.build(llm._native_model, path, "q4_0", tmp_path / "r.gguf", progress=False)
    side, backbone = _types(tmp_path / "r.gguf"), _types(path)
    for il in range(L):
        for name in EXPERT_TENSORS:
            key = f"blk.{il}.{name}.weight"
            assert side[key] == ("Q4_0", backbone[key][1])   # all 8 experts, [.., .., 8]
            assert backbone[key][1][2] == 8
        assert f"blk.{il}.ffn_gate_inp.weight" not in side      # the router stays the backbone's
    assert len(side) == L * 7   # Q, K, V, O and three expert tensors


def test_fallback_is_reported_per_expert_tensor(arch_paths, tmp_path):
    """q4_K's 256-element blocks fit none of these rows (128, 192, an expert's 96): each expert
    tensor falls back once, as a whole, to the 32-block type of q4_K's bits per weight."""
    path = arch_paths["qwen3moe"]
    with Llama(path, n_ctx=64, verbose=False) as llm:
        report = R.build(llm._native_model, path, "q4_K", tmp_path / "r.gguf", progress=False)
    lines = report.strip().splitlines()
    assert len(lines) == 4 * 7
    assert "blk.2.ffn_down_exps.weight: q4_K does not fit rows of 96, using q4_0" in lines
    assert sum("ffn_up_exps" in ln for ln in lines) == 4
    assert not any("ffn_gate_inp" in ln for ln in lines)
    assert {t for t, _ in _types(tmp_path / "r.gguf").values()} == {"Q4_0"}


def _with_q4_0_experts(src, dst):
    """A copy of the F32 qwen3moe file whose expert tensors are Q4_0 (attention stays F32)."""
    reader = gguf.GGUFReader(src, "r")
    plan = gguf_io.plan_from_file(reader)
    for i, rt in enumerate(reader.tensors):
        if rt.name.startswith("blk.") and rt.name.split(".")[2] in EXPERT_TENSORS:
            q = gguf.quants.quantize(np.asarray(rt.data, dtype=np.float32).reshape(-1, int(rt.shape[0])),
                                     gguf.GGMLQuantizationType.Q4_0)
            plan.tensors[i] = gguf_io.Tensor(rt.name, plan.tensors[i].ne, gguf.GGMLQuantizationType.Q4_0,
                                             lambda q=q: iter([q]))
    plan.kv["general.file_type"] = gguf_io.KV(2, gguf.GGUFValueType.UINT32)
    return str(gguf_io.write_plan(dst, plan))


def test_not_cheaper_rule_per_expert_tensor(arch_paths, tmp_path):
    """Attention in F32, experts in Q4_0: a q4_0 river is cheaper for attention but not for the
    experts, so it is refused naming the first expert tensor; forced, it builds and runs."""
    path = _with_q4_0_experts(arch_paths["qwen3moe"], tmp_path / "m.gguf")
    with Llama(path, n_ctx=64, verbose=False) as llm:
        with pytest.raises(ValueError, match="q4_0 is not cheaper than the backbone's q4_0 for blk.0.ffn_gate_exps.weight"):
            R.build(llm._native_model, path, "q4_0", tmp_path / "r.gguf", progress=False)
        R.build(llm._native_model, path, "q4_0", tmp_path / "r.gguf", force=True, progress=False)
        ref = llm.decode_logits(llm.tokenize(b"The river runs to the sea"))[-1]
    with Llama(path, n_ctx=64, verbose=False, river=str(tmp_path / "r.gguf")) as llm:
        llm.set_exit(2.0, 1, 1, prefill_exit=True)   # every token leaves the backbone after block 1
        got = llm.decode_logits(llm.tokenize(b"The river runs to the sea"))[-1]
    assert np.isfinite(got).all()
    assert not np.array_equal(got, ref)   # its attention is q4_0 now: the river did run


def test_routing_decides_the_output(arch_paths, tmp_path):
    """Control for the parity tests: with the routers of two layers swapped the logits change, so
    a graph that ignored the router (or picked experts wrongly) could not pass them."""
    path = arch_paths["qwen3moe"]
    reader = gguf.GGUFReader(path, "r")
    plan = gguf_io.plan_from_file(reader)
    a, b = plan.tensor("blk.1.ffn_gate_inp.weight"), plan.tensor("blk.2.ffn_gate_inp.weight")
    a.chunks, b.chunks = b.chunks, a.chunks
    swapped = str(gguf_io.write_plan(tmp_path / "swapped.gguf", plan))
    outs = []
    for p in (path, swapped):
        with Llama(p, n_ctx=64, verbose=False) as llm:
            outs.append(llm.decode_logits(llm.tokenize(b"The river runs from the mountains to the sea"))[-1])
    assert np.abs(outs[0] - outs[1]).max() > 1e-2
