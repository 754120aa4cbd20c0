"""The long-context flags of pyriver serve and run (llama.cpp's --rope-*, --yarn-*, --keep,
--cache-reuse), the context shift's arithmetic (llama-server's, server-context.cpp) and the request
fields n_keep / n_discard / n_cache_reuse checked against llama-server's limits. What they change in
a running model and server: tests/runtime/test_rope_scaling.py, test_server_long_context.py."""
from __future__ import annotations

import pytest

from pyriver.server import context_shift, parser, settings
from pyriver.server.schema import APIError


def _serve(*argv):
    return settings(parser().parse_args(["m.gguf", *argv]))


def test_rope_flags_are_llama_cpp_s():
    kw = _serve()["llama_kwargs"]   # llama-server's defaults: the file's settings everywhere
    assert (kw["rope_scaling_type"], kw["rope_freq_base"], kw["rope_freq_scale"], kw["yarn_orig_ctx"]) == (-1, 0.0, 0.0, 0)
    assert all(kw[k] == -1.0 for k in ("yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow"))
    kw = _serve("--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "2048", "--yarn-beta-fast", "8",
                "--yarn-ext-factor", "0.5", "--rope-freq-base", "20000")["llama_kwargs"]
    assert (kw["rope_scaling_type"], kw["rope_freq_scale"], kw["yarn_orig_ctx"]) == (2, 0.25, 2048)
    assert (kw["yarn_beta_fast"], kw["yarn_ext_factor"], kw["rope_freq_base"]) == (8.0, 0.5, 20000.0)
    assert _serve("--rope-scaling", "none")["llama_kwargs"]["rope_scaling_type"] == 0
    assert _serve("--rope-freq-scale", "0.5")["llama_kwargs"]["rope_freq_scale"] == 0.5
    with pytest.raises(SystemExit):   # argparse: invalid choice, as llama.cpp's "invalid value"
        _serve("--rope-scaling", "longer")
    with pytest.raises(ValueError, match="--rope-scale must be > 0"):
        _serve("--rope-scale", "0")


def test_run_takes_the_rope_flags():
    from pyriver.cli import parser as cli_parser
    a = cli_parser().parse_args(["run", "hi", "--model", "m.gguf", "--rope-scaling", "linear", "--rope-freq-scale", "0.5"])
    from pyriver.cli.args import rope_kwargs
    assert rope_kwargs(a)["rope_scaling_type"] == 1 and rope_kwargs(a)["rope_freq_scale"] == 0.5


def test_keep_and_cache_reuse_flags():
    s = _serve()
    assert (s["n_keep"], s["cache_reuse"]) == (0, 0)
    s = _serve("--keep", "-1", "--cache-reuse", "256")
    assert (s["n_keep"], s["cache_reuse"]) == (-1, 256)
    with pytest.raises(ValueError, match="--keep must be >= -1"):
        _serve("--keep", "-2")
    with pytest.raises(ValueError, match="--cache-reuse >= 0"):
        _serve("--cache-reuse", "-1")


# (n_prompt, n_cached, n_ctx, n_keep, n_discard, add_bos) -> (kept, dropped), by llama-server's rule
@pytest.mark.parametrize("args, want", [
    ((10, 63, 64, 0, 0, True), (1, 31)),       # the BOS, half of the rest
    ((10, 63, 64, 0, 0, False), (0, 31)),
    ((10, 63, 64, 8, 0, True), (9, 27)),       # n_keep on top of the BOS
    ((10, 63, 64, -1, 0, True), (11, 26)),     # -1: the whole prompt (and the BOS once more, as llama-server)
    ((10, 63, 64, 100, 0, True), (60, 1)),     # at most n_ctx - 4 kept, at least one token after them
    ((10, 63, 64, 8, 5, True), (9, 5)),        # n_discard as given
    ((10, 63, 64, 8, 500, True), (9, 53)),     # ... at most all but one of the rest
])
def test_shift_plan_is_llama_server_s(args, want):
    assert context_shift.plan(*args) == want


def test_request_fields_are_checked_as_llama_server_checks_them():
    assert context_shift.check_fields({}) == {"n_keep": None, "n_discard": None, "n_cache_reuse": None}
    assert context_shift.check_fields({"n_keep": -1, "n_discard": 3, "n_cache_reuse": None}) == \
        {"n_keep": -1, "n_discard": 3, "n_cache_reuse": None}
    for body, msg in [({"n_keep": -2}, "Field 'n_keep': Value must be between -1 <= value <= 2147483647, but got -2"),
                      ({"n_discard": -1}, "Field 'n_discard': Value must be between 0 <= value"),
                      ({"n_cache_reuse": -5}, "Field 'n_cache_reuse': Value must be between 0 <= value"),
                      ({"n_keep": "all"}, "'n_keep' must be an integer"),
                      ({"n_keep": True}, "'n_keep' must be an integer")]:
        with pytest.raises(APIError) as e:
            context_shift.check_fields(body)
        assert e.value.status == 400 and msg in str(e.value), (body, str(e.value))


def test_chat_takes_serve_s_rope_flags(monkeypatch):
    """pyriver chat: the same --rope-*/--yarn-* definitions (cli/args.py's add_rope_args), handed to Llama."""
    from pyriver.cli import main, parser as cli_parser
    a = cli_parser().parse_args(["chat", "m.gguf", "--rope-scaling", "yarn", "--rope-freq-base", "20000",
                                 "--rope-freq-scale", "0.25", "--yarn-orig-ctx", "2048", "--yarn-beta-fast", "8",
                                 "--yarn-ext-factor", "0.5", "--yarn-attn-factor", "1.5", "--yarn-beta-slow", "2"])
    from pyriver.cli.args import rope_kwargs
    want = rope_kwargs(a)
    assert want["rope_scaling_type"] == 2 and want["yarn_attn_factor"] == 1.5
    served = _serve("--rope-scaling", "yarn", "--rope-freq-base", "20000", "--rope-freq-scale", "0.25", "--yarn-orig-ctx",
                    "2048", "--yarn-beta-fast", "8", "--yarn-ext-factor", "0.5", "--yarn-attn-factor", "1.5",
                    "--yarn-beta-slow", "2")["llama_kwargs"]
    assert all(served[k] == v for k, v in want.items())
    seen = {}

    def fake(*args, **kw):
        seen.update(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr("pyriver.chat.app.Llama", fake)
    assert main(["chat", "m.gguf", "--rope-scaling", "yarn", "--rope-freq-scale", "0.25", "--yarn-orig-ctx", "2048"]) == 1
    assert (seen["rope_scaling_type"], seen["rope_freq_scale"], seen["yarn_orig_ctx"]) == (2, 0.25, 2048)
    with pytest.raises(SystemExit):
        cli_parser().parse_args(["chat", "m.gguf", "--rope-scaling", "longer"])
