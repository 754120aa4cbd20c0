"""pyriver.tools.server_suite: the shims' command lines, the side-by-side verdicts, and (peer) the
whole comparison: pyriver passes every test of llama.cpp's server suite that llama-server passes
on the same GGUF, except the listed N/A (llama-server's internals) and the open gaps, listed with
why in server_suite_gaps.json."""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from helpers import asked_for_by_name
from pyriver.tools import llama_server, server_suite as S

# What pyriver does not pass yet of what llama-server passes (issue 28's open work), each with why:
# the target is an empty list; a test missing beyond it fails this.
GAPS = Path(__file__).with_name("server_suite_gaps.json")

SUITE_ARGS = ("--port 8080 --temp 0.8 --seed 42 --host 127.0.0.1 --hf-repo ggml-org/test-model-stories260K "
              "--batch-size 32 --no-slots --alias tinyllama-2 --ctx-size 512 --parallel 2 --n-predict 64 "
              "--no-jinja --embedding --reranking --kv-unified --backend_sampling --ctx-checkpoints 3").split()


def test_shims_map_the_suites_command_line(monkeypatch):
    monkeypatch.delenv("PYRIVER_SUITE_LENIENT", raising=False)
    a = S.pyriver_args(SUITE_ARGS)
    assert a[0].endswith(".gguf") and "--hf-repo" not in a and "--batch-size" not in a
    assert a[a.index("--ctx-size") + 1] == "512" and a[a.index("--seed") + 1] == "42"
    assert "--embedding" in a   # known to pyriver serve: passed on
    assert "--reranking" in a   # known to pyriver serve: passed on
    assert "--no-slots" in a    # GET /slots answers 501, as llama-server's
    assert "--kv-unified" in a and "--backend_sampling" in a   # known: the shared pool, backend sampling
    assert a[-1] == "--no-lossless"   # no drafts, as llama-server without --spec-type
    assert a[a.index("--ctx-checkpoints") + 1] == "3"   # unknown: passed, so it refuses to start (the truth)
    assert "--mmproj" not in a   # stories260K has no projector
    monkeypatch.setenv("PYRIVER_SUITE_LENIENT", "1")
    lenient = S.pyriver_args(SUITE_ARGS)
    assert "--ctx-checkpoints" not in lenient and "3" not in lenient and "--embedding" in lenient
    b = S.llama_args(SUITE_ARGS + ["--model-draft", "x.gguf"])
    assert b[:2] == ["--model", a[0]] and "--hf-repo" not in b and b[b.index("--model-draft") + 1] == a[0]
    assert S._local_model([["--hf-repo", "ggml-org/gemma-3-270m-GGUF"]]).endswith("gemma-3-270m-q4_k_m.gguf")


def test_shims_serve_tinygemma3_with_its_projector(monkeypatch, tmp_path):
    """ggml-org/tinygemma3-GGUF is the local synthetic pair; the projector comes with it as the hub's
    -hf hands it, for both servers, unless --no-mmproj; --mmproj-url names the local projector."""
    monkeypatch.setattr(S, "tinygemma3", lambda: [str(tmp_path / "t.gguf"), str(tmp_path / "mm.gguf")])
    hf = ["--hf-repo", "ggml-org/tinygemma3-GGUF:Q8_0", "--media-path", "../../../tools", "--parallel", "2"]
    for args in (S.pyriver_args(hf), S.llama_args(hf)[1:]):
        assert args[0] == str(tmp_path / "t.gguf") and args[args.index("--mmproj") + 1] == str(tmp_path / "mm.gguf")
        assert args[args.index("--media-path") + 1] == "../../../tools" and "--hf-repo" not in args
    assert "--mmproj" not in S.pyriver_args(hf + ["--no-mmproj"]) and "--mmproj" not in S.llama_args(hf + ["--no-mmproj"])
    url = S.llama_args(["--hf-repo", "x/stories", "--mmproj-url", "https://x/mm.gguf"])
    assert url[url.index("--mmproj") + 1] == str(tmp_path / "mm.gguf") and "--mmproj-url" not in url


