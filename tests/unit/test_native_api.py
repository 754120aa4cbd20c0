"""The C API's contract without a model: buffer-filling functions report the size they need, and
every failing call leaves a message."""
from __future__ import annotations

import re

import pytest

from pyriver.engine.binding import check, ffi, last_error, lib, read_text


def test_text_out_reports_the_size_it_needs():
    needed = ffi.new("size_t *")
    check(lib.pr_devices(ffi.NULL, 0, needed))
    text = read_text(lib.pr_devices)
    assert needed[0] == len(text.encode()) + 1 and "CPU" in text
    small = ffi.new("char[]", needed[0] - 1)
    with pytest.raises(ValueError, match=f"too small for {needed[0]}"):
        check(lib.pr_devices(small, len(small), needed))
    assert needed[0] == len(text.encode()) + 1   # still told, after the refusal


def test_failing_calls_leave_a_message():
    out = ffi.new("pr_model **")
    assert lib.pr_model_load(b"/nonexistent/m.gguf", ffi.NULL, out) != 0 and "m.gguf" in last_error()
    assert lib.pr_logits(ffi.NULL, 0) == ffi.NULL and last_error() == "ctx is NULL"
    assert lib.pr_n_ctx(ffi.NULL) == 0 and last_error() == "ctx is NULL"
    assert lib.pr_graph_input_reads(ffi.NULL) == 0 and last_error() == "ctx is NULL"
    assert lib.pr_context_set_wide_prompt_rows(ffi.NULL, 16) != 0 and last_error() == "ctx is NULL"
    assert lib.pr_context_set_verify_tile_rows(ffi.NULL, 8) != 0 and last_error() == "ctx is NULL"
    for status in (lib.pr_kv_clear(ffi.NULL), lib.pr_river_report(ffi.NULL, ffi.NULL, 0, ffi.NULL),
                   lib.pr_model_meta(ffi.NULL, b"k", ffi.NULL, 0, ffi.NULL), lib.pr_kv_fill(ffi.NULL, 0.0),
                   lib.pr_context_set_exit(ffi.NULL, ffi.NULL)):
        assert status != 0 and last_error()


def test_debug_knobs_are_not_in_the_product_header():
    from pyriver.engine.binding import HEADERS, _cdef, _HERE
    product = _cdef(_HERE.parent / "native" / HEADERS[0])
    for knob in ("pr_kv_fill", "pr_graph_runs", "force_exit_layer", "check_chunk", "host_checks", "device_carry",
                 "predict", "pr_place_layers", "pr_graph_input_reads"):
        assert not re.search(rf"\b{knob}\b", product), knob   # (exit_rule's "predicted" is the product's)
        assert hasattr(lib, knob) or knob in _cdef(_HERE.parent / "native" / HEADERS[1])


def test_gguf_meta_and_tensor_names_read_a_file_without_loading_it(smol_path):
    from pyriver import ModelLoadError
    from pyriver.engine.binding import gguf_meta
    assert gguf_meta(smol_path, "general.architecture") == "llama"
    assert gguf_meta(smol_path, "llama.embedding_length") == "576"
    with pytest.raises(ValueError, match="no metadata value 'llama.nope'"):
        gguf_meta(smol_path, "llama.nope")
    with pytest.raises(ModelLoadError, match="m.gguf"):
        gguf_meta("/nonexistent/m.gguf", "general.architecture")
    assert lib.pr_gguf_meta(smol_path.encode(), ffi.NULL, ffi.NULL, 0, ffi.NULL) != 0 and last_error() == "key is NULL"
    from pyriver.engine.binding import gguf_tensor_names
    names = gguf_tensor_names(smol_path)
    assert names[0] == "token_embd.weight" and "output_norm.weight" in names and "blk.29.ffn_down.weight" in names
    assert len(names) == len(set(names)) == 2 + 30 * 9   # SmolLM2: embeddings, final norm, 30 blocks of 9
    with pytest.raises(ModelLoadError, match="m.gguf"):
        gguf_tensor_names("/nonexistent/m.gguf")
