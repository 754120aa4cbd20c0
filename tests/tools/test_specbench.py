"""`pyriver bench --lossless` on a small synthetic model: every setting measured, lossless rows
with their draft statistics and full depth's text."""
from __future__ import annotations

import json

from pyriver.tools import bench


def test_bench_lossless_rows(synth_paths, tmp_path):
    out = tmp_path / "b.json"
    rc = bench.main([synth_paths["gqa_untied"], "--lossless", "--river", "q8_0", "--tau", "0.0", "--draft-max", "2",
                     "--prompts", "2", "--gen-tokens", "16", "--repeats", "2", "--min-exit-layer", "1",
                     "--json", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    s = res["settings"]
    assert list(s) == ["full depth", "river tau 0.0 (lossy)", "lossless tau 0.0 k 2", "lossless river stack k 2",
                       "llama.cpp"]
    for name in ("lossless tau 0.0 k 2", "lossless river stack k 2"):
        assert s[name]["text_equals_full_depth"] is True
        assert 0 < s[name]["accepted"] <= s[name]["drafted"] <= 2 * s[name]["verify_steps"]
        assert len(s[name]["tok_s"]) == 2 and s[name]["median_tok_s"] > 0
    assert "drafted" not in s["full depth"] and s["full depth"]["ratio_to_full_depth"] == 1.0