def test_shims_serve_the_split_model_as_a_local_split(monkeypatch, tmp_path):
    """test_load_split_model's hub split (stories15M in 3 shards) is a local split (of Qwen2.5-Coder
    1.5B when cached), its first shard handed to both servers; no longer N/A."""
    monkeypatch.setattr(S, "split_model", lambda src: str(tmp_path / f"{src}-00001-of-00003.gguf"))
    monkeypatch.setattr(S, "_split_source", lambda: "local")
    hf = ["--hf-repo", "ggml-org/models", "--hf-file", "tinyllamas/split/stories15M-q8_0-00001-of-00003.gguf"]
    want = str(tmp_path / "local-00001-of-00003.gguf")
    assert S.pyriver_args(hf)[0] == want and S.llama_args(hf)[:2] == ["--model", want]
    assert S.na_reason("test_basic::test_load_split_model") is None


def test_verdicts():
    llama = {"test_basic::test_a": "passed", "test_basic::test_b": "passed", "test_basic::test_c": "failed",
             "test_basic::test_no_ui": "passed", "test_basic::test_d": "skipped"}
    pyr = {"test_basic::test_a": "passed", "test_basic::test_b": "failed", "test_basic::test_c": "passed",
           "test_basic::test_no_ui": "failed", "test_basic::test_d": "skipped"}
    c = S.compare(llama, pyr)
    verdict = {r["test"]: r["verdict"] for r in c["rows"]}
    assert verdict == {"test_basic::test_a": "both", "test_basic::test_b": "llama-server only",
                       "test_basic::test_c": "pyriver only", "test_basic::test_no_ui": "N/A",
                       "test_basic::test_d": "skipped"}
    assert c["missing"] == ["test_basic::test_b"] and c["llama_server_passed"] == 3
    assert "llama-server only 1" in S.table(c)


def test_the_whole_suite_runs_only_when_asked_for():
    class Config:
        def __init__(self, expr):
            self.expr = expr

        def getoption(self, name):
            assert name == "markexpr"
            return self.expr
    asked = {e: asked_for_by_name(Config(e), "peer") for e in
             ("peer", "peer and slow", "slow or peer", "", None, "not slow", "not peer", "slow and not peer", "peers")}
    assert asked == {"peer": True, "peer and slow": True, "slow or peer": True, "": False, None: False,
                     "not slow": False, "not peer": False, "slow and not peer": False, "peers": False}


@pytest.mark.peer
@pytest.mark.slow
def test_pyriver_passes_what_llama_server_passes(tmp_path, request):
    # Both servers through the whole suite: about 40 minutes on 2 cores (Zen 4), over 40 on a Zen 3,
    # more than the rest of the suite; the default run (CI's 90 minutes) leaves it to `-m peer`.
    if not asked_for_by_name(request.config, "peer"):
        pytest.skip("llama.cpp's server suite on both servers runs with -m peer (40+ minutes on 2 cores)")
    if not llama_server.binary().is_file():
        pytest.skip("llama-server is not built into the cache: python -c 'from pyriver.tools import llama_server; "
                    "llama_server.ensure()'")
    out = tmp_path / "suite.json"
    assert S.main(["--server", "both", "--work", str(tmp_path), "--json", str(out)]) == 0
    c = json.loads(out.read_text())
    assert c["llama_server_passed"] > 0
    gaps = json.loads(GAPS.read_text())["gaps"]
    new = sorted(set(c["missing"]) - set(gaps))
    assert not new, f"{len(new)} more tests llama-server passes and pyriver fails: {new}"
    closed = sorted(set(gaps) - set(c["missing"]))
    if closed:   # not a failure: a test llama-server itself passes only sometimes drops out too
        warnings.warn(f"gaps no longer missing (remove them from {GAPS.name} if they stay so): {closed}")
