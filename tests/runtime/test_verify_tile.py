"""Verify steps attended through flash attention's tiled kernel (pr_context_set_verify_tile_rows,
graph.cpp's tiled_attention): the query heads of each KV head folded into one product, padded to 64
rows. A verify step (prompt VERIFY) of at least verify_tile_rows tokens takes it: its logits are the
per-row kernel's within float rounding (a head folded onto another's rows, a mask row off by one or a
padding row kept would be wrong by whole units), and their bits are another kernel's. Nothing else
changes: a prompt of the same tokens, a shorter verify step, a decode step beside it in a batch."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import RIVER_PROMPT, model_path
from pyriver import Llama
from pyriver.api.batch import BatchDecoder, Feed
from pyriver.engine import VERIFY

# GQA 4 (8 heads of 32 over 2), GQA 3 (3 over 1), MHA, and Gemma 3's sliding window and soft-capped logits
MODELS = ("gqa_untied", "deep_rope_linear", "mha", "gemma3")
# 4 x 8 = 32 rows padded to 64; 17 x 4 = 68 rows unpadded; 40; and 63, the largest below the tile
STEPS = (8, 17, 40, 63)
PROMPT = 90   # more than the Gemma file's window (16), so that its local layers mask by it


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def _step(llm, toks, n: int, tile: int, prompt=VERIFY) -> np.ndarray:
    """The logits of every row of one step of n tokens after PROMPT of them, with tile set."""
    llm.reset()
    llm.context.truncate(0)
    llm.context.set_verify_tile_rows(tile)
    llm.decode_logits(toks[:PROMPT], prompt=True)
    return np.array(llm.decode_logits(toks[PROMPT:PROMPT + n], logits_all=True, prompt=prompt))


@pytest.mark.parametrize("name", MODELS)
def test_a_tiled_verify_step_attends_as_the_per_row_one(request, name):
    with Llama(model_path(request, name), n_ctx=512, n_threads=2, verbose=False, river=None, flash_attn=True) as llm:
        toks = (llm.tokenize(RIVER_PROMPT, add_bos=True) * 20)[:PROMPT + max(STEPS)]
        for n in STEPS:
            plain, tiled = _step(llm, toks, n, 0), _step(llm, toks, n, 2)
            assert _rel(tiled, plain) < 2e-2, (name, n)   # rounding (Q in F32, not F16), not another attention
            assert not np.array_equal(tiled, plain), (name, n)   # the tiled kernel's bits: it ran
            # its rows' greedy tokens are the per-row step's
            assert (tiled.argmax(1) == plain.argmax(1)).mean() >= 0.95, (name, n)
            # a step shorter than the setting, and a prompt, are untouched
            assert np.array_equal(_step(llm, toks, n, n + 1), plain), (name, n)
            assert np.array_equal(_step(llm, toks, n, 2, prompt=True), _step(llm, toks, n, 0, prompt=True)), (name, n)


def test_a_verify_step_beside_a_decode_step_in_a_batch(request):
    """The server's step: one slot verifies 12 tokens, another decodes one. The verify rows are
    tiled (within rounding), the decode row's bits the same either way."""
    with Llama(model_path(request, "gqa_untied"), n_ctx=512, n_threads=2, verbose=False, river=None,
               flash_attn=True) as llm:
        toks = (llm.tokenize(RIVER_PROMPT, add_bos=True) * 20)[:PROMPT + 12]
        rows = {}
        for tile in (0, 4):
            llm.context.set_verify_tile_rows(tile)
            dec = BatchDecoder(llm, 2)
            try:
                dec.step([Feed(0, toks[:PROMPT], prompt=True), Feed(1, toks[:PROMPT], prompt=True)])
                res = dec.step([Feed(0, toks[PROMPT:PROMPT + 12], prompt=True, all_logits=True),
                                Feed(1, toks[PROMPT:PROMPT + 1])])
                rows[tile] = (np.array(res[0][0]), np.array(res[1][0]))
            finally:
                dec.close()
    (v0, d0), (v4, d4) = rows[0], rows[4]
    assert v0.shape == v4.shape == (12, llm.n_vocab())
    assert _rel(v4, v0) < 2e-2 and not np.array_equal(v4, v0)
    assert np.array_equal(d4, d0)


def test_the_setting_is_refused_below_zero(request):
    with Llama(model_path(request, "mha"), n_ctx=128, n_threads=2, verbose=False, river=None, flash_attn=True) as llm:
        with pytest.raises(Exception, match="verify_tile_rows must be >= 0"):
            llm.context.set_verify_tile_rows(-1)


def test_the_automatic_table_tiles_only_where_it_may(request, tmp_cache, monkeypatch):
    """The automatic verify table times the tiled steps only with flash attention and tiled_verify
    (the sizes of costcurve.TILE_SIZES), and the Llama's context takes the rows it chose."""
    from pyriver.speculative import costcurve
    seen = []
    real = costcurve.measure

    def measure(llm, sizes, repeats, prompt, small_repeats=0, tiled=(), tick=None):
        seen.append(list(tiled))
        return real(llm, sizes, 1, prompt, 1, tiled, tick=tick)
    monkeypatch.setattr(costcurve, "measure", measure)
    # 12 wherever a step was timed tiled (what tile_rows makes of the times: tests/unit/test_cost_measure.py)
    monkeypatch.setattr(costcurve, "tile_rows",
                        lambda far, near=None: 12 if any("tiled_ratio" in r for r in far.values()) else 0)
    path = model_path(request, "gqa_untied")
    with Llama(path, n_ctx=2048, n_threads=2, verbose=False, river=None, flash_attn=True, lossless=True,
               draft_model="ngram", draft_cost="auto") as llm:
        assert seen[0] == list(costcurve.TILE_SIZES) and llm.verify_tile_rows == 12
        assert llm.context.args.verify_tile_rows == 12   # a BatchDecoder's context (the server's) too
        assert llm.speculator.cost.untiled is not None   # what a step of several sequences reads
    seen.clear()
    for kw in (dict(flash_attn=False), dict(flash_attn=True, tiled_verify=False)):
        with Llama(path, n_ctx=2048, n_threads=2, verbose=False, river=None, lossless=True, draft_model="ngram",
                   draft_cost="auto", **kw) as llm:
            assert llm.verify_tile_rows == 0
    assert seen and all(t == [] for t in seen)
