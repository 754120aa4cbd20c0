"""llama-perplexity's KL-divergence base file (`--kl-divergence-base FILE`), read and written as
its tools/perplexity/perplexity.cpp does, so that either side reads the other's.

Layout (native byte order, as it writes it): b"_logits_", int32 n_ctx, int32 n_vocab, int32
n_chunk, the int32 tokens of the n_chunk chunks (n_chunk * n_ctx, the text's own tokens: the BOS
each chunk starts with when evaluated is not written), then per chunk one row for each scored
position (the second half of the chunk but its last token: n_ctx - 1 - n_ctx // 2 rows). A row is
nv = 2 * ((n_vocab + 1) // 2) + 4 uint16: float32 scale and float32 min_log_prob (4 uint16), then
each token's log-probability as round((logit - min_logit) / scale), min_logit clamped to max - 16
(a logit at or below it stores 0), then a padding uint16 (0) when n_vocab is odd.

The arithmetic is float32 where perplexity.cpp's is float and float64 where it is double, so
that pyriver's rows are its rows bit for bit on the same logits (up to the order its float64 sum
of exponentials adds them in)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, List

import numpy as np

MAGIC = b"_logits_"
LOG_PROB_FLOOR = 16.0   # perplexity.cpp's max_logit - 16: below it a log-probability is stored as the floor


def row_width(n_vocab: int) -> int:
    """uint16 per row: the two float32 (4 uint16) and n_vocab values padded to an even count."""
    return 2 * ((n_vocab + 1) // 2) + 4


def scored_rows(n_ctx: int) -> int:
    """Positions scored per chunk: the second half's first n_ctx - 1 - n_ctx // 2 (each predicts the next)."""
    return n_ctx - 1 - n_ctx // 2


def log_sum_exp(logits: np.ndarray) -> tuple:
    """(max, float32 log(sum exp(x - max)) summed in float64 over float32 exps) of each row."""
    x = np.asarray(logits, dtype=np.float32)
    mx = x.max(axis=-1)
    s = np.exp(x - mx[..., None]).astype(np.float64).sum(axis=-1)
    return mx, np.log(s).astype(np.float32)


def quantize_rows(logits: np.ndarray, n_vocab: int) -> np.ndarray:
    """[rows, n_vocab] float32 logits -> [rows, row_width] uint16 rows (perplexity.cpp's log_softmax
    that writes log_prob)."""
    x = np.asarray(logits, dtype=np.float32)[:, :n_vocab]
    mx, lse = log_sum_exp(x)
    mn = np.maximum(x.min(axis=1), mx - np.float32(LOG_PROB_FLOOR))
    min_log_prob = (mn - mx - lse).astype(np.float32)
    scale = ((mx - mn) / np.float32(65535.0)).astype(np.float32)
    out = np.zeros((x.shape[0], row_width(n_vocab)), dtype=np.uint16)
    head = np.stack([scale, min_log_prob], axis=1).astype(np.float32)
    out[:, :4] = head.view(np.uint16)
    with np.errstate(divide="ignore"):
        inv = np.where(scale != 0, np.float32(1.0) / scale, np.float32(0.0)).astype(np.float32)
    q = np.rint(inv[:, None] * (x - mn[:, None])).astype(np.int64)   # nearest_int: round half to even
    q = np.where(x > mn[:, None], q, 0)
    q[scale == 0] = 0
    out[:, 4:4 + n_vocab] = (q & 0xFFFF).astype(np.uint16)
    return out


def row_log_probs(rows: np.ndarray, n_vocab: int) -> np.ndarray:
    """[rows, row_width] uint16 -> [rows, n_vocab] float32 log-probabilities, scale * q + min_log_prob."""
    head = np.ascontiguousarray(rows[:, :4]).view(np.float32)
    scale, mlp = head[:, 0:1], head[:, 1:2]
    return (scale * rows[:, 4:4 + n_vocab].astype(np.float32) + mlp).astype(np.float32)


@dataclass
class Header:
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray   # int32 [n_chunk * n_ctx]


def write_header(f: BinaryIO, n_ctx: int, n_vocab: int, n_chunk: int, tokens: List[int]) -> None:
    toks = np.asarray(tokens[:n_chunk * n_ctx], dtype=np.int32)
    if toks.size != n_chunk * n_ctx:
        raise ValueError(f"{n_chunk} chunks of {n_ctx} need {n_chunk * n_ctx} tokens, got {toks.size}")
    f.write(MAGIC)
    f.write(np.array([n_ctx, n_vocab, n_chunk], dtype=np.int32).tobytes())
    f.write(toks.tobytes())


def write_chunk(f: BinaryIO, logits: np.ndarray, n_vocab: int) -> None:
    """One chunk's rows from the logits of its scored positions."""
    f.write(quantize_rows(logits, n_vocab).tobytes())


def _read(f: BinaryIO, n: int, what: str, path: str) -> bytes:
    b = f.read(n)
    if len(b) != n:
        raise ValueError(f"{path}: truncated while reading {what} ({len(b)} of {n} bytes)")
    return b


def read_header(f: BinaryIO, path: str) -> Header:
    if f.read(8) != MAGIC:
        raise ValueError(f"{path} does not look like a file containing log-probabilities (no {MAGIC!r} magic)")
    n_ctx, n_vocab, n_chunk = (int(v) for v in np.frombuffer(_read(f, 12, "n_ctx, n_vocab, n_chunk", path), np.int32))
    if n_ctx < 4 or n_vocab < 1 or n_chunk < 1:
        raise ValueError(f"{path}: bad header (n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk})")
    toks = np.frombuffer(_read(f, 4 * n_ctx * n_chunk, "the evaluation tokens", path), np.int32).copy()
    if toks.size and (toks.min() < 0 or toks.max() >= n_vocab):
        raise ValueError(f"{path}: a token outside the vocabulary [0, {n_vocab})")
    return Header(n_ctx, n_vocab, n_chunk, toks)


def read_chunk(f: BinaryIO, h: Header, chunk: int, path: str) -> np.ndarray:
    """One chunk's [scored_rows, row_width] uint16 rows."""
    n, w = scored_rows(h.n_ctx), row_width(h.n_vocab)
    b = _read(f, 2 * n * w, f"the log-probs of chunk {chunk}", path)
    return np.frombuffer(b, np.uint16).reshape(n, w)
