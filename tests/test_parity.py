"""Full-depth parity with llama.cpp (llama-cpp-python on the same file)."""
from __future__ import annotations

import numpy as np
import pytest

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
    "Q: What is 17 + 25?\nA:",
    "The three primary colors are",
    "Water boils at a temperature of",
    "import numpy as np\n\ndef softmax(x):",
    "My favourite season is autumn because",
]
N_GEN = 64


def _ref(path):
    import llama_cpp
    return llama_cpp.Llama(path, n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False)


def _greedy_ref(ref, prompt_tokens, n):
    ref.reset()
    ref.eval(prompt_tokens)
    out = []
    for _ in range(n):
        t = int(np.argmax(ref.scores[ref.n_tokens - 1]))
        out.append(t)
        ref.eval([t])
    return out


def _greedy_ours(llm, prompt_tokens, n):
    llm.reset()
    logits = llm.eval(prompt_tokens)[-1]
    out = []
    for _ in range(n):
        t = int(np.argmax(logits))
        out.append(t)
        logits = llm.eval([t])[-1]
    return out


def _check_parity(path):
    from pyriver import Llama
    ref = _ref(path)
    llm = Llama(path, n_ctx=512, n_threads=2, verbose=False)
    agree = total = 0
    mismatched = []
    for prompt in PROMPTS:
        ptoks = ref.tokenize(prompt.encode(), add_bos=True, special=True)
        assert llm.tokenize(prompt.encode(), add_bos=True, special=True) == ptoks
        ref_cont = _greedy_ref(ref, ptoks, N_GEN)
        ours_cont = _greedy_ours(llm, ptoks, N_GEN)
        if ours_cont != ref_cont:
            mismatched.append(prompt)
        # Teacher-forced over the reference sequence: top-1 of every position.
        seq = ptoks + ref_cont
        ref.reset()
        ref.eval(seq)
        ref_top = np.argmax(np.asarray(ref.scores[: len(seq)]), axis=1)
        llm.reset()
        our_top = np.argmax(llm.eval(seq, logits_all=True), axis=1)
        agree += int((ref_top == our_top).sum())
        total += len(seq)
    llm.close()
    return agree, total, mismatched


def test_parity_smollm2(smol_path):
    agree, total, mismatched = _check_parity(smol_path)
    assert total >= 500
    assert agree / total >= 0.995, f"top-1 agreement {agree}/{total}"
    assert not mismatched, f"greedy continuations differ for {mismatched}"


@pytest.mark.parametrize("name", ["mha", "gqa_untied", "deep_rope_linear"])
def test_parity_synthetic(synth_paths, name):
    agree, total, mismatched = _check_parity(synth_paths[name])
    assert total >= 500
    assert agree / total >= 0.995, f"top-1 agreement {agree}/{total}"
    assert not mismatched, f"greedy continuations differ for {mismatched}"


def test_one_ggml_per_process(smol_path):
    import llama_cpp  # noqa: F401
    from pyriver import Llama
    with Llama(smol_path, n_ctx=64, verbose=False) as llm:
        llm.eval(llm.tokenize(b"Hello"))
    libs = {line.split()[-1] for line in open("/proc/self/maps") if "libggml-base.so" in line or "libggml.so" in line}
    assert len([p for p in libs if "libggml-base" in p]) == 1, libs
    assert len([p for p in libs if "libggml.so" in p]) == 1, libs
