"""Q/K/V and gate/up joined at load (native/model.cpp, join_projections): each block on the CPU
computes them as one product. test_parity holds the joined graphs to llama.cpp's bits; these tests
hold that the parity runs do go through joined matrices, in every architecture that has them, and
that the river's own matrices stay its own."""
from __future__ import annotations

import subprocess
import sys

import gguf
import numpy as np
import pytest

from helpers import ARCH_SPECS, RIVER_PROMPT, forced_logits, rewrite_sidecar, river_copy
from pyriver import Llama
from pyriver.engine import debug
from pyriver_dev import synth
from pyriver.tools.engine import LlamaCppEngine
from pyriver.tools.quantize import quantize

# Joined matrices per block: Q/K/V and gate/up, where the file has them separate and of one type.
PER_BLOCK = {"phi3": 0,        # attn_qkv and ffn_up are fused in the file already
             "qwen3moe": 1,    # experts: only Q/K/V
             "llama_biases": 1}   # FFN biases: gate and up stay apart (Q/K/V biases are joined too)


def _logits(llm, n=8):
    toks = llm.tokenize(RIVER_PROMPT, add_bos=True)
    out = [llm.decode_logits(toks)[-1]]
    for _ in range(n):
        out.append(llm.decode_logits([int(np.argmax(out[-1]))])[-1])
    return np.stack(out)


@pytest.mark.parametrize("name", sorted(ARCH_SPECS))
def test_parity_architectures_run_joined(arch_paths, name):
    with Llama(arch_paths[name], n_ctx=128, verbose=False, river=None) as llm:
        assert debug.joined(llm) == PER_BLOCK.get(name, 2) * ARCH_SPECS[name]["n_layer"]


def test_q4_k_m_joins_q_and_k_where_v_differs(gemma_path):
    """Gemma 3 270M's Q4_K_M keeps V at q8_0 in half of its blocks: there Q and K are joined
    alone (test_parity holds the file to llama.cpp's bits), so every block has two joins."""
    with Llama(gemma_path, n_ctx=64, verbose=False, river=None) as llm:
        types = {t.name: t.tensor_type for t in gguf.GGUFReader(gemma_path).tensors}
        L = llm.info["n_layer"]
        assert any(types[f"blk.{i}.attn_v.weight"] != types[f"blk.{i}.attn_q.weight"] for i in range(L))
        assert debug.joined(llm) == 2 * L


def test_a_join_taken_back_loads(smol_path, tmp_path):
    """Q4_0 with 12 rows of K (one KV head of 12) and 216 of Q/K/V: on a CPU that repacks Q4_0 by
    8 rows the joined matrix would be repacked and K not, so both joins are taken back. The file
    loads (a taken-back join once reached the file's offsets by a name it lacks: ggml aborted),
    with llama.cpp's logits."""
    f16 = tmp_path / "odd.f16.gguf"
    synth.write_llama(f16, n_layer=2, n_embd=192, n_head=16, n_head_kv=1, n_ff=512, tied_output=True, seed=5,
                      dtype="f16", tokenizer_from=smol_path)
    path = str(quantize(f16, tmp_path / "odd.q4_0.gguf", "q4_0"))
    code = f"from pyriver import Llama; Llama({path!r}, n_ctx=32, verbose=False, river=None).decode_logits([1, 2, 3])"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    with Llama(path, n_ctx=32, verbose=False, river=None) as llm:
        ours = llm.decode_logits([1, 2, 3])
        assert 2 <= debug.joined(llm) <= 4   # gate/up always; Q/K/V unless taken back
    ref = LlamaCppEngine(path, 32, 2)
    assert np.array_equal(ours, ref.decode_logits([1, 2, 3]))
    ref.close()


def test_smollm2_joined_mapped_or_copied(smol_path):
    """The joined matrices are copies in either case (no one place in the file to map): the same
    bits with and without mmap, every block joined."""
    runs = []
    for use_mmap in (True, False):
        with Llama(smol_path, n_ctx=128, verbose=False, river=None, use_mmap=use_mmap) as llm:
            assert debug.joined(llm) == 2 * llm.info["n_layer"]
            runs.append(_logits(llm))
    assert np.array_equal(runs[0], runs[1])


def test_river_keeps_its_own_matrices(smol_path, tmp_path):
    """A river over a joined backbone computes with its own gate/up and Q/K/V: its exited steps
    differ from those of a sidecar holding the backbone's bytes for them (the same numbers the
    backbone's joined matrices hold)."""
    path, prompt, tokens, _, L = river_copy(smol_path, tmp_path, 8)
    blocks = [0, L - 1, 3]
    kw = dict(n_ctx=256, n_threads=2, verbose=False, exit_threshold=2.0)
    with Llama(path, river="q4_0", **kw) as llm:
        assert debug.joined(llm) == 2 * L
        own, exits = forced_logits(llm, prompt, tokens, blocks)
        sidecar = llm.river_path
    backbone = gguf.GGUFReader(path).tensors
    for parts in ("ffn_gate", "ffn_up"), ("attn_q", "attn_k", "attn_v"):
        names = {t.name: t for t in backbone if t.name.startswith("blk.") and t.name.split(".")[2] in parts}
        with Llama(path, river=rewrite_sidecar(sidecar, tmp_path / f"{parts[0]}.gguf", tensors=names), **kw) as llm:
            other, _ = forced_logits(llm, prompt, tokens, blocks)
        assert np.array_equal(own[0], other[0])   # the prompt at full depth
        assert all(not np.array_equal(own[i + 1], other[i + 1]) for i, e in enumerate(exits) if e < L - 1), parts
