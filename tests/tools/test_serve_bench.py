"""pyriver bench --serve's comparison with llama-server: ratios taken within each repeat."""
from __future__ import annotations

import pytest

from pyriver.tools.serve_bench import paired_ratio


def test_paired_ratio_takes_each_ratio_within_its_repeat():
    # The machine ran slow in the third repeat for llama-server only: every other repeat says 0.9x,
    # where the ratio of the medians (90 / 50) would say 1.8x.
    runs = [{"tok_s": 90.0}, {"tok_s": 45.0}, {"tok_s": 180.0}]
    ref = [{"tok_s": 100.0}, {"tok_s": 50.0}, {"tok_s": 40.0}]
    assert paired_ratio(runs, ref, "tok_s") == pytest.approx(0.9)
