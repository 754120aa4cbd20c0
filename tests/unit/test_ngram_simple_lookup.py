"""--spec-type ngram-simple's draft (server.drafting.lookup) against llama.cpp's rule written out:
the last n tokens (the newest included) searched for in the earlier ones, windows starting at index
1 or later and ending before the newest token; the most recent window that holds them gives the up
to m tokens after it, or nothing when fewer than n follow it."""
import random

from pyriver.server.drafting import lookup


def rule(hist, n, m):
    toks = list(hist[:-1])
    cur = len(toks)
    if cur <= n + m + 1:
        return []
    pattern = list(hist[-n:])
    found = None
    for j in range(1, cur - n):   # windows toks[j:j+n], j = 1 .. cur - n - 1
        if toks[j:j + n] == pattern:
            found = j
    if found is None:
        return []
    copy = min(m, cur - (found + n))
    return [] if copy < n else toks[found + n:found + n + copy]


def test_cases_written_out():
    # the pattern [1, 2] occurs at 1 and 5; the most recent is drafted, up to m tokens after it
    hist = [9, 1, 2, 3, 4, 1, 2, 5, 6, 7, 8, 1, 2]
    assert lookup(hist, 2, 3) == [5, 6, 7] == rule(hist, 2, 3)
    # a window at index 0 is not searched
    assert lookup([1, 2, 7, 7, 7, 7, 7, 7, 1, 2], 2, 2) == []
    # fewer than n tokens after the most recent match: nothing, not an earlier match
    hist = [0, 5, 6, 1, 2, 3, 0, 0, 0, 0, 0, 0, 5, 6, 5, 6]   # [5, 6] at 1 and at 12 (one token after)
    assert rule(hist, 2, 4) == [] and lookup(hist, 2, 4) == []
    assert lookup(hist[:14] + [9, 5, 6], 2, 4) == [9, 5]   # at 12 with two after
    # too short a history
    assert lookup([1, 2, 1, 2], 1, 2) == []


def test_random_texts_as_the_rule():
    rng = random.Random(7)
    checked = drafted = 0
    for _ in range(3000):
        vocab = rng.choice([2, 3, 5, 20])
        hist = [rng.randrange(vocab) for _ in range(rng.randrange(1, 80))]
        n, m = rng.randint(1, 4), rng.randint(1, 12)
        got = lookup(hist, n, m)
        assert got == rule(hist, n, m), (hist, n, m)
        assert lookup(tuple(hist), n, m) == got   # any sequence, as a list
        checked += 1
        drafted += bool(got)
    assert drafted > checked // 4   # the texts did draft
