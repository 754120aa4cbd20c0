"""River invariants: each must hold exactly, not approximately."""
from __future__ import annotations

import shutil

import gguf
import numpy as np
import pytest

from helpers import RIVER_PROMPT as PROMPT
from helpers import generate_logits as _generate_logits
from helpers import check_forced_exits, model_path, on_gpu
from pyriver import Llama, ModelLoadError
from pyriver.engine import debug
from pyriver.engine import river as R
# The River invariants hold for every architecture: SmolLM2 (llama), the synthetic qwen2, qwen3,
# gemma3 (sliding window 16, shorter than PROMPT + 24 tokens), Mistral-style llama files and llama
# files with biases, and the real Gemma 3 270M.
NEW_ARCHS = ["mistral3", "gemma2", "smollm3", "olmo2", "phi3", "qwen3moe"]   # issue 16
ARCH_MODELS = ["smol", "qwen2", "qwen3", "gemma3", "mistral_swa", "llama_biases", "gemma3_270m"] + NEW_ARCHS


def _exit_blocks(L):
    """Forced exit blocks spread over the depth (L - 1: no exit), changing from token to token."""
    out = []
    for b in [min(3, L - 1), L // 3, (2 * L) // 3, L - 2, L - 1, 1]:
        if b not in out:
            out.append(b)
    return out


@pytest.mark.parametrize("model", ARCH_MODELS)
@pytest.mark.gpu
def test_never_exit_is_identical_to_no_river(request, model, gpu_layers):
    path = model_path(request, model)
    with Llama(path, n_ctx=256, n_threads=2, verbose=False, n_gpu_layers=gpu_layers) as full:
        ref, _ = _generate_logits(full)
        L = full.info["n_layer"]
        on_gpu(full, gpu_layers)
    # Gemma 3 270M: q3_K (rows of 640 fall back to a 32-block type) is cheaper than every backbone
    # tensor; q4_0 is not cheaper than its Q4_K attn_output.
    river = "q3_K" if model == "gemma3_270m" else "q4_0"
    with Llama(path, n_ctx=256, n_threads=2, verbose=False, n_gpu_layers=gpu_layers, river=river, exit_threshold=1.5) as llm:
        got, exits = _generate_logits(llm)
    assert np.array_equal(ref, got)
    assert set(exits) == {L - 1}


@pytest.mark.parametrize("model", ["smol", "gqa_untied", "qwen2", "qwen3", "gemma3", "mistral_swa", "llama_biases"] + NEW_ARCHS)
@pytest.mark.gpu
def test_same_type_river_with_any_exit_pattern_is_identical(request, synth_paths, model, gpu_layers):
    path = model_path(request, model)
    with Llama(path, n_ctx=256, n_threads=2, verbose=False, n_gpu_layers=gpu_layers) as base:
        ref, _ = _generate_logits(base)
        backbone_type = base.meta("general.file_type")
        L = base.info["n_layer"]
        on_gpu(base, gpu_layers)
    river_type = {"3": "q4_1", "0": "f32", "1": "f16", "7": "q8_0"}[backbone_type]
    with Llama(path, n_ctx=256, n_threads=2, verbose=False, n_gpu_layers=gpu_layers, river=river_type, river_force=True) as llm:
        # Forced exits at several blocks, changing from token to token.
        blocks = list(dict.fromkeys([0, L // 2, L - 2, 1, L - 1, L // 3]))
        check_forced_exits(llm, ref, blocks)
        # The similarity rule with a low threshold: speculative segments, exits at many blocks.
        llm.set_exit(0.0, 1)
        got, exits = _generate_logits(llm)
        assert np.array_equal(ref, got)
        assert set(exits) == {1}
        llm.set_exit(0.97, 2)
        got, exits = _generate_logits(llm)
        assert np.array_equal(ref, got)


@pytest.mark.gpu
def test_exit_decision_follows_the_similarity_rule(smol_path, gpu_layers):
    """With tau between the similarities of different blocks, the exit block is the first
    checked block whose cos(in, out) reaches tau, whatever block the graphs guessed."""
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, n_gpu_layers=gpu_layers, river="q4_0", exit_threshold=0.975,
               min_exit_layer=4) as llm:
        _, exits = _generate_logits(llm, n=32)
        assert all(4 <= e <= llm.info["n_layer"] - 1 for e in exits)
        assert len(set(exits)) > 1          # the rule, not a constant
        runs_tau = exits
        # The same tokens with one graph per block (chunk 1, no guess beyond): same exits.
        llm.set_exit(0.975, 4, check_chunk=1)
        _, exits1 = _generate_logits(llm, n=32)
        assert exits1[:4] == runs_tau[:4]


@pytest.mark.gpu
def test_host_and_graph_similarities_agree(smol_path, gpu_layers):
    """Single-token checks computed on the host from hidden outputs decide as the in-graph ones."""
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, n_gpu_layers=gpu_layers, river="q4_0", exit_threshold=0.975,
               min_exit_layer=4) as llm:
        host_logits, host_exits = _generate_logits(llm, n=40)
        llm.set_exit(0.975, 4, host_checks=False)
        graph_logits, graph_exits = _generate_logits(llm, n=40)
    assert host_exits == graph_exits
    assert len(set(host_exits)) > 3
    np.testing.assert_allclose(host_logits, graph_logits, rtol=0, atol=1e-4)


@pytest.mark.parametrize("model", ARCH_MODELS)
@pytest.mark.gpu
def test_poisoned_cache_is_never_read(request, model, gpu_layers):
    """Every cache row a token attends to must have been written. With forced exits at several
    blocks: a cache filled with NaN gives finite logits on the CPU (its flash attention skips masked rows, so only
    rows 0..pos are read; on sliding-window layers only the window), and a cache filled with a
    large finite value gives the clean cache's logits bit for bit. Control: a hole (a row never
    written) changes them. (NaN alone is no control on every model: a Q8_K-quantized activation
    row that is all NaN becomes zeros in ggml, so Gemma 3 270M's Q4_K attn_output hides it.)"""
    path = model_path(request, model)
    river = "q3_K" if model == "gemma3_270m" else "q4_0"
    with Llama(path, n_ctx=128, n_threads=2, verbose=False, n_gpu_layers=gpu_layers, flash_attn=True, river=river,
               exit_threshold=2.0) as llm:
        blocks = _exit_blocks(llm.info["n_layer"])
        schedule = lambda m, i: m.set_exit(2.0, 1, blocks[i % len(blocks)])  # noqa: E731
        clean, exits = _generate_logits(llm, n=30, schedule=schedule)
        assert set(exits) == set(blocks)
        # NaN only on the CPU: ggml-cuda's flash attention reads the masked rows of a tile and
        # weighs them by 0, and NaN * 0 is NaN (seen on an H200); finite garbage must still give
        # the clean logits bit for bit there.
        for value in (1000.0, float("nan")) if gpu_layers == 0 else (1000.0,):
            debug.kv_fill(llm, value)   # _generate_logits rewinds; the fill stays
            got, exits = _generate_logits(llm, n=30, schedule=schedule)
            assert set(exits) == set(blocks)
            assert np.isfinite(got).all()
            if value == 1000.0:
                assert np.array_equal(clean, got)
        # Control: the same garbage in rows that are read (written, then overwritten) shows.
        prompt = llm.tokenize(PROMPT)
        llm.reset()
        llm.decode_logits(prompt)
        ref = llm.decode_logits([1])
        llm.reset()
        llm.decode_logits(prompt)
        debug.kv_fill(llm, 1000.0)
        assert not np.array_equal(ref, llm.decode_logits([1]))


@pytest.mark.gpu
def test_prefill_exit_option(smol_path, gpu_layers):
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, n_gpu_layers=gpu_layers, river="q4_0", exit_threshold=0.9,
               min_exit_layer=3, prefill_exit=True) as llm:
        llm.decode_logits(llm.tokenize(PROMPT))
        assert len(set(llm.last_exits)) == 1 and llm.last_exits[0] < llm.info["n_layer"] - 1


def test_river_stats_on_completion(smol_path):
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975,
               min_exit_layer=4) as llm:
        r = llm("Rivers are", max_tokens=16, temperature=0)
        st = r["river"]
        assert st["tokens"] == r["usage"]["completion_tokens"] - 1 or st["tokens"] == r["usage"]["completion_tokens"]
        assert sum(st["histogram"].values()) == st["tokens"]
        L = llm.info["n_layer"]
        expect = sum(L - 1 - e for e in st["exit_layers"]) / (len(st["exit_layers"]) * L)
        assert st["river_work_share"] == pytest.approx(expect)


