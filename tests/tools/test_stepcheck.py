"""`python -m pyriver_dev.stepcheck`: a token's logits in one step against single-token steps."""
from __future__ import annotations

from helpers import pyriver_module


def test_stepcheck_on_the_cpu(smol_path):
    r = pyriver_module("pyriver_dev.stepcheck", smol_path, "--tokens", "48", "--batch-invariant", "on")
    assert r.returncode == 0, r.stderr
    assert "batch_invariant True" in r.stdout and "0/24 positions differ" in r.stdout
    r = pyriver_module("pyriver_dev.stepcheck", smol_path, "--tokens", "48")   # the default: llama.cpp's kernels
    assert r.returncode == 0, r.stderr
    assert "batch_invariant False" in r.stdout and "0/24 positions differ" not in r.stdout
