"""The automatic verify cost table's measurement (pyriver.speculative.costcurve): each step read against the
single steps beside it, so a machine whose speed drifts during the measurement still reads each
size's true cost; the small sizes measured more often; a table kept per flash-attention setting."""
import pytest

from pyriver.speculative import costcurve
from pyriver.models.cache import setting_key

TRUE = {1: 1.0, 2: 1.66, 3: 2.2, 4: 2.7, 8: 4.7, 16: 8.6, 64: 23.0}   # SmolLM2's on the Xeon, in single steps
TILED = {8: 4.0, 16: 5.0}   # its steps with their attention tiled (a made-up curve)


class DriftingContext:
    """The Llama's context (its step interface): truncate, and the engine's context."""

    def __init__(self, llm):
        self.llm, self.engine = llm, None

    def truncate(self, n):
        self.llm.pos = n


class DriftingLlama:
    """A model whose steps cost TRUE[n] single steps of 10 ms at a speed that slows by 2% a step (another
    process taking the cores): what the clock reads is kept in `times`, in the order of the steps."""

    def __init__(self):
        self.calls, self.pos = 0, 0
        self.context = DriftingContext(self)

    def decode_logits(self, toks, logits_all=False, prompt=False):
        self.pos += len(toks)
        self.last = len(toks)

    def reset(self):
        pass


@pytest.fixture
def drifting(monkeypatch):
    llm = DriftingLlama()

    def timed(fn):
        fn()
        llm.calls += 1
        cost = TILED[llm.last] if getattr(llm, "tiled", False) else TRUE[llm.last]
        return 0.010 * cost * (1.0 + 0.02 * llm.calls)
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

    class Context:   # Llama.context: its ContextArgs
        def __init__(self, fa):
            self.args = Args(fa)

    class Fake:
        def __init__(self, fa):
            self.model_path, self.n_threads, self.n_threads_batch, self.batch_invariant = str(f), 2, 2, False
            self.context = Context(fa)

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


def _res(plain, tiled, at=None):
    """A measurement's ratios: plain and tiled steps of each size (tiled only for the sizes in at)."""
    at = plain if at is None else at
    return {n: {"ratio": [plain[n]], **({"tiled_ratio": [tiled[n]]} if n in at else {})} for n in plain}


PLAIN = {6: 3.0, 8: 4.0, 16: 8.0, 32: 14.0, 48: 20.0}


def test_tiled_verify_steps_are_taken_from_where_every_larger_one_pays():
    # SmolLM2's shape: the tiled steps cheaper the more rows, 8 rows not by TILE_GAIN, 6 dearer
    far = _res(PLAIN, {6: 3.5, 8: 3.9, 16: 5.0, 32: 6.0, 48: 7.0})
    assert costcurve.TILE_GAIN == 0.95 and costcurve.tile_rows(far) == 16
    # at the near context no dearer from 16 on: taken from 16; one dearer size there moves it past it
    assert costcurve.tile_rows(far, _res(PLAIN, {6: 3.5, 8: 4.5, 16: 8.0, 32: 13.0, 48: 19.0})) == 16
    assert costcurve.tile_rows(far, _res(PLAIN, {6: 3.5, 8: 4.5, 16: 8.1, 32: 13.0, 48: 19.0})) == 32
    # the largest size not paying: never (the 1.5B: 48 rows 0.97 of the plain step at the far context)
    assert costcurve.tile_rows(_res(PLAIN, {6: 2.0, 8: 2.0, 16: 4.0, 32: 7.0, 48: 19.4})) == 0
    # a near measurement of only the sizes that paid far
    assert costcurve.tile_rows(far, _res(PLAIN, {16: 7.0, 32: 13.0, 48: 19.0}, at=(16, 32, 48))) == 16


def test_the_table_reads_the_tiled_steps_from_their_size(drifting):
    """measure() times the sizes in tiled a second time with the context's verify_tile_rows at the
    size (and back to 0 after), and table(res, tile) reads those from tile rows on."""
    settings = []

    class Ctx:
        tile = 0

        def set_verify_tile_rows(self, n):
            self.tile = n
            settings.append(n)
    drifting.context.engine = Ctx()
    base = drifting.decode_logits

    def decode_logits(toks, logits_all=False, prompt=False):
        base(toks, logits_all, prompt)
        drifting.tiled = drifting.context.engine.tile > 0
    drifting.decode_logits = decode_logits
    res = costcurve.measure(drifting, list(TRUE), 3, list(range(50)), small_repeats=5, tiled=[8, 16])
    assert len(res[8]["tiled_ratio"]) == len(res[16]["tiled_ratio"]) == 3 and "tiled_ratio" not in res[4]
    assert settings == [8, 0, 16, 0] * 3 and drifting.context.engine.tile == 0
    assert costcurve.table(res, 16)[16] == pytest.approx(TILED[16], rel=1e-9)
    assert costcurve.table(res, 16)[8] == pytest.approx(TRUE[8], rel=1e-9)   # below the tile: plain
    assert costcurve.table(res, 16)[64] == pytest.approx(TRUE[64], rel=1e-9)   # 64 rows are tiled anyway
    assert costcurve.table(res)[16] == pytest.approx(TRUE[16], rel=1e-9)


def test_a_faster_kernel_does_not_read_the_table_of_the_slower_one(tmp_path, monkeypatch):
    # a table's steps are priced by the kernels that ran them: once a kernel gets faster (the native
    # library's revision raised), the old table must not be read, or the draft rule prices its steps too high
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")

    class Args:
        flash_attn, type_k, type_v = False, 1, 1

    class Fake:
        model_path, n_threads, n_threads_batch, batch_invariant, tiled_verify = str(f), 2, 2, False, False

        class context:
            args = Args()

        def devices(self):
            return ["CPU"]

    read = []
    monkeypatch.setattr(costcurve, "read", lambda path: read.append(path) or (costcurve.DEFAULT_COST, 0))
    costcurve.auto(Fake(), [1, 2, 3])
    revision = costcurve.tiled_revision()
    monkeypatch.setattr(costcurve, "tiled_revision", lambda: revision + 1)
    costcurve.auto(Fake(), [1, 2, 3])
    assert len(read) == 2 and read[0] != read[1]
