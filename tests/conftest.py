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
}


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


@pytest.fixture(scope="session")
def synth_paths(smol_path) -> dict:
    from pyriver import synth
    SYNTH_DIR.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, spec in SYNTH_SPECS.items():
        p = SYNTH_DIR / f"llama_{name}.gguf"
        if not p.exists():
            synth.write_llama(p, tokenizer_from=smol_path, **spec)
        out[name] = str(p)
    return out


@pytest.fixture(scope="session")
def bad_files(synth_paths, tmp_path_factory) -> dict:
    from pyriver import synth
    d = tmp_path_factory.mktemp("bad")
    return {k: str(v) for k, v in synth.write_corrupt_variants(synth_paths["mha"], d).items()}
