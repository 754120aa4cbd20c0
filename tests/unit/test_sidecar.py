"""Sidecar naming (one rule for making a name and for finding a model's sidecars) and reading a
stored calibration, without the native library."""
from __future__ import annotations

import json
import os

import gguf

from pyriver.models.cache import file_sha256
from pyriver.river.sidecar import CALIBRATION_PREFIX, find_calibration, read_calibration, sidecar_path, sidecars


def _gguf(path, **kv):
    w = gguf.GGUFWriter(str(path), arch="pyriver-river")
    for k, v in kv.items():
        w.add_string(k, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return str(path)


def test_names_are_found_beside_a_writable_model(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    p = sidecar_path(str(model), "Q4_0")
    assert p == tmp_path / "m.river-q4_0.gguf"
    for rt in ("q4_0", "iq4_nl"):
        sidecar_path(str(model), rt).write_bytes(b"x")
    (tmp_path / "other.river-q4_0.gguf").write_bytes(b"x")
    assert sidecars(str(model)) == [str(tmp_path / "m.river-iq4_nl.gguf"), str(tmp_path / "m.river-q4_0.gguf")]


def test_a_read_only_model_folder_puts_them_in_the_cache(tmp_path, tmp_cache, monkeypatch):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF model")
    (tmp_path / "m.river-q8_0.gguf").write_bytes(b"x")   # one that was made before
    # A read-only folder (chmod would not stop root).
    monkeypatch.setattr("pyriver.river.sidecar.os.access", lambda path, mode: os.fspath(path) != os.fspath(tmp_path))
    p = sidecar_path(str(model), "q4_0")
    assert p == tmp_cache / "rivers" / f"{file_sha256(model)[:16]}-m.river-q4_0.gguf"
    p.parent.mkdir(parents=True)
    p.write_bytes(b"x")
    assert sidecars(str(model)) == [str(p), str(tmp_path / "m.river-q8_0.gguf")]


def test_reading_a_stored_calibration(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    rec = lambda enabled, utc: json.dumps({"enabled": enabled, "utc": utc, "setting": {"tau": 0.98}})  # noqa: E731
    # The older one sorts first by name: the newer must win by its time.
    old = _gguf(sidecar_path(str(model), "iq4_nl"), **{CALIBRATION_PREFIX + "report": rec(True, "2025-01-01")})
    new = _gguf(sidecar_path(str(model), "q4_0"), **{CALIBRATION_PREFIX + "report": rec(True, "2025-02-01")})
    off = _gguf(sidecar_path(str(model), "q8_0"), **{CALIBRATION_PREFIX + "report": rec(False, "2025-03-01")})
    _gguf(sidecar_path(str(model), "q5_0"))   # never calibrated
    assert read_calibration(off)["enabled"] is False
    assert read_calibration(str(tmp_path / "m.river-q5_0.gguf")) is None
    assert read_calibration(str(tmp_path / "missing.gguf")) is None
    found = find_calibration(str(model))
    assert found["sidecar"] == new and found["utc"] == "2025-02-01"   # the newest enabled one
    os.remove(new)
    assert find_calibration(str(model))["sidecar"] == old
