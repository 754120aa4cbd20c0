"""pyriver.text.reasoning_budget, llama.cpp's budget sampler's state machine (common/reasoning-budget.cpp)
token by token: start, count, force (after a complete UTF-8 character), natural end, re-arm; the
sampler wrapper masks all but the forced token and replays a rewound history. Against llama-server:
tests/runtime/test_server_reasoning.py."""
from __future__ import annotations

import numpy as np

from pyriver.text import reasoning_budget as RB

START, END = [10, 11], [12, 13]


def _states(budget, toks, forced=(12, 13), piece=None):
    b = RB.Budget(START, [END], list(forced), budget, piece)
    out = []
    for t in toks:
        b.accept(t)
        out.append((b.state, b.forcing()))
    return out


def test_counts_then_forces_the_end():
    s = _states(2, [5, 10, 11, 7, 8, 12, 13, 9])
    assert [x[0] for x in s] == [RB.IDLE, RB.IDLE, RB.COUNTING, RB.COUNTING, RB.FORCING, RB.FORCING, RB.DONE, RB.DONE]
    assert s[4][1] == 12 and s[5][1] == 13 and s[6][1] is None


def test_zero_forces_at_once_and_a_natural_end_is_done():
    assert _states(0, [10, 11])[-1] == (RB.FORCING, 12)
    assert [x[0] for x in _states(5, [10, 11, 7, 12, 13])][-1] == RB.DONE
    assert _states(5, [10, 11, 7, 12, 13])[-1][1] is None


def test_a_new_start_tag_re_arms():
    s = _states(1, [10, 11, 7, 12, 13, 10, 11, 7])
    assert s[2] == (RB.FORCING, 12) and s[4][0] == RB.DONE
    assert s[-2][0] == RB.COUNTING and s[-1] == (RB.FORCING, 12)   # a fresh budget of 1: one token, then forced again


def test_waits_for_a_complete_character():
    pieces = {7: b"\xe2\x82", 8: b"\xac", 9: b"x"}
    s = _states(1, [10, 11, 7, 8], piece=lambda t: pieces.get(t, b"a"))
    assert s[2][0] == RB.WAITING_UTF8 and s[3] == (RB.FORCING, 12)
    assert RB.utf8_complete(b"\xe2\x82\xac") and not RB.utf8_complete(b"a\xe2") and RB.utf8_complete(b"")


class _Argmax:
    greedy = True

    def sample(self, logits, history=()):
        return int(np.argmax(logits))


def test_the_sampler_masks_all_but_the_forced_token_and_replays_a_rewind():
    s = RB.BudgetSampler(_Argmax(), lambda: RB.Budget(START, [END], [12, 13], 1), prefill=[10, 11], n_prompt=3)
    logits = np.zeros(20, dtype=np.float32)
    logits[5] = 9.0
    prompt = [1, 2, 3]
    assert s.sample(logits, prompt) == 5            # one token of budget
    assert s.sample(logits, prompt + [5]) == 12     # then the end tag, forced
    assert s.sample(logits, prompt + [5, 12]) == 13
    assert s.sample(logits, prompt + [5, 12, 13]) == 5   # done
    assert s.sample(logits, prompt + [5]) == 12     # a rewound history replays from the prefill
    assert s.sample(logits, prompt) == 5
