"""A verify cost table measured at two contexts (pyriver.speculative.costcurve.auto) is read at each step's
context: every row of a step attends over the whole cache, so a long step's cost over a single
step's grows with the context, and the draft length rule drafts less after a long text."""
from __future__ import annotations

import json

import pytest

from helpers import RecordingCost
from pyriver.speculative import costcurve
from pyriver.speculative.draftlen import DraftCost, DraftLength, choose_together, parse_cost

# The 1.5B Q4_K_M on the Xeon, 2 threads, flash attention: after 144 and after 576 tokens
NEAR = {1: 1.0, 2: 1.46, 4: 1.54, 8: 2.79, 16: 3.55, 32: 6.0}
FAR = {1: 1.0, 2: 1.51, 4: 1.63, 8: 3.16, 16: 4.08, 32: 7.05}
COST = DraftCost(NEAR, 0.77, 144, (576, FAR, 1.044))


def test_the_table_is_read_at_the_context():
    assert COST.at(144).points == NEAR and COST.at(None) is COST
    assert COST.at(576).points == pytest.approx(FAR)
    assert COST.at(10).points == NEAR                      # before the near context: as measured there
    mid = COST.at(360).points
    assert all(NEAR[n] < mid[n] < FAR[n] for n in (8, 16, 32))
    far = COST.at(2016).points
    assert far[32] > FAR[32] and far[16] > FAR[16]         # past the far context it keeps growing,
    assert COST.at(10 ** 6).points == COST.at(144 + 9 * 432).points   # to MAX_FAR distances
    one = DraftCost(NEAR, 0.77)
    assert one.at(5000) is one                             # a table of one context is read as it is


def test_a_noisy_far_single_step_never_makes_steps_cheaper_with_context():
    c = DraftCost(NEAR, 0.0, 144, (576, FAR, 0.9)).at(2000).points
    assert all(c[n] >= NEAR[n] for n in NEAR)


def test_the_rule_drafts_less_after_a_long_text():
    def dl():
        d = DraftLength(COST, draft_max=64)
        for _ in range(20):
            d.update("ngram9", 16, 12)   # 12 of 16 kept: long drafts pay where long steps are cheap
        return d
    near, far = dl().choose("ngram9", 31, context=144), dl().choose("ngram9", 31, context=2016)
    assert (near, far) == (15, 3)
    picks = lambda: [(dl(), "ngram9", 31) for _ in range(4)]
    assert sum(choose_together(picks(), COST, context=2016)) < sum(choose_together(picks(), COST, context=144))


def test_stored_as_a_calibration_and_a_cache_file_stores_it(tmp_path):
    assert parse_cost(COST.to_dict()).at(1000).points == COST.at(1000).points
    path = tmp_path / "t.json"
    path.write_text(costcurve.to_json(COST, "m.gguf", 2, 12))
    back, tile = costcurve.read(path)
    assert back.at(1000).points == COST.at(1000).points and back.river_draft == costcurve.DEFAULT_COST.river_draft
    assert tile == 12   # the verify steps it was measured with
    path.write_text(json.dumps({"schema": "pyriver.verify_cost/3", "verify": [1.0], "river_draft": 0.77}))
    with pytest.raises(ValueError, match="verify_cost/4"):   # an older table is measured again
        costcurve.read(path)


@pytest.mark.parametrize("far", [(100, FAR, 1.0), (576, {2: 1.5}, 1.0), (576, FAR, 0.0), (576, {1: 1.0, 2: -1}, 1.0)])
def test_a_bad_far_table_is_refused(far):
    with pytest.raises(ValueError, match="far table"):
        DraftCost(NEAR, 0.0, 144, far)


def test_the_servers_slots_choose_at_their_longest_context():
    from types import SimpleNamespace
    from pyriver.speculative.draft import SuffixLookup
    from pyriver.server.drafting import LlamaDrafter
    cost = RecordingCost(NEAR, 0.0, 144, (576, FAR, 1.044))
    d = LlamaDrafter(SimpleNamespace(draft_model=SuffixLookup(), cost=cost, draft_max=64, source="SuffixLookup"), 1000)
    text = [5, 6, 7, 8, 9] * 40
    for seq in (0, 1):
        d.start(seq, None, 100)
    d.propose({0: (text[:150], 31), 1: (text[:120], 31)})
    assert cost.seen == [149]   # the tokens the longer slot's cache holds before the step (its newest not run)


# SmolLM2 after 960 tokens, flash attention: one sequence's 64 rows run ggml's tiled kernel
TILED = DraftCost({1: 1.0, 2: 1.64, 4: 3.12, 8: 5.57, 16: 11.05, 32: 21.35, 48: 32.51, 64: 14.0}, 0.0)


def test_a_step_of_several_sequences_is_not_priced_as_one_tiled_product():
    assert TILED.step(64) == 14.0 and TILED.step(64, largest=64) == 14.0
    below = TILED.step(64, largest=61)   # 61 rows of one sequence and 3 single rows: no tiled product
    assert below > 32.51 and below == TILED.interp(64, largest=61)
    assert TILED.step(16, largest=4) == 11.05   # below the tile the table holds for any split

    def kept():
        d = DraftLength(TILED, draft_max=64)
        for _ in range(20):
            d.update("ngram16", 30, 30)
        return d
    ks = choose_together([(kept(), "ngram16", 40) for _ in range(4)], TILED)
    assert 4 + sum(ks) < 64   # no slot reaches 64 rows: the tiled sizes are never the price (they were: 164 rows)
    assert choose_together([(kept(), "ngram16", 63)], TILED) == [63]   # one sequence: its 64 rows are tiled
    assert kept().choose("ngram16", 60, others=3) + 4 < 64   # beside 3 single rows, the same (60 drafts otherwise)


def test_a_step_of_several_sequences_reads_the_untiled_table():
    """Where the automatic table's verify steps of 8 rows or more are tiled (each sequence's rows
    padding a 64-row tile of its own), a step of several sequences is priced from the same table
    untiled; a sequence alone from the tiled one. Both kept through a context, a file and a copy."""
    plain = {1: 1.0, 2: 1.3, 4: 2.2, 8: 4.4, 16: 8.6, 32: 15.0}
    tiled = {**plain, 8: 3.2, 16: 4.3, 32: 7.0}
    far = lambda t: (1296, t, 2.3)   # noqa: E731
    cost = DraftCost(tiled, 0.77, 162, far(tiled), untiled=DraftCost(plain, 0.77, 162, far(plain)))
    back = DraftCost.from_dict(cost.to_dict())
    for c in (cost, back, parse_cost(cost.to_dict())):
        assert c.at(600).step(16) < c.at(600).several().step(16)
        assert c.at(600).several().points == c.untiled.at(600).points
    # a copied run alone drafts into the tiled steps; four slots copying together do not buy them
    dl = lambda: DraftLength(cost, 31)   # noqa: E731
    alone = choose_together([(dl(), "ngram16", 31)], cost, context=600)
    assert alone[0] >= 15
    four = choose_together([(dl(), "ngram16", 31) for _ in range(4)], cost, context=600)
    untiled = choose_together([(dl(), "ngram16", 31) for _ in range(4)], cost.untiled, context=600)
    assert four == untiled and sum(four) < 4 * alone[0]
    assert DraftLength(cost, 31).choose("river", 15, others=3, context=600) == \
        DraftLength(cost.untiled, 31).choose("river", 15, others=3, context=600)
