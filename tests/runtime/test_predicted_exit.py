"""Predicted exits (exit_rule "predicted" and "guarded", native/forecast.h): the forecast rule as
documented, one graph a decode step, exact where the forecast says full depth, the guard's bound,
and batches."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import RIVER_PROMPT
from helpers import generate_logits as _generate_logits
from pyriver import Llama
from pyriver.engine import debug
from pyriver.api.batch import BatchDecoder, Feed

N = 24


def _steps(llm, n=N, tau=None, rule=None):
    """Greedy decode from RIVER_PROMPT, step by step: (logits, exits, forecasts, observed, graphs per step)."""
    if tau is not None:
        llm.set_exit(tau, llm.min_exit_layer, exit_rule=rule)
    llm.reset()
    out = llm.decode_logits(llm.tokenize(RIVER_PROMPT))[-1]
    rows, exits, fc, ob, graphs = [out], [], [], [], []
    for _ in range(n):
        g0 = debug.graph_runs(llm)
        out = llm.decode_logits([int(np.argmax(out))])[-1]
        graphs.append(debug.graph_runs(llm) - g0)
        rows.append(out)
        exits += llm.last_exits
        f, o = debug.exit_forecasts(llm)
        fc += f
        ob += o
    return np.stack(rows), exits, fc, ob, graphs


def _expected_forecasts(observed, L, lo):
    """The rule of native/forecast.h, restated: the upper quartile of the last 8 observed exits (a
    censored one, -1, counts as L-1), clamped to [lo, L-1]; full depth with no history."""
    out, hist = [], []
    for o in observed:
        if not hist:
            out.append(L - 1)
        else:
            s = sorted(hist)
            out.append(min(L - 1, max(lo, s[max((len(s) * 3 + 3) // 4, 1) - 1])))
        hist = (hist + [L - 1 if o < 0 else o])[-8:]
    return out


@pytest.fixture(scope="module")
def full(smol_path):
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False) as llm:
        yield _steps(llm)[0]


@pytest.mark.parametrize("rule", ["predicted", "guarded"])
def test_never_exit_is_identical_to_full_depth(smol_path, full, rule):
    """tau > 1 never exits; tau 1.0 forecasts full depth for every step (no block reaches it), and a
    full-depth forecast runs the full-depth graph: the same bits, one graph a step."""
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river="q4_0", exit_threshold=1.5, exit_rule=rule) as llm:
        L = llm.info["n_layer"]
        got, exits, *_ = _steps(llm)
        assert np.array_equal(full, got) and set(exits) == {L - 1}
        got, exits, fc, ob, graphs = _steps(llm, tau=1.0)
        assert np.array_equal(full, got)
        assert set(exits) == set(fc) == set(ob) == {L - 1}
        assert graphs == [1] * N


def test_predicted_is_one_graph_a_step_and_follows_the_forecast_rule(smol_path):
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975,
               min_exit_layer=4, exit_rule="predicted") as llm:
        L = llm.info["n_layer"]
        got, exits, fc, ob, graphs = _steps(llm, n=40)
        # The one graph computes what the checked path's graphs compute for a token forced out at the
        # same block (backbone to it, river after it): the same bits.
        forced, _ = _generate_logits(llm, n=40, schedule=lambda m, i: m.set_exit(2.0, 4, exits[i], exit_rule="checked"))
    assert np.array_equal(forced, got)
    assert graphs == [1] * 40
    assert exits == fc                                   # the token leaves where it was forecast
    assert fc == _expected_forecasts(ob, L, 4)
    assert len(set(fc)) > 2                              # the rule, not a constant
    for f, o in zip(fc, ob):                             # what came back: the first block at tau it ran
        assert (4 <= o <= f) or (o == -1 and f < L - 1) or (o == L - 1 == f)


def test_same_type_river_predicted_gives_full_depth_bits(smol_path, full):
    """A river of the backbone's own type computes the backbone's bits, so whatever the forecasts the
    one-graph step (backbone to the forecast, river after it, one cache) must give full depth's logits."""
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river="q4_1", river_force=True, exit_threshold=0.97,
               min_exit_layer=2, exit_rule="predicted") as llm:
        L = llm.info["n_layer"]
        got, exits, *_ = _steps(llm)
    assert len({e for e in exits if e < L - 1}) > 1
    assert np.array_equal(full, got)


