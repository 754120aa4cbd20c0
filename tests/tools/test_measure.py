"""`pyriver bench`, `eval`, `sweep` and `calibrate` end to end on a tiny synthetic GGUF (a copy per
module: calibrate writes into the sidecars next to it), their JSON against pyriver/tools/schemas,
the calibrated default of `Llama(MODEL)`, bad input, and Ctrl-C."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from helpers import REPO, default_sigint, pyriver_cli as _pyriver
from pyriver.models.cache import file_sha256
from pyriver.speculative.draftlen import DEFAULT_COST
from pyriver.river.sidecar import read_calibration
from pyriver_dev import synth
from pyriver.tools.results import schema

pytestmark = pytest.mark.slow

DEFAULT_VERIFY = DEFAULT_COST.verify
GRID = ["--river", "q4_0", "--tau", "0.9", "0.99", "--min-exit-layer", "2", "--limit", "4", "-n", "12"]


def _valid(path, name):
    d = json.loads(Path(path).read_text())
    jsonschema.validate(d, schema(name))
    return d


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, smol_path):
    d = tmp_path_factory.mktemp("tiny")
    p = d / "tiny.gguf"
    synth.write_llama(p, n_layer=6, n_embd=128, n_head=4, n_head_kv=2, n_ff=352, tied_output=True, seed=5,
                      dtype="f16", tokenizer_from=smol_path)
    return str(p)


def test_schemas_are_valid_schemas_and_readme_results_follow_them():
    for name in ("bench", "eval", "sweep", "calibrate"):
        jsonschema.Draft202012Validator.check_schema(schema(name))
    docs = os.path.join(REPO, "docs", "results")
    for f in os.listdir(docs):
        if f.endswith(".json"):
            _valid(os.path.join(docs, f), f.split("-")[0])


def test_bench_end_to_end(tiny, tmp_path):
    out = tmp_path / "b.json"
    r = _pyriver("bench", tiny, "--repeats", "1", "--prompt-tokens", "16", "--gen-tokens", "8", "--river", "q4_0",
                 "--tau", "0.9", "--min-exit-layer", "2", "--competitor", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "TTFT ms" in r.stdout
    d = _valid(out, "bench")
    assert set(d["engines"]) == {"llama.cpp", "pyriver", "pyriver river=q4_0 tau=0.9", "llama.cpp q4_0"}
    assert d["conditions"]["model_sha256"] == file_sha256(tiny) and d["conditions"]["threads"] == 2
    for e in d["engines"].values():
        assert e["ttft_ms"]["median"] > 0 and e["decode_tok_s"]["min"] <= e["decode_tok_s"]["median"] <= e["decode_tok_s"]["max"]
    assert d["engines"]["pyriver river=q4_0 tau=0.9"]["mean_exit_layer"] is not None


def test_bench_paired(tiny, tmp_path):
    """--paired: both engines in one process, their logits equal after every step on the CPU, and the
    ratios the per-repeat ratios of the engines' own speeds."""
    out = tmp_path / "p.json"
    r = _pyriver("bench", tiny, "--paired", "--repeats", "2", "--prompt-tokens", "16", "--gen-tokens", "8", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "logits equal to llama.cpp's after the prompt and every step: yes" in r.stdout
    d = json.loads(out.read_text())
    assert d["schema"] == "pyriver.bench-paired/1" and d["logits_equal"] is True
    for m in ("prefill_tok_s", "decode_tok_s"):
        py, lc = d["engines"]["pyriver"][m]["values"], d["engines"]["llama.cpp"][m]["values"]
        assert len(py) == 2 and all(v > 0 for v in py + lc)
        assert d["ratio_to_llama_cpp"][m]["values"] == [p / q for p, q in zip(py, lc)]


def test_bench_paired_llamacpp_engine(tiny, tmp_path):
    """--paired --engine llama.cpp: pyriver's side runs on llama.cpp's own graphs (so its logits are
    llama-cpp-python's, bit for bit), and the JSON says which engine ran it."""
    out = tmp_path / "p.json"
    r = _pyriver("bench", tiny, "--paired", "--engine", "llama.cpp", "--repeats", "1", "--prompt-tokens", "16",
                 "--gen-tokens", "4", "--json", str(out))
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["conditions"]["pyriver_engine"] == "llama.cpp" and d["logits_equal"] is True
    assert "pyriver engine llama.cpp" in r.stdout


def test_eval_end_to_end(tiny, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Say hello.", "category": "chat"}) + "\n\n" +
                       json.dumps({"prompt": "def add(a, b):\n", "category": "code", "chat": False}) + "\n")
    text = tmp_path / "t.txt"
    text.write_text("The river runs to the sea, and the sea is wide.\n\nOne, two, three, four, five, six.\n")
    out = tmp_path / "e.json"
    r = _pyriver("eval", tiny, "--river", "q4_0", "--tau", "0.9", "2.0", "--min-exit-layer", "2", "--prompts", str(prompts),
                 "-n", "10", "--text", str(text), "--competitor", "--json", str(out))
    assert r.returncode == 0, r.stderr
    d = _valid(out, "eval")
    c = d["conditions"]
    assert c["prompts"] == 2 and c["texts"] == 2 and c["prompt_set"] == str(prompts) and c["tokens_per_prompt"] == 10
    low, never, uni = d["results"]
    assert [x["kind"] for x in d["results"]] == ["river", "river", "uniform"]
    # tau 2.0 never exits: full depth exactly.
    assert never["top1_agreement"] == 1.0 and never["mean_identical_prefix"] == 10 and never["river_work_share"] == 0.0
    assert abs(never["perplexity_change"]) < 1e-9
    assert set(never["histogram"]) == {"5"}
    for x in (low, never):
        assert sum(x["histogram"].values()) == x["positions"] == 20
        assert set(x["top1_by_category"]) == {"chat", "code"}
    assert low["mean_exit_layer"] < 5 and low["river_work_share"] > 0
    assert uni["model"].endswith(".q4_0.gguf") and uni["mean_exit_layer"] is None
    assert d["full_depth"]["text_tokens"] > 10 and d["full_depth"]["perplexity"] > 1


def test_eval_without_river_uses_the_default_type(tiny, tmp_path):
    out = tmp_path / "e.json"
    r = _pyriver("eval", tiny, "--tau", "2.0", "--min-exit-layer", "2", "--limit", "1", "-n", "4", "--text-tokens", "0",
                 "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "using the default river type q4_0" in r.stderr
    d = _valid(out, "eval")
    assert d["conditions"]["river"] == "q4_0" and d["conditions"]["calibrated"] is False
    assert [x["river"] for x in d["results"]] == ["q4_0"]


def test_eval_humaneval_sets(tiny, tmp_path):
    out = tmp_path / "h.json"
    r = _pyriver("eval", tiny, "--river", "q4_0", "--min-exit-layer", "2", "--prompts", "humaneval", "--limit", "2",
                 "-n", "4", "--text", "humaneval", "--text-limit", "3", "--text-tokens", "24", "--json", str(out))
    assert r.returncode == 0, r.stderr
    d = _valid(out, "eval")
    assert d["conditions"]["prompt_set"] == "humaneval[:2]" and d["conditions"]["prompts"] == 2
    assert d["conditions"]["text_set"] == "humaneval[:3]" and d["conditions"]["texts"] == 3
    assert d["results"][0]["positions"] == 8


def test_sweep_end_to_end(tiny, tmp_path):
    png, md, js = tmp_path / "s.png", tmp_path / "s.md", tmp_path / "s.json"
    r = _pyriver("sweep", tiny, *GRID, "--min-exit-layer", "2", "3", "-r", "2", "--png", str(png), "--markdown", str(md),
                 "--json", str(js))
    assert r.returncode == 0, r.stderr
    d = _valid(js, "sweep")
    kinds = [p["kind"] for p in d["points"]]
    assert sorted(kinds) == sorted(["full", "llama.cpp", "uniform"] + ["river"] * 4)
    assert all(p["repeats"] == 2 and len(p["decode_tok_s"]["values"]) == 2 for p in d["points"])
    full = next(p for p in d["points"] if p["kind"] == "full")
    assert full["top1_agreement"] == 1.0 and full["speedup"] == 1.0
    # The frontier as marked is the frontier of the measured points.
    for p in d["points"]:
        dominated = any(q["top1_agreement"] >= p["top1_agreement"] and q["decode_tok_s"]["median"] >= p["decode_tok_s"]["median"]
                        and (q["top1_agreement"], q["decode_tok_s"]["median"]) != (p["top1_agreement"], p["decode_tok_s"]["median"])
                        for q in d["points"])
        assert p["pareto"] == (not dominated)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = md.read_text()
    assert table == r.stdout.strip() + "\n" and table.count("\n| ") == len(d["points"]) + 1


def test_calibrate_stores_setting_that_eval_confirms(tiny, tmp_path, capfd):
    from pyriver import Llama
    from pyriver.tools.calibrate import decide
    model = str(tmp_path / "cal.gguf")
    shutil.copy(tiny, model)
    out = tmp_path / "c.json"
    # min-speedup 0: choose the fastest setting meeting the target even where the tiny model's
    # speeds are within noise, so that the choice itself is exercised.
    r = _pyriver("calibrate", model, *GRID, "-r", "1", "--target-fidelity", "0.9", "--min-speedup", "0", "--no-uniform",
                 "--no-lossless", "--json", str(out))
    assert r.returncode == 0, r.stderr
    d = _valid(out, "calibrate")
    dec = d["decision"]
    assert dec["enabled"] and "calibrated: river q4_0" in r.stdout
    assert decide(d["points"], 0.9, 0.0, False)["setting"] == dec["setting"]
    s = dec["setting"]
    # the exit rule measured on this device at that setting, recorded with it, meets the target
    (device, rule), = dec["exit_rules"].items()
    assert device.startswith("CPU") and rule["measured"][rule["rule"]]["top1_agreement"] >= 0.9
    assert set(rule["measured"]) == {"checked", "predicted", "guarded"} and f"exit rule on {device}" in r.stdout
    assert read_calibration(dec["stored"][0])["exit_rules"] == dec["exit_rules"]
    # eval (no --river: the calibrated setting) re-measures it on the calibration set: it meets the target.
    ev = tmp_path / "e.json"
    r = _pyriver("eval", model, "--limit", "4", "-n", "12", "--text-tokens", "0", "--json", str(ev))
    assert r.returncode == 0, r.stderr
    e = _valid(ev, "eval")
    assert e["conditions"]["calibrated"] is True
    assert [(x["river"], x["tau"], x["min_exit_layer"]) for x in e["results"]] == [(s["river"], s["tau"], s["min_exit_layer"])]
    assert e["results"][0]["top1_agreement"] >= 0.9
    # bench without --river runs it too.
    bj = tmp_path / "b.json"
    r = _pyriver("bench", model, "--repeats", "1", "--prompt-tokens", "8", "--gen-tokens", "4", "--json", str(bj))
    assert r.returncode == 0, r.stderr
    b = _valid(bj, "bench")
    assert b["conditions"]["calibrated"] is True and f"pyriver river={s['river']} tau={s['tau']}" in b["engines"]
    # Llama(MODEL) uses it, says so, and reports it; river=None stays full depth.
    capfd.readouterr()
    with Llama(model, n_ctx=128, n_threads=2) as llm:
        assert llm.river_path == dec["stored"][0] and llm.exit_rule == rule["rule"]
        assert abs(llm.exit_threshold - s["tau"]) < 1e-6 and llm.min_exit_layer == s["min_exit_layer"]
        llm("Rivers", max_tokens=4, temperature=0)
        st = llm.river_stats()
        assert st["calibrated"] is True and st["tokens"] > 0
    assert "River on from calibration" in capfd.readouterr().err
    with Llama(model, n_ctx=64, verbose=False, river=None) as llm:
        assert llm.river_path is None and llm.river_stats() is None
    # `pyriver chat MODEL` too.
    r = _pyriver("chat", model, "-n", "4", input="Hi\n/stats\n", timeout=120)
    assert r.returncode == 0 and "mean exit block" in r.stdout, r.stdout + r.stderr
    # A calibration that finds nothing worth it (lossless mode measured too) turns River off again.
    r = _pyriver("calibrate", model, *GRID, "-r", "1", "--target-fidelity", "0.9", "--min-speedup", "1000", "--no-uniform",
                 "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "River stays off" in r.stdout and "lossless q4_0 tau 0.975 min 2 k 2:" in r.stdout
    assert len(_valid(out, "calibrate")["lossless_points"]) == 1
    assert read_calibration(dec["stored"][0])["enabled"] is False
    with Llama(model, n_ctx=64, verbose=False) as llm:
        assert llm.river_path is None


def test_calibrate_chooses_lossless_mode_that_llama_then_runs(tiny, tmp_path, capfd):
    """Where no lossy setting meets the target, lossless mode (full depth's text) is the candidate;
    Llama(MODEL) then runs it, with the calibrated draft length, and its text is full depth's."""
    from pyriver import Llama
    model = str(tmp_path / "cal.gguf")
    shutil.copy(tiny, model)
    out = tmp_path / "c.json"
    # tau 0: every token leaves the backbone at block 2, which misses a target of 1.0.
    r = _pyriver("calibrate", model, "--river", "q4_0", "--tau", "0.0", "--min-exit-layer", "2", "--limit", "4", "-n", "12",
                 "-r", "1", "--target-fidelity", "1.0", "--min-speedup", "0", "--no-uniform", "--draft-tau", "0.9",
                 "--draft-max", "3", "--json", str(out))
    assert r.returncode == 0, r.stderr
    d = _valid(out, "calibrate")
    assert [p["top1_agreement"] < 1.0 for p in d["points"] if p["kind"] == "river"] == [True]
    lp, = d["lossless_points"]
    assert lp["text_equals_full_depth"] and lp["drafted"] > 0
    dec = d["decision"]
    assert dec["enabled"] and dec["setting"] == {"river": "q4_0", "tau": 0.9, "min_exit_layer": 2, "lossless": True,
                                                 "draft_max": 3}
    assert "calibrated: lossless on river q4_0" in r.stdout
    capfd.readouterr()
    with Llama(model, n_ctx=256, n_threads=2) as llm, Llama(model, n_ctx=256, n_threads=2, verbose=False, river=None) as ref:
        assert llm.lossless and llm.speculator.draft_max == 3 and abs(llm.exit_threshold - 0.9) < 1e-6
        got = llm("Rivers", max_tokens=24, temperature=0)
        assert got["choices"][0]["text"] == ref("Rivers", max_tokens=24, temperature=0)["choices"][0]["text"]
        assert got["river"]["lossless"]["drafted"] > 0
    assert "River on from calibration: q4_0 lossless" in capfd.readouterr().err
    # lossless=False: the drafts' tau was never checked for lossy fidelity, so River stays off.
    with Llama(model, n_ctx=64, verbose=False, lossless=False) as llm:
        assert llm.river_path is None and not llm.lossless


def test_calibrate_measures_each_drafter_and_llama_runs_the_chosen_one(tiny, tmp_path):
    """--draft ngram both --draft-cost default on the code-edit prompts: a lossless point per drafter
    (n-grams once), each by cost; with n-grams alone the chosen setting stores the drafter and its
    cost, and Llama(MODEL) runs it without a river, by cost, its text full depth's."""
    from pyriver import Llama
    from pyriver.tools.calibrate import decide
    model = str(tmp_path / "cal.gguf")
    shutil.copy(tiny, model)
    out = tmp_path / "c.json"
    base = ["--river", "q4_0", "--tau", "0.0", "--min-exit-layer", "2", "--limit", "2", "-n", "16", "-r", "1",
            "--target-fidelity", "1.0", "--min-speedup", "0", "--no-uniform", "--draft-tau", "0.9", "--draft-max", "6",
            "--draft-cost", "default", "--prompts", "code-edit", "--json", str(out)]
    r = _pyriver("calibrate", model, *base, "--draft", "ngram", "both")
    assert r.returncode == 0, r.stderr
    d = _valid(out, "calibrate")
    assert d["conditions"]["prompt_set"].startswith("code-edit")
    assert [(p["draft"], p["name"]) for p in d["lossless_points"]] == [
        ("ngram", "lossless ngram on q4_0 k<=6 by cost"), ("both", "lossless both q4_0 tau 0.9 min 2 k<=6 by cost")]
    assert all(p["draft_cost"]["verify"] == DEFAULT_VERIFY for p in d["lossless_points"])
    assert decide(d["points"], 1.0, 0.0, False, d["lossless_points"])["setting"] == d["decision"]["setting"]
    r = _pyriver("calibrate", model, *base, "--draft", "ngram")
    assert r.returncode == 0, r.stderr
    s = _valid(out, "calibrate")["decision"]["setting"]
    assert s["lossless"] and s["draft"] == "ngram" and s["draft_cost"]["verify"] == DEFAULT_VERIFY, s
    assert "calibrated: lossless, n-gram drafts, k<=6 by cost" in r.stdout
    prompt = "def f(x):\n    return x + 1\n\n\n# f again, unchanged:\ndef f(x):\n"
    with Llama(model, n_ctx=256, n_threads=2, verbose=False) as llm, \
            Llama(model, n_ctx=256, n_threads=2, verbose=False, river=None) as ref:
        assert llm.lossless and llm.river_path is None and llm.speculator.draft_max == 6
        got = llm(prompt, max_tokens=16, temperature=0)
        assert got["choices"][0]["text"] == ref(prompt, max_tokens=16, temperature=0)["choices"][0]["text"]
        ls = llm.river_stats()["lossless"]
        assert llm.river_stats()["calibrated"] and ls["draft"] == "SuffixLookup"
        assert ls["draft_length"] == "by cost" and set(ls["by_source"]) == {"ngram"}
    r = _pyriver("calibrate", model, *base, "--draft", "bigram")
    assert r.returncode == 2 and "invalid choice: 'bigram'" in r.stderr


@pytest.mark.parametrize("cmd", ["bench", "eval", "sweep", "calibrate"])
def test_bad_model_path(cmd, tmp_path):
    r = _pyriver(cmd, str(tmp_path / "missing.gguf"), "--river", "q4_0")
    assert r.returncode == 1 and "missing.gguf" in r.stderr and "Traceback" not in r.stderr


def test_bad_prompt_and_text_files(tiny, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    r = _pyriver("eval", tiny, "--river", "q4_0", "--prompts", str(empty))
    assert r.returncode == 1 and "no prompts" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": "unterminated\n')
    r = _pyriver("sweep", tiny, "--prompts", str(bad))
    assert r.returncode == 1 and "bad.jsonl:2: not a JSON line" in r.stderr
    noprompt = tmp_path / "np.jsonl"
    noprompt.write_text('{"text": "wrong key"}\n')
    r = _pyriver("calibrate", tiny, "--prompts", str(noprompt))
    assert r.returncode == 1 and 'np.jsonl:1: each line needs a non-empty "prompt"' in r.stderr
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n")
    r = _pyriver("eval", tiny, "--river", "q4_0", "--text", str(blank))
    assert r.returncode == 1 and "no text" in r.stderr


SIGINT_CASES = {
    # command args, what stderr shows once something is measured, schema
    "sweep": (["sweep", *GRID, "-r", "500", "--no-uniform"], r"sweep:.*\| [1-9]\d{2,}/", "sweep"),
    "eval": (["eval", "--river", "q4_0", "--tau", "0.9", "0.95", "0.96", "0.97", "0.98", "0.99", "--min-exit-layer", "2",
              "--limit", "4", "-n", "120", "--text-tokens", "0"], r"river 0\.95", "eval"),
    "bench": (["bench", "--repeats", "50", "--prompt-tokens", "16", "--gen-tokens", "8"], r"bench:.*\| ([2-9]|\d\d+)/", "bench"),
}


@pytest.mark.parametrize("cmd", sorted(SIGINT_CASES))
def test_ctrl_c_keeps_partial_results(cmd, tiny, tmp_path):
    args, ready, name = SIGINT_CASES[cmd]
    js = tmp_path / "r.json"
    p = subprocess.Popen([sys.executable, "-m", "pyriver.cli", args[0], tiny, *args[1:], "--json", str(js)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    seen = threading.Event()

    def watch():   # until stderr (progress bars) shows that something was measured
        buf = ""
        while not seen.is_set():
            ch = p.stderr.read(64)
            if not ch:
                return
            buf += ch
            if re.search(ready, buf[-400:]):
                seen.set()

    threading.Thread(target=watch, daemon=True).start()
    assert seen.wait(120), f"{cmd} never started measuring"
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 130
    d = _valid(js, name)
    assert d["interrupted"] is True
    if cmd == "sweep":
        assert d["points"] and all(pt["repeats"] < 500 for pt in d["points"]) and "| point |" in out
    elif cmd == "eval":
        assert 1 <= len(d["results"]) < 6 and "top-1 agreement" in out
    else:
        assert 1 <= d["conditions"]["repeats"] < 50 and "decode tok/s" in out
