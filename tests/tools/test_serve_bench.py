"""pyriver bench --serve's comparison with llama-server: ratios taken within each repeat."""
from __future__ import annotations

from pathlib import Path

import pytest

from pyriver.tools.serve_bench import paired_ratio


def test_paired_ratio_takes_each_ratio_within_its_repeat():
    # The machine ran slow in the third repeat for llama-server only: every other repeat says 0.9x,
    # where the ratio of the medians (90 / 50) would say 1.8x.
    runs = [{"tok_s": 90.0}, {"tok_s": 45.0}, {"tok_s": 180.0}]
    ref = [{"tok_s": 100.0}, {"tok_s": 50.0}, {"tok_s": 40.0}]
    assert paired_ratio(runs, ref, "tok_s") == pytest.approx(0.9)


def test_script_dependencies_reads_the_inline_metadata():
    from pyriver.tools.serve_bench import script_dependencies
    text = ('#!/usr/bin/env -S uv run --script\n# /// script\n# requires-python = ">=3.8"\n# dependencies = [\n'
            '#   "fastapi>=0.100",\n#   "llama-cpp-python[server]",\n#   "uvicorn ; python_version>\'3\'",\n# ]\n'
            '# ///\n\nimport os\ndependencies = ["not-this"]\n')
    assert script_dependencies(text) == ["fastapi", "llama-cpp-python", "uvicorn"]
    assert script_dependencies("import os\n") == []
    assert script_dependencies("# /// script\n# dependencies = ['a', \"b[x]>=1\"]\n# ///\n") == ["a", "b"]


def _batched_module(monkeypatch):
    """llama-cpp-python's batched example server (examples/server/server.py of its sdist), as a module."""
    import importlib.util
    import sys
    pytest.importorskip("fastapi")
    from pyriver.tools.serve_bench import batched_script
    spec = importlib.util.spec_from_file_location("llama_cpp_batched_server", batched_script())
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)   # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_batched_config_is_server_py_s_own_config_with_the_bench_s_settings(tmp_path, monkeypatch):
    # The config the bench writes must pass server.py's own parser, name the local file (no hub), and
    # become llama.cpp context parameters like llama-server's --parallel 4 -c 4096 -t 2 -fa off: one
    # 1024-position cache per sequence.
    import json

    from pyriver.tools.serve_bench import batched_config, script_dependencies
    srv = _batched_module(monkeypatch)
    assert "fastapi" in script_dependencies(Path(srv.__file__).read_text())
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(batched_config("/models/m.gguf", threads=2, slots=4, port=4321)))
    c = srv.ConfigFile.load(str(cfg))
    assert (c.server.host, c.server.port) == ("127.0.0.1", 4321)
    assert c.model.from_pretrained is None and c.model.resolve_model_path() == "/models/m.gguf"
    m = c.model
    p = srv.Model.build_context_params(
        n_ctx=m.n_ctx, n_batch=m.n_batch, n_ubatch=m.n_ubatch, n_seq_max=m.n_seq_max, n_threads=m.threads,
        n_threads_batch=m.threads_batch, rope_scaling_type=None, pooling_type=None, attention_type=None,
        embedding=False, rope_freq_base=None, rope_freq_scale=None, yarn_ext_factor=None, yarn_attn_factor=None,
        yarn_beta_fast=None, yarn_beta_slow=None, yarn_orig_ctx=None, offload_kqv=None, flash_attn=m.flash_attn,
        op_offload=None, swa_full=None, no_perf=None, type_k=None, type_v=None, kv_unified=m.kv_unified)
    assert (p.n_ctx, p.n_seq_max, p.n_threads, p.n_threads_batch) == (4096, 4, 2, 2)
    assert p.kv_unified is False
    assert p.flash_attn_type == srv.llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED


def test_every_server_gets_the_bench_s_gpu_layers():
    # llama-server's own default is 'auto' (offload on a GPU machine): the bench names the placement for
    # every server, so pyriver's and llama.cpp's servers run on the same device.
    from types import SimpleNamespace

    from pyriver.tools.serve_bench import batched_config, gpu_flags
    assert gpu_flags(SimpleNamespace(n_gpu_layers=0)) == {"pyriver": [], "llama-server": ["-ngl", "0"],
                                                          "llama_cpp.server": []}
    g = gpu_flags(SimpleNamespace(n_gpu_layers=-1))
    assert g == {"pyriver": ["--n-gpu-layers", "-1"], "llama-server": ["-ngl", "all"],
                 "llama_cpp.server": ["--n_gpu_layers", "-1"]}
    assert gpu_flags(SimpleNamespace(n_gpu_layers=12))["llama-server"] == ["-ngl", "12"]
    assert "n_gpu_layers" not in batched_config("/m.gguf", 2, 4, 1)["model"]
    assert batched_config("/m.gguf", 2, 4, 1, n_gpu_layers=-1)["model"]["n_gpu_layers"] == -1


def test_every_server_gets_the_bench_s_attention(monkeypatch):
    # pyriver serve's default is flash attention (llama-server's -fa auto): the benches name the same
    # attention for every server, the bench's --flash-attn, else off.
    from types import SimpleNamespace

    from pyriver.tools import llama_server, spec_serve
    from pyriver.tools.serve_bench import attn_flags, batched_config
    monkeypatch.setattr(llama_server, "ensure", lambda threads: "/bin/llama-server")
    for fa, want in ((False, "off"), (True, "on")):
        a = SimpleNamespace(streams=[1, 4], threads=2, n_gpu_layers=0, llama_spec_types=None, pyriver_setting=None,
                            llama_server_setting=None, flash_attn=fa)
        argvs = [argv for _, argv in spec_serve.configs(a, "/m.gguf")]
        assert len(argvs) > 4 and all(argv[argv.index("-fa") + 1] == want for argv in argvs)
        assert batched_config("/m.gguf", 2, 4, 1, flash_attn=fa)["model"]["flash_attn"] is fa
        assert attn_flags(a)["llama_cpp.server"] == ["--flash_attn", str(fa)]


def test_llama_spec_types_none_is_plain_llama_server_only(monkeypatch):
    """`--llama-spec-types none` (and the flag with no types) runs plain llama-server alone, not a
    second plain server named "llama-server none"."""
    from types import SimpleNamespace

    from pyriver.tools import llama_server, spec_serve
    monkeypatch.setattr(llama_server, "ensure", lambda threads: "/bin/llama-server")
    for types in (["none"], []):
        a = SimpleNamespace(streams=[1], threads=2, n_gpu_layers=0, llama_spec_types=types, pyriver_setting=None,
                            llama_server_setting=None, flash_attn=False)
        names = [name for name, _ in spec_serve.configs(a, "/m.gguf")]
        assert [n for n in names if n.startswith("llama-server")] == ["llama-server"]
    a.llama_spec_types = ["ngram-mod"]
    assert [n for n, _ in spec_serve.configs(a, "/m.gguf") if n.startswith("llama-server")] == ["llama-server", "llama-server ngram-mod"]
