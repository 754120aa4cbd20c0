"""GPU costs counted on the CPU (pr_context_counters, native/counters.cpp; issue 69): host syncs, graph
changes by ggml-cuda's rule for reusing a captured CUDA graph, device-to-host bytes and where they
land. Steady decode holds llama.cpp's: one graph, one sync, no graph change a token, the logits row
into the output buffer (pinned on a GPU); verify and batched steps read all their rows in one copy
into it; River's predicted exits one graph and one sync a token."""
from __future__ import annotations

import math

import numpy as np

from helpers import PROMPTS, RIVER_PROMPT
from pyriver import Llama
from pyriver.engine import debug
from pyriver.tools import counts

N, WARM = 24, 4


def _row_bytes(smol_path):
    with Llama(smol_path, n_ctx=64, verbose=False, vocab_only=True) as v:
        return 4 * v.n_vocab()


def _in_output_buffer(row):
    """Every byte read landed in the output buffer: pinned memory with a GPU, the CPU backend's buffer
    (where a GPU's pinned one would be) without one."""
    return row["pinned"] == (True if row["output_buffer"]["pinned"] else "would be")


def test_steady_decode_is_llama_cpps(smol_path):
    """A decode token: one graph, the one it ran last (no change for ggml-cuda to capture again), one
    host sync (the read of its logits: the graph is launched without a wait), one row of logits, into
    the pinned buffer. llama.cpp's context on the same file reuses its graph every token."""
    rows = counts.measure(smol_path, n=N, warmup=WARM, modes=("decode",))
    ours, theirs = rows
    assert ours["mode"] == "decode" and theirs["mode"] == "llama.cpp decode"
    row_bytes = _row_bytes(smol_path)
    assert ours["graphs_per_token"] == 1
    assert ours["graph_changes_per_token"] == 0 and ours["graph_captures_per_token"] == 0
    assert ours["syncs_per_token"] == 1 and ours["reads_per_token"] == 1
    assert ours["host_bytes_per_token"] == row_bytes and ours["pinned"] and _in_output_buffer(ours)
    assert ours["nodes_per_token"] > 0
    assert theirs["graph_changes_per_token"] == 0 and theirs["graphs_reused"] == N
    assert theirs["syncs_per_token"] == ours["syncs_per_token"] and theirs["host_bytes_per_token"] == row_bytes
    assert theirs["pinned"] == ours["pinned"]


def test_verify_step_reads_its_rows_in_one_copy_into_the_output_buffer(smol_path):
    """A verify step of 16 tokens: one graph, unchanged from step to step; its 16 rows of logits
    come back in one device-to-host copy and one sync, into the output buffer (llama.cpp's, grown to
    the step's rows), not into heap memory."""
    (row,) = counts.measure(smol_path, n=8, warmup=2, modes=("verify",), llama_cpp=False)
    steps, per = row["steps"], row["tokens_per_step"]
    assert per == counts.VERIFY_TOKENS and row["tokens"] == steps * per
    assert row["graphs_per_token"] * per == 1 and row["graph_changes_per_token"] == 0
    assert row["reads_per_token"] * per == 1 and row["syncs_per_token"] * per == 1
    assert row["host_bytes_per_token"] == _row_bytes(smol_path)
    assert _in_output_buffer(row)


def test_batch_step_reads_its_rows_in_one_copy_into_the_output_buffer(smol_path):
    """A decode step of 4 sequences: one graph, unchanged; the 4 rows in one copy and one sync into
    the output buffer (sized for the 4 slots), no copy per sequence."""
    (row,) = counts.measure(smol_path, n=8, warmup=2, modes=("batch4",), llama_cpp=False)
    seqs = row["sequences"]
    assert seqs == counts.BATCH and row["tokens"] == row["steps"] * seqs
    assert row["graphs_per_token"] * seqs == 1 and row["graph_changes_per_token"] == 0
    assert row["reads_per_token"] * seqs == 1 and row["syncs_per_token"] * seqs == 1
    assert row["host_bytes_per_token"] == _row_bytes(smol_path)
    assert _in_output_buffer(row)


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
    a GPU): one graph a token; one sync a token, as decode: the logits row and the forecast's
    similarities are two queued copies into the output buffer and one wait; a graph change each
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
        buf = debug.output_buffer(llm)
    row = counts._per_token(c, N, "river-predicted", buf)
    for k in ("syncs_per_token", "graph_changes_per_token", "host_bytes_per_token", "nodes_per_token"):
        assert math.isfinite(row[k]), k
    assert row["syncs_per_token"] >= 1
    assert c["graphs"] == N
    assert c["syncs"] == N and c["reads"] == 2 * N   # the logits and the similarities, one wait
    assert c["graph_changes"] == len(set(fc)) >= 1
    assert _in_output_buffer(row)   # the similarities land beside the logits, not in heap memory


def test_river_predicted_batch_step_is_one_sync(smol_path):
    """A predicted step of 4 sequences whose forecasts differ (a lane each, in one graph): its rows and
    every lane's similarities come back in queued copies into the output buffer and one wait."""
    from pyriver.api.batch import BatchDecoder, Feed
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975,
               min_exit_layer=4, exit_rule="predicted") as llm:
        llm.set_exit(0.975, min_exit_layer=4, host_checks=False, exit_rule="predicted")
        dec = BatchDecoder(llm, 4)
        try:
            prompts = [llm.tokenize(p.encode()) for p in PROMPTS[:4]]
            res = dec.step([Feed(i, p, prompt=True) for i, p in enumerate(prompts)])
            lanes, steps = set(), 12
            debug.reset_counters(dec)
            for _ in range(steps):
                res = dec.step([Feed(i, [int(np.argmax(res[i][0]))]) for i in range(4)])
                lanes.add(len(set(debug.exit_forecasts(dec)[0])))
            c = debug.counters(dec)
            buf = debug.output_buffer(dec)
        finally:
            dec.close()
    assert max(lanes) > 1   # steps of several lanes were counted
    assert c["graphs"] == steps and c["syncs"] == steps
    assert _in_output_buffer(counts._per_token(c, steps, "river-predicted batch4", buf))


def test_embeddings_land_in_the_output_buffer(smol_path):
    """An embed's rows (every token's hidden state after the final norm) come back in one copy into
    the output buffer, as llama.cpp's embeddings do: pinned memory on a GPU, not heap memory. The rows
    are the same wherever they land: embedded again after a completion has used the buffer."""
    text = " ".join(PROMPTS)
    with Llama(smol_path, n_ctx=512, embedding=True, verbose=False, engine="native") as llm:
        n, E = len(llm.tokenize(text.encode())), llm.n_embd()
        debug.reset_counters(llm)
        first = llm.embed(text, normalize=False)
        c, buf = debug.counters(llm), debug.output_buffer(llm)
        llm.create_completion("The river", max_tokens=4)   # logits rows through the same buffer
        assert llm.embed(text, normalize=False) == first
    assert n > 16 and len(first) == n and len(first[0]) == E
    assert c["host_bytes"] == n * E * 4 and c["reads"] == 1 and c["syncs"] == 1
    assert _in_output_buffer({"pinned": counts.pinned(c, buf), "output_buffer": buf})
