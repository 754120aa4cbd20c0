"""The samplers (llama.cpp's, pyriver.engine.sampling) on hand-made logits: the chain order, penalties,
seeds, llama-server's extra samplers and bad values."""
from __future__ import annotations

import numpy as np
import pytest

from pyriver.engine.sampling import Sampler, SamplingParams

LOGITS = np.array([1.0, 3.0, 2.5, -1.0, 0.0], dtype=np.float32)


def _draws(n=4000, seed=0, **kw):
    s = Sampler(SamplingParams(**kw), seed)
    return np.bincount([s.sample(LOGITS) for _ in range(n)], minlength=LOGITS.size)


def test_temperature_zero_is_argmax():
    assert Sampler(SamplingParams(temperature=0.0)).sample(LOGITS) == 1
    assert Sampler(SamplingParams(temperature=-1.0)).sample(LOGITS) == 1


@pytest.mark.parametrize("kw", [dict(top_k=1), dict(top_p=0.0001), dict(min_p=0.999)])
def test_filters_that_leave_one_token_give_argmax(kw):
    params = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    params.update(kw)
    assert set(np.nonzero(_draws(500, **params))[0]) == {1}


def test_unfiltered_draws_follow_the_softmax():
    counts = _draws(20000, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    p = np.exp(LOGITS - LOGITS.max())
    p /= p.sum()
    np.testing.assert_allclose(counts / counts.sum(), p, atol=0.015)


def test_top_k_keeps_the_k_most_likely():
    counts = _draws(2000, temperature=5.0, top_k=2, top_p=1.0, min_p=0.0)
    assert set(np.nonzero(counts)[0]) == {1, 2}


def test_min_p_drops_tokens_below_its_share_of_the_best():
    # p(token) >= 0.5 * p(best): only tokens 1 (best) and 2 (e^-0.5 = 0.61 of it) stay.
    counts = _draws(2000, temperature=1.0, top_k=0, top_p=1.0, min_p=0.5)
    assert set(np.nonzero(counts)[0]) == {1, 2}


def test_typical_keeps_the_tokens_nearest_the_entropy():
    # Entropy of this peaked distribution is far below -log p of the tail: typical_p keeps the head.
    counts = _draws(2000, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=0.5)
    assert counts[3] == 0 and counts.sum() == 2000


def test_seed_reproduces_and_differs():
    kw = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    s1, s2, s3 = (Sampler(SamplingParams(**kw), seed) for seed in (7, 7, 8))
    seq1 = [s1.sample(LOGITS) for _ in range(64)]
    assert seq1 == [s2.sample(LOGITS) for _ in range(64)]
    assert seq1 != [s3.sample(LOGITS) for _ in range(64)]


def test_penalties_change_only_the_recent_tokens():
    s = Sampler(SamplingParams(temperature=0.0, repeat_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25))
    out = s.greedy_scores(LOGITS.copy(), [1, 1, 3])
    # token 1: 3.0 / 2 - 2 * 0.5 - 0.25; token 3: -1.0 * 2 - 0.5 - 0.25; the others unchanged.
    np.testing.assert_allclose(out, [1.0, 0.25, 2.5, -2.75, 0.0])
    assert s.sample(LOGITS, [1, 1, 3]) == 2   # the repeated best token lost its place


def test_penalty_window_is_the_last_tokens_only():
    s = Sampler(SamplingParams(temperature=0.0, repeat_penalty=10.0, penalty_last_n=2))
    assert s.sample(LOGITS, [1, 0, 4]) == 1    # token 1 is outside the last 2
    assert s.sample(LOGITS, [0, 1]) == 2


@pytest.mark.parametrize("kw,match", [(dict(top_p=1.5), "top_p"), (dict(min_p=-0.1), "min_p"),
                                      (dict(typical_p=0.0), "typical_p"), (dict(repeat_penalty=0.0), "repeat_penalty"),
                                      (dict(temperature=float("nan")), "temperature")])
def test_bad_values_are_value_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        Sampler(SamplingParams(**kw))


def test_penalties_follow_a_rewound_history():
    """A lossless rewind hands a history that is not an extension of the last: the penalties forget the rest."""
    s = Sampler(SamplingParams(temperature=0.0, repeat_penalty=10.0))
    assert s.sample(LOGITS, [1, 2]) == 0
    assert s.sample(LOGITS, [1, 4]) == 2     # 2 was rewound away
    assert s.sample(LOGITS, [3]) == 1


def test_top_n_sigma_keeps_the_logits_within_n_sigma_of_the_best():
    # std of LOGITS is 1.43: within 0.5 sigma of 3.0 only token 1 (and not 2.5 - 3.0 = -0.5 > -0.71? it is kept)
    counts = _draws(2000, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, top_n_sigma=0.5)
    assert set(np.nonzero(counts)[0]) == {1, 2}


def test_xtc_removes_the_top_choices_above_its_threshold():
    # probability 1: every token above the threshold but the least likely of them is removed
    counts = _draws(500, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, xtc_probability=1.0, xtc_threshold=0.1)
    assert counts[1] == 0 and counts.sum() == 500


def test_dry_needs_the_vocabulary():
    with pytest.raises(ValueError, match="DRY"):
        Sampler(SamplingParams(dry_multiplier=0.8))


def test_logit_bias_comes_first():
    s = Sampler(SamplingParams(temperature=0.0), bias={4: 10.0}, n_vocab=LOGITS.size)
    assert s.sample(LOGITS) == 4
    assert Sampler(SamplingParams(temperature=0.0), bias={1: float("-inf")}, n_vocab=LOGITS.size).sample(LOGITS) == 2
