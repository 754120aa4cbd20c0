"""The `pyriver` command, run as a user runs it (a subprocess)."""
from __future__ import annotations

import json
import subprocess
import sys


def _pyriver(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pyriver.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_run_streams_and_reports_speed(smol_path):
    r = _pyriver("run", "The capital of France is", "-n", "12", "--model", smol_path)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    assert "tok/s" in r.stdout.splitlines()[-1]


def test_run_chat_with_river_stats(smol_path):
    r = _pyriver("run", "Name a river.", "--chat", "-n", "16", "--model", smol_path, "--river", "q4_0",
                 "--tau", "0.97", "--stats")
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("[river ") and "mean exit block" in last and "river work" in last


def test_run_bad_model_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a model at all")
    r = _pyriver("run", "hi", "--model", str(bad))
    assert r.returncode == 1
    assert "not a GGUF" in r.stderr and "Traceback" not in r.stderr


def test_eval_writes_json(smol_path, tmp_path):
    out = tmp_path / "e.json"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Say hello."}) + "\n" + json.dumps({"prompt": "Count to three."}) + "\n")
    r = _pyriver("eval", smol_path, "--river", "q4_0", "--tau", "0.97", "2.0", "--prompts", str(prompts), "-n", "8",
                 "--text-tokens", "32", "--json", str(out))
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert [x["tau"] for x in d["results"]] == [0.97, 2.0]
    never = d["results"][1]
    assert never["top1_agreement"] == 1.0 and never["river_work_share"] == 0.0
    assert never["positions"] == 16


def test_eval_rejects_malformed_prompts(smol_path, tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"prompt": "ok"}\n{not json}\n')
    r = _pyriver("eval", smol_path, "--river", "q4_0", "--prompts", str(p))
    assert r.returncode == 1 and "bad.jsonl:2" in r.stderr
