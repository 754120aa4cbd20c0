"""choose_together: the draft lengths of the server's decoding slots, chosen for the whole verify step."""
from pyriver.speculative.draftlen import DraftCost, DraftLength, choose_together

# Gemma 3 270M's measured curve on the 2-core EPYC (docs/results/lossless/verify-cost-64-gemma3-270m.json), the
# sizes the automatic table measures
GEMMA = DraftCost({1: 0.97, 2: 1.83, 3: 2.27, 4: 2.37, 6: 3.91, 8: 3.60, 12: 4.65, 16: 5.83, 24: 8.80,
                   32: 9.72, 48: 15.64, 64: 20.86}, 0.0)


def _learned(kept: int, drafted: int, source: str) -> DraftLength:
    dl = DraftLength(GEMMA, draft_max=64)
    for _ in range(20):
        dl.update(source, drafted, kept)
    return dl


def _rate(picks, ks):
    expect = len(picks) + sum(sum(dl.chances(src)[0] * dl.chances(src)[1] ** j for j in range(k))
                              for (dl, src, _), k in zip(picks, ks))
    return expect / GEMMA.interp(len(picks) + sum(ks))


def test_drafts_go_where_they_are_kept_and_the_step_lands_on_a_measured_size():
    picks = [(_learned(30, 30, "ngram16"), "ngram16", 40), (_learned(30, 30, "ngram16"), "ngram16", 40),
             (_learned(0, 4, "ngram1"), "ngram1", 40), (_learned(0, 4, "ngram1"), "ngram1", 40)]
    ks = choose_together(picks, GEMMA)
    assert ks[2] == ks[3] == 0 and ks[0] > 8 and ks[1] > 8
    assert abs(ks[0] - ks[1]) <= 1                     # equal chances: an even split
    assert GEMMA.step(4 + sum(ks)) is not None         # never a size the table skips
    assert choose_together(picks[2:], GEMMA) == [0, 0]   # nothing that pays: plain steps


def test_together_is_no_worse_than_each_alone():
    # each slot alone against the others' single rows claims the same cheap rows; together they share them
    picks = [(_learned(12, 16, "ngram9"), "ngram9", 60) for _ in range(4)]
    together = choose_together(picks, GEMMA)
    alone = [dl.choose(src, cap, others=3) for dl, src, cap in
             [(_learned(12, 16, "ngram9"), "ngram9", 60) for _ in range(4)]]
    assert together != alone and _rate(picks, together) > _rate(picks, alone)
    assert _rate(picks, together) > 4 / GEMMA.step(4)   # and drafting pays here


def test_caps_hold():
    picks = [(_learned(30, 30, "ngram16"), "ngram16", 3), (_learned(30, 30, "ngram16"), "ngram16", 0)]
    ks = choose_together(picks, GEMMA)
    assert ks[0] <= 3 and ks[1] == 0
