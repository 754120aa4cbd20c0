"""GPU costs counted on the CPU (pr_context_counters, native/counters.cpp; issue 69): host syncs, graph
changes by ggml-cuda's rule for reusing a captured CUDA graph, device-to-host bytes and where they
land. Steady decode holds llama.cpp's: one graph, one sync, no graph change a token, the logits row
into the pinned buffer; River's predicted exits hold what they measure."""
from __future__ import annotations

import math

import numpy as np

from helpers import RIVER_PROMPT
from pyriver import Llama
from pyriver.engine import debug
from pyriver.tools import counts

N, WARM = 24, 4


def test_steady_decode_is_llama_cpps(smol_path):
    """A decode token: one graph, the one it ran last (no change for ggml-cuda to capture again), one
    host sync (the read of its logits: the graph is launched without a wait), one row of logits, into
    the pinned buffer. llama.cpp's context on the same file reuses its graph every token."""
    rows = counts.measure(smol_path, n=N, warmup=WARM, modes=("decode",))
    ours, theirs = rows
    assert ours["mode"] == "decode" and theirs["mode"] == "llama.cpp decode"
    with Llama(smol_path, n_ctx=64, verbose=False, vocab_only=True) as v:
        row_bytes = 4 * v.n_vocab()
    assert ours["graphs_per_token"] == 1
    assert ours["graph_changes_per_token"] == 0 and ours["graph_captures_per_token"] == 0
    assert ours["syncs_per_token"] == 1
    assert ours["host_bytes_per_token"] == row_bytes and ours["pinned"]
    assert ours["nodes_per_token"] > 0
    assert theirs["graph_changes_per_token"] == 0 and theirs["graphs_reused"] == N
    assert theirs["syncs_per_token"] == ours["syncs_per_token"] and theirs["host_bytes_per_token"] == row_bytes


def test_decode_changes_its_graph_where_the_cache_passes_a_multiple_of_256(smol_path):
    """The attended rows grow by 256 (kv_pad): the decode graph is rebuilt over more rows once, a
    change ggml-cuda captures again on the next token; every other token replays it."""
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river=None) as llm:
        prompt = (llm.tokenize(RIVER_PROMPT) * 40)[:250]
        out = llm.decode_logits(prompt, prompt=True)[-1]
        debug.reset_counters(llm)
        for _ in range(2):   # the graph of n_kv 256, seen and captured
            out = llm.decode_logits([int(np.argmax(out))])[-1]
        debug.reset_counters(llm)
        for _ in range(12):   # positions 252..263: n_kv 512 from position 256 on
            out = llm.decode_logits([int(np.argmax(out))])[-1]
        c = debug.counters(llm)
    assert c["graphs"] == 12 and c["syncs"] == 12
    assert c["graph_changes"] == 1 and c["graph_captures"] == 1


def test_river_predicted_counts(smol_path):
    """exit_rule "predicted", as measured on SmolLM2 (q4_0 river, tau 0.95, similarities in the graph as on
    a GPU): one graph a token; two syncs a token, the logits row and then the forecast's similarities
    (two reads: a sync each; one queued read of both would make it one, as decode); a graph change each
    time a forecast block's graph runs for the first time (each forecast is a graph of its own, kept:
the same forecast again replays it)."""
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.95,
               exit_rule="predicted") as llm:
        llm.set_exit(0.95, host_checks=False, exit_rule="predicted")
        prompt = llm.tokenize(RIVER_PROMPT)
        out = llm.decode_logits(prompt, prompt=True)[-1]
        debug.reset_counters(llm)   # graph records start here: every graph's first run is a change
        fc = []
        for _ in range(N):
            out = llm.decode_logits([int(np.argmax(out))])[-1]
            fc += debug.exit_forecasts(llm)[0]
        c = debug.counters(llm)
    row = counts._per_token(c, N, "river-predicted")
    for k in ("syncs_per_token", "graph_changes_per_token", "host_bytes_per_token", "nodes_per_token"):
        assert math.isfinite(row[k]), k
    assert row["syncs_per_token"] >= 1
    assert c["graphs"] == N
    assert c["syncs"] == 2 * N
    assert c["graph_changes"] == len(set(fc)) >= 1
    assert c["host_bytes_pinned"] < c["host_bytes"]   # the similarities land in heap memory
