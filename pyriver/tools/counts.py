"""`pyriver bench MODEL --counts`: what makes a small model slow on a GPU, counted on the CPU.

Each mode runs a few warm-up tokens, then -n tokens, with the native context's counters
(pyriver.engine.debug.counters; native/counters.cpp) on: host synchronizations (every wait for the
device: the read of logits, exit similarities, hidden states), graph changes by ggml-cuda's own
rule for reusing a captured CUDA graph (ggml_cuda_graph_update_required: a changed graph runs
uncaptured and is captured again), device-to-host copies and bytes and whether they land in the
output buffer (`pinned`: True on a GPU, whose host buffer type is pinned memory; "would be" on the
CPU alone, where the same buffer is the CPU backend's, as llama.cpp's; see pinned()), nodes. One
JSON object a line per mode:

  decode           steady greedy decode, one token a step
  verify           lossless verify steps of 16 tokens (every row's logits; per token = per verified token)
  river-checked    decode under River, exit_rule "checked" (the backbone in graphs, similarities read after each)
  river-predicted  decode under River, exit_rule "predicted" (one graph a token)
  batch4           batched decode steps of 4 sequences (per token = per sequence's token)
  llama.cpp decode llama.cpp's own context on the same file, what applies (see llama_cpp_counts)

River modes check exits in the graph (host_checks off), as they do on a GPU; on the CPU the hidden
state between a token's graphs still goes through the host (on one GPU it stays there: device carry),
so river-checked's host bytes include those reads.
"""
from __future__ import annotations

import json
from typing import Dict, List, Optional

import numpy as np

from pyriver.api.llama import Llama
from pyriver.engine import VERIFY, debug

PROMPT = b"The history of the printing press begins in the fifteenth century, when"
VERIFY_TOKENS = 16
BATCH = 4
MODES = ("decode", "verify", "river-checked", "river-predicted", "batch4")


def pinned(c: Dict[str, int], buf: Dict) -> object:
    """Where a mode's device-to-host bytes land: True when all of them land in the output buffer and
    that is pinned memory (a GPU's host buffer type); "would be" when they all land there but it is
    the CPU backend's buffer type (no GPU: the same buffer, from the type a GPU's pinned one replaces,
    as llama.cpp allocates its output buffer); False when any lands elsewhere (heap memory)."""
    if c["host_bytes"] == 0 or c["host_bytes_pinned"] != c["host_bytes"]:
        return False
    return True if buf["pinned"] else "would be"


def _per_token(c: Dict[str, int], tokens: int, mode: str, buf: Dict, **extra) -> Dict:
    row = {
        "mode": mode,
        "tokens": tokens,
        "syncs_per_token": c["syncs"] / tokens,
        "reads_per_token": c["reads"] / tokens,
        "graph_changes_per_token": c["graph_changes"] / tokens,
        "graph_captures_per_token": c["graph_captures"] / tokens,
        "graphs_per_token": c["graphs"] / tokens,
        "nodes_per_token": c["nodes"] / tokens,
        "host_bytes_per_token": c["host_bytes"] / tokens,
        "pinned": pinned(c, buf),
        "pinned_bytes_per_token": c["host_bytes_pinned"] / tokens,
        "output_buffer": buf,
    }
    row.update(extra)
    return row


def _greedy(llm, tok: int) -> int:
    return int(np.argmax(llm.decode_logits([tok])[-1]))


def _single(llm, mode: str, n: int, warmup: int) -> Dict:
    prompt = llm.tokenize(PROMPT)
    tok = int(np.argmax(llm.decode_logits(prompt, prompt=True)[-1]))
    debug.reset_counters(llm)   # the first reset starts comparing graphs
    if mode == "verify":
        # A step verifies 16 drafted tokens and keeps one (the cache advances a token a step).
        pos = len(prompt)

        def verify():
            nonlocal pos
            llm.decode_logits([tok] * VERIFY_TOKENS, logits_all=True, prompt=VERIFY)
            pos += 1
            llm.context.truncate(pos)
        for _ in range(warmup):
            verify()
        debug.reset_counters(llm)
        for _ in range(n):
            verify()
        return _per_token(debug.counters(llm), n * VERIFY_TOKENS, mode, debug.output_buffer(llm), steps=n,
                          tokens_per_step=VERIFY_TOKENS)
    for _ in range(warmup):
        tok = _greedy(llm, tok)
    debug.reset_counters(llm)
    for _ in range(n):
        tok = _greedy(llm, tok)
    return _per_token(debug.counters(llm), n, mode, debug.output_buffer(llm))


