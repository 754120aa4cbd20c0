"""Which free slot a request takes and whether the prompt cache is updated around it: llama-server's
get_available_slot (pyriver/server/scheduler.py, Scheduler._slot_for). tests/runtime/test_server_slot_choice.py
holds a real server to llama-server's choices."""
from __future__ import annotations

from types import SimpleNamespace

from pyriver.server.scheduler import Scheduler, Slot


def _slots(*cached, ends=None):
    out = []
    for i, c in enumerate(cached):
        s = Slot(i)
        s.cached = list(c)
        s.last_end = -1 if ends is None else ends[i]
        out.append(s)
    return out


def _choose(free, prompt, similarity=0.1, lora=()):
    s, update = Scheduler._slot_for(SimpleNamespace(slot_similarity=similarity), SimpleNamespace(prompt=list(prompt), lora=lora), free)
    return s.seq, update


def test_a_fresh_server_starts_on_its_last_slot():
    assert _choose(_slots([], [], [], []), range(10)) == (3, True)


def test_the_slot_sharing_most_over_a_tenth_of_the_prompt_is_chosen():
    prompt = list(range(100))
    free = _slots(list(range(20)) + [999] * 20, list(range(30)) + [999] * 10, [], ends=[0, 1, -1])
    assert _choose(free, prompt) == (1, False)   # 30% of the prompt, 30 of its 40 cached tokens kept
    free = _slots(list(range(20)) + [999] * 80, [], ends=[0, -1])
    assert _choose(free, prompt) == (0, True)    # kept: 20 of its 100 cached, under half: the cache is updated


def test_a_tenth_or_less_goes_to_the_least_recently_used():
    prompt = list(range(100))
    free = _slots(list(range(10)) + [7] * 5, list(range(5)), [1, 2], ends=[2, 0, 1])
    assert _choose(free, prompt) == (1, True)    # 10% is not over a tenth: slot 1 ended first
    assert _choose(free, prompt, similarity=0.0) == (1, True)   # -sps 0: always the least recently used
    assert _choose(free, prompt, similarity=0.05)[0] == 0


def test_a_cache_of_other_lora_scales_is_not_similar():
    free = _slots(list(range(50)), [], ends=[0, 1])
    assert _choose(free, range(60), lora=(1.0,)) == (0, True)   # chosen as the least recently used, not by its prefix
    free = _slots(list(range(50)), [], ends=[1, 0])
    assert _choose(free, range(60), lora=(1.0,)) == (1, True)
    assert _choose(free, range(60)) == (0, False)
