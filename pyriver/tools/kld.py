"""`pyriver eval -f TEXT --kl-divergence-base FILE [--kl-divergence]`: llama-perplexity's KL
divergence, on its files. Without --kl-divergence the model at full depth writes the base file
(its logits at the scored positions of each chunk); with it the evaluated configuration (the
model file at full depth, or a River point) is compared with a base file, and llama-perplexity's
lines are printed.

Chunks as llama-perplexity cuts them: the text tokenized with the BOS, n_ctx tokens a chunk
(at most --chunks, at least two chunks' worth of text), each evaluated from an empty cache with its
first token replaced by the BOS (when the vocabulary adds one); the first half of a chunk is
context only, positions n_ctx // 2 .. n_ctx - 2 are scored (each against the next token). At full
depth a chunk is one batch, as there; a River point runs the first half and its first scored token
as a prompt and each later token as a decode step, as generation would, so exits apply. A lossless
point (draft length K) runs the same prompt, then the later tokens in verify steps of K + 1 rows
through lossless mode's own verify call (pyriver.speculative.lossless.verify): the steps lossless
generation takes when every draft is kept (a rejection makes a step shorter; which rows come out of
a step of which size is the only thing that differs: its tokens are the text's). Its text is full
depth's; the KLD says what its multi-row steps' last bits cost."""
from __future__ import annotations

import sys
from typing import List, Optional

import numpy as np

from pyriver.api.llama import Llama
from pyriver.speculative.lossless import verify as verify_step
from pyriver.tools import kld_file, kld_stats
from pyriver.tools.engine import feed, progress


def adds_bos(llm) -> bool:
    return len(llm.tokenize(b"a", add_bos=True)) > len(llm.tokenize(b"a", add_bos=False))


def n_chunks(n_tokens: int, n_ctx: int, chunks: Optional[int]) -> int:
    """llama-perplexity's count: whole chunks of the text, at most --chunks; it needs 2 * n_ctx tokens."""
    if n_tokens < 2 * n_ctx:
        raise ValueError(f"you need at least {2 * n_ctx} tokens to evaluate perplexity with a context of {n_ctx}: "
                         f"the text tokenizes to only {n_tokens} tokens")
    most = n_tokens // n_ctx
    return most if chunks is None or chunks < 0 else min(chunks, most)


def chunk_logits(llm, chunk: List[int], bos: Optional[int], stepwise: bool, verify: int = 0) -> np.ndarray:
    """The logits [n_ctx - 1 - n_ctx // 2, n_vocab] at a chunk's scored positions: one batch, or
    stepwise (decode steps), or with verify = K + 1 lossless mode's verify steps of K + 1 rows."""
    n_ctx = len(chunk)
    first = n_ctx // 2
    toks = list(chunk)
    if bos is not None:
        toks[0] = bos
    if verify > 0:
        llm.reset()
        # the prompt (lossless generation's first token comes from its last row), then verify steps
        rows = [np.asarray(llm.decode_logits(toks[:first + 1], prompt=True))[-1:]]
        for i in range(first + 1, n_ctx - 1, verify):
            rows.append(np.asarray(verify_step(llm, toks[i:min(i + verify, n_ctx - 1)])))
        return np.concatenate(rows)
    if not stepwise:
        llm.reset()
        return np.asarray(llm.decode_logits(toks, logits_all=True))[first:n_ctx - 1]
    run = feed(llm, toks[:first + 1], toks[first + 1:n_ctx - 1], keep_logits=True)
    return np.stack(run.logits)


def lossless_llama(model: str, n_ctx: int, threads: int, verify_tile_rows: int = 0, **kw):
    """The model at full depth as lossless mode verifies with it, for chunk_logits(verify=K + 1): a
    verify step's logits do not depend on the drafter (its tokens are the text's here), so no river is
    loaded; verify_tile_rows as lossless mode's measured table would set it (Context.set_verify_tile_rows)."""
    llm = Llama(model, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False, river=None, **kw)
    if verify_tile_rows:
        llm.context.set_verify_tile_rows(verify_tile_rows)
    return llm


