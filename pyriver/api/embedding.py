"""Embeddings: llama-cpp-python's `Llama.embed` and `Llama.create_embedding` (same signatures, same
result shapes), as a part of `pyriver.Llama` (`Llama.embeddings`).

The native side (pr_embed) gives each token's hidden state after the final norm, llama.cpp's
"result_norm"; pooling and normalization are here, in numpy: they are a few vector operations on
n_tokens x n_embd floats, and one home in Python keeps the rule (which pooling, which norm) beside
llama_cpp's that it copies.

River: embeddings are always computed at full depth. A river's exits apply to decode steps; a text
to embed is a prompt, and pr_embed runs it through every backbone block whatever the exit rule
(prefill_exit included), so the vectors do not depend on whether a river is on.
"""
from __future__ import annotations

from typing import List, Optional, Union

import numpy as np


# llama.cpp's enum llama_pooling_type (llama_cpp.LLAMA_POOLING_TYPE_*).
LLAMA_POOLING_TYPE_UNSPECIFIED = -1
LLAMA_POOLING_TYPE_NONE = 0
LLAMA_POOLING_TYPE_MEAN = 1
LLAMA_POOLING_TYPE_CLS = 2
LLAMA_POOLING_TYPE_LAST = 3
LLAMA_POOLING_TYPE_RANK = 4


def pool(rows: np.ndarray, pooling_type: int) -> np.ndarray:
    """llama.cpp's build_pooling over one sequence's rows [n_tokens, n_embd]: NONE keeps every row,
    MEAN averages them, CLS takes the first token's, LAST the last token's."""
    if pooling_type == LLAMA_POOLING_TYPE_NONE:
        return rows
    if pooling_type == LLAMA_POOLING_TYPE_MEAN:
        return rows.astype(np.float64).mean(axis=0)
    if pooling_type == LLAMA_POOLING_TYPE_CLS:
        return rows[0]
    if pooling_type == LLAMA_POOLING_TYPE_LAST:
        return rows[-1]
    if pooling_type == LLAMA_POOLING_TYPE_RANK:
        # a causal model without a classifier head: llama.cpp's RANK takes the last token's row
        # (build_inp_cls picks the last position when causal_attn) and projects nothing; qwen3
        # then applies its softmax (see rank_head)
        return rows[-1]
    raise ValueError(f"unsupported pooling_type {pooling_type}")


def rank_head(path: str, arch: str) -> bool:
    """What llama.cpp's RANK pooling does on this file beyond the last token's row: True when it
    then takes a softmax (qwen3, qwen3vl). A classifier head (`cls.*` tensors: BERT-style rerankers,
    Qwen3-Reranker's `cls.output`) is refused: pyriver's graph does not build it, and scores
    without it would not be llama.cpp's."""
    from pyriver.engine import file_tensor_names
    from pyriver.engine.shards import shard_paths
    head = sorted(t for p in shard_paths(path) for t in file_tensor_names(p)   # every shard's
                  if t.split(".")[0] == "cls")
    if head:
        raise ValueError(f"pooling_type RANK (4): this model's classifier head ({', '.join(head)}) is not supported")
    return arch in ("qwen3", "qwen3vl")


