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


@pytest.mark.parametrize("measure, label, what", [
    (lambda llm: widerows.auto(llm, list(range(40))), "prompt layouts", "from how many rows prompts read the second layout"),
    (lambda llm: costcurve.auto(llm, list(range(40))), "draft costs", "the verify cost of 12 step sizes for lossless drafts")])
def test_a_first_start_shows_its_measurement_and_a_cached_one_is_silent(llm, measure, label, what, capsys, monkeypatch):
    monkeypatch.setattr(firststart, "DELAY", 0.0)   # as if the measurement took its seconds
    measure(llm)
    err = capsys.readouterr().err
    assert f"pyriver: measuring {label} (once)" in err   # the bar
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


def test_the_bar_shows_on_a_terminal_that_reports_no_width():
    """A pty whose size nobody set (0 columns, as under `script` or some CI runners): tqdm's
    dynamic width alone draws nothing there; the bar must still show, its count within 80 columns
    beside the longest measurement's account (the closing line's, not the bar's)."""
    import os
    import pty
    import subprocess
    import sys
    master, slave = pty.openpty()   # a new pty: 0 rows, 0 columns
    assert os.get_terminal_size(slave).columns == 0
    what = "the verify cost of 12 step sizes for lossless drafts and the tiled crossover"
    code = (f"WHAT = {what!r}\nimport time\nfrom pyriver.engine import firststart\nfirststart.DELAY = 0.0\n"
            "with firststart.Measuring(WHAT, 3, '/nowhere', 'draft costs') as m:\n"
            "    for _ in range(3):\n        time.sleep(0.6); m.tick()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:   # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=30) == 0
    text = out.decode("utf-8", "replace")
    assert "pyriver: measuring draft costs (once)" in text and "/3 [" in text   # the bar, with its count
    assert f"pyriver: measured {what} in " in text