def write_base(llm, path: str, tokens: List[int], n_ctx: int, chunks: Optional[int]) -> int:
    """Write llama-perplexity's base file from llm at full depth; returns the chunks written."""
    n_chunk = n_chunks(len(tokens), n_ctx, chunks)
    n_vocab = llm.n_vocab()
    bos = llm.token_bos() if adds_bos(llm) else None
    bar = progress(n_chunk * n_ctx, "kl-divergence base")
    nll = nll2 = 0.0
    count = 0
    first = n_ctx // 2
    with open(path, "wb") as f:
        kld_file.write_header(f, n_ctx, n_vocab, n_chunk, tokens)
        for c in range(n_chunk):
            chunk = tokens[c * n_ctx:(c + 1) * n_ctx]
            logits = chunk_logits(llm, chunk, bos, False)
            kld_file.write_chunk(f, logits, n_vocab)
            x = np.asarray(logits, np.float32)[:, :n_vocab]
            mx, lse = kld_file.log_sum_exp(x)
            v = (mx + lse - x[np.arange(len(x)), chunk[first + 1:]]).astype(np.float64)   # its per-token nll
            nll, nll2, count = nll + v.sum(), nll2 + (v * v).sum(), count + len(v)
            bar.update(n_ctx)
            bar.clear()
            print(f"[{c + 1}]{np.exp(nll / count):.4f},", end="", flush=True)
    bar.close()
    m = nll / count
    var = nll2 / count - m * m
    print(f"\nFinal estimate: PPL = {np.exp(m):.4f} +/- {np.sqrt(var / (count - 1)) * np.exp(m) if var > 0 else float('nan'):.5f}")
    print(f"kl-divergence base: {n_chunk} chunks of {n_ctx} tokens, {n_vocab} log-probs a row, written to {path}")
    return n_chunk


def read_header(path: str) -> kld_file.Header:
    with open(path, "rb") as f:
        return kld_file.read_header(f, path)


def compare(llm, path: str, stepwise: bool, chunks: Optional[int] = None, label: str = "", verify: int = 0) -> dict:
    """llm against the base file: llama-perplexity's running lines per chunk, then its statistics.
    Returns the statistics' figures. stepwise: a River point's decode steps; verify = K + 1: a
    lossless point's verify steps (chunk_logits)."""
    with open(path, "rb") as f:
        h = kld_file.read_header(f, path)
        if h.n_vocab != llm.n_vocab():
            raise ValueError(f"{path}: inconsistent vocabulary ({h.n_vocab} vs the model's {llm.n_vocab()})")
        if h.n_ctx > llm.n_ctx():
            raise ValueError(f"{path} has been computed with n_ctx {h.n_ctx}, while the current context is {llm.n_ctx()}")
        n_chunk = h.n_chunk if chunks is None or chunks < 0 else min(chunks, h.n_chunk)
        bos = llm.token_bos() if adds_bos(llm) else None
        first = h.n_ctx // 2
        k = kld_stats.KLDivergence()
        print(f"\nkl-divergence{label}: {n_chunk} chunks, n_ctx={h.n_ctx}\n")
        print(kld_stats.TABLE_HEAD)
        bar = progress(n_chunk * h.n_ctx, f"kl-divergence{label}")
        for c in range(n_chunk):
            rows = kld_file.read_chunk(f, h, c, path)
            chunk = h.tokens[c * h.n_ctx:(c + 1) * h.n_ctx].tolist()
            logits = chunk_logits(llm, chunk, bos, stepwise, verify)
            k.add(logits, rows, np.asarray(chunk[first + 1:]), h.n_vocab)
            bar.update(h.n_ctx)
            bar.clear()
            print(kld_stats.chunk_line(c + 1, k))
            sys.stdout.flush()
        bar.close()
    print()
    if k.count < 100:   # llama-perplexity prints no statistics on so few values
        return kld_stats.summary(k, tails=False)
    s = kld_stats.summary(k)
    print("\n".join(kld_stats.report_lines(s)))
    return s
