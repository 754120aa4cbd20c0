"""`pyriver bench --systems`: how well skipped backbone work turns into wall-clock time.

A synthetic llama of about 1B parameters (random weights, a real tokenizer) with a high-precision
backbone and a 4-bit river; every token is forced to exit after one fixed block. The measured
decode speedup over full depth is compared with the speedup that the bytes of weights read per
token predict (blocks before the exit from the backbone, after it from the river, plus the head).
On a memory-bound decoder the two agree; efficiency = measured / predicted."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Dict

from .results import write_json

SPEC = dict(n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, n_ff=5632, tied_output=True, seed=7)


def model_path(dtype: str) -> Path:
    from . import models
    return models.cache_dir() / "synthetic" / f"llama-1b-{dtype}.gguf"


def ensure_model(dtype: str) -> Path:
    from . import models, synth
    p = model_path(dtype)
    if not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        print(f"writing {p} (synthetic, {dtype})", file=sys.stderr)
        synth.write_llama(p, dtype=dtype, tokenizer_from=str(models.resolve(None)), **SPEC)
    return p


def block_bytes(path: str) -> Dict[str, float]:
    """Bytes of each block's weights and of the head (norm + output matrix)."""
    import gguf
    r = gguf.GGUFReader(path)
    per: Dict[str, float] = {}
    for t in r.tensors:
        key = t.name.split(".")[1] if t.name.startswith("blk.") else t.name
        per[key] = per.get(key, 0) + int(t.n_bytes)
    return per


def predicted_speedup(bb: Dict[str, float], rv: Dict[str, float], exit_block: int, n_layer: int) -> float:
    """Bytes of full depth over bytes of an exit after exit_block (bb: backbone, rv: river)."""
    head = bb.get("output.weight", bb["token_embd.weight"]) + bb["output_norm.weight"]
    full = sum(bb[str(i)] for i in range(n_layer)) + head
    river = sum(bb[str(i)] for i in range(exit_block + 1)) + sum(rv[str(i)] for i in range(exit_block + 1, n_layer)) + head
    return full / river


def main(a) -> int:
    from . import Llama
    from .bench import _run_worker
    path = str(ensure_model(a.systems_dtype))
    with Llama(path, n_ctx=16, verbose=False, river=a.river or "q4_0") as llm:
        sidecar, L = llm.river_path, llm.info["n_layer"]
    exit_block = a.force_exit_layer if a.force_exit_layer >= 0 else L // 2 - 1
    base = {"model": path, "threads": a.threads, "n_prompt": 16, "n_gen": a.gen_tokens}
    from .bench import requantized
    rtype = a.river or "q4_0"
    uniform = requantized(path, rtype)
    cfgs = [dict(base, name="full", engine="pyriver"),
            dict(base, name="forced", engine="pyriver", river=rtype, tau=2.0, force_exit_layer=exit_block),
            # The kernels' own ceiling: every block at the river type, full depth.
            dict(base, name="uniform", engine="pyriver", model=uniform)]
    runs: Dict[str, list] = {c["name"]: [] for c in cfgs}
    for r in range(a.repeats):
        for c in (cfgs if r % 2 == 0 else cfgs[::-1]):
            runs[c["name"]].append(_run_worker(c)["decode_tok_s"])
    full, forced, uni = (statistics.median(runs[k]) for k in ("full", "forced", "uniform"))
    bb, ub = block_bytes(path), block_bytes(uniform)
    pred = predicted_speedup(bb, block_bytes(sidecar), exit_block, L)
    # Bytes predict the uniform model's speedup too: how far the kernels themselves are from
    # memory-bound on this machine.
    pred_uni = sum(bb.values()) / sum(ub.values())
    res = {"model": path, "backbone": a.systems_dtype, "river": rtype, "exit_block": exit_block,
           "n_layer": L, "threads": a.threads, "repeats": a.repeats, "decode_tok_s": runs,
           "measured_speedup": forced / full, "predicted_speedup": pred, "efficiency": (forced / full) / pred,
           "uniform_measured_speedup": uni / full, "uniform_predicted_speedup": pred_uni,
           "uniform_efficiency": (uni / full) / pred_uni}
    print(f"synthetic 1B {a.systems_dtype} backbone, {rtype} river, exit after block {exit_block} of {L}")
    print(f"decode tok/s median: full {full:.2f}, river {forced:.2f}, uniform {rtype} {uni:.2f}")
    print(f"river:   measured speedup {forced / full:.3f}, predicted by bytes {pred:.3f}, efficiency {res['efficiency']:.3f}")
    print(f"uniform: measured speedup {uni / full:.3f}, predicted by bytes {pred_uni:.3f}, efficiency {res['uniform_efficiency']:.3f}")
    if a.json:
        write_json(a.json, res)
    return 0
