"""Several sequences in one context (pyriver.api.batch, native pr_decode_batch): each sequence's result
in a batch is its result alone, the cache stays complete under every batch exit rule, and bad
batches are refused before any graph runs."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import PROMPTS, model_path
from pyriver import Llama
from pyriver.engine import debug
from pyriver.api.batch import BATCH_RULES, BatchDecoder, Feed
from pyriver.engine.sampling import Sampler, SamplingParams
from pyriver.server.scheduler import Request, Scheduler

N_GEN = 24


def _greedy():
    return Sampler(SamplingParams(temperature=0.0))


def _run(sched: Scheduler, prompts, max_tokens=N_GEN):
    """Submits every prompt at once; the generated tokens of each, and its exit blocks."""
    reqs = [Request(prompt=p, sampler=_greedy(), max_tokens=max_tokens) for p in prompts]
    for r in reqs:
        sched.submit(r)
    out = []
    for r in reqs:
        toks = []
        while True:
            item = r.out.get(timeout=300)
            if item[0] == "end":
                assert not item[1].startswith("error"), item[1]
                break
            toks.append(item[1])
        out.append((toks, r.exits))
    return out


@pytest.mark.parametrize("model", ["smol", "gemma3"])
def test_eight_sequences_together_give_their_texts_alone(request, model):
    """The parity prompts decoded together (8 slots, prompts in chunks of 5 beside decode steps)
    give each prompt's greedy tokens alone, bit-for-bit logits included (batch_invariant=True)."""
    with Llama(model_path(request, model), n_ctx=256, n_threads=2, verbose=False, river=None,
               batch_invariant=True) as llm:
        prompts = [llm.tokenize(p.encode()) for p in PROMPTS]
        alone = [list(llm.context.generate_tokens(p, _greedy(), N_GEN)) for p in prompts]
        sched = Scheduler(llm, 8, prompt_chunk=5)
        try:
            together = _run(sched, prompts)
        finally:
            sched.stop()
        assert [t for t, _ in together] == alone
        # Logits: a step of three sequences (a decode token, a 4-token prompt chunk, one more token)
        # against each alone.
        # Then a decode step of all three (one attention product for the three regions, graph.cpp's
        # run_attention) against each alone.
        dec = BatchDecoder(llm, 3)
        try:
            dec.step([Feed(0, prompts[0], prompt=True), Feed(2, prompts[2], prompt=True)])
            got = dec.step([Feed(0, [alone[0][0]]), Feed(1, prompts[1][:4], prompt=True), Feed(2, [alone[2][0]])])
            run = dec.step([Feed(0, [alone[0][1]]), Feed(1, [prompts[1][4]]), Feed(2, [alone[2][1]])])
        finally:
            dec.close()
        for seq, before, last, nxt in ((0, prompts[0], [alone[0][0]], alone[0][1]), (1, [], prompts[1][:4], prompts[1][4]),
                                       (2, prompts[2], [alone[2][0]], alone[2][1])):
            llm.reset()
            if before:
                llm.decode_logits(before, prompt=True)
            ref = llm.decode_logits(last, prompt=len(last) > 1)[-1]
            assert np.array_equal(got[seq][0], ref), seq
            assert np.array_equal(run[seq][0], llm.decode_logits([nxt])[-1]), seq


def test_sequences_reuse_and_truncate_independently(llm):
    dec = BatchDecoder(llm, 2)
    try:
        a, b = llm.tokenize(b"Hello there"), llm.tokenize(b"The capital of France is")
        dec.step([Feed(0, a, prompt=True), Feed(1, b, prompt=True)])
        assert (dec.pos(0), dec.pos(1)) == (len(a), len(b))
        dec.truncate(1, 2)
        assert (dec.pos(0), dec.pos(1)) == (len(a), 2)
        with pytest.raises(ValueError, match="sequence 2"):
            dec.pos(2)
        with pytest.raises(ValueError, match="cannot truncate"):
            dec.truncate(0, len(a) + 1)
    finally:
        dec.close()


def test_a_step_that_keeps_no_logits(llm):
    """A prompt chunk before a prompt's last (logits=False on every feed) keeps no rows, and the
    chunks in turn give the logits of the whole prompt in one step."""
    toks = llm.tokenize(b"The capital of France is Paris, and the capital of Spain is")
    dec = BatchDecoder(llm, 2)
    try:
        out = dec.step([Feed(0, toks[:5], prompt=True, logits=False), Feed(1, toks[:3], prompt=True, logits=False)])
        assert out[0][0] is None and out[1][0] is None and len(out[0][1]) == 5
        chunked = dec.step([Feed(0, toks[5:], prompt=True)])[0][0]
        whole = dec.step([Feed(1, toks[3:], prompt=True)])[1][0]
        assert chunked.shape == (llm.n_vocab(),) and np.argmax(chunked) == np.argmax(whole)
    finally:
        dec.close()


def test_bad_batches_are_refused_and_change_nothing(llm):
    dec = BatchDecoder(llm, 2)
    try:
        toks = llm.tokenize(b"Hello")
        dec.step([Feed(0, toks, prompt=True)])
        for feeds, msg in [([Feed(5, [1])], "sequence (id )?5"),
                           ([Feed(0, [llm.n_vocab()])], "out of range"),
                           ([Feed(1, [1] * (dec.n_ctx + 1), prompt=True)], "exceeds n_batch|do not fit")]:
            with pytest.raises(ValueError, match=msg):
                dec.step(feeds)
        assert (dec.pos(0), dec.pos(1)) == (len(toks), 0)
        with pytest.raises(ValueError, match="at least one token"):
            dec.step([Feed(0, [])])
    finally:
        dec.close()
    with pytest.raises(ValueError, match="batch_rule"):
        BatchDecoder(llm, 2, batch_rule="widest")


