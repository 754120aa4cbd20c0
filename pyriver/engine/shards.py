"""A model split in shards as llama.cpp's gguf-split writes it: PREFIX-00001-of-00003.gguf and on,
the first holding the metadata; llama.cpp (and pyriver) load it by its first shard and find the
others by name. The checks of the shards are native (native/split.cpp, through engine.check_file)."""
from __future__ import annotations

from typing import List

SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS = "split.no", "split.count", "split.tensors.count"


def shard_name(prefix: str, i: int, n: int) -> str:
    """llama_split_path: the name of shard i (from 0) of n."""
    return f"{prefix}-{i + 1:05d}-of-{n:05d}.gguf"


def shard_paths(path: str) -> List[str]:
    """Every file of the model loaded from path, in order: [path] for a file that is not split (or
    not the first shard: llama.cpp loads no other)."""
    from pyriver.engine import file_meta   # same package: the native check of the file
    try:
        n = int(file_meta(path, SPLIT_COUNT))
    except ValueError:   # no split.count: one file
        n = 0
    tail = shard_name("", 0, n)
    if n <= 1 or not str(path).endswith(tail):
        return [str(path)]
    prefix = str(path)[:-len(tail)]
    return [shard_name(prefix, i, n) for i in range(n)]
