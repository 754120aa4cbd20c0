"""`pyriver compare` end to end on SmolLM2 (issue 72 item 2): one base pass, the input file against
itself at 0 KLD, a requantized point read as `pyriver eval --kl-divergence` reads that file alone,
the frontier, and a run that resumes: an interrupted one keeps what it measured, a rerun measures
only what is missing, and a complete one measures nothing again."""
from __future__ import annotations

import json

import jsonschema
import pytest

from pyriver.tools import compare, eval as eval_tool
from pyriver.tools.results import schema



@pytest.fixture
def text(tmp_path):
    from pyriver.tools import datasets
    p = tmp_path / "he.txt"
    p.write_text("\n\n".join(t["text"] for t in datasets.load_texts("humaneval")[:20]) + "\n")
    return str(p)


def test_compare_measures_each_point_once_and_reads_kld_as_eval_does(smol_path, text, tmp_path, monkeypatch):
    out = tmp_path / "cmp"
    argv = [smol_path, "--quantize", "q4_0", "-f", text, "-c", "128", "--chunks", "1", "-p", "16", "-n", "4",
            "-r", "1", "-o", str(out)]
    calls = {"fidelity": [], "speed": []}
    on_disk = []
    real = {"fidelity": compare.fidelity, "speed": compare.speed}

    def counted(part, stop_at=None):
        def fn(a, p, *rest):
            if p["name"] == stop_at:   # Ctrl-C here; what is on disk then is what a kill would leave
                on_disk.append([("kld" in q, "speed" in q) for q in json.loads((out / "compare.json").read_text())["points"]])
                raise KeyboardInterrupt
            calls[part].append(p["name"])
            return real[part](a, p, *rest)
        return fn
    # 1: interrupted at the requantized point's speed: its fidelity and the first point are kept
    monkeypatch.setattr(compare, "fidelity", counted("fidelity"))
    monkeypatch.setattr(compare, "speed", counted("speed", stop_at="requantized q4_0"))
    assert compare.main(argv) == 130
    res = json.loads((out / "compare.json").read_text())
    assert on_disk == [[(True, True), (True, False)]]   # each part written as soon as it was measured
    assert res["interrupted"] and [("kld" in p, "speed" in p) for p in res["points"]] == [(True, True), (True, False)]
    base_time = (out / "base.kld").stat().st_mtime_ns
    # 2: the rerun measures only the missing speed, on the same base
    monkeypatch.setattr(compare, "speed", counted("speed"))
    assert compare.main(argv) == 0
    assert calls == {"fidelity": ["SmolLM2-135M-Instruct.Q4_1", "requantized q4_0"],
                     "speed": ["SmolLM2-135M-Instruct.Q4_1", "requantized q4_0"]}
    assert (out / "base.kld").stat().st_mtime_ns == base_time
    res = json.loads((out / "compare.json").read_text())
    jsonschema.validate(res, schema("compare"))
    assert not res["interrupted"] and all((out / f"compare.{x}").stat().st_size > 0 for x in ("md", "csv", "png"))
    own, quant = res["points"]
    # the input file against itself: 0, up to the base file's 16-bit log-probs
    assert own["kld"]["kld"] < 1e-5 and own["kld"]["same_top"] == 1.0 and own["kld"]["ppl_ratio"] == pytest.approx(1, abs=1e-4)
    # the requantized point: what `pyriver eval --kl-divergence` reads for that file alone
    alone = tmp_path / "alone.json"
    assert eval_tool.main([quant["model"], "--kl-divergence-base", str(out / "base.kld"), "--kl-divergence",
                           "--json", str(alone)]) == 0
    e = json.loads(alone.read_text())["results"][0]
    assert quant["kld"]["kld"] > 0.01 and (quant["kld"]["kld"], quant["kld"]["same_top"], quant["kld"]["ppl_ratio"]) == \
        (e["kld"], e["same_top"], e["ppl_ratio"])
    # the frontier: the points no other one beats on mean KLD and decode speed, one at least strictly
    # (speed: pyriver's decode over llama.cpp's on the input file, timed beside each point; for the
    # requantized file llama.cpp runs it and the input file, alternated with pyriver)
    assert set(quant["speed"]["engines"]) == {"pyriver", "llama.cpp", "anchor"} and set(own["speed"]["engines"]) == {"pyriver", "llama.cpp"}
    assert own["speed"]["ratio_to_anchor"] == own["speed"]["ratio_to_llama_cpp"]
    tg = lambda p: p["speed"]["ratio_to_anchor"]["decode_tok_s"]["median"]   # noqa: E731
    for p in res["points"]:
        beaten = any(q["kld"]["kld"] <= p["kld"]["kld"] and tg(q) >= tg(p) and (q["kld"]["kld"] < p["kld"]["kld"] or tg(q) > tg(p))
                     for q in res["points"] if q is not p)
        assert p["pareto"] is not beaten
    assert own["pareto"]   # the lowest KLD
    md = (out / "compare.md").read_text()
    assert "| *SmolLM2-135M-Instruct.Q4_1 | " in md and "requantized q4_0" in md
    # 3: a complete run measures nothing again
    monkeypatch.setattr(compare, "fidelity", counted("fidelity", stop_at=quant["name"]))
    monkeypatch.setattr(compare, "speed", counted("speed", stop_at=quant["name"]))
    calls = {"fidelity": [], "speed": []}
    on_disk.clear()
    assert compare.main(argv) == 0 and on_disk == [] and calls == {"fidelity": [], "speed": []}
    assert json.loads((out / "compare.json").read_text())["points"] == res["points"]
