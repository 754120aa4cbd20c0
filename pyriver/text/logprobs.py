"""Log-probabilities of sampled tokens: one entry per token under the logits that chose it, and
llama-cpp-python's `logprobs` shape for a completion's text."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

Entry = Tuple[int, float, List[Tuple[int, float]]]


def entry(logits: np.ndarray, tok: int, k: int) -> Entry:
    """log p(tok) under the raw logits, and the k most likely tokens with theirs."""
    x = logits.astype(np.float64)
    lse = x.max() + np.log(np.exp(x - x.max()).sum())
    top = np.argpartition(-x, k - 1)[:k] if 0 < k < x.size else np.arange(0)
    top = top[np.argsort(-x[top], kind="stable")]
    return tok, float(x[tok] - lse), [(int(i), float(x[i] - lse)) for i in top]


def as_dict(vocab, entries: List[Entry], text: str, base: int) -> Dict:
    """llama-cpp-python's logprobs shape, for the generated tokens whose text was returned."""
    out: Dict[str, list] = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
    offset = 0
    for tok, lp, top in entries:
        if offset >= len(text) and out["tokens"]:
            break
        piece = vocab.piece(tok).decode("utf-8", "ignore")
        tops = {vocab.piece(i).decode("utf-8", "ignore"): v for i, v in top}
        tops[piece] = lp
        out["tokens"].append(piece)
        out["text_offset"].append(base + offset)
        out["token_logprobs"].append(lp)
        out["top_logprobs"].append(tops)
        offset += len(piece)
    return out


def prompt_logprobs(llm, prompt_tokens: List[int], k: int) -> Dict:
    """echo=True's logprobs of the prompt (llama_cpp's shape; it needs logits_all=True): token j
    under the logits of token j - 1 (llama_cpp's scores rows); the first token (after a leading
    BOS, which is left out) has None, as in OpenAI's API."""
    toks = prompt_tokens[1:] if prompt_tokens and prompt_tokens[0] == llm.token_bos() else list(prompt_tokens)
    first = len(prompt_tokens) - len(toks)   # index of toks[0] in the prompt
    scores = llm.scores
    out: Dict[str, list] = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
    text = b""
    for j, tok in enumerate(toks):
        i = first + j
        piece = llm.vocab.piece(tok)
        out["tokens"].append(piece.decode("utf-8", "ignore"))
        out["text_offset"].append(len(text.decode("utf-8", "ignore")))
        text += piece
        if j == 0:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        t, lp, top = entry(scores[i - 1], tok, k)
        tops = {llm.vocab.piece(x).decode("utf-8", "ignore"): v for x, v in top}
        tops[out["tokens"][-1]] = lp
        out["token_logprobs"].append(lp)
        out["top_logprobs"].append(tops)
    return out


def merge(a: Dict, b: Dict) -> Dict:
    return {key: a[key] + b[key] for key in a}
