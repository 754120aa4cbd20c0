"""Writing files (write-then-rename) and the sha256 stamps of the cache."""
from __future__ import annotations

import os

import pytest

from pyriver.models import cache
from pyriver.atomic import replacing, write_text


def test_replacing_leaves_the_old_file_on_failure(tmp_path):
    f = tmp_path / "sub" / "a.json"
    write_text(f, "one")
    with pytest.raises(KeyboardInterrupt):
        with replacing(f) as tmp:
            tmp.write_text("half")
            raise KeyboardInterrupt
    assert f.read_text() == "one"
    assert sorted(os.listdir(f.parent)) == ["a.json"]   # no temporary left
    with replacing(f) as tmp:
        assert tmp.parent == f.parent and tmp.name.startswith(".a.json.")
        tmp.write_text("two")
    assert f.read_text() == "two" and oct(f.stat().st_mode & 0o777) == "0o644"


def test_file_sha256_is_stamped_and_rehashed_on_change(tmp_path, tmp_cache, monkeypatch):
    f = tmp_path / "model.bin"
    f.write_bytes(b"a" * 1000)
    first = cache.file_sha256(f)
    assert first == cache.sha256_file(f)
    calls = []
    monkeypatch.setattr(cache, "sha256_file", lambda p: calls.append(p) or "stamped?")
    assert cache.file_sha256(f) == first and calls == []   # the stamp answered
    f.write_bytes(b"b" * 1001)
    assert cache.file_sha256(f) == "stamped?" and len(calls) == 1   # size changed: hashed again


def test_stamps(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"data")
    stamp = tmp_path / "x.verified"
    assert cache.read_stamp(stamp, f) is None
    cache.write_stamp(stamp, f, "abc")
    assert cache.read_stamp(stamp, f) == "abc"
    os.utime(f, ns=(0, 0))
    assert cache.read_stamp(stamp, f) is None
