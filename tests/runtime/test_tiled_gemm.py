"""The tiled products (native/tiled_gemm.h): on an x86 CPU with AVX2, a Q4_1 file's steps of several
tokens and a Q6_K matrix's steps of 2 to 24 (2 to 8 without AVX-512) go through them, with the bits of
ggml's own product (its dot product under 8 rows, its tiled kernel from 8), and with AVX-512 VNNI a
repacked Q4_K matrix's steps of 2 to 64 (the bits of ggml's repacked GEMM and GEMV), so the switch
changes no logit (test_parity holds those steps to llama.cpp's)."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import ARCH_SPECS, RIVER_PROMPT, x86_cpu_has
from pyriver import Llama
from pyriver.engine import debug
from pyriver.tools.quantize import quantize


pytestmark = pytest.mark.skipif(not x86_cpu_has("avx2", "fma", "f16c"), reason="the tiled kernels are x86 AVX2's")

# A prompt step, then verify-like steps: one tile group of columns and less, one and more than one
STEPS = (60, 2, 3, 8, 9, 17)
# Q6_K: one kernel takes 2 to 7 rows (ggml's dot product's bits), one 8 to 24 with AVX-512 VNNI, 8
# without (its tiled kernel's: to 16 rows one band, from 17 its standard path; 9 and 17 partial groups
# of columns); 25 rows and more and the prompt step stay ggml's
Q6_K_STEPS = (40, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 24, 25, 32, 33)
Q6_K_MOST = 24 if x86_cpu_has("avx512f", "avx512bw", "avx512vl", "avx512_vnni") else 8
Q6_K_TILED = sum(2 <= n <= Q6_K_MOST for n in Q6_K_STEPS)
# Q4_K (repacked): 2 to 64 rows, ggml's 4-row GEMM for the first 4*(n//4) rows and its GEMV for the
# rest (2, 3 GEMV alone; 16, 32, 64 its 16-row body; 17, 33 GEMV rows after it); the prompt step of
# 80 stays ggml's
AVX512_VNNI = x86_cpu_has("avx512f", "avx512bw", "avx512vl", "avx512_vnni")
Q4_K_STEPS = (80, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 24, 32, 33, 48, 64)
Q4_K_TILED = sum(2 <= n <= 64 for n in Q4_K_STEPS)
Q4_K_1_5B_MATRICES = 28 * 3 + 14   # Q/K(/V) joined, O, gate/up joined in each block; down in half


def _steps(path: str, type: str, on: bool, steps=STEPS, **kw):
    """Logits of every row of each step in steps with type's switch on or off, and the products its
    kernel computed meanwhile."""
    debug.tiled_gemm(type, on)
    try:
        with Llama(path, n_ctx=512, n_threads=2, verbose=False, river=None, **kw) as llm:
            toks = (llm.tokenize(RIVER_PROMPT, add_bos=True) * 40)[:sum(steps)]
            runs, out, at = debug.tiled_gemm_runs(type), [], 0
            for n in steps:
                out.append(np.array(llm.decode_logits(toks[at:at + n], logits_all=True)))
                at += n
            return out, debug.tiled_gemm_runs(type) - runs
    finally:
        debug.tiled_gemm(type, True)


def _same(steps, a_steps, b_steps, n_vocab=None):
    for n, a, b in zip(steps, a_steps, b_steps):
        assert a.shape[0] == n and (n_vocab is None or a.shape[1] == n_vocab)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), n


def test_the_probes_find_ggmls_bits_here(smol_path):
    """Each kernel's own products against ggml's on random rows (the most rows it takes, a partial
    group of columns for Q4_1, and two): on this CPU they agree, so graphs use them."""
    with Llama(smol_path, n_ctx=64, verbose=False, river=None):
        assert debug.tiled_gemm("q4_1") == 1 and debug.tiled_gemm("q6_K") == 2
        assert debug.tiled_gemm("q4_K") == int(AVX512_VNNI)
        assert debug.tiled_in_use() == ("q4_1:1,q4_K:1,q6_K:2" if AVX512_VNNI else "q4_1:1,q6_K:2")
    with pytest.raises(ValueError, match="no tiled kernel"):
        debug.tiled_gemm("q8_0")


def test_multi_token_steps_have_ggmls_bits(smol_path):
    tiled, runs_on = _steps(smol_path, "q4_1", True)
    plain, runs_off = _steps(smol_path, "q4_1", False)
    assert runs_off == 0
    assert runs_on >= len(STEPS) * 7 * 30 // 2   # SmolLM2: 30 blocks of 7 matrices (some joined)
    _same(STEPS, tiled, plain, 49152)


@pytest.mark.parametrize("name", sorted(ARCH_SPECS))
def test_every_architecture_in_q4_1(arch_paths, tmp_path, name):
    """Each architecture's synthetic file with every matrix in Q4_1 (its output head too): its own
    graph's projections (fused or joined Q/K/V, biases, norms, experts beside them) through the
    kernel, the bits of ggml's product, and the graph's node budget holding the extra node."""
    path = str(quantize(arch_paths[name], tmp_path / f"{name}.q4_1.gguf", "q4_1", pure=True))
    tiled, runs_on = _steps(path, "q4_1", True)
    plain, runs_off = _steps(path, "q4_1", False)
    assert runs_off == 0 and runs_on >= len(STEPS) * ARCH_SPECS[name]["n_layer"]
    _same(STEPS, tiled, plain)


@pytest.fixture(scope="module")
def q6_k_path(synth_paths, tmp_path_factory) -> str:
    """A synthetic file with every matrix in Q6_K (rows of 256 and 512 weights; its own output head)."""
    return str(quantize(synth_paths["gqa_untied"], tmp_path_factory.mktemp("q6_k") / "q6_k.gguf", "q6_k", pure=True))


def test_q6_k_everywhere(q6_k_path):
    """Every matrix in Q6_K: steps of 2 to 24 tokens through the kernels with ggml's bits, longer ones
    and the prompt through ggml's."""
    tiled, runs_on = _steps(q6_k_path, "q6_K", True, Q6_K_STEPS)
    plain, runs_off = _steps(q6_k_path, "q6_K", False, Q6_K_STEPS)
    assert runs_off == 0
    assert runs_on == Q6_K_TILED * (3 * 4 + 1)   # a step: 3 blocks of Q/K/V (joined), O, gate/up (joined), down; the head
    _same(Q6_K_STEPS, tiled, plain)