def test_river_not_cheaper_is_refused(smol_path, tmp_path):
    p = tmp_path / "m.gguf"
    shutil.copy(smol_path, p)
    with pytest.raises(ValueError, match="not cheaper"):
        Llama(str(p), n_ctx=64, verbose=False, river="q8_0")
    assert not (tmp_path / "m.river-q8_0.gguf").exists()
    with Llama(str(p), n_ctx=64, verbose=False, river="q8_0", river_force=True) as llm:
        assert llm("Hi", max_tokens=2, temperature=0)["usage"]["completion_tokens"] >= 1


def test_kquant_river_falls_back_on_576_wide_rows(smol_path, tmp_path):
    p = tmp_path / "m.gguf"
    shutil.copy(smol_path, p)
    with Llama(str(p), n_ctx=64, verbose=False) as llm:
        report = R.build(llm._native_model, str(p), "q4_K", tmp_path / "r.gguf", progress=False)
    lines = report.strip().splitlines()
    # Rows of 576 (every matrix but ffn_down) do not fit 256-element blocks; ffn_down's 1536 do.
    assert len(lines) == 30 * 6
    assert all("does not fit rows of 576, using q4_0" in ln for ln in lines)
    assert not any("ffn_down" in ln for ln in lines)


def test_kquant_river_falls_back_on_gemma_640_wide_rows(gemma_path, tmp_path):
    """Gemma 3 270M: rows of 640 (Q, K, V, gate, up) do not fit 256-element K-quant blocks and fall
    back to the 32-block type of nearest bits per weight (MXFP4 for q3_K); attn_output (1024) and
    ffn_down (2048) take q3_K. q4_0 is refused: not cheaper than the backbone's Q4_K attn_output."""
    with Llama(gemma_path, n_ctx=64, verbose=False) as llm:
        report = R.build(llm._native_model, gemma_path, "q3_K", tmp_path / "r.gguf", progress=False)
        with pytest.raises(ValueError, match="not cheaper than the backbone's q4_K for blk.0.attn_output"):
            R.build(llm._native_model, gemma_path, "q4_0", tmp_path / "r4.gguf", progress=False)
    lines = report.strip().splitlines()
    assert len(lines) == 18 * 5
    assert all("does not fit rows of 640, using mxfp4" in ln for ln in lines)
    types = {t.name.split(".")[2]: t.tensor_type.name for t in gguf.GGUFReader(str(tmp_path / "r.gguf")).tensors}
    assert types == {"attn_q": "MXFP4", "attn_k": "MXFP4", "attn_v": "MXFP4", "ffn_gate": "MXFP4",
                     "ffn_up": "MXFP4", "attn_output": "Q3_K", "ffn_down": "Q3_K"}


