"""Reliability on real runs, through the tools that measure it: a short long-run (chat turns with
context shifts, River on) without fd/thread growth, load/close cycles without leaks, and several
processes sharing one model file's pages."""
from __future__ import annotations

import pytest

from pyriver_dev import longrun, memshare

pytestmark = pytest.mark.slow


def test_short_long_run_has_no_fd_or_thread_growth(smol_path):
    res = longrun.run(smol_path, tokens=600, n_ctx=256, max_tokens=64, turns_per_conversation=5, reloads=4,
                      progress=False)
    assert res["tokens"] >= 600
    assert res["context_shifts"] >= 1 and res["resets"] >= 1   # both paths ran
    sm = longrun.summary(res, warmup_tokens=200)
    assert sm["fds"][0] == sm["fds"][1], sm
    assert sm["threads"][0] == sm["threads"][1], sm
    assert sm["reload_fds"][0] == sm["reload_fds"][1] and sm["reload_threads"][0] == sm["reload_threads"][1], sm
    # A leaked model or context is >= 90 MiB here (the mapped weights alone); the allocator's
    # own noise between cycles is a few MiB.
    assert sm["reload_rss"][1] - sm["reload_rss"][0] < 32, sm


def test_processes_share_the_mapped_weights(smol_path):
    """Three processes on one file: each maps the weights, and the pages are shared (their
    proportional share of the mapping is about a third of what each has resident)."""
    res = memshare.measure(smol_path, procs=3)
    assert len(set(res["outputs"])) == 1            # same text in every process
    for row in res["per_process"]:
        assert row["file_rss"] > 40                  # the weights really are read from the mapping
        assert row["file_pss"] < 0.5 * row["file_rss"], row
