"""Who asks for batch_layout (tests/runtime/test_batch_layout.py holds what it computes): the
commands that serve or run a model, unless --no-batch-layout; never Llama by itself (llama-cpp-python's
bits)."""
from __future__ import annotations

import inspect

from pyriver.cli.args import layout_kwargs
from pyriver.cli import parser as cli_parser
from pyriver.api.llama import Llama


def test_serve_asks_for_it_unless_told_not_to():
    from pyriver.server import parser, settings
    assert settings(parser().parse_args(["m.gguf"]))["llama_kwargs"]["batch_layout"] is True
    assert settings(parser().parse_args(["m.gguf", "--no-batch-layout"]))["llama_kwargs"]["batch_layout"] is False
    assert settings(parser().parse_args(["m.gguf"]))["llama_kwargs"]["tiled_verify"] is True
    assert settings(parser().parse_args(["m.gguf", "--no-tiled-verify"]))["llama_kwargs"]["tiled_verify"] is False


def test_run_and_chat_ask_for_it_unless_told_not_to():
    p = cli_parser()
    for cmd in (["run", "hi"], ["chat", "m.gguf"]):
        assert layout_kwargs(p.parse_args(cmd)) == {"batch_layout": True, "tiled_verify": True}
        assert layout_kwargs(p.parse_args(cmd + ["--no-batch-layout"])) == {"batch_layout": False, "tiled_verify": True}
        assert layout_kwargs(p.parse_args(cmd + ["--no-tiled-verify"])) == {"batch_layout": True, "tiled_verify": False}


def test_llama_keeps_llama_cpp_s_one_layout():
    assert inspect.signature(Llama).parameters["batch_layout"].default is False
