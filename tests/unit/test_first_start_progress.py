"""Issue 72 item 4: a first start's measurements (the verify-cost curve with its tiled crossover,
pyriver.speculative.costcurve; the prompt layouts' crossover, pyriver.engine.widerows) show a
progress bar and a closing line on stderr without verbose, once they run past a moment; a cached
measurement, or a quick one, prints nothing."""
from types import SimpleNamespace

import pytest

from pyriver.engine import firststart, widerows
from pyriver.speculative import costcurve


class FakeLlama:
    """What the two measurements step: a model file, its setting, a context to truncate."""

    def __init__(self, path):
        self.model_path, self.n_threads, self.n_threads_batch, self.batch_invariant = str(path), 2, 2, False
        self.verbose, self.tiled_verify, self.steps = False, False, 0
        self.context = SimpleNamespace(truncate=lambda n: None, args=SimpleNamespace(flash_attn=False),
                                       engine=SimpleNamespace(set_wide_prompt_rows=lambda n: None))

    def devices(self):
        return ["CPU"]

    def n_ctx(self):
        return 512

    def decode_logits(self, toks, **kw):
        self.steps += 1

    def reset(self):
        pass


@pytest.fixture
def llm(tmp_path, monkeypatch):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setattr(widerows, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(costcurve, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(costcurve, "_time", lambda fn: (fn(), 0.01)[1])
    return FakeLlama(f)


@pytest.mark.parametrize("measure, what", [
    (lambda llm: widerows.auto(llm, list(range(40))), "from how many rows prompts read the second layout"),
    (lambda llm: costcurve.auto(llm, list(range(40))), "the verify cost of 12 step sizes for lossless drafts")])
def test_a_first_start_shows_its_measurement_and_a_cached_one_is_silent(llm, measure, what, capsys, monkeypatch):
    monkeypatch.setattr(firststart, "DELAY", 0.0)   # as if the measurement took its seconds
    measure(llm)
    err = capsys.readouterr().err
    assert f"pyriver: measuring {what} (once)" in err   # the bar
    assert f"pyriver: measured {what} in " in err and "cached in " in err   # the closing line
    n = llm.steps
    measure(llm)   # cached: nothing measured, nothing said
    assert llm.steps == n and capsys.readouterr().err == ""


def test_a_quick_measurement_stays_silent(llm, capsys):
    assert firststart.DELAY >= 0.5
    widerows.auto(llm, list(range(40)))
    assert llm.steps > 0 and capsys.readouterr().err == ""


def test_the_bar_counts_every_timed_step(llm, monkeypatch):
    """The bar's total is the measurement's own count of steps (it ends full, not short or over)."""
    seen = []

    class Bar(firststart.Measuring):
        def close(self):
            seen.append((self.bar.n, self.bar.total))
            super().close()
    monkeypatch.setattr(widerows, "Measuring", Bar)
    monkeypatch.setattr(costcurve, "Measuring", Bar)
    widerows.auto(llm, list(range(40)))
    costcurve.auto(llm, list(range(40)))
    assert len(seen) == 2 and all(n == total > 0 for n, total in seen)
