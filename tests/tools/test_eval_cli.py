"""`pyriver eval` on the real default model, run as a user runs it (a subprocess)."""
from __future__ import annotations

import json

import pytest

from helpers import pyriver_cli as _pyriver

pytestmark = pytest.mark.slow


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
