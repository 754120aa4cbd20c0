"""Malformed model and sidecar files: a loaded model or a clear exception, never a crash.
Crashes the long fuzz run found are replayed on every run (tests/fuzz_regressions.json: seed and
case regenerate the exact input from the deterministic base file: the synthetic llama below, or
with "arch" that foreign architecture's file, loaded through the llama.cpp engine)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import TESTS
from pyriver_dev import synth
from pyriver_dev.fuzz import run
from pyriver_dev.synth_foreign import ARCHS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base(smol_path, tmp_path_factory):
    p = tmp_path_factory.mktemp("fuzz") / "fuzz-base.gguf"
    synth.write_llama(p, n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_ff=128, tokenizer_from=smol_path)
    return p


def test_short_fuzz_run_model(base):
    r = subprocess.run([sys.executable, "-m", "pyriver_dev.fuzz", "--source", str(base), "--cases", "300", "--seed", "11"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert "300 cases" in r.stdout and "0 crashes or hangs" in r.stdout


def test_short_fuzz_run_river(base):
    from pyriver import Llama
    Llama(str(base), n_ctx=8, verbose=False, river="q8_0").close()
    side = base.with_name("fuzz-base.river-q8_0.gguf")
    res = run(str(side), "river", 100, 12, None, backbone=str(base), quiet=True)
    assert res["crashes"] == [] and res["bad_message"] == 0
    assert res["error"] > 0


@pytest.mark.parametrize("arch", ARCHS)
def test_short_fuzz_run_llamacpp_engine(foreign_paths, arch):
    """Each foreign architecture's file, mutated, through the llama.cpp engine's load path (a
    model, a context, a step): a handful of fresh cases each."""
    res = run(foreign_paths[arch], "model", 16, 21, None, quiet=True, engine="llama.cpp")
    assert res["crashes"] == [] and res["bad_message"] == 0, res["crashes"]
    assert res["error"] > 0


REPLAY = """
import json, random, sys
from pathlib import Path
from pyriver import Llama, ModelLoadError
from pyriver_dev.fuzz import _meta_end, mutate
sources, cases, tmp = json.loads(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), Path(sys.argv[3])
for c in cases:
    src = sources[c.get("arch", "llama")]
    blob, what = mutate(Path(src).read_bytes(), random.Random(c["seed"] * 1_000_003 + c["case"]), _meta_end(src))
    assert what == c["mutation"], (what, c)
    f = tmp / ("regression-%s-%d-%d.gguf" % (c.get("arch", "llama"), c["seed"], c["case"]))
    f.write_bytes(blob)
    try:   # a harmless mutation may still load
        Llama(str(f), n_ctx=16, verbose=False, engine=c.get("engine", "auto")).close()
        print("loaded", c["case"])
    except (ModelLoadError, ValueError) as e:
        assert str(e)
        print("error", c["case"], e)
"""


def test_regressions_raise_clear_errors(base, foreign_paths, tmp_path):
    """Replayed in a child process: a crash must fail this test, not end the test run."""
    cases = TESTS / "fuzz_regressions.json"
    assert json.loads(cases.read_text())
    sources = json.dumps({"llama": str(base), **foreign_paths})
    r = subprocess.run([sys.executable, "-c", REPLAY, sources, str(cases), str(tmp_path)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(r.stdout.splitlines()) == len(json.loads(cases.read_text()))
    assert "appears twice" in r.stdout
