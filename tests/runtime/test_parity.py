"""Full-depth parity with llama.cpp (llama-cpp-python on the same file), for every architecture."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import ARCH_SPECS, PROMPTS, TESTS, on_gpu
from pyriver.tools.engine import LlamaCppEngine, greedy

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

N_GEN = 64
# 595 Gemma tokens: longer than Gemma 3 270M's 512-token sliding window.
LONG_PROMPT = (TESTS / "data" / "long_prompt.txt").read_text()


def _check_parity(path, gpu_layers, prompts=PROMPTS, n_ctx=512):
    from pyriver import Llama
    ref = LlamaCppEngine(path, n_ctx, 2, n_batch=512, logits_all=True, n_gpu_layers=gpu_layers)
    llm = Llama(path, n_ctx=n_ctx, n_threads=2, verbose=False, n_gpu_layers=gpu_layers)
    on_gpu(llm, gpu_layers)
    agree = total = 0
    mismatched = []
    for prompt in prompts:
        ptoks = ref.tokenize(prompt.encode(), add_bos=True, special=True)
        assert llm.tokenize(prompt.encode(), add_bos=True, special=True) == ptoks
        ref_cont = greedy(ref, ptoks, N_GEN).tokens
        ours_cont = greedy(llm, ptoks, N_GEN).tokens
        if ours_cont != ref_cont:
            mismatched.append(prompt)
        # Teacher-forced over the reference sequence: top-1 of every position.
        seq = ptoks + ref_cont
        ref.reset()
        ref_top = np.argmax(ref.eval(seq, logits_all=True), axis=1)
        llm.reset()
        our_top = np.argmax(llm.eval(seq, logits_all=True), axis=1)
        agree += int((ref_top == our_top).sum())
        total += len(seq)
    llm.close()
    ref.close()
    return agree, total, mismatched


def test_parity_smollm2(smol_path, gpu_layers):
    agree, total, mismatched = _check_parity(smol_path, gpu_layers)
    assert total >= 500
    assert agree / total >= 0.995, f"top-1 agreement {agree}/{total}"
    assert not mismatched, f"greedy continuations differ for {mismatched}"


@pytest.mark.parametrize("name", ["mha", "gqa_untied", "deep_rope_linear", "rope_yarn", "rope_factor_only"])
def test_parity_synthetic(synth_paths, name, gpu_layers):
    agree, total, mismatched = _check_parity(synth_paths[name], gpu_layers)
    assert total >= 500
    assert agree / total >= 0.995, f"top-1 agreement {agree}/{total}"
    assert not mismatched, f"greedy continuations differ for {mismatched}"


@pytest.mark.parametrize("name", sorted(ARCH_SPECS))
def test_parity_architectures(arch_paths, name, gpu_layers):
    """qwen2, qwen3, gemma3 (sliding window 16, soft-capping) and a llama file with a
    sliding-window key: 64 generated tokens run well past the windows."""
    agree, total, mismatched = _check_parity(arch_paths[name], gpu_layers)
    assert total >= 500
    assert agree / total >= 0.995, f"top-1 agreement {agree}/{total}"
    assert not mismatched, f"greedy continuations differ for {mismatched}"


def test_parity_gemma3_270m(gemma_path, gpu_layers):
    """The real Gemma 3 270M, including a prompt longer than its 512-token sliding window."""
    from pyriver import Llama
    with Llama(gemma_path, n_ctx=64, verbose=False) as llm:
        assert llm.info["arch"] == "gemma3"
        assert int(llm.metadata("gemma3.attention.sliding_window")) == 512
        assert len(llm.tokenize(LONG_PROMPT.encode(), add_bos=True, special=True)) > 512
    agree, total, mismatched = _check_parity(gemma_path, gpu_layers, PROMPTS + [LONG_PROMPT], n_ctx=1024)
    assert total >= 500
    assert agree / total >= 0.995, f"top-1 agreement {agree}/{total}"
    assert not mismatched, f"greedy continuations differ for {[m[:40] for m in mismatched]}"


def test_one_ggml_per_process(smol_path):
    import llama_cpp  # noqa: F401
    from pyriver import Llama
    with Llama(smol_path, n_ctx=64, verbose=False) as llm:
        llm.eval(llm.tokenize(b"Hello"))
    libs = {line.split()[-1] for line in open("/proc/self/maps") if "libggml-base.so" in line or "libggml.so" in line}
    assert len([p for p in libs if "libggml-base" in p]) == 1, libs
    assert len([p for p in libs if "libggml.so" in p]) == 1, libs