def _rewrite_sidecar(src, dst, mutate):
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), arch="pyriver-river")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        val = f.contents()
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(f.name, val)
        else:
            w.add_key_value(f.name, val, vtype)
    for t in r.tensors:
        data, shape, ttype = mutate(t)
        if data is None:
            continue
        w.add_tensor(t.name, data, raw_shape=shape, raw_dtype=ttype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_bad_sidecars_are_rejected(smol_path, synth_paths, tmp_path):
    p = tmp_path / "m.gguf"
    shutil.copy(smol_path, p)
    good = tmp_path / "good.gguf"
    with Llama(str(p), n_ctx=64, verbose=False) as llm:
        R.build(llm._native_model, str(p), "q4_0", good, progress=False)
    # A sidecar of another model.
    other = tmp_path / "other.gguf"
    with Llama(synth_paths["mha"], n_ctx=64, verbose=False) as syn:
        R.build(syn._native_model, synth_paths["mha"], "q4_0", other, progress=False)
    with pytest.raises(ModelLoadError, match="belongs to another model"):
        Llama(str(p), n_ctx=64, verbose=False, river=str(other))
    # Truncated.
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match="truncated"):
        Llama(str(p), n_ctx=64, verbose=False, river=str(trunc))
    # A tensor of the wrong shape (same metadata, so it claims the right backbone).
    bad = tmp_path / "bad.gguf"

    def keep_or_break(t):
        if t.name == "blk.3.ffn_up.weight":
            return np.zeros((768, 576 // 32 * 18), dtype=np.uint8), (768, 576 // 32 * 18), t.tensor_type
        return t.data, tuple(t.data.shape), t.tensor_type
    _rewrite_sidecar(good, bad, keep_or_break)
    with pytest.raises(ModelLoadError, match="blk.3.ffn_up.weight' has shape"):
        Llama(str(p), n_ctx=64, verbose=False, river=str(bad))
    # The good one still works, and the process with it.
    with Llama(str(p), n_ctx=64, verbose=False, river=str(good), exit_threshold=0.97) as llm:
        assert llm("Hi", max_tokens=4, temperature=0)["usage"]["completion_tokens"] >= 1