def _batch(llm, n: int, warmup: int) -> Dict:
    from pyriver.api.batch import BatchDecoder, Feed
    dec = BatchDecoder(llm, BATCH)
    try:
        prompt = llm.tokenize(PROMPT)
        first = dec.step([Feed(s, prompt[:len(prompt) - s], prompt=True) for s in range(BATCH)])
        toks = {s: int(np.argmax(first[s][0])) for s in range(BATCH)}

        def step():
            out = dec.step([Feed(s, [toks[s]]) for s in range(BATCH)])
            for s in range(BATCH):
                toks[s] = int(np.argmax(out[s][0]))
        debug.reset_counters(dec)
        for _ in range(warmup):
            step()
        debug.reset_counters(dec)
        for _ in range(n):
            step()
        return _per_token(debug.counters(dec), n * BATCH, "batch4", debug.output_buffer(dec), steps=n, sequences=BATCH)
    finally:
        dec.close()


def llama_cpp_counts(model: str, n: int, warmup: int, threads: int, n_gpu_layers: int, n_ctx: int,
                     pinned_memory: bool) -> Dict:
    """llama.cpp's context on the same file, decoding the same way. Measured: graphs it reused
    (llama_perf_context's n_reused, llama-context.cpp process_ubatch: a reused graph keeps its
    scheduler split and uid, so ggml-cuda's ggml_cuda_graph_update_required returns "unchanged" at
    once; a graph it rebuilt is counted as a change, an upper bound). Stated from its source
    (llama-context.cpp of the pinned sdist), not measured: one sync a token (decode queues the logits
    read, ggml_backend_tensor_get_async; llama_get_logits waits, llama_context::synchronize), the last
    row's n_vocab floats read a token, into its output buffer, allocated from the output device's
    ggml_backend_dev_host_buffer_type (pinned memory on CUDA; output_reserve), else the CPU buffer
    type: pinned_memory says which, as pyriver's context on the same devices found it (pyriver's
    output buffer is chosen by the same rule)."""
    import llama_cpp

    from pyriver.engine.llamacpp import graphs_reused, reset_graph_reuse
    llm = llama_cpp.Llama(model, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                          n_gpu_layers=n_gpu_layers, verbose=False)
    try:
        prompt = llm.tokenize(PROMPT)
        llm.eval(prompt)
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        for _ in range(warmup):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        reset_graph_reuse(llm.ctx)
        for _ in range(n):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        reused = graphs_reused(llm.ctx)
        n_vocab = llm.n_vocab()
        return {
            "mode": "llama.cpp decode", "tokens": n,
            "syncs_per_token": 1.0,
            "graph_changes_per_token": (n - reused) / n,
            "host_bytes_per_token": float(n_vocab * 4),
            "pinned": True if pinned_memory else "would be",
            "graphs_reused": reused,
            "how": {"graph_changes_per_token": "measured: graphs rebuilt, 1 - n_reused/n (llama_perf_context)",
                    "syncs_per_token": "source: llama-context.cpp decode (tensor_get_async) + llama_get_logits (synchronize)",
                    "host_bytes_per_token": "source: one row of n_vocab floats (logits of the last token)",
                    "pinned": "source: output_reserve allocates from the output device's "
                              "ggml_backend_dev_host_buffer_type (CUDA: pinned), else the CPU buffer type"},
        }
    finally:
        llm.close()


def measure(model: str, n: int = 32, warmup: int = 4, threads: int = 2, n_gpu_layers: int = 0,
            river: str = "q4_0", tau: float = 0.95, modes=MODES, n_ctx: int = 512, llama_cpp: bool = True,
            river_force: bool = False) -> List[Dict]:
    rows: List[Dict] = []
    kw = dict(n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_gpu_layers=n_gpu_layers, verbose=False,
              engine="native")
    plain = [m for m in modes if m in ("decode", "verify", "batch4")]
    if plain:
        llm = Llama(model, river=None, **kw)
        try:
            for m in plain:
                llm.reset()
                rows.append(_batch(llm, n, warmup) if m == "batch4" else _single(llm, m, n, warmup))
        finally:
            llm.close()
    for m in ("river-checked", "river-predicted"):
        if m not in modes:
            continue
        rule = m.split("-")[1]
        llm = Llama(model, river=river, exit_threshold=tau, exit_rule=rule, river_force=river_force, **kw)
        try:
            llm.set_exit(tau, host_checks=False, exit_rule=rule)   # in the graph, as on a GPU
            row = _single(llm, m, n, warmup)
            row.update(river=river, tau=tau, host_checks=False)
            rows.append(row)
        finally:
            llm.close()
    if llama_cpp:
        pinned_memory = any(r["output_buffer"]["pinned"] for r in rows) if rows else n_gpu_layers != 0
        rows.append(llama_cpp_counts(model, n, warmup, threads, n_gpu_layers, n_ctx, pinned_memory))
    return rows


def main(a) -> int:
    from pyriver import models
    from pyriver.tools.results import write_text
    model = str(models.resolve(a.model))
    rows = measure(model, n=a.count_tokens, threads=a.threads, n_gpu_layers=a.n_gpu_layers,
                   river=a.river or "q4_0", tau=(a.tau or [0.95])[0], river_force=a.river_force)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    print(text, end="", flush=True)
    if a.json:
        write_text(a.json, text)
    return 0