def normalize_embedding(v: np.ndarray) -> np.ndarray:
    """llama_cpp._internals.normalize_embedding: divided by its Euclidean (L2) norm; a zero vector
    is left as it is."""
    v = np.asarray(v, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    return v if norm == 0.0 else v / norm


class Embeddings:
    """`Llama.embeddings` (a part of `pyriver.Llama`): `embed` and `create_embedding` for a Llama
    made with embedding=True (`enabled`); `pooling`: the pooling embed applies."""

    def __init__(self, llm, embedding: bool, pooling_type: int) -> None:
        """The pooling llama.cpp's context would use: pooling_type when given, else the GGUF's
        `<arch>.pooling_type`, else NONE (llama.cpp's default for a model without the key, as every
        decoder-only chat model is: embed then returns one vector per token)."""
        self.llm = L = llm
        self.enabled = bool(embedding)
        pooling_type = int(pooling_type)
        if pooling_type == LLAMA_POOLING_TYPE_UNSPECIFIED:
            declared = L.meta(f"{L.info['arch']}.pooling_type")
            pooling_type = int(declared) if declared is not None else LLAMA_POOLING_TYPE_NONE
        if not LLAMA_POOLING_TYPE_UNSPECIFIED <= pooling_type <= LLAMA_POOLING_TYPE_RANK:
            raise ValueError(f"pooling_type must be -1 (unspecified) or 0..4 (none, mean, cls, last, rank), got {pooling_type}")
        self.rank_softmax = False
        if self.enabled and pooling_type == LLAMA_POOLING_TYPE_RANK:
            self.rank_softmax = rank_head(L.model_path, L.info["arch"])
        self.pooling = pooling_type

    def pooling_type(self) -> int:
        """The pooling embed applies (llama_cpp.LLAMA_POOLING_TYPE_*)."""
        return self.pooling

    def embed(self, input: Union[str, List[str]], normalize: bool = False, truncate: bool = True,
              return_count: bool = False):
        """Embed a string or a list of strings, as llama_cpp's `Llama.embed`: with pooling NONE one
        vector per token of each input, else one vector per input; normalize divides each vector by
        its L2 norm; truncate keeps the first n_batch tokens of an input (n_batch at most n_ctx), and
        without it a longer input raises ValueError before anything is computed. return_count also
        returns the number of tokens embedded.

        As llama_cpp does, the cache is cleared for each input and the generation state is reset at
        the end (the next completion starts from an empty cache). Full depth: see the module's
        docstring (River)."""
        L = self.llm
        if not self.enabled:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        inputs = [input] if isinstance(input, str) else input
        if not isinstance(inputs, (list, tuple)) or not all(isinstance(t, str) for t in inputs):
            raise TypeError("input must be a string or a list of strings")
        with L.lock:
            L.check_live()
            n_batch = min(L.n_batch, L.n_ctx())   # llama_cpp's n_batch = min(n_ctx, n_batch)
            batches = []
            for text in inputs:
                tokens = L.tokenize(text.encode("utf-8"))
                if truncate:
                    tokens = tokens[:n_batch]
                if len(tokens) > n_batch:
                    raise ValueError(f"Requested tokens ({len(tokens)}) exceed batch size of {n_batch}")
                if not tokens:
                    raise ValueError("cannot embed an input without tokens (an empty string on a model that adds no BOS)")
                batches.append(tokens)
            data = self.embed_tokens(batches, normalize)
        output = data[0] if isinstance(input, str) else data
        total_tokens = sum(len(t) for t in batches)
        return (output, total_tokens) if return_count else output

    def embed_tokens(self, batches: List[List[int]], normalize: bool = False) -> list:
        """embed's work on token lists (each at most n_batch tokens; the server tokenizes under its
        own lock): the cache is cleared for each, and the generation state reset at the end."""
        L = self.llm
        if not self.enabled:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        with L.lock:
            L.check_live()
            data = []
            try:
                L.reset()
                for tokens in batches:
                    data.append(self.embed_one(tokens, normalize))
            finally:
                L.reset()
            return data

    def embed_one(self, tokens: List[int], normalize: bool):
        """One input in an empty cache: its pooled (and normalized) vector or vectors, as lists."""
        L = self.llm
        rows = L.context.engine.embed(tokens)   # clears the cache first
        pooled = pool(rows, self.pooling)
        if self.rank_softmax:
            e = np.exp(pooled.astype(np.float64) - pooled.max())
            pooled = e / e.sum()
        if pooled.ndim == 2:
            return [(normalize_embedding(r) if normalize else r.astype(np.float64)).tolist() for r in pooled]
        return (normalize_embedding(pooled) if normalize else pooled.astype(np.float64)).tolist()

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None):
        """An OpenAI-shaped embedding response, as llama_cpp's `Llama.create_embedding`."""
        L = self.llm
        model_name: str = model if model is not None else L.model_path
        input = input if isinstance(input, list) else [input]
        embeds, total_tokens = self.embed(input, return_count=True)
        data = [{"object": "embedding", "embedding": emb, "index": idx} for idx, emb in enumerate(embeds)]
        return {
            "object": "list",
            "data": data,
            "model": model_name,
            "usage": {"prompt_tokens": total_tokens, "total_tokens": total_tokens},
        }
