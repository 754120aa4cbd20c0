"""Lossless mode, sampling: the speculative sampling rule gives the backbone's distribution, with
the samplers (temperature, top-k, penalties) applied to the draft's and the backbone's logits
alike. 2,000 seeds of a real lossless generation on a small synthetic model, the first and second
tokens against the exact full-depth distribution (chi-square, p > 0.001); control: a wrong
acceptance rule fails the same test."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pyriver import Llama
from pyriver.speculative.lossless import accept_or_resample
from pyriver.engine.sampling import Sampler, SamplingParams

N_SEEDS = 2000
PARAMS = dict(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0, repeat_penalty=1.3)
PROMPT = b"The river flows"


def _chi2_p(counts: dict, expected: dict, n: int) -> float:
    """p-value of observed counts against expected probabilities; cells expected under 5 draws
    are pooled into one, and a draw outside the expected support fails outright."""
    if any(expected.get(k, 0.0) == 0.0 for k in counts):
        return 0.0
    keys = sorted(expected, key=expected.get, reverse=True)
    big = [k for k in keys if expected[k] * n >= 5]
    obs = [counts.get(k, 0) for k in big] + [n - sum(counts.get(k, 0) for k in big)]
    exp = [expected[k] * n for k in big] + [n * (1.0 - sum(expected[k] for k in big))]
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    exp = np.asarray(exp) * sum(obs) / sum(exp)   # rounding of the probabilities
    return float(stats.chisquare(obs, exp).pvalue)


def _exact(path, tokens):
    """Full depth's distribution of the first token and of (first, second), samplers applied."""
    s = Sampler(SamplingParams(**PARAMS))
    with Llama(path, n_ctx=128, n_threads=2, verbose=False, river=None) as full:
        p1 = s.distribution(full.decode_logits(tokens, prompt=True)[-1], tokens)
        joint = {}
        for t in np.flatnonzero(p1):
            full.reset()
            seq = tokens + [int(t)]
            p2 = s.distribution(full.decode_logits(seq, prompt=True)[-1], seq)
            for u in np.flatnonzero(p2):
                joint[(int(t), int(u))] = float(p1[t] * p2[u])
    return {int(t): float(p1[t]) for t in np.flatnonzero(p1)}, joint


def _draws(llm, tokens):
    """First and second tokens over N_SEEDS seeds. Three tokens are asked for, so that the second
    step drafts (a last token is never drafted: nothing would follow it)."""
    firsts, pairs = {}, {}
    for seed in range(N_SEEDS):
        a, b = list(llm.context.generate_tokens(tokens, Sampler(SamplingParams(**PARAMS), seed), 3))[:2]
        firsts[a] = firsts.get(a, 0) + 1
        pairs[(a, b)] = pairs.get((a, b), 0) + 1
    return firsts, pairs


def _always_accept(p, q, d, rng):   # wrong: emits the draft's distribution
    return None


def _resample_from_p(p, q, d, rng):   # wrong: a rejected draft is replaced from p, not from max(0, p - q)
    qd = 1.0 if q is None else float(q[d])
    return None if rng.random() * qd < p[d] else int(rng.choice(p.size, p=p / p.sum()))


@pytest.fixture(scope="module")
def model(synth_paths):
    path = synth_paths["gqa_untied"]
    with Llama(path, n_ctx=128, verbose=False) as tok:
        tokens = tok.tokenize(PROMPT)
    return path, tokens, _exact(path, tokens)


@pytest.mark.parametrize("rule", ["speculative", "always_accept", "resample_from_p"])
def test_sampled_tokens_follow_full_depth(model, rule):
    path, tokens, (p1, joint) = model
    # min exit layer 0 and tau 0: the draft leaves the backbone after block 0, so its distribution
    # is far from full depth's (total variation about 0.3 here): a wrong rule shows.
    with Llama(path, n_ctx=128, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.0, min_exit_layer=0,
               river_force=True, lossless=True, draft_max=1) as llm:
        if rule != "speculative":
            llm.speculator.rule = {"always_accept": _always_accept, "resample_from_p": _resample_from_p}[rule]
        firsts, pairs = _draws(llm, tokens)
        ls = llm.river_stats()["lossless"]
        assert ls["verify_steps"] >= 1 and ls["drafted"] >= 1
    p_first, p_pairs = _chi2_p(firsts, p1, N_SEEDS), _chi2_p(pairs, joint, N_SEEDS)
    if rule == "speculative":
        assert p_first > 0.001 and p_pairs > 0.001, (p_first, p_pairs)
    else:   # the first token never passes through the rule; the second does
        assert p_first > 0.001 and p_pairs < 0.001, (p_first, p_pairs)


def test_deterministic_drafts_keep_the_distribution(model):
    """A draft model's proposals (no draft distribution: q one-hot) verified by the same rule: a
    draft model that always proposes the likeliest second token."""
    path, tokens, (p1, joint) = model
    likeliest = max(joint, key=joint.get)[1]
    with Llama(path, n_ctx=128, n_threads=2, verbose=False, river=None,
               draft_model=lambda ids: np.array([likeliest], dtype=np.intc)) as llm:
        _, pairs = _draws(llm, tokens)
        ls = llm.river_stats()["lossless"]
        assert ls["drafted"] >= 1
    assert _chi2_p(pairs, joint, N_SEEDS) > 0.001


def test_rule_alone_over_many_draws():
    """accept_or_resample against an exact p for a q far from it (and for one-hot q)."""
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05, 0.0])
    q = np.array([0.05, 0.1, 0.1, 0.15, 0.3, 0.3])
    n = 20000
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        d = int(rng.choice(q.size, p=q))
        r = accept_or_resample(p, q, d, rng)
        out[i] = d if r is None else r
    counts = np.bincount(out, minlength=p.size)
    assert counts[5] == 0
    assert stats.chisquare(counts[:5], p[:5] * n).pvalue > 0.001
    for d in (0, 3, 5):   # a deterministic draft of d
        out = [accept_or_resample(p, None, d, rng) for _ in range(5000)]
        toks = np.array([d if r is None else r for r in out])
        assert stats.chisquare(np.bincount(toks, minlength=6)[:5], p[:5] * 5000).pvalue > 0.001
