"""`pyriver compare`'s rules that need no model (issue 72 item 2): its point specs, the plan of
points, the frontier over mean KLD and decode speed, the table of a partly measured run, and a
rerun into a directory measured under other conditions."""
from __future__ import annotations

import argparse
import json

import pytest

from pyriver.tools import compare, compare_out


def _pt(name, kld, tg, kind="file", anchor=None):
    return {"key": name, "name": name, "kind": kind, "model": f"/m/{name}.gguf", "kld": {
        "kld": kld, "kld_unc": 0.001, "same_top": 0.9, "same_top_unc": 0.01, "ppl_ratio": 1.0, "rms_p_diff": 0.05},
        "speed": {"engines": {e: {"prefill_tok_s": {"median": 500.0}, "decode_tok_s": {"median": tg}}
                              for e in ("pyriver", "llama.cpp")},
                  "ratio_to_llama_cpp": {"prefill_tok_s": {"median": 1.0}, "decode_tok_s": {"median": 1.0}},
                  "ratio_to_anchor": {"prefill_tok_s": {"median": 1.0}, "decode_tok_s": {"median": tg / 100 if anchor is None else anchor}}}}


def test_river_points_and_file_types_are_checked_when_parsed():
    assert compare.river_spec("q4_0:0.985") == {"river": "q4_0", "tau": 0.985, "min_exit_layer": 4}
    assert compare.river_spec("iq4_nl:0.95:8") == {"river": "iq4_nl", "tau": 0.95, "min_exit_layer": 8}
    for bad in ("q4_0", "q4_0:x", ":0.9", "q4_0:0.9:-1", "q4_0:1.5", "q4_0:0.9:4:1"):
        with pytest.raises(argparse.ArgumentTypeError):
            compare.river_spec(bad)
    a = compare.parser().parse_args(["m.gguf", "--quantize", "q4_0,Q3_K_M", "--quantize", "iq4_nl",
                                     "--river", "q4_0:0.95,q4_0:0.985"])
    assert a.quantize == ["q4_0", "q3_k_m", "iq4_nl"] and [r["tau"] for r in a.river] == [0.95, 0.985]
    with pytest.raises(SystemExit):   # an unknown file type: refused before anything is measured
        compare.parser().parse_args(["m.gguf", "--quantize", "q4_9"])


def test_the_plan_lists_each_point_once(tmp_path):
    m = tmp_path / "model.Q8_0.gguf"
    m.write_bytes(b"GGUF" + bytes(60))
    a = compare.parser().parse_args([str(m), str(m), "--quantize", "q4_0,q4_0", "--river", "q4_0:0.95,q4_0:0.950:4"])
    a.paths = [str(m), str(m)]
    pts = compare.plan(a, str(m))
    assert [p["kind"] for p in pts] == ["file", "quantized", "river"]
    assert pts[0]["name"] == "model.Q8_0" and pts[1]["name"] == "requantized q4_0" and pts[2]["tau"] == 0.95


def test_the_frontier_is_lowest_kld_at_each_speed():
    """Speed read as the ratio to the anchor (llama.cpp on the first file, timed beside each point)."""
    pts = [_pt("ref", 0.0, 100.0), _pt("q8", 0.002, 120.0), _pt("q4", 0.15, 170.0), _pt("worse", 0.2, 160.0),
           _pt("slow_q4", 0.15, 150.0), _pt("river", 0.1, 140.0, "river"),
           _pt("drifted", 0.15, 200.0, anchor=1.5)]   # timed while the machine ran fast: slower than q4 beside the anchor
    half = {"key": "half", "name": "half", "kind": "quantized", "model": "/m/h.gguf", "kld": pts[1]["kld"]}   # no speed yet
    compare_out.mark(pts + [half])
    assert {p["name"] for p in pts if p["pareto"]} == {"ref", "q8", "q4", "river"} and half["pareto"] is False
    # its table row has the fidelity and blank speed cells; the frontier's rows are starred
    md = compare_out.markdown({"conditions": {"model": "/m/ref.gguf", "reference": "/m/ref.gguf", "reference_sha256": "ab" * 32, "ctx": 128,
                                              "chunks": 2, "prompt_tokens": 16, "gen_tokens": 4, "repeats": 1,
                                              "threads": 2}, "points": pts + [half]})
    rows = {r.split("|")[1].strip(): r for r in md.splitlines() if r.startswith("| ")}
    assert "*q4" in rows and "worse" in rows and "*worse" not in rows
    assert rows["*q4"].split("|")[-2].strip() == "1.700"   # tg / anchor
    assert rows["half"].split("|")[3].strip() == "0.002000 ± 0.001000" and rows["half"].split("|")[7].strip() == ""
    csv_rows = compare_out.to_csv({"points": pts}).splitlines()
    assert csv_rows[0].split(",") == list(compare_out.COLUMNS) and csv_rows[3].startswith("q4,file,q4.gguf,,0.150000,")


def test_a_rerun_under_other_conditions_is_refused(tmp_path):
    cond = {k: 1 for k in compare.SAME}
    store = tmp_path / "compare.json"
    store.write_text(json.dumps({"schema": compare.SCHEMA, "conditions": cond, "points": []}))
    assert compare._resume(store, dict(cond))["points"] == []
    assert compare._resume(store, dict(cond, text_sha256=None)) is not None   # -f left out: the base holds the text
    with pytest.raises(ValueError, match="measured with ctx 1, this run has 2"):
        compare._resume(store, dict(cond, ctx=2))
    assert compare._resume(tmp_path / "none.json", cond) is None