@pytest.mark.parametrize("model", ["smol", "gemma3"])
@pytest.mark.parametrize("rule", sorted(BATCH_RULES))
def test_poisoned_cache_with_several_sequences(request, model, rule):
    """Under every batch exit rule, 4 sequences decoded together with River exits read only rows
    that were written: a cache filled with NaN gives finite logits (flash attention, which skips
    masked rows, as in test_river) and one filled with a large finite value gives the clean cache's
    logits bit for bit. Exits really happen."""
    with Llama(model_path(request, model), n_ctx=128, n_threads=2, verbose=False, river="q4_0", flash_attn=True,
               exit_threshold={"smol": 0.9, "gemma3": 0.8}[model], min_exit_layer=1) as llm:
        prompts = [llm.tokenize(p.encode()) for p in PROMPTS[:4]]
        runs = []
        for value in (None, 1000.0, float("nan")):
            dec = BatchDecoder(llm, 4, batch_rule=rule)
            try:
                if value is not None:
                    debug.kv_fill(dec, value)
                runs.append(_decode_steps(dec, prompts, 12))
            finally:
                dec.close()
        (clean, exits), (big, _), (nan, _) = runs
        L = llm.info["n_layer"]
        # exits (under split at several blocks, so that later tokens read rows earlier ones wrote on the river)
        assert len({e for e in exits if e < L - 1}) >= (2 if rule == "split" else 1)
        assert np.isfinite(nan).all()
        assert np.array_equal(clean, big)


def _decode_steps(dec, prompts, n):
    """Greedy decode of every prompt together, n steps: the stacked logits and every exit block."""
    res = dec.step([Feed(i, p, prompt=True) for i, p in enumerate(prompts)])
    logits, exits = [], []
    for _ in range(n):
        feeds = [Feed(i, [int(np.argmax(res[i][0]))]) for i in range(len(prompts))]
        res = dec.step(feeds)
        for i in range(len(prompts)):
            logits.append(res[i][0])
            exits.extend(res[i][1])
    return np.stack(logits), exits


@pytest.mark.parametrize("river", ["q4_0", "q4_0+head-q4_0"])
def test_split_rule_gives_each_sequence_its_river_result_alone(smol_path, river):
    """Under the split rule a sequence leaves the backbone where it would alone (its similarities are
    its own, computed batch-invariantly): 8 sequences together give their River tokens and exit
    blocks alone; with the river's own head too (a step's lanes then take two heads)."""
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river=river, exit_threshold=0.95,
               min_exit_layer=2, batch_invariant=True) as llm:
        prompts = [llm.tokenize(p.encode()) for p in PROMPTS]
        alone = []
        for p in prompts:
            toks = list(llm.context.generate_tokens(p, _greedy(), N_GEN))
            alone.append((toks, list(llm.last_stats["exits"])))
        sched = Scheduler(llm, 8, batch_rule="split", prompt_chunk=7)
        try:
            together = _run(sched, prompts)
        finally:
            sched.stop()
        assert len({e for _, ex in alone for e in ex}) > 3
        assert [t for t, _ in together] == [t for t, _ in alone]
        # neither runs the last token when max_tokens ends it
        assert [ex for _, ex in together] == [ex for _, ex in alone]


def test_sequences_of_different_lengths_attend_together_as_alone(smol_path):
    """Flash attention: one-token decode rows of sequences whose caches end in different 256-row
    blocks attend over one common length in one product, as llama.cpp's streams (batch.cpp). The
    rows past the short sequence's own are masked and never read: with the cache filled with NaN
    first, its logits are finite and equal its logits decoded alone bit for bit (both one query over
    whole rows). The long one picks the token its decode step alone picks after the same prompt step
    (its logits differ by the products' row counts, one row against two); it runs on a clean cache,
    since ggml's multi-token flash attention of its prompt reads a NaN past its end (a poisoned cache
    only)."""
    with Llama(smol_path, n_ctx=1024, n_threads=2, verbose=False, river=None, flash_attn=True) as llm:
        short = llm.tokenize(PROMPTS[0].encode())
        long = llm.tokenize((" ".join(PROMPTS) * 8).encode())[:300]
        assert len(short) < 255 < len(long)
        got = []
        for fill, seqs in ((float("nan"), (0, 1)), (None, (0, 1)), (None, (1,))):
            dec = BatchDecoder(llm, 2)
            try:
                if fill is not None:
                    debug.kv_fill(dec, fill)
                dec.step([Feed(0, short, prompt=True), Feed(1, long, prompt=True)])
                got.append(dec.step([Feed(q, [7]) for q in seqs]))
            finally:
                dec.close()
        llm.reset()
        llm.decode_logits(short, prompt=True)
        alone = llm.decode_logits([7])[-1]
        assert np.array_equal(got[0][0][0], alone)
        assert np.array_equal(got[1][0][0], alone)
        together, by_itself = got[1][1][0], got[2][1][0]
        assert np.isfinite(together).all() and int(np.argmax(together)) == int(np.argmax(by_itself))