@pytest.mark.parametrize("model, matrices", [("gemma", 9), ("qwen15", 29)])
def test_q6_k_in_q4_k_m_files(request, model, matrices):
    """The real Q4_K_M files' Q6_K matrices (Gemma 3's FFN down halves; the 1.5B's, its V and its
    output head of 151,936 rows) in steps of 2 to 33 tokens: the bits of ggml's product."""
    path = request.getfixturevalue(f"{model}_path")
    tiled, runs_on = _steps(path, "q6_K", True, Q6_K_STEPS)
    plain, runs_off = _steps(path, "q6_K", False, Q6_K_STEPS)
    assert runs_off == 0 and runs_on == Q6_K_TILED * matrices   # Q6_K matrices a step (the 1.5B's: 14 + 14 + its head)
    _same(Q6_K_STEPS, tiled, plain)


def test_q6_k_batch_invariant(q6_k_path):
    """In a batch-invariant context a step of 12 tokens of an all-Q6_K file has every row's bits of
    12 one-token steps: the 2-to-7-row kernel's sums are a one-row product's, the 8-to-16-row one's
    (ggml's tiled kernel's) are not, and such a step does not take it."""
    with Llama(q6_k_path, n_ctx=256, n_threads=2, verbose=False, river=None, batch_invariant=True) as llm:
        toks = (llm.tokenize(RIVER_PROMPT, add_bos=True) * 4)[:20]
        llm.decode_logits(toks[:8], prompt=True)
        runs = debug.tiled_gemm_runs("q6_K")
        step = np.array(llm.decode_logits(toks[8:20], logits_all=True))
        assert debug.tiled_gemm_runs("q6_K") == runs   # 12 rows: one-row products, not the tiled kernel
        llm.context.truncate(8)
        singles = [np.array(llm.decode_logits([t])).reshape(-1) for t in toks[8:20]]
        assert np.array_equal(step.view(np.uint32), np.array(singles).view(np.uint32))


@pytest.fixture(scope="module")
def q4_k_path(synth_paths, tmp_path_factory) -> str:
    """A synthetic file with every matrix in Q4_K (rows of 256 and 512 weights; its own output head),
    each repacked by ggml as it loads."""
    return str(quantize(synth_paths["gqa_untied"], tmp_path_factory.mktemp("q4_k") / "q4_k.gguf", "q4_k_s", pure=True))


@pytest.mark.skipif(not AVX512_VNNI, reason="the Q4_K kernel is AVX-512 VNNI's")
def test_q4_k_everywhere(q4_k_path):
    """Every matrix in Q4_K, repacked: steps of 2 to 64 tokens through the kernel with the bits of
    ggml's repacked GEMM and GEMV, the prompt of 80 through ggml's."""
    tiled, runs_on = _steps(q4_k_path, "q4_K", True, Q4_K_STEPS)
    plain, runs_off = _steps(q4_k_path, "q4_K", False, Q4_K_STEPS)
    assert runs_off == 0
    assert runs_on == Q4_K_TILED * (3 * 4 + 1)   # a step: 3 blocks of Q/K/V (joined), O, gate/up (joined), down; the head
    _same(Q4_K_STEPS, tiled, plain)


@pytest.mark.skipif(not AVX512_VNNI, reason="the Q4_K kernel is AVX-512 VNNI's")
def test_q4_k_in_the_1_5b(qwen15_path):
    """The 1.5B Q4_K_M's Q4_K matrices (Q/K joined, O, gate/up joined in every block; down in half
    of them) in steps of 2 to 64 tokens: the bits of ggml's repacked product."""
    tiled, runs_on = _steps(qwen15_path, "q4_K", True, Q4_K_STEPS)
    plain, runs_off = _steps(qwen15_path, "q4_K", False, Q4_K_STEPS)
    assert runs_off == 0 and runs_on == Q4_K_TILED * Q4_K_1_5B_MATRICES
    _same(Q4_K_STEPS, tiled, plain)
