"""`Llama.river` (a part of `pyriver.Llama`): the River bound to the model (a sidecar of early-exit
heads, pyriver.river) and the exit rule its decode steps run under."""
from __future__ import annotations

import sys
import warnings
from typing import Optional

from pyriver.engine import ExitRule, check_exit_rule
from pyriver.engine.backends import device_key
from pyriver.river.sidecar import calibrated_exit_rule, find_calibration


class River:
    """`exit`: the exit rule of the last set_exit as the engine holds it (a BatchDecoder on the same
    model applies it too), None before; `exiting`: whether that rule exits at all. The Llama keeps
    the public face of it (river_path, calibration, exit_threshold, min_exit_layer, exit_rule)."""

    def __init__(self, llm):
        self.llm = llm
        self.exit: Optional[ExitRule] = None
        self.exiting = False

    def bind(self, river, exit_threshold, min_exit_layer, force, rebuild, use_mmap, verbose, lossless):
        """river="auto" (the default): the setting `pyriver calibrate` stored in a sidecar of this
        model, if any; River off otherwise. river=None is always full depth, and so is a lossless
        calibration with lossless=False (its tau was chosen for drafts, not for lossy fidelity).
        Returns the exit threshold and min exit layer to use (None: the defaults)."""
        L = self.llm
        L.river_path = None
        L.calibration = None
        if river == "auto" and not L.backend.supports_river:
            river = None   # a calibration is of the native engine's River
        if river is not None and not L.backend.supports_river:
            raise L.backend.no_river(f"river={river!r}")
        if river == "auto":
            river = None
            cal = find_calibration(L.model_path)
            if cal is not None and not (cal["setting"].get("lossless") and lossless is False):
                L.calibration = cal
                s = cal["setting"]
                if s.get("draft") != "ngram":   # n-gram drafts need no river: it stays unbound
                    river = cal["sidecar"]
                    exit_threshold = s["tau"] if exit_threshold is None else exit_threshold
                    min_exit_layer = s["min_exit_layer"] if min_exit_layer is None else min_exit_layer
                if verbose:
                    at = "" if river is None else f" at tau {exit_threshold} min layer {min_exit_layer}"
                    how = (f"lossless, {s.get('draft', 'river')} drafts{at} k {s['draft_max']}" if s.get("lossless")
                           else f"tau {exit_threshold} min layer {min_exit_layer} (top-1 "
                           f"{cal['candidate']['top1_agreement']:.4f} >= {cal['target_fidelity']})")
                    print(f"pyriver: River on from calibration: {s['river']} {how}; {cal['sidecar']}; "
                          f"river=None turns it off", file=sys.stderr)
        if river is not None:
            try:
                L.river_path = str(L.backend.prepare_river(L.model_path, river, force=force, rebuild=rebuild,
                                                                 progress=True, use_mmap=use_mmap, verbose=verbose))
            except Exception as e:
                if L.calibration is None:
                    raise
                # a stale calibrated sidecar must not stop the model from loading
                warnings.warn(f"calibrated river not usable, River off: {e}")
                L.calibration = None
                exit_threshold = min_exit_layer = None
        return exit_threshold, min_exit_layer

    def calibrated_rule(self, verbose: bool) -> None:
        """The exit rule `pyriver calibrate` measured fastest for the calibrated setting on the
        device this model runs on; checked when it measured none there."""
        L = self.llm
        device = device_key(L.backend.devices())
        rule = calibrated_exit_rule(L.calibration, device)
        if rule is not None:
            L.exit_rule = rule
            if verbose:
                print(f"pyriver: exit rule {rule} from calibration on {device}; exit_rule= overrides it", file=sys.stderr)

    def attach(self, river: str, *, force: bool = False, rebuild: bool = False) -> str:
        """Bind a river to this model after loading (once); exits stay off until set_exit."""
        L = self.llm
        with L.lock:
            L.check_live()
            if L.river_path is not None:
                raise ValueError(f"a river is already attached: {L.river_path}")
            if not L.backend.supports_river:
                raise L.backend.no_river("attach_river")
            L.river_path = str(L.backend.prepare_river(L.model_path, river, force=force, rebuild=rebuild))
            return L.river_path

    def set_exit(self, exit_threshold: float, min_exit_layer: Optional[int] = None, force_exit_layer: int = -1,
                 prefill_exit: bool = False, check_chunk: int = 0, host_checks: bool = True,
                 device_carry: bool = True, predict: bool = False, exit_rule: Optional[str] = None) -> None:
        """Change the exit rule between calls (tau > 1 never exits; force_exit_layer >= 0 exits
        every token after that block; check_chunk: blocks per graph, 0 = 2 on the CPU, 8 over
        RPC, 16 on a GPU; device_carry: a token's hidden state stays on the device between graphs;
        predict: the first graph runs to the previous token's exit block; exit_rule: "checked",
        "predicted" or "guarded", None keeps the current one)."""
        L = self.llm
        check_exit_rule(L.exit_rule if exit_rule is None else exit_rule)
        with L.lock:
            L.check_live()
            if not L.backend.supports_river:
                raise L.backend.no_river("set_exit")
            if prefill_exit and L.speculator is not None:
                raise ValueError("lossless mode verifies at full depth; prefill_exit=True runs prompts on the river")
            rule = ExitRule(float(exit_threshold), int(L.min_exit_layer if min_exit_layer is None else min_exit_layer),
                            bool(prefill_exit), int(force_exit_layer), int(check_chunk), bool(host_checks),
                            bool(device_carry), bool(predict), L.exit_rule if exit_rule is None else exit_rule)
            self.exit = rule = L.context.engine.set_exit(rule)   # a BatchDecoder on this model applies the same rule
            L.exit_threshold, L.min_exit_layer, L.exit_rule = rule.exit_threshold, rule.min_exit_layer, rule.rule
            self.exiting = rule.exits
            L.prefill_exit = prefill_exit
