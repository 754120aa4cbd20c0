"""pyriver_dev.gguf_split: where a shard ends, as llama-gguf-split's split_strategy decides it (a
shard every N tensors; or before a tensor that takes the shard's padded tensor bytes past the size),
and its command line. The shards themselves: tests/runtime/test_split.py."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType

from pyriver_dev import gguf_split as G
from pyriver.tools.gguf_io import Plan, Tensor, write_plan


def _tensors(*sizes):
    """F32 vectors of these byte sizes (multiples of 4)."""
    return [Tensor(f"t{i}", (n // 4,), GGMLQuantizationType.F32, lambda: iter([]), n) for i, n in enumerate(sizes)]


def _counts(groups):
    return [len(g) for g in groups]


def test_a_shard_every_n_tensors():
    assert _counts(G.groups(_tensors(*[4] * 10), max_tensors=4)) == [4, 4, 2]
    assert _counts(G.groups(_tensors(*[4] * 8), max_tensors=4)) == [4, 4]
    assert _counts(G.groups(_tensors(*[4] * 3), max_tensors=4)) == [3]
    assert _counts(G.groups(_tensors(*[4] * 8), max_tensors=4, no_tensor_first=True)) == [0, 4, 4]


def test_a_shard_by_padded_size():
    # 40 bytes count 64 (padded to 32): 64 + 64 = 128 fits 130, a third would not
    assert _counts(G.groups(_tensors(40, 40, 40, 40, 40), max_size=130)) == [2, 2, 1]
    assert _counts(G.groups(_tensors(32, 32, 32, 32), max_size=64)) == [2, 2]
    # a tensor past the size alone gets a shard of its own, unless it would leave one empty (refused there too)
    assert _counts(G.groups(_tensors(32, 100, 32), max_size=64)) == [1, 1, 1]
    assert _counts(G.groups(_tensors(32, 100), max_size=64, no_tensor_first=True)) == [0, 1, 1]
    for sizes in ((100, 32), (32,)):
        with pytest.raises(ValueError, match="no tensors"):
            G.groups(_tensors(*sizes), max_size=30)


def test_sizes_parse_as_gguf_split_parses_them():
    assert G.parse_size("500M") == 500_000_000 and G.parse_size("2G") == 2_000_000_000
    for bad in ("1.5G", "10K", "0M", "M", "-3M"):
        with pytest.raises(ValueError):
            G.parse_size(bad)


def test_command_line(tmp_path, capsys):
    src = tmp_path / "in.gguf"
    write_plan(src, Plan(tensors=[Tensor(f"t{i}", (8,), GGMLQuantizationType.F32,
                                         lambda i=i: iter([np.full(8, i, dtype=np.float32)])) for i in range(5)]))
    assert G.main([str(src), str(tmp_path / "out"), "--split-max-tensors", "2", "--dry-run"]) == 0
    assert not list(tmp_path.glob("out-*"))
    assert G.main([str(src), str(tmp_path / "out"), "--split-max-tensors", "2"]) == 0
    names = sorted(p.name for p in tmp_path.glob("out-*"))
    assert names == ["out-00001-of-00003.gguf", "out-00002-of-00003.gguf", "out-00003-of-00003.gguf"]
    r = gguf.GGUFReader(tmp_path / "out-00003-of-00003.gguf", "r")
    assert [t.name for t in r.tensors] == ["t4"] and list(r.tensors[0].data) == [4.0] * 8
    assert G.main([str(tmp_path / "out-00001-of-00003.gguf"), str(tmp_path / "again")]) == 1   # already split
    assert "already a shard" in capsys.readouterr().err
    assert G.main([str(src), str(tmp_path / "x"), "--split-max-size", "1.5G"]) == 1
