"""The automatic verify cost table's measurement (pyriver.costcurve): each step read against the
single steps beside it, so a machine whose speed drifts during the measurement still reads each
size's true cost; the small sizes measured more often; a table kept per flash-attention setting."""
import pytest

from pyriver import costcurve
from pyriver.cache import setting_key

TRUE = {1: 1.0, 2: 1.66, 3: 2.2, 4: 2.7, 8: 4.7, 16: 8.6, 64: 23.0}   # SmolLM2's on the Xeon, in single steps


class DriftingLlama:
    """A model whose steps cost TRUE[n] single steps of 10 ms at a speed that slows by 2% a step (another
    process taking the cores): what the clock reads is kept in `times`, in the order of the steps."""

    def __init__(self):
        self.calls, self.pos = 0, 0

    def decode_logits(self, toks, logits_all=False, prompt=False):
        self.pos += len(toks)
        self.last = len(toks)

    def _truncate(self, n):
        self.pos = n

    def reset(self):
        pass


@pytest.fixture
def drifting(monkeypatch):
    llm = DriftingLlama()

    def timed(fn):
        fn()
        llm.calls += 1
        return 0.010 * TRUE[llm.last] * (1.0 + 0.02 * llm.calls)
    monkeypatch.setattr(costcurve, "_time", timed)
    return llm


def test_a_drifting_machine_reads_each_size_at_its_cost(drifting):
    res = costcurve.measure(drifting, list(TRUE), 3, list(range(50)), small_repeats=5)
    table = costcurve.table(res)
    assert set(table) == set(TRUE)
    for n, c in TRUE.items():   # linear drift: the mean of the neighbours is the speed at the step
        assert table[n] == pytest.approx(c, rel=1e-9)
    # the small sizes (a chat's one or two drafts) are measured more often than the large ones
    assert costcurve.SMALL >= 4 and len(res[2]["ratio"]) == len(res[4]["ratio"]) == 5
    assert len(res[8]["ratio"]) == len(res[16]["ratio"]) == len(res[64]["ratio"]) == 3
    assert drifting.pos == 0   # the cache emptied at the end


def test_the_fastest_over_the_fastest_would_misread_it(drifting):
    # what schema 2 read (the fastest step of a size over the fastest single one): the drift
    # puts the large sizes, timed late in each repeat, above their cost
    res = costcurve.measure(drifting, list(TRUE), 3, list(range(50)))
    old = min(res[64]["multi_s"]) / min(res[1]["multi_s"])
    assert old > 1.1 * TRUE[64] and costcurve.table(res)[64] == pytest.approx(TRUE[64], rel=1e-9)


def test_flash_attention_keys_its_own_table(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")

    class Args:
        def __init__(self, fa):
            self.flash_attn = fa

    class Fake:
        def __init__(self, fa):
            self.model_path, self.n_threads, self.n_threads_batch, self.batch_invariant = str(f), 2, 2, False
            self._context_args = Args(fa)

        def devices(self):
            return ["CPU"]
    assert setting_key(Fake(True), what="verify") != setting_key(Fake(False), what="verify")
    assert setting_key(Fake(True), what="verify") == setting_key(Fake(True), what="verify")


def test_a_spell_of_load_falls_on_few_of_the_small_sizes_passes(monkeypatch):
    """Another process on the cores for the last 40% of the measurement, slowing the single steps
    (which then read the 2-row step at 1.19): the passes over the small sizes alone are spread between
    those over every size, so that fewer than half of them, and not their median, fall in the spell
    (all of them after the full passes: 5 of the 9, and the 3- and 4-row steps read 1.83 and 1.93)."""
    llm = DriftingLlama()
    sizes = list(TRUE)
    small = [n for n in sizes if n <= costcurve.SMALL]
    n_passes = max(3, costcurve.SMALL_REPEATS)
    steps = 3 * (1 + 2 * len(sizes)) + (n_passes - 3) * (1 + 2 * len(small))

    def timed(fn):
        fn()
        llm.calls += 1
        slow = 1.0 + 0.4 * (llm.calls > 0.6 * steps and llm.last == 1)
        return 0.010 * TRUE[llm.last] * slow
    monkeypatch.setattr(costcurve, "_time", timed)
    res = costcurve.measure(llm, sizes, 3, list(range(50)), small_repeats=costcurve.SMALL_REPEATS)
    assert llm.calls == steps and len(res[2]["ratio"]) == costcurve.SMALL_REPEATS
    table = costcurve.table(res)
    for n in small[1:]:
        assert table[n] == pytest.approx(TRUE[n], rel=1e-9)
