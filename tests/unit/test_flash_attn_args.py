"""-fa/--flash-attn of pyriver serve, run and chat: llama.cpp's flag and default (llama-server's and
llama-cli's auto: on, unless batch invariance, which is built on the other attention).
tests/runtime/test_server_flash_attn.py holds what it changes in a running server."""
from __future__ import annotations

import pytest

from pyriver.server import parser, settings


def _fa(*argv):
    return settings(parser().parse_args(["m.gguf", *argv]))["llama_kwargs"]["flash_attn"]


def test_auto_is_the_default_and_on_as_llama_server_s():
    assert _fa() is True
    assert _fa("-fa", "auto") is True


def test_on_and_off_are_taken_as_said():
    assert _fa("-fa", "off") is False
    assert _fa("--flash-attn", "on") is True
    assert _fa("-fa") is True   # llama-server's older bare flag


def test_batch_invariance_turns_auto_off_and_refuses_on():
    assert _fa("--batch-invariant") is False
    assert _fa("--batch-invariant", "-fa", "off") is False
    with pytest.raises(ValueError, match="flash attention off"):
        _fa("--batch-invariant", "-fa", "on")


def test_a_draft_model_gets_the_server_s_setting(monkeypatch):
    from pyriver.server import drafting
    seen = {}

    class FakeLlama:
        def __init__(self, *a, **kw):
            seen.update(kw)
            raise RuntimeError("stop here")

    monkeypatch.setattr("pyriver.api.llama.Llama", FakeLlama)
    with pytest.raises(RuntimeError, match="stop here"):
        drafting.DraftModel({"model": "d.gguf", "p_min": 0.0, "n_gpu_layers": 0, "n_max": 4, "n_min": 0, "synth_rates": None},
                                   type("L", (), {"n_ctx": lambda self: 64})(), 1, 2, {"flash_attn": True})
    assert seen["flash_attn"] is True


def _reaching_llama(monkeypatch, module: str, argv):
    """The flash_attn that `pyriver run`/`chat` hands Llama (the Llama stops there)."""
    from pyriver.cli import main
    seen = {}

    def fake(*a, **kw):
        seen.update(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr(module + ".Llama", fake)
    assert main(argv) == 1 and "flash_attn" in seen
    return seen["flash_attn"]


@pytest.mark.parametrize("cmd, module", [(["run", "hi"], "pyriver.api.llama"), (["chat", "m.gguf"], "pyriver.chat.app")])
def test_run_and_chat_default_to_llama_cli_s_auto(monkeypatch, cmd, module):
    assert _reaching_llama(monkeypatch, module, cmd) is True
    assert _reaching_llama(monkeypatch, module, cmd + ["-fa", "off"]) is False
    assert _reaching_llama(monkeypatch, module, cmd + ["--flash-attn", "on"]) is True


def test_chat_s_batch_invariance_turns_auto_off_and_refuses_on(monkeypatch, capsys):
    from pyriver.cli import main
    assert _reaching_llama(monkeypatch, "pyriver.chat.app", ["chat", "m.gguf", "--batch-invariant"]) is False
    assert main(["chat", "m.gguf", "--batch-invariant", "-fa", "on"]) == 1
    assert "needs flash attention off" in capsys.readouterr().err
