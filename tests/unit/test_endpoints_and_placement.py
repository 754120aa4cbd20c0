"""RPC endpoint parsing and the block placement arithmetic (llama.cpp's split points), in the
native library without a model or a server."""
from __future__ import annotations

import pytest

from pyriver.engine import debug
from pyriver.engine import rpc
from pyriver.cli.args import tensor_split


@pytest.mark.parametrize("bad", ["127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", ":5000", "127.0.0.1:50x",
                                 "a:1,b"])
def test_malformed_endpoints(bad):
    with pytest.raises(ValueError, match="host:port"):
        rpc.register_for_llama_cpp(bad)


def test_endpoint_list_rules():
    with pytest.raises(ValueError, match="listed twice"):
        rpc.register_for_llama_cpp("h:1, h:1")
    with pytest.raises(ValueError, match="no RPC server given"):
        rpc.register_for_llama_cpp(" , ")


def test_layer_split_as_llama_cpp():
    # 20 of 31 layers (30 blocks and the head) over two devices 1:2: blocks 0-10 stay on the CPU,
    # then 7 blocks on the first device and 12 blocks and the head on the second.
    where = debug.place_layers(30, 20, [1.0, 2.0])
    assert where == [-1] * 11 + [0] * 7 + [1] * 13


@pytest.mark.parametrize("n_gpu,shares,want", [
    (0, [1.0], [-1] * 5),                    # nothing offloaded
    (-1, [1.0], [0] * 5),                    # every block and the head
    (99, [1.0, 1.0], [0, 0, 0, 1, 1]),       # more than there are: all, split at 0.5 of 5 layers
    (1, [1.0, 1.0], [-1] * 4 + [0]),         # only the head: the first device
    (3, [0.0, 1.0], [-1, -1, 1, 1, 1]),      # a device with no share gets nothing
    (-1, [], [-1] * 5),                      # no devices: the CPU
])
def test_layer_split_edges(n_gpu, shares, want):
    assert debug.place_layers(4, n_gpu, shares) == want


def test_bad_shares():
    with pytest.raises(ValueError, match="all zero"):
        debug.place_layers(4, -1, [0.0, 0.0])
    with pytest.raises(ValueError, match="finite"):
        debug.place_layers(4, -1, [1.0, float("nan")])


def test_tensor_split_argument():
    assert tensor_split("1,2.5") == [1.0, 2.5]
    assert tensor_split(None) is None and tensor_split("") is None
    with pytest.raises(ValueError, match="--tensor-split"):
        tensor_split("1,x")
