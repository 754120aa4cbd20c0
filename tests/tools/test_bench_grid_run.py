"""Issue 72 item 3, end to end: `pyriver bench SmolLM2 -p 16 -n 8 -r 1` in every output format,
parsed back; beside llama-bench's own binary (when built), the same fields and markdown columns."""
import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pyriver.tools.grid_out import EXTRA, FIELDS

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
GRID = ["-p", "16", "-n", "8", "-r", "1", "-t", "2"]


def bench(*args) -> str:
    p = subprocess.run([sys.executable, "-m", "pyriver.cli", "bench", *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def llama_bench():
    from pyriver.tools.llama_server import binary
    exe = binary().parent / "llama-bench"
    if not exe.exists():
        pytest.skip(f"no llama-bench at {exe} (cmake --build <llama-server's build> --target llama-bench)")
    return str(exe)


def _rows_ok(rows, path):
    assert [(int(r["n_prompt"]), int(r["n_gen"]), r["engine"]) for r in rows] == [(16, 0, "pyriver"), (0, 8, "pyriver")]
    for r in rows:
        assert r["model_filename"] == path and int(r["n_threads"]) == 2 and float(r["avg_ts"]) > 0
        assert int(r["avg_ns"]) > 0 and r["type_k"] == "f16"


def test_every_format_parses(smol_path):
    out = {fmt: bench(smol_path, *GRID, "-o", fmt) for fmt in ("md", "csv", "json", "jsonl", "sql")}
    rows = list(csv.DictReader(io.StringIO(out["csv"])))
    assert list(rows[0]) == list(FIELDS + EXTRA)
    _rows_ok(rows, smol_path)
    doc = json.loads(out["json"])
    _rows_ok(doc, smol_path)
    assert all(len(r["samples_ns"]) == 1 for r in doc)
    _rows_ok([json.loads(line) for line in out["jsonl"].splitlines()], smol_path)
    db = sqlite3.connect(":memory:")
    db.row_factory = sqlite3.Row
    db.executescript(out["sql"])
    sql_rows = [dict(r) for r in db.execute("select * from llama_bench")]
    assert all("engine" not in r and r["build_commit"].startswith("pyriver-") for r in sql_rows)   # llama-bench's table
    _rows_ok([dict(r, engine="pyriver") for r in sql_rows], smol_path)
    md = out["md"].splitlines()
    assert md[0].split("|")[1:-1] == [" model                          ", "       size ", "     params ", " backend    ",
                                      " threads ", "            test ", "                  t/s "]
    assert [line.split("|")[6].strip() for line in md[2:4]] == ["pp16", "tg8"]
    assert md[-1].startswith("build: pyriver-")


def test_fields_and_columns_are_llama_benchs_own(smol_path):
    exe = llama_bench()
    rows = [json.loads(line) for line in bench(smol_path, *GRID, "-o", "jsonl", "--llama-bench", exe).splitlines()]
    ours, theirs = [r for r in rows if r["engine"] == "pyriver"], [r for r in rows if r["engine"] == "llama-bench"]
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert list(a) == list(b)   # llama-bench's fields (and the added engine) in its order
        for f in ("model_type", "model_size", "model_n_params", "n_prompt", "n_gen", "n_depth", "n_threads",
                  "n_batch", "n_ubatch", "type_k", "type_v", "cpu_info", "gpu_info", "backends"):
            assert a[f] == b[f], f
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(exe).parent))
    theirs_md = subprocess.run([exe, "-m", smol_path, *GRID, "-o", "md"], capture_output=True, text=True, env=env,
                               timeout=600).stdout.splitlines()
    ours_md = bench(smol_path, *GRID, "-o", "md").splitlines()
    assert ours_md[:2] == theirs_md[:2]   # header and rule
    for a, b in zip(ours_md[2:4], theirs_md[2:4]):   # model, size, params, backend, threads, test
        assert a.split("|")[1:7] == b.split("|")[1:7]


def test_a_setting_both_engines_refuse_is_a_row_not_a_crash(smol_path):
    """A quantized V cache without flash attention: llama.cpp cannot make the context, pyriver
    refuses it; the grid goes on and says so in each row."""
    md = bench(smol_path, "-p", "8", "-n", "0", "-r", "1", "-t", "2", "-ctv", "q8_0", "-fa", "0", "-pg", "0,0",
               "--llama-cpp", "-o", "md").splitlines()
    rows = [line for line in md if "pp8" in line]
    assert len(rows) == 2 and all("skipped: " in r for r in rows), md