def test_guarded_never_leaves_before_its_first_block_at_tau(smol_path):
    """The bound: a step leaves at its forecast when a block at tau came by then, else where the
    checked path leaves (the first block at tau after the forecast, or full depth)."""
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975,
               min_exit_layer=4, exit_rule="guarded") as llm:
        L = llm.info["n_layer"]
        _, exits, fc, ob, graphs = _steps(llm, n=40)
    assert fc == _expected_forecasts(ob, L, 4)
    hits = 0
    for e, f, o in zip(exits, fc, ob):
        assert 4 <= o <= L - 1                           # never censored: the guard sees every exit
        assert e == (f if o <= f else o)
        hits += o <= f < L - 1
    assert hits > 0 and len(set(exits)) > 2
    assert min(graphs) == 1 and max(graphs) >= 2         # two graphs when the forecast held


def _batch_steps(llm, n_seq, rule, n):
    dec = BatchDecoder(llm, n_seq, rule)
    try:
        prompts = [llm.tokenize(RIVER_PROMPT)[: 6 + 3 * i] for i in range(n_seq)]
        res = dec.step([Feed(i, p, prompt=True) for i, p in enumerate(prompts)])
        steps = []
        for _ in range(n):
            res = dec.step([Feed(i, [int(np.argmax(res[i][0]))]) for i in range(n_seq)])
            steps.append(([res[i][0] for i in range(n_seq)], [res[i][1][0] for i in range(n_seq)], debug.exit_forecasts(dec)))
        return prompts, steps
    finally:
        dec.close()


def test_batch_split_gives_each_sequence_its_predicted_result_alone(smol_path):
    """Under split each sequence runs its own forecast (slots that agree share a lane): together they
    give the tokens, exits and forecasts each gives alone."""
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975, min_exit_layer=4,
               batch_invariant=True, exit_rule="predicted") as llm:
        L = llm.info["n_layer"]
        prompts, steps = _batch_steps(llm, 4, "split", 16)
        for i, p in enumerate(prompts):
            llm.reset()
            out = llm.decode_logits(p)[-1]
            for logits, exits, (fc, _) in steps:
                out = llm.decode_logits([int(np.argmax(out))])[-1]
                assert int(np.argmax(out)) == int(np.argmax(logits[i]))
                assert llm.last_exits == [exits[i]] == [fc[i]]
    assert len({e for _, ex, _ in steps for e in ex if e < L - 1}) > 1


@pytest.mark.parametrize("rule", ["minimum", "all"])
def test_batch_minimum_and_all_leave_at_the_deepest_forecast(smol_path, rule):
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.975, min_exit_layer=4,
               exit_rule="predicted") as llm:
        _, steps = _batch_steps(llm, 3, rule, 12)
    for _, exits, (fc, ob) in steps:
        assert len(set(exits)) == 1 and exits == fc
    assert len({s[1][0] for s in steps}) > 1


def test_bad_exit_rule_is_a_clear_error(smol_path):
    with pytest.raises(ValueError, match="exit_rule must be one of"):
        Llama(smol_path, verbose=False, river="q4_0", exit_rule="sometimes")
    with pytest.raises(ValueError, match="need a river"):
        Llama(smol_path, verbose=False, river=None, exit_rule="predicted")
    with Llama(smol_path, n_ctx=64, n_threads=2, verbose=False, river="q4_0") as llm:
        with pytest.raises(ValueError, match="exit_rule must be one of"):
            llm.set_exit(0.97, exit_rule="Predicted")
        from pyriver.engine.binding import ffi, lib
        p = ffi.new("pr_exit_params *", lib.pr_exit_default_params())
        p.exit_rule = 7
        assert lib.pr_context_set_exit(llm._native_ctx, p) != 0
        assert llm.exit_rule == "checked"
