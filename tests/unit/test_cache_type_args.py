"""-ctk/--cache-type-k and -ctv/--cache-type-v of pyriver serve, run, chat and bench: llama.cpp's
flags, names and errors (an unknown type: argparse's error with llama.cpp's "Unsupported cache type";
a quantized V without flash attention: llama.cpp's message, before any model loads).
tests/runtime/test_kv_types.py holds what the types change."""
from __future__ import annotations

import pytest

from pyriver.engine import kv_types
from pyriver.server import parser, settings


def _kw(*argv):
    kw = settings(parser().parse_args(["m.gguf", *argv]))["llama_kwargs"]
    return kw["type_k"], kw["type_v"]


def test_serve_defaults_to_f16_and_takes_llama_cpp_s_names():
    assert _kw() == (1, 1)
    assert _kw("-ctk", "q8_0", "-ctv", "q8_0") == (8, 8)
    assert _kw("--cache-type-k", "q4_0", "--cache-type-v", "iq4_nl") == (2, 20)
    assert _kw("-ctk", "bf16", "-ctv", "q5_1", "-fa", "on") == (30, 7)


def test_an_unknown_type_is_an_argparse_error_with_llama_cpp_s_words(capsys):
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["m.gguf", "-ctk", "q4_k"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Unsupported cache type: q4_k" in err and "q8_0" in err


def test_a_quantized_v_needs_flash_attention():
    with pytest.raises(ValueError, match="quantized V cache requires flash_attn to be enabled"):
        _kw("-ctv", "q8_0", "-fa", "off")
    with pytest.raises(ValueError, match="quantized V cache requires flash_attn"):
        _kw("-ctv", "q4_0", "--batch-invariant")   # which turns auto off
    assert _kw("-ctk", "q8_0", "-fa", "off") == (8, 1)   # a quantized K is llama.cpp's without it too


def _reaching_llama(monkeypatch, module: str, argv):
    from pyriver.cli import main
    seen = {}

    def fake(*a, **kw):
        seen.update(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr(module + ".Llama", fake)
    assert main(argv) == 1
    return seen


@pytest.mark.parametrize("cmd, module", [(["run", "hi"], "pyriver.api.llama"), (["chat", "m.gguf"], "pyriver.chat.app")])
def test_run_and_chat_hand_the_types_to_llama(monkeypatch, capsys, cmd, module):
    seen = _reaching_llama(monkeypatch, module, cmd + ["-ctk", "q8_0", "-ctv", "q4_1"])
    assert (seen["type_k"], seen["type_v"]) == (8, 3)
    seen = _reaching_llama(monkeypatch, module, cmd)
    assert (seen["type_k"], seen["type_v"]) == (1, 1)
    assert _reaching_llama(monkeypatch, module, cmd + ["-ctv", "q8_0", "-fa", "off"]) == {}   # refused first
    assert "quantized V cache requires flash_attn" in capsys.readouterr().err


def test_bench_takes_the_flags():
    from pyriver.tools.bench import parser as bench_parser
    a = bench_parser().parse_args(["m.gguf", "-ctk", "q4_0", "-ctv", "q4_0"])
    assert (a.cache_type_k, a.cache_type_v) == ("q4_0", "q4_0")


def test_the_table_is_llama_cpp_s():
    """Names, ids and block bytes of llama.cpp's cache types (common/arg.cpp's kv_cache_types, ggml's
    type traits), checked against ggml through llama_cpp where it is installed."""
    llama_cpp = pytest.importorskip("llama_cpp")
    assert list(kv_types.TYPES) == ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
    named = 0
    for name, (tid, _, _) in kv_types.TYPES.items():
        if hasattr(llama_cpp, f"GGML_TYPE_{name.upper()}"):   # llama_cpp 0.3.36 names all but BF16 (30 in ggml.h)
            assert getattr(llama_cpp, f"GGML_TYPE_{name.upper()}") == tid
            named += 1
    assert named >= 8
    assert kv_types.row_bytes(8, 64) == 68 and kv_types.row_bytes(2, 64) == 36 and kv_types.row_bytes(1, 64) == 128
    with pytest.raises(ValueError, match="block size 32 does not divide n_embd_head_k=48"):
        kv_types.check("q8_0", "f16", True, 48)
    assert kv_types.check("f16", "f16", False, 48) == (1, 1)


def test_the_draft_model_takes_its_own_types(monkeypatch, tmp_path):
    """-ctkd/--cache-type-k-draft and -ctvd/--cache-type-v-draft (llama-server's): the draft model's
    cache types, f16 by default whatever -ctk/-ctv say; checked against flash attention as -ctv is."""
    def spec(*argv):
        return settings(parser().parse_args(["m.gguf", "--model-draft", "d.gguf", *argv]))["spec"]
    assert (spec()["type_k"], spec()["type_v"]) == (1, 1)
    assert (spec("-ctk", "q8_0", "-ctv", "q8_0")["type_k"], spec("-ctv", "q8_0")["type_v"]) == (1, 1)
    s = spec("-ctkd", "q8_0", "-ctvd", "q4_0")
    assert (s["type_k"], s["type_v"]) == (8, 2)
    s = spec("--cache-type-k-draft", "q4_1", "--cache-type-v-draft", "q5_0")
    assert (s["type_k"], s["type_v"]) == (3, 6)
    assert _kw("-ctkd", "q8_0") == (1, 1)   # the model's own cache keeps -ctk's
    with pytest.raises(ValueError, match="quantized V cache requires flash_attn"):
        spec("-ctvd", "q8_0", "-fa", "off")
    with pytest.raises(SystemExit):
        spec("-ctkd", "q4_k")
    # the draft Llama gets them (server/drafting.py's DraftModel)
    from pyriver.server import drafting
    seen = {}

    def fake(*a, **kw):
        seen.update(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr("pyriver.api.llama.Llama", fake)

    class Target:
        def n_ctx(self):
            return 256
    with pytest.raises(RuntimeError, match="stop here"):
        drafting.make(s, Target(), 1, 2, {"type_k": 8, "type_v": 8, "flash_attn": True})
    assert (seen["type_k"], seen["type_v"], seen["flash_attn"]) == (3, 6, True)
