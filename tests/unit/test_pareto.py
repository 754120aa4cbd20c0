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
           {"kind": "uniform", "river": "q4_0", "top1_agreement": 0.96, "decode_tok_s": {"median": 120.0}, "speedup": 1.2}]
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
    assert d["enabled"] is True and d["setting"] == {"river": "q4_0", "tau": 0.98, "min_exit_layer": 4, "lossless": False}


def _lossless(speedup, exact=True):
    return {"kind": "lossless", "river": "iq4_nl", "tau": 0.975, "min_exit_layer": 4, "draft_max": 3,
            "decode_tok_s": {"median": 100.0 * speedup}, "speedup": speedup, "text_equals_full_depth": exact}


def test_calibrate_lossless_candidates():
    """Lossless mode meets any target when its text was full depth's; it wins only when faster
    than the lossy candidates, and the speedup and uniform rules apply to it as to them."""
    full = {"kind": "full", "top1_agreement": 1.0, "decode_tok_s": {"median": 100.0}}
    lossy = {"kind": "river", "river": "q4_0", "tau": 0.98, "min_exit_layer": 4, "top1_agreement": 0.95,
             "decode_tok_s": {"median": 110.0}, "speedup": 1.1}
    d = decide([full, lossy], 0.99, 1.05, False, [_lossless(1.2)])   # the lossy point misses the target
    assert d["enabled"] and d["setting"] == {"river": "iq4_nl", "tau": 0.975, "min_exit_layer": 4, "lossless": True,
                                             "draft_max": 3}
    assert d["candidate"]["top1_agreement"] == 1.0 and "lossless on river iq4_nl" in d["reason"]
    assert decide([full, lossy], 0.9, 1.05, False, [_lossless(1.2)])["setting"]["lossless"] is True
    assert decide([full, lossy], 0.9, 1.05, False, [_lossless(1.08)])["setting"] == \
        {"river": "q4_0", "tau": 0.98, "min_exit_layer": 4, "lossless": False}
    # A lossless run whose text was not full depth's is no candidate.
    d = decide([full, lossy], 0.99, 1.05, False, [_lossless(1.2, exact=False)])
    assert d["enabled"] is False and "no lossless run gave full depth's text" in d["reason"]
    # Slower than full depth (as on every model measured on the CPU): kept off, saying so.
    d = decide([full, lossy], 0.99, 1.05, False, [_lossless(0.6)])
    assert d["enabled"] is False and "0.600x full depth" in d["reason"] and d["candidate"]["lossless"] is True
    uni = {"kind": "uniform", "river": "q4_0", "top1_agreement": 0.995, "decode_tok_s": {"median": 125.0}, "speedup": 1.25}
    assert decide([full, lossy, uni], 0.99, 1.05, True, [_lossless(1.2)])["enabled"] is False
    assert decide([full, lossy, uni], 0.99, 1.05, True, [_lossless(1.3)])["enabled"] is True


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


def _rule(fid, speed):
    return {"top1_agreement": fid, "speed_vs_checked": speed}


def test_calibrated_exit_rule_is_the_fastest_meeting_the_target():
    """calibrate_rule.choose on given figures: the fastest rule whose top-1 meets the target; a faster
    one that misses it is never chosen; checked stays unless another beats it by the margin."""
    from pyriver.tools.calibrate_rule import choose
    m = {"checked": _rule(0.99, 1.0), "predicted": _rule(0.995, 1.2), "guarded": _rule(0.985, 1.5)}
    assert choose(m, 0.99, 1.05)["rule"] == "predicted"   # guarded is fastest but misses 0.99
    assert choose(m, 0.98, 1.05)["rule"] == "guarded"
    assert choose(m, 0.99, 1.25)["rule"] == "checked"     # 1.2x is inside the margin
    # checked misses the target: the rule that meets it, whatever its speed
    m = {"checked": _rule(0.95, 1.0), "predicted": _rule(0.99, 0.9), "guarded": _rule(0.97, 1.3)}
    assert choose(m, 0.99, 1.05)["rule"] == "predicted"
    assert choose(m, 0.995, 1.05)["rule"] is None


def test_calibrated_exit_rules_of_other_devices_are_kept_for_the_same_setting():
    from pyriver.tools.calibrate_rule import merged
    s = {"river": "q4_0", "tau": 0.98, "min_exit_layer": 4, "lossless": False}
    old = {"setting": s, "exit_rules": {"CUDA0 (NVIDIA H200)": {"rule": "predicted"}, "CPU (x)": {"rule": "guarded"}}}
    assert merged(old, dict(s), {"CPU (x)": {"rule": "checked"}}) == {"CUDA0 (NVIDIA H200)": {"rule": "predicted"},
                                                                     "CPU (x)": {"rule": "checked"}}
    assert merged(old, dict(s, tau=0.985), {"CPU (x)": {"rule": "checked"}}) == {"CPU (x)": {"rule": "checked"}}
    assert merged(None, s, {}) == {}
