"""RoPE scaling as llama-cpp-python takes it (rope_scaling_type, rope_freq_base/scale, yarn_*), on
both engines: the same logits and greedy text as llama_cpp.Llama given the same arguments, on
SmolLM2 and on a synthetic file carrying YaRN metadata; bad values are refused by name."""
from __future__ import annotations

import math

import llama_cpp
import numpy as np
import pytest

from pyriver import Llama

LINEAR = dict(rope_scaling_type=llama_cpp.LLAMA_ROPE_SCALING_TYPE_LINEAR, rope_freq_scale=0.5)
YARN = dict(rope_scaling_type=llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN, rope_freq_scale=0.25, yarn_orig_ctx=512,
            yarn_beta_fast=16.0, yarn_beta_slow=2.0)
PROMPT = "The capital of France is Paris. The capital of Germany is"


def _run(cls, path, kw, **extra):
    """Logits of the prompt's last token and a greedy continuation."""
    llm = cls(path, n_ctx=256, n_threads=2, verbose=False, logits_all=True, **kw, **extra)
    try:
        toks = llm.tokenize(PROMPT.encode())
        llm.eval(toks)
        logits = np.array(llm.scores[len(toks) - 1])
        llm.reset()
        text = llm(PROMPT, max_tokens=24, temperature=0.0)["choices"][0]["text"]
        return logits, text
    finally:
        llm.close()


@pytest.mark.parametrize("engine", ["native", "llama.cpp"])
@pytest.mark.parametrize("kw", [LINEAR, YARN], ids=["linear", "yarn"])
def test_rope_scaling_gives_llama_cpp_s_logits_and_text(smol_path, engine, kw):
    ref_logits, ref_text = _run(llama_cpp.Llama, smol_path, kw)
    logits, text = _run(Llama, smol_path, kw, engine=engine)
    plain_logits, _ = _run(Llama, smol_path, {}, engine=engine)
    assert text == ref_text
    assert np.array_equal(logits, ref_logits)
    assert not np.array_equal(plain_logits, ref_logits)   # the setting took


# The file's YaRN (factor 4 from 64 positions), then the context's: no scaling, other betas and
# extrapolation mix, another original context, a linear scale that replaces YaRN's.
@pytest.mark.parametrize("kw", [
    {},
    dict(rope_scaling_type=llama_cpp.LLAMA_ROPE_SCALING_TYPE_NONE),
    dict(yarn_ext_factor=0.5, yarn_beta_fast=8.0, yarn_beta_slow=2.0, yarn_orig_ctx=32),
    dict(rope_scaling_type=llama_cpp.LLAMA_ROPE_SCALING_TYPE_LINEAR, rope_freq_scale=0.5, rope_freq_base=20000.0),
    dict(yarn_attn_factor=0.8, yarn_ext_factor=0.0),
], ids=["file", "none", "yarn_params", "linear", "attn_factor"])
@pytest.mark.parametrize("engine", ["native", "llama.cpp"])
def test_yarn_metadata_and_overrides_match_llama_cpp(synth_paths, engine, kw):
    path = synth_paths["rope_yarn"]
    ref_logits, ref_text = _run(llama_cpp.Llama, path, kw)
    logits, text = _run(Llama, path, kw, engine=engine)
    assert text == ref_text
    assert np.array_equal(logits, ref_logits)
    if kw:
        file_logits, _ = _run(llama_cpp.Llama, path, {})
        assert not np.array_equal(file_logits, ref_logits)   # each setting changes the result


@pytest.mark.parametrize("kw, match", [
    (dict(rope_scaling_type=7), "rope_scaling_type must be"),
    (dict(rope_scaling_type="yarn"), "rope_scaling_type must be"),
    (dict(yarn_ext_factor=math.nan), "yarn_ext_factor must be finite"),
    (dict(yarn_beta_fast=math.inf), "yarn_beta_fast must be finite"),
    (dict(yarn_orig_ctx=-1), "yarn_orig_ctx must be"),
    (dict(rope_freq_scale=-0.5), "rope_freq_scale must be"),
])
@pytest.mark.parametrize("engine", ["native", "llama.cpp"])
def test_bad_rope_values_are_refused_by_name(smol_path, engine, kw, match):
    with pytest.raises(ValueError, match=match):
        Llama(smol_path, n_ctx=64, verbose=False, engine=engine, **kw)


def test_native_library_refuses_bad_rope_values_itself(smol_path):
    """The C API checks what the Python side checks (another caller of pr_model_load)."""
    from pyriver.engine.binding import check, ffi, lib
    for field, value, match in [("rope_scaling_type", 9, "rope_scaling_type"), ("yarn_beta_slow", math.nan, "yarn_beta_slow"),
                                ("yarn_orig_ctx", -3, "yarn_orig_ctx")]:
        mp = ffi.new("pr_model_params *", lib.pr_model_default_params())
        setattr(mp, field, value)
        out = ffi.new("pr_model **")
        with pytest.raises(ValueError, match=match):
            check(lib.pr_model_load(smol_path.encode(), mp, out))
