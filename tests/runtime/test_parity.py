"""Full-depth parity with llama.cpp (llama-cpp-python on the same file), for every architecture."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import ARCH_SPECS, PROMPTS, TESTS, on_gpu
from pyriver.tools.engine import LlamaCppEngine, StepwiseEngine, greedy

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

N_GEN = 64
# 595 Gemma tokens: longer than Gemma 3 270M's 512-token sliding window.
LONG_PROMPT = (TESTS / "data" / "long_prompt.txt").read_text()


# Two ways to compute a step of several tokens, each against its llama.cpp reference:
# - stepwise (batch_invariant=True): every token as a single-token step computes
#   it, so the reference is llama.cpp fed one token per step, and logits must match bit for bit;
# - batched (batch_invariant=False, the default): llama.cpp's kernels for many tokens, against
#   llama.cpp's own batched prompt: top-1 agreement and identical greedy continuations.
# On a GPU only batched runs (batch invariance re-reads the weights per token there); on the CPU
# batched runs for the models below.
BATCHED_ON_CPU = {"smollm2", "mha", "gemma3", "gemma3_270m", "qwen3moe"}


def _modes(gpu_layers, name):
    if gpu_layers:
        return ["batched"]
    return ["stepwise", "batched"] if name in BATCHED_ON_CPU else ["stepwise"]


def _check_parity(path, gpu_layers, mode, prompts=PROMPTS, n_ctx=512, n_gen=N_GEN, min_total=500):
    from pyriver import Llama
    ref = LlamaCppEngine(path, n_ctx, 2, n_batch=512, logits_all=True, n_gpu_layers=gpu_layers)
    if mode == "stepwise":
        ref = StepwiseEngine(ref)
    llm = Llama(path, n_ctx=n_ctx, n_threads=2, verbose=False, n_gpu_layers=gpu_layers,
                batch_invariant=mode == "stepwise")
    on_gpu(llm, gpu_layers)
    agree = total = 0
    mismatched, unequal = [], []
    for prompt in prompts:
        ptoks = ref.tokenize(prompt.encode(), add_bos=True, special=True)
        assert llm.tokenize(prompt.encode(), add_bos=True, special=True) == ptoks
        ref_cont = greedy(ref, ptoks, n_gen).tokens
        ours_cont = greedy(llm, ptoks, n_gen).tokens
        if ours_cont != ref_cont:
            mismatched.append(prompt[:40])
        # Teacher-forced over the reference sequence: every position's logits.
        seq = ptoks + ref_cont
        ref.reset()
        ref_logits = ref.decode_logits(seq, logits_all=True)
        llm.reset()
        our_logits = llm.decode_logits(seq, logits_all=True)
        agree += int((np.argmax(ref_logits, axis=1) == np.argmax(our_logits, axis=1)).sum())
        total += len(seq)
        if not np.array_equal(ref_logits, our_logits):
            unequal.append(prompt[:40])
    llm.close()
    ref.close()
    assert total >= min_total
    assert agree / total >= 0.995, f"{mode}: top-1 agreement {agree}/{total}"
    assert not mismatched, f"{mode}: greedy continuations differ for {mismatched}"
    if mode == "stepwise":
        assert not unequal, f"stepwise: logits differ from llama.cpp's single-token steps for {unequal}"


def test_parity_smollm2(smol_path, gpu_layers):
    for mode in _modes(gpu_layers, "smollm2"):
        _check_parity(smol_path, gpu_layers, mode)


@pytest.mark.parametrize("name", ["mha", "gqa_untied", "deep_rope_linear", "rope_yarn", "rope_factor_only"])
def test_parity_synthetic(synth_paths, name, gpu_layers):
    for mode in _modes(gpu_layers, name):
        _check_parity(synth_paths[name], gpu_layers, mode)


@pytest.mark.parametrize("name", sorted(ARCH_SPECS))
def test_parity_architectures(arch_paths, name, gpu_layers):
    """qwen2, qwen3, gemma3 (sliding window 16, soft-capping) and a llama file with a
    sliding-window key: 64 generated tokens run well past the windows."""
    for mode in _modes(gpu_layers, name):
        _check_parity(arch_paths[name], gpu_layers, mode)


@pytest.mark.long   # 160 s on a 2-core Zen 3: a prompt past the 512-token window, every mode (README)
def test_parity_gemma3_270m(gemma_path, gpu_layers):
    """The real Gemma 3 270M, including a prompt longer than its 512-token sliding window."""
    from pyriver import Llama
    with Llama(gemma_path, n_ctx=64, verbose=False) as llm:
        assert llm.info["arch"] == "gemma3"
        assert int(llm.meta("gemma3.attention.sliding_window")) == 512
        assert len(llm.tokenize(LONG_PROMPT.encode(), add_bos=True, special=True)) > 512
    for mode in _modes(gpu_layers, "gemma3_270m"):
        _check_parity(gemma_path, gpu_layers, mode, PROMPTS + [LONG_PROMPT], n_ctx=1024)


def test_parity_qwen25_coder_1_5b(qwen15_path, gpu_layers):
    """The real Qwen2.5-Coder 1.5B (qwen2) when it is cached (the fixture skips otherwise): two prompts
    and 24 tokens, as the 1.5B costs about ten times SmolLM2's time per token."""
    from pyriver import Llama
    with Llama(qwen15_path, n_ctx=64, verbose=False) as llm:
        assert llm.info["arch"] == "qwen2"
    for mode in _modes(gpu_layers, "qwen2.5_coder_1.5b"):
        _check_parity(qwen15_path, gpu_layers, mode, PROMPTS[:2], n_gen=24, min_total=40)


def test_one_ggml_per_process(smol_path):
    import llama_cpp  # noqa: F401
    from pyriver import Llama
    with Llama(smol_path, n_ctx=64, verbose=False) as llm:
        llm.decode_logits(llm.tokenize(b"Hello"))
    libs = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "libggml-base.so" in line or "libggml.so" in line}
    assert len([p for p in libs if "libggml-base" in p]) == 1, libs
    assert len([p for p in libs if "libggml.so" in p]) == 1, libs
