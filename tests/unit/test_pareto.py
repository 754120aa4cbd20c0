"""The decisions the measurement tools make from measured points: the Pareto frontier of a sweep,
calibrate's choice, and the uniform competitor's llama.cpp file type."""
from __future__ import annotations

import pytest

from pyriver.tools.calibrate import decide
from pyriver.tools.quantize import ftype_constant, requantized, uniform_ftype
from pyriver.tools.sweep import mark_pareto


def _pt(name, fid, speed):
    return {"name": name, "top1_agreement": fid, "decode_tok_s": {"median": speed}}


def test_pareto_frontier():
    pts = [_pt("full", 1.0, 100.0), _pt("fast", 0.8, 150.0), _pt("dominated", 0.79, 140.0),
           _pt("middle", 0.9, 120.0), _pt("slow", 0.9, 110.0), _pt("tie_a", 0.85, 130.0), _pt("tie_b", 0.85, 130.0)]
    mark_pareto(pts)
    on = {p["name"] for p in pts if p["pareto"]}
    # Equal points do not dominate each other; a point as faithful but slower is dominated.
    assert on == {"full", "fast", "middle", "tie_a", "tie_b"}


def test_calibrate_rule_against_uniform_and_target():
    """The choice rule on given points: the uniform model that meets the target and is faster wins."""
    pts = [{"kind": "full", "top1_agreement": 1.0, "decode_tok_s": {"median": 100.0}},
           {"kind": "river", "river": "q4_0", "tau": 0.98, "min_exit_layer": 4, "top1_agreement": 0.95,
            "decode_tok_s": {"median": 110.0}, "speedup": 1.1},
           {"kind": "uniform", "river": "q4_0", "top1_agreement": 0.96, "decode_tok_s": {"median": 120.0}}]
    assert decide(pts, 0.9, 1.0, True)["enabled"] is False
    assert "uniformly requantized" in decide(pts, 0.9, 1.0, True)["reason"]
    assert decide(pts, 0.9, 1.0, False)["enabled"] is True
    assert decide(pts, 0.97, 1.0, False)["enabled"] is False


def test_calibrate_needs_the_speedup():
    pts = [{"kind": "full", "top1_agreement": 1.0, "decode_tok_s": {"median": 100.0}},
           {"kind": "river", "river": "q4_0", "tau": 0.98, "min_exit_layer": 4, "top1_agreement": 0.95,
            "decode_tok_s": {"median": 104.0}, "speedup": 1.04}]
    assert decide(pts, 0.9, 1.05, False)["enabled"] is False
    d = decide(pts, 0.9, 1.03, False)
    assert d["enabled"] is True and d["setting"] == {"river": "q4_0", "tau": 0.98, "min_exit_layer": 4}


def test_uniform_competitor_file_types():
    """Each river type maps to the llama.cpp file type that puts (nearly) every matrix at that
    type; mxfp4 has none for dense models and says so."""
    assert uniform_ftype("q4_0") == "q4_0" and uniform_ftype("q3_K") == "q3_k_s" and uniform_ftype("Q6_K") == "q6_k"
    for rt in ("q4_0", "iq4_nl", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_0"):
        ftype_constant(uniform_ftype(rt))   # a file type llama.cpp knows
    assert uniform_ftype("mxfp4") is None
    with pytest.raises(ValueError, match="no uniform mxfp4"):
        requantized("/nonexistent.gguf", "mxfp4")
    with pytest.raises(ValueError, match="unknown ftype"):
        ftype_constant("q9_9")
