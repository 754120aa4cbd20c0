"""The draft length rules stop looking once no longer draft can pay (DraftCost.floor): the same
choices as the full scan, on random tables and counts; and the priors of short n-gram matches, as
measured on held-out answers, keep a chat's one-token matches from drafting."""
import random

from pyriver.speculative.draftlen import (FA_TILE, NGRAM_MARGIN, DraftCost, DraftLength, bucket, choose_together,
                                         prior)

SIZES = [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
KEYS = ["ngram1", "ngram2", "ngram3", "ngram5", "ngram9", "ngram20", "repeat1", "repeat3", "repeat7", "repeat16", "river"]


def _table(rng):
    pts = {1: 1.0}
    for n in sorted(rng.sample(SIZES, rng.randint(2, len(SIZES)))):   # not monotone per token, as measured
        pts[n] = max(0.6, rng.uniform(0.3, 1.1) * n ** rng.uniform(0.35, 1.0))
    return DraftCost(pts, rng.choice([0.0, 0.77]))


def _learned(rng, cost):
    dl = DraftLength(cost, 64)
    for _ in range(rng.randint(0, 12)):
        n = rng.randint(1, 8)
        dl.update(rng.choice(KEYS), n, rng.randint(0, n))
    return dl


def _scan_choose(dl, source, cap, others):
    """choose without stopping: every k's rate."""
    dl._forget(bucket(source))
    p1, a = dl.chances(source)
    cost = dl.cost
    per = cost.river_draft if source == "river" else 0.0
    best, best_rate, expect, run = 0, (1.0 + others) / cost.interp(1 + others), 1.0 + others, p1
    if source != "river":   # free drafts beat a plain step by the margin
        best_rate *= 1.0 + NGRAM_MARGIN
    for k in range(1, min(dl.draft_max, cap) + 1):
        expect += run
        run *= a
        step = cost.step(others + k + 1, k + 1 if others else None)
        if step is not None and expect / (step + k * per) > best_rate + 1e-12:
            best, best_rate = k, expect / (step + k * per)
    return best


def _scan_together(picks, cost):
    """choose_together without stopping: every total of the ranked gains."""
    ranked = sorted(((g, i) for i, (dl, src, cap) in enumerate(picks) for g in dl.gains(src, cap)), key=lambda x: -x[0])
    rows, expect = len(picks), float(len(picks))
    best, best_rate, grown, largest = 0, expect / cost.interp(rows) * (1.0 + NGRAM_MARGIN), [1] * len(picks), 1
    for d, (g, i) in enumerate(ranked, 1):
        expect += g
        grown[i] += 1
        largest = max(largest, grown[i])
        c = cost.step(rows + d, largest if rows > 1 else None)
        if c is not None and expect / c > best_rate + 1e-12:
            best, best_rate = d, expect / c
    ks = [0] * len(picks)
    for _, i in ranked[:best]:
        ks[i] += 1
    return ks


def test_stopping_early_chooses_what_the_full_scan_chooses():
    rng = random.Random(7)
    drafted = 0
    for _ in range(1500):
        cost = _table(rng)
        seed = rng.random()
        src, cap, others = rng.choice(KEYS), rng.randint(0, 64), rng.choice([0, 0, 1, 3, FA_TILE - 4])
        a, b = _learned(random.Random(seed), cost), _learned(random.Random(seed), cost)
        k = a.choose(src, cap, others)
        assert k == _scan_choose(b, src, cap, others)
        m = rng.randint(1, 4)
        seeds = [rng.random() for _ in range(m)]
        srcs = [rng.choice(KEYS[:-1]) for _ in range(m)]
        caps = [rng.randint(0, 64) for _ in range(m)]
        ks = choose_together([(_learned(random.Random(s), cost), x, c) for s, x, c in zip(seeds, srcs, caps)], cost)
        assert ks == _scan_together([(_learned(random.Random(s), cost), x, c) for s, x, c in zip(seeds, srcs, caps)], cost)
        drafted += k > 0 and sum(ks) > 0
    assert drafted > 100   # the cases drafted as well as the ones that stop at once


def test_a_floor_is_the_least_of_every_longer_step():
    cost = DraftCost({1: 1.0, 2: 1.5, 4: 1.4, 8: 3.0, 16: 2.9, 64: 20.0}, 0.0)
    for n in range(1, 90):
        longer = [cost.step(m) for m in range(n, 400) if cost.step(m) is not None]
        split = [cost.step(m, 1) for m in range(max(n, FA_TILE), 400) if cost.step(m, 1) is not None]
        assert cost.floor(n) == min(longer + split)


def test_a_chats_short_matches_do_not_draft_where_a_long_copy_does():
    # SmolLM2's steps on the Xeon (interleaved, docs/lossless.md): two rows cost 1.66 single steps
    smol = DraftCost({1: 1.0, 2: 1.66, 3: 2.2, 4: 2.7, 6: 3.8, 8: 4.7, 16: 8.6, 32: 16.7, 64: 22.9}, 0.77)
    for key in ("ngram1", "repeat1", "ngram2", "repeat2", "repeat3"):
        assert DraftLength(smol, 64).choose(key, cap=64) == 0, key
    assert DraftLength(smol, 64).choose("ngram16", cap=64) >= 4
    # a match of one token keeps its first draft 16% of the time in the held-out answers: even where a
    # step of two rows costs 1.3 single steps it does not draft (the form n / (n + 1) read 0.5, and did)
    cheap = DraftCost({1: 1.0, 2: 1.3, 3: 1.5, 4: 1.6}, 0.0)
    assert prior("ngram1")[0] < 0.25 and DraftLength(cheap, 64).choose("ngram1", cap=3) == 0


def test_short_matches_that_promise_little_are_not_drafted():
    # SmolLM2's verify steps on the 2-core EPYC (2 rows 1.64 single steps, 3 rows 1.84, 4 rows 2.05):
    # at their priors, a match of 2 in the prompt and of 3 in the answer (or an earlier request's,
    # "store3") promise 2-7% over plain steps, under NGRAM_MARGIN: a chat kept fewer (0.44 and 0.22
    # first drafts) and ran slower drafting them; a match of 3 in the prompt (15%) and longer ones are drafted
    smol = DraftCost({1: 1.0, 2: 1.64, 3: 1.84, 4: 2.05, 6: 3.09, 8: 3.2}, 0.77)
    for key in ("ngram2", "repeat3", "store3"):
        assert DraftLength(smol, 64).choose(key, cap=8) == 0, key
        assert choose_together([(DraftLength(smol, 64), key, 8)], smol) == [0], key
    for key in ("ngram3", "ngram4", "repeat4", "store4", "ngram9"):
        assert DraftLength(smol, 64).choose(key, cap=8) > 0, key
        assert choose_together([(DraftLength(smol, 64), key, 8)], smol)[0] > 0, key
