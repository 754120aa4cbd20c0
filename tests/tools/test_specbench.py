"""`pyriver bench --lossless` on a small synthetic model: every setting measured on each prompt
set, lossless rows with their draft statistics and full depth's text; --verify-cost's table."""
from __future__ import annotations

import json

import pytest

from pyriver.tools import bench


def test_bench_lossless_rows(synth_paths, tmp_path):
    out = tmp_path / "b.json"
    rc = bench.main([synth_paths["gqa_untied"], "--lossless", "--river", "q8_0", "--tau", "0.0", "--draft-max", "2",
                     "--draft", "river", "ngram", "--fixed-k", "--prompt-set", "both", "--batch-invariant",
                     "--prompts", "2", "--gen-tokens", "16", "--repeats", "2", "--min-exit-layer", "1",
                     "--json", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert list(res["sets"]) == ["chat", "code-edit"]
    for s in res["sets"].values():
        assert list(s) == ["full depth", "river tau 0.0 (lossy)", "lossless river tau 0.0 k2", "lossless ngram k2",
                           "llama.cpp"]
        for name in ("lossless river tau 0.0 k2", "lossless ngram k2"):
            assert s[name]["texts_equal_full_depth"] == [2, 2]   # batch-invariant: exact on every prompt
            assert s[name]["accepted"] <= s[name]["drafted"] <= 2 * s[name]["verify_steps"]
            assert len(s[name]["tok_s"]) == 2 and s[name]["median_tok_s"] > 0
        assert s["lossless river tau 0.0 k2"]["accepted"] > 0
        assert "drafted" not in s["full depth"] and s["full depth"]["ratio_to_full_depth"] == 1.0


def test_bench_verify_cost(synth_paths, tmp_path):
    out = tmp_path / "v.json"
    assert bench.main([synth_paths["gqa_untied"], "--verify-cost", "--repeats", "1", "--verify-k-max", "20",
                       "--json", str(out)]) == 0
    k = json.loads(out.read_text())["k"]
    assert sorted(map(int, k)) == list(range(1, 21))
    assert all(v["multi_ms"] > 0 and v["single_ms"] > 0 and len(v["runs"]["ratio"]) == 1 for v in k.values())
    assert all(v["decode_steps"] == pytest.approx(v["multi_ms"] / v["single_ms"]) for v in k.values())   # in single steps
