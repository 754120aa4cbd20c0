"""The `pyriver` command, run as a user runs it (a subprocess)."""
from __future__ import annotations

import pytest

from helpers import pyriver_cli as _pyriver
from pyriver.cli import TOOLS


def test_help_lists_every_command():
    r = _pyriver("--help")
    assert r.returncode == 0, r.stderr
    for cmd in ("run", "chat", "models", "rpc-server", *TOOLS):
        assert f"    {cmd}" in r.stdout, cmd
    # A tool's own parser answers its --help.
    r = _pyriver("sweep", "--help")
    assert r.returncode == 0 and "usage: pyriver sweep" in r.stdout and "--png" in r.stdout


@pytest.mark.slow
def test_run_streams_and_reports_speed(smol_path):
    r = _pyriver("run", "The capital of France is", "-n", "12", "--model", smol_path)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    assert "tok/s" in r.stdout.splitlines()[-1]


@pytest.mark.slow
def test_run_chat_with_river_stats(smol_path):
    r = _pyriver("run", "Name a river.", "--chat", "-n", "16", "--model", smol_path, "--river", "q4_0",
                 "--tau", "0.97", "--stats")
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("[river ") and "mean exit block" in last and "river work" in last


@pytest.mark.slow
def test_run_bad_model_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a model at all")
    r = _pyriver("run", "hi", "--model", str(bad))
    assert r.returncode == 1
    assert "not a GGUF" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_run_lossless_prints_the_full_depth_text_and_draft_stats(smol_path):
    args = ("run", "The capital of France is", "-n", "24", "--model", smol_path)
    full = _pyriver(*args)
    r = _pyriver(*args, "--lossless", "--tau", "0.975", "--stats")
    assert full.returncode == 0 and r.returncode == 0, r.stderr
    answer = lambda out: out.split("\n\n[prompt")[0]   # noqa: E731
    assert answer(r.stdout) == answer(full.stdout)
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("[lossless (river drafts): drafted ") and "verify steps" in last, last
    assert "mean accepted length" in last


CODE = ("def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n\n\n"
        "# The same two functions again, unchanged:\ndef area(w, h):\n")


@pytest.mark.slow
@pytest.mark.parametrize("draft,kind,river", [("ngram", "SuffixLookup", False), ("both", "NgramOrRiver", True)])
def test_run_lossless_drafter_and_cost_reach_the_llama(smol_path, draft, kind, river):
    """--draft and --draft-cost reach Llama's lossless mode: the stats line names the drafter, its
    drafts by source and the draft length by cost; the text is full depth's."""
    args = ("run", CODE, "-n", "24", "--model", smol_path)
    full = _pyriver(*args)
    r = _pyriver(*args, "--lossless", "--draft", draft, "--draft-cost", "default", "--draft-max", "6", "--stats")
    assert full.returncode == 0 and r.returncode == 0, r.stderr
    assert r.stdout.split("\n\n[prompt")[0] == full.stdout.split("\n\n[prompt")[0]
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith(f"[lossless ({kind} drafts): drafted ") and "| ngram: kept " in last, last
    assert last.endswith("| draft length by cost]") and ("| river: kept" in last) <= river, last


@pytest.mark.slow
@pytest.mark.parametrize("args,code,words", [
    (["--draft", "ngram"], 1, "add --lossless"),
    (["--draft-cost", "default"], 1, "add --lossless"),
    (["--lossless", "--draft", "bigram"], 2, "invalid choice: 'bigram'"),
    (["--lossless", "--draft", "ngram", "--draft-cost", "/nonexistent/vc.json"], 2, "not a readable file"),
])
def test_run_bad_drafter_settings(smol_path, args, code, words):
    r = _pyriver("run", "hi", "-n", "2", "--model", smol_path, *args)
    assert r.returncode == code and words in r.stderr and "Traceback" not in r.stderr, r.stderr
