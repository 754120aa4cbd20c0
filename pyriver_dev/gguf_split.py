"""Split a GGUF model into shards as llama.cpp's `llama-gguf-split --split` writes them
(tools/gguf-split/gguf-split.cpp): OUT_PREFIX-00001-of-0000N.gguf ..., the first shard with all of
the input's metadata, every shard with split.no (uint16), split.tensors.count (int32) and
split.count (uint16) and its share of the tensors in the input's order, a later shard with no other
key: byte for byte the files llama-gguf-split writes (checked against it on SmolLM2). A new shard
starts every --split-max-tensors tensors, or before a tensor that would take the shard's tensor
bytes (each padded to 32) past --split-max-size.

  python -m pyriver_dev.gguf_split IN.gguf OUT_PREFIX --split-max-tensors 128
  python -m pyriver_dev.gguf_split IN.gguf OUT_PREFIX --split-max-size 500M [--no-tensor-first-split]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

import gguf
from gguf import GGUFValueType

from pyriver.engine.shards import SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS, shard_name
from pyriver.tools.gguf_io import KV, Plan, Tensor, plan_from_file, write_plan

_PAD = 32   # GGUF_DEFAULT_ALIGNMENT: gguf-split counts each tensor's bytes padded to it


def parse_size(s: str) -> int:
    """gguf-split's N(M|G): decimal megabytes or gigabytes."""
    unit = {"M": 1000 ** 2, "G": 1000 ** 3}.get(s[-1:])
    if unit is None or not s[:-1].isdigit() or int(s[:-1]) <= 0:
        raise ValueError(f"split size must be a positive whole number of M (megabytes) or G (gigabytes), got {s!r}")
    return int(s[:-1]) * unit


def groups(tensors: List[Tensor], max_tensors: int = 0, max_size: int = 0, no_tensor_first: bool = False) -> List[List[Tensor]]:
    """The tensors of each shard, by gguf-split's split_strategy."""
    if (max_tensors > 0) == (max_size > 0):
        raise ValueError("give one of max_tensors and max_size")
    out: List[List[Tensor]] = [[]] + ([[]] if no_tensor_first else [])
    size = 0
    for i, t in enumerate(tensors):
        n = -(-t.nbytes // _PAD) * _PAD
        cut = size + n > max_size if max_size else i > 0 and i % max_tensors == 0
        if cut:
            if not out[-1]:
                raise ValueError("a shard would have no tensors: the size or tensor limit is too small")
            out.append([])
            size = n
        else:
            size += n
        out[-1].append(t)
    return out


def split(src: str, prefix: str, max_tensors: int = 0, max_size: int = 0, no_tensor_first: bool = False,
          dry_run: bool = False) -> List[Path]:
    """Write the shards of src as PREFIX-0000i-of-0000n.gguf; their paths, the first first."""
    reader = gguf.GGUFReader(src, "r")
    plan = plan_from_file(reader)
    if SPLIT_COUNT in plan.kv and int(plan.kv[SPLIT_COUNT].value) > 1:
        raise ValueError(f"{src} is already a shard of a split model")
    parts = groups(plan.tensors, max_tensors, max_size, no_tensor_first)
    n = len(parts)
    paths = [Path(shard_name(prefix, i, n)) for i in range(n)]
    for i, (p, ts) in enumerate(zip(paths, parts)):
        kv = dict(plan.kv) if i == 0 else {}   # the metadata in the first shard only
        # gguf-split's order: it sets split.count last, once it knows the count (gguf_set_val appends)
        kv[SPLIT_NO] = KV(i, GGUFValueType.UINT16)
        kv[SPLIT_TENSORS] = KV(len(plan.tensors), GGUFValueType.INT32)
        kv[SPLIT_COUNT] = KV(n, GGUFValueType.UINT16)
        print(f"split {i + 1:05d}: n_tensors = {len(ts)}, total_size = {sum(t.nbytes for t in ts) // 1000 ** 2}M")
        if not dry_run:
            write_plan(p, Plan(kv=kv, tensors=ts), bare=i > 0)
            print(f"wrote {p}")
    del reader
    return paths


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pyriver_dev.gguf_split", description=__doc__.split("\n\n")[0])
    p.add_argument("input")
    p.add_argument("output_prefix", help="the shards are OUTPUT_PREFIX-00001-of-0000N.gguf ...")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--split-max-tensors", type=int, default=None, help="tensors in each shard (default 128)")
    g.add_argument("--split-max-size", default=None, help="bytes of tensors in each shard: N(M|G), decimal")
    p.add_argument("--no-tensor-first-split", action="store_true", help="the first shard holds the metadata only")
    p.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    a = p.parse_args(argv)
    try:
        size = parse_size(a.split_max_size) if a.split_max_size else 0
        tensors = 0 if size else (a.split_max_tensors if a.split_max_tensors is not None else 128)
        if not size and tensors <= 0:
            raise ValueError("--split-max-tensors must be positive")
        split(a.input, a.output_prefix, tensors, size, a.no_tensor_first_split, a.dry_run)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
