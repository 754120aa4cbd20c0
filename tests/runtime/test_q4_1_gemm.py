"""The tiled Q4_1 product (native/q4_1_gemm.h): on an x86 CPU with AVX2, a Q4_1 file's steps of
several tokens go through it, with the bits of ggml's own product, so the switch changes no logit
(test_parity holds those steps to llama.cpp's)."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import ARCH_SPECS, RIVER_PROMPT, x86_cpu_has
from pyriver import Llama, debug
from pyriver.tools.quantize import quantize


pytestmark = pytest.mark.skipif(not x86_cpu_has("avx2", "fma", "f16c"), reason="the tiled Q4_1 kernel is x86 AVX2's")

# A prompt step, then verify-like steps: one tile group of columns and less, one and more than one
STEPS = (60, 2, 3, 8, 9, 17)


def _steps(path: str, on: bool, **kw):
    """Logits of every row of each step in STEPS with the switch on or off, and the products the
    kernel computed meanwhile."""
    debug.tiled_q4_1(on)
    try:
        with Llama(path, n_ctx=256, n_threads=2, verbose=False, river=None, **kw) as llm:
            toks = (llm.tokenize(RIVER_PROMPT, add_bos=True) * 40)[:sum(STEPS)]
            runs, out, at = debug.tiled_q4_1_runs(), [], 0
            for n in STEPS:
                out.append(np.array(llm.decode_logits(toks[at:at + n], logits_all=True)))
                at += n
            return out, debug.tiled_q4_1_runs() - runs
    finally:
        debug.tiled_q4_1(True)


def test_the_probe_finds_ggmls_bits_here(smol_path):
    """The kernel's own products against ggml's on random rows (a partial tile and a partial group):
    on this CPU they agree, so graphs use it."""
    with Llama(smol_path, n_ctx=64, verbose=False, river=None):
        assert debug.tiled_q4_1()


def test_multi_token_steps_have_ggmls_bits(smol_path):
    tiled, runs_on = _steps(smol_path, True)
    plain, runs_off = _steps(smol_path, False)
    assert runs_off == 0
    assert runs_on >= len(STEPS) * 7 * 30 // 2   # SmolLM2: 30 blocks of 7 matrices (some joined)
    for n, a, b in zip(STEPS, tiled, plain):
        assert a.shape == (n, 49152)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), n


@pytest.mark.parametrize("name", sorted(ARCH_SPECS))
def test_every_architecture_in_q4_1(arch_paths, tmp_path, name):
    """Each architecture's synthetic file with every matrix in Q4_1 (its output head too): its own
    graph's projections (fused or joined Q/K/V, biases, norms, experts beside them) through the
    kernel, the bits of ggml's product, and the graph's node budget holding the extra node."""
    path = str(quantize(arch_paths[name], tmp_path / f"{name}.q4_1.gguf", "q4_1", pure=True))
    tiled, runs_on = _steps(path, True)
    plain, runs_off = _steps(path, False)
    assert runs_off == 0 and runs_on >= len(STEPS) * ARCH_SPECS[name]["n_layer"]
    for n, a, b in zip(STEPS, tiled, plain):
        assert a.shape[0] == n
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), n
