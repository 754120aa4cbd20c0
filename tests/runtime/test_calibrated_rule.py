"""The exit rule `pyriver calibrate` recorded per device (pyriver.tools.calibrate_rule): Llama(MODEL)
runs it on the device it was measured on, an explicit exit_rule wins, and a record of another
device is ignored (checked)."""
from __future__ import annotations

import pytest

from pyriver import Llama
from pyriver.engine.backends import device_key
from pyriver.river.sidecar import read_calibration
from pyriver_dev import synth
from pyriver.tools.calibrate import store

SETTING = {"river": "q4_0", "tau": 0.9, "min_exit_layer": 2, "lossless": False}


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, smol_path):
    """A tiny model with a q4_0 sidecar, and a function storing a calibration with given exit rules."""
    p = tmp_path_factory.mktemp("calrule") / "tiny.gguf"
    synth.write_llama(p, n_layer=6, n_embd=128, n_head=4, n_head_kv=2, n_ff=352, tied_output=True, seed=5,
                      dtype="f16", tokenizer_from=smol_path)
    with Llama(str(p), n_ctx=64, verbose=False, river="q4_0") as llm:
        sidecar, device = llm.river_path, device_key(llm.backend.devices())

    def calibrate(rules):
        store(sidecar, {"enabled": True, "setting": SETTING, "candidate": {"top1_agreement": 0.95},
                        "target_fidelity": 0.9, "utc": "2025-01-01T00:00:00Z", "exit_rules": rules})
        assert read_calibration(sidecar)["exit_rules"] == rules
    return str(p), device, calibrate


def _rule(model, **kw):
    with Llama(model, n_ctx=64, verbose=False, **kw) as llm:
        assert llm.river_path is not None and abs(llm.exit_threshold - SETTING["tau"]) < 1e-6   # calibrated
        assert llm.river.exit.rule == llm.exit_rule   # the rule the engine runs
        return llm.exit_rule


def test_the_rule_recorded_for_this_device_is_used_unless_named(calibrated):
    model, device, calibrate = calibrated
    calibrate({device: {"rule": "predicted"}, "CUDA0 (NVIDIA H200)": {"rule": "guarded"}})
    assert _rule(model) == "predicted"
    assert _rule(model, exit_rule="checked") == "checked"
    assert _rule(model, exit_rule="guarded") == "guarded"


def test_a_rule_recorded_for_another_device_is_ignored(calibrated):
    model, device, calibrate = calibrated
    calibrate({"CUDA0 (NVIDIA H200)": {"rule": "predicted"}, device + " 2": {"rule": "guarded"}})
    assert _rule(model) == "checked"
    calibrate({})
    assert _rule(model) == "checked"
