"""LoRA adapters on pyriver.Llama (lora_path, lora_scale as llama-cpp-python's; lora_adapters, pyriver's
list): the adapter tests/conftest.py writes for SmolLM2 (pyriver_dev.synth_lora) changes the logits
measurably, and pyriver's logits with it equal llama-cpp-python's bit for bit on the same files, at
scale 1 and 0.5. A model with adapters runs on the llama.cpp engine; the native engine, River and
bad adapters are clear errors."""
from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from pyriver import Llama

PROMPT = b"The capital of France is"
KW = dict(n_ctx=128, n_threads=2, verbose=False, logits_all=True)


def _logits(cls, path, **kw):
    m = cls(path, **KW, **kw)
    try:
        toks = m.tokenize(PROMPT)
        m.eval(toks)
        return np.array(m.scores[:len(toks)])
    finally:
        m.close()


@pytest.fixture(scope="module")
def plain(smol_path):
    return _logits(llama_cpp.Llama, smol_path)


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_logits_equal_llama_cpp_with_the_same_adapter(smol_path, smol_lora_path, plain, scale):
    want = _logits(llama_cpp.Llama, smol_path, lora_path=smol_lora_path, lora_scale=scale)
    got = _logits(Llama, smol_path, lora_path=smol_lora_path, lora_scale=scale)
    assert np.array_equal(got, want)
    assert np.abs(want - plain).max() > 1.0   # the adapter changes the logits measurably
    if scale == 0.5:   # and the scale is applied (not 1)
        assert not np.array_equal(got, _logits(llama_cpp.Llama, smol_path, lora_path=smol_lora_path))


def test_lora_adapters_list_and_what_runs(smol_path, smol_lora_path, tmp_path, capfd):
    """pyriver's lora_adapters: several adapters at their scales, one at 0 left out (llama.cpp's rule),
    so the list equals llama_cpp's one adapter; the engine is llama.cpp's, and verbose says why."""
    from pyriver_dev.synth_lora import write_lora
    other = write_lora(tmp_path / "other.gguf", smol_path, seed=1)
    want = _logits(llama_cpp.Llama, smol_path, lora_path=smol_lora_path, lora_scale=0.5)
    assert np.array_equal(_logits(Llama, smol_path, lora_adapters=[(smol_lora_path, 0.5), (other, 0.0)]), want)
    assert not np.array_equal(_logits(Llama, smol_path, lora_adapters=[(smol_lora_path, 0.5), (other, 0.5)]), want)
    with Llama(smol_path, n_ctx=64, lora_path=smol_lora_path, verbose=True) as m:
        assert m.engine == "llama.cpp" and m.lora_path == smol_lora_path and m._lora_adapter is not None
        assert [(a.path, a.scale) for a in m.lora_adapters] == [(smol_lora_path, 1.0)]
    assert "engine llama.cpp (LoRA adapters run on llama.cpp's graphs" in capfd.readouterr().err


@pytest.mark.parametrize("kw, err, match", [
    ({"engine": "native"}, ValueError, "pyriver's own graphs have no LoRA"),
    ({"river": "q4_0"}, ValueError, "LoRA adapters need llama.cpp's graphs"),
    ({"lora_scale": float("nan")}, ValueError, "finite number"),
    ({"lora_adapters": [("x.gguf", 1.0)]}, ValueError, "not both"),
])
def test_what_cannot_run_is_a_clear_error(smol_path, smol_lora_path, kw, err, match):
    with pytest.raises(err, match=match):
        Llama(smol_path, n_ctx=64, verbose=False, lora_path=smol_lora_path, **kw)


def test_bad_adapter_files_are_clear_errors(smol_path, gemma_path, tmp_path):
    from pyriver.errors import ModelLoadError
    from pyriver_dev.synth_lora import write_lora
    with pytest.raises(FileNotFoundError, match="LoRA adapter not found"):
        Llama(smol_path, n_ctx=64, verbose=False, lora_path=str(tmp_path / "none.gguf"))
    with pytest.raises(ModelLoadError, match="could not load the LoRA adapter"):   # a model, not an adapter
        Llama(smol_path, n_ctx=64, verbose=False, lora_path=smol_path)
    other = write_lora(tmp_path / "gemma-lora.gguf", gemma_path, rank=2)   # another architecture
    with pytest.raises(ModelLoadError, match="could not load the LoRA adapter"):
        Llama(smol_path, n_ctx=64, verbose=False, lora_path=other)
