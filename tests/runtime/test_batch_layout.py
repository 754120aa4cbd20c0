"""batch_layout (pr_model_params.batch_layout; on by default in `pyriver serve`, run and chat): the
CPU's repacked K-quant matrices are also read in the file's own layout by prompt steps of more than
wide_prompt_rows rows (16 here; by default measured on the machine, pyriver.engine.widerows) and any step
of more than 64, where ggml's tiled kernel is faster than the repacked GEMM. The
referee is llama.cpp itself: such a step has the bits of llama.cpp loaded without its extra buffer
types (use_extra_bufts off, llama-server's --no-repack); a verify step (logits for every row) of 64
rows or fewer, and a prompt of 16, those of llama.cpp as it loads by default."""
from __future__ import annotations

import numpy as np
import pytest

import llama_cpp
import llama_cpp.llama_cpp as llama_low

from helpers import x86_cpu_has
from pyriver import Llama
from pyriver_dev import synth
from pyriver.tools.engine import LlamaCppEngine
from pyriver.tools.quantize import quantize


# ggml's tiled kernel is built for x86 with AVX2 (or AVX-512)
pytestmark = pytest.mark.skipif(not x86_cpu_has("avx2"), reason="ggml's tiled kernel is x86 AVX2/AVX-512 only")


@pytest.fixture(scope="module")
def q4k_path(smol_path, tmp_path_factory):
    """Every matrix Q4_K (pure): each one is repacked by default and each one the tiled kernel takes."""
    d = tmp_path_factory.mktemp("layout")
    f16 = d / "m.f16.gguf"
    synth.write_llama(f16, n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, tied_output=False, seed=11,
                      dtype="f16", tokenizer_from=smol_path)
    return str(quantize(f16, d / "m.q4_k.gguf", "q4_k_m", pure=True))


def _llama_cpp_rows(path, toks, repack: bool, every_row: bool = True) -> np.ndarray:
    """Every row's logits (else the last's) of one llama.cpp step over toks; repack=False loads it as
    --no-repack."""
    default = llama_low.llama_model_default_params

    def no_extra():
        p = default()
        p.use_extra_bufts = False
        return p
    try:
        if not repack:
            llama_low.llama_model_default_params = no_extra
        eng = LlamaCppEngine(path, 128, 2, logits_all=every_row)
    finally:
        llama_low.llama_model_default_params = default
    try:
        return eng.decode_logits(toks, logits_all=every_row)
    finally:
        eng.close()


def _rows(path, toks, batch_layout: bool, every_row: bool = True, wide_prompt_rows: int = 16) -> np.ndarray:
    with Llama(path, n_ctx=128, n_threads=2, n_threads_batch=2, verbose=False, river=None, lossless=False,
               batch_layout=batch_layout, wide_prompt_rows=wide_prompt_rows) as llm:
        assert llm.batch_layout == batch_layout   # every matrix is Q4_K: all get the second layout
        return llm.decode_logits(toks, logits_all=every_row)


def _tokens(n):
    return [1 + (7 * i) % 400 for i in range(n)]


def test_a_wide_step_has_llama_cpp_no_repack_bits(q4k_path):
    toks = _tokens(80)
    plain, repacked = _llama_cpp_rows(q4k_path, toks, False), _llama_cpp_rows(q4k_path, toks, True)
    assert not np.array_equal(plain, repacked)   # the two kernels differ in the last bits here
    assert np.array_equal(_rows(q4k_path, toks, True), plain)
    assert np.array_equal(_rows(q4k_path, toks, False), repacked)


def test_a_step_of_64_rows_keeps_the_repacked_kernel(q4k_path):
    toks = _tokens(64)
    assert np.array_equal(_rows(q4k_path, toks, True), _llama_cpp_rows(q4k_path, toks, True))


@pytest.mark.parametrize("n", [17, 40])
def test_a_prompt_step_of_more_than_16_rows_is_wide(q4k_path, n):
    """A prompt (the last row's logits) reads the file's layout from 17 rows, its head too."""
    toks = _tokens(n)
    plain = _llama_cpp_rows(q4k_path, toks, False, every_row=False)
    assert not np.array_equal(plain, _llama_cpp_rows(q4k_path, toks, True, every_row=False))
    assert np.array_equal(_rows(q4k_path, toks, True, every_row=False), plain)


def test_a_prompt_of_16_rows_keeps_the_repacked_kernel(q4k_path):
    toks = _tokens(16)
    assert np.array_equal(_rows(q4k_path, toks, True, every_row=False), _llama_cpp_rows(q4k_path, toks, True, every_row=False))


def test_a_prompt_reads_the_file_layout_above_the_contexts_threshold(q4k_path):
    """wide_prompt_rows moves the prompt rule: 40 rows read the file's layout above 39, not at 40."""
    toks = _tokens(40)
    plain = _llama_cpp_rows(q4k_path, toks, False, every_row=False)
    repacked = _llama_cpp_rows(q4k_path, toks, True, every_row=False)
    assert np.array_equal(_rows(q4k_path, toks, True, every_row=False, wide_prompt_rows=39), plain)
    assert np.array_equal(_rows(q4k_path, toks, True, every_row=False, wide_prompt_rows=40), repacked)


def test_the_measured_threshold_is_cached_and_reaches_a_batch_context(q4k_path, tmp_cache, monkeypatch):
    """Without wide_prompt_rows the Llama measures it once (pyriver.engine.widerows) and a later Llama reads
    the cache; the server's BatchDecoder context starts from the same context arguments."""
    from pyriver.engine import widerows
    calls = []

    def fake(llm, prompt, sizes=widerows.SIZES, repeats=widerows.REPEATS, tick=None):   # tick: the progress bar
        calls.append(len(prompt))
        return {17: {"wide": [2.0], "one": [1.0]}, 24: {"wide": [1.5], "one": [1.0]},
                32: {"wide": [1.0], "one": [1.5]}}
    monkeypatch.setattr(widerows, "measure", fake)
    kw = dict(n_ctx=128, n_threads=2, n_threads_batch=2, verbose=False, river=None, lossless=False, batch_layout=True)
    with Llama(q4k_path, **kw) as llm:
        assert llm.wide_prompt_rows == 24 and llm.context.args.wide_prompt_rows == 24
    with Llama(q4k_path, **kw) as llm:
        assert llm.wide_prompt_rows == 24 and len(calls) == 1
        toks = _tokens(24)   # at the threshold: the repacked layout, in a batch context too
        from pyriver.api.batch import BatchDecoder
        bd = BatchDecoder(llm, 2)
        try:
            row = bd._ectx.decode_batch(toks, [0] * 24, list(range(24)), [0] * 23 + [1], [1] * 24)
        finally:
            bd.close()
    assert np.array_equal(row, _llama_cpp_rows(q4k_path, toks, True, every_row=False))


def test_only_tiled_types_get_a_second_layout(smol_path):
    """SmolLM2's Q4_1 is neither repacked nor a tiled type: nothing changes, nothing is kept twice."""
    with Llama(smol_path, n_ctx=64, verbose=False, river=None, lossless=False, batch_layout=True) as llm:
        assert llm.info["n_wide"] == 0 and not llm.batch_layout


def test_without_mmap_there_is_one_layout(q4k_path):
    """The second binding is the file's mapping: a copied model keeps one layout."""
    with Llama(q4k_path, n_ctx=64, verbose=False, river=None, lossless=False, batch_layout=True,
               use_mmap=False) as llm:
        assert not llm.batch_layout
