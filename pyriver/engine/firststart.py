"""The progress bar of a measurement a first start makes once and then caches (the verify-cost curve
with its tiled-kernel crossover, pyriver.speculative.costcurve; the prompt layouts' crossover,
pyriver.engine.widerows): on stderr whether or not the Llama is verbose, since the start waits on it
for seconds to a minute. It shows only once the measurement has run DELAY seconds (a quick one
stays silent) and ends with one line saying what was measured and where it is kept; a cached
measurement never makes one."""
from __future__ import annotations

import os
import sys
import time

from tqdm import tqdm

DELAY = 1.0   # seconds before the bar shows


def _size_args(stream) -> dict:
    """tqdm's size arguments: the terminal's own, followed as it changes; 80 x 24 on a terminal that
    reports no size (a pty whose size nobody set, as under `script` or some CI runners), where tqdm
    reads 0 rows and hides the bar as if it stood below the screen."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return {"dynamic_ncols": True}   # not a terminal: tqdm writes its plain stats
    if size.columns > 0 and size.lines > 0:
        return {"dynamic_ncols": True}
    return {"ncols": 80, "nrows": 24}


class Measuring:
    """A bar over `total` timed steps (tick() after each; total may grow), then the closing line.
    label: a few words for the bar (what: the closing line's account), so that the bar's count and
    time still fit an 80-column terminal."""

    def __init__(self, what: str, total: int, path, label: str) -> None:
        self.what, self.path, self.t0 = what, path, time.monotonic()
        self.bar = tqdm(total=total, desc=f"pyriver: measuring {label} (once)", unit="step", file=sys.stderr,
                        delay=DELAY, leave=False, mininterval=0.5, **_size_args(sys.stderr))

    def grow(self, n: int) -> None:
        self.bar.total += n
        self.bar.refresh()

    def tick(self) -> None:
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
        s = time.monotonic() - self.t0
        if s >= DELAY:
            print(f"pyriver: measured {self.what} in {s:.1f} s, cached in {self.path}", file=sys.stderr, flush=True)

    def __enter__(self) -> "Measuring":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
