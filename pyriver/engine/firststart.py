"""The progress bar of a measurement a first start makes once and then caches (the verify-cost curve
with its tiled-kernel crossover, pyriver.speculative.costcurve; the prompt layouts' crossover,
pyriver.engine.widerows): on stderr whether or not the Llama is verbose, since the start waits on it
for seconds to a minute. It shows only once the measurement has run DELAY seconds (a quick one
stays silent) and ends with one line saying what was measured and where it is kept; a cached
measurement never makes one."""
from __future__ import annotations

import sys
import time

from tqdm import tqdm

DELAY = 1.0   # seconds before the bar shows


class Measuring:
    """A bar over `total` timed steps (tick() after each; total may grow), then the closing line."""

    def __init__(self, what: str, total: int, path) -> None:
        self.what, self.path, self.t0 = what, path, time.monotonic()
        self.bar = tqdm(total=total, desc=f"pyriver: measuring {what} (once)", unit="step", file=sys.stderr,
                        delay=DELAY, leave=False, mininterval=0.5, dynamic_ncols=True)

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
