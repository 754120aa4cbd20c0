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
from typing import Dict, List

import gguf

from pyriver import models
from pyriver.atomic import replacing
from pyriver.api.llama import DEFAULT_RIVER, Llama

from pyriver.tools.engine import greedy
from pyriver.tools.quantize import quantize, requantized
from pyriver.tools.results import write_json
from pyriver.tools.worker import engine_kwargs, run_worker, text_prompt

# Synthetic llamas: ~1B (16 blocks of 2048) and Llama 3.1 8B's shape (32 blocks of 4096, GQA 32/8,
# FFN 14336; the vocabulary is SmolLM2's 49152, so the head is smaller than Llama's).
SPECS = {
    "1b": dict(n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, n_ff=5632, tied_output=True, seed=7),
    "8b": dict(n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, tied_output=False, seed=8),
}


def model_path(dtype: str, size: str = "1b") -> Path:
    return models.cache_dir() / "synthetic" / f"llama-{size}-{dtype}.gguf"


def _synth(p: Path):
    """pyriver_dev.synth, which writes the synthetic model: it is in the repository, not in the wheel."""
    try:
        from pyriver_dev import synth
    except ModuleNotFoundError as e:
        if e.name != "pyriver_dev":
            raise
        raise SystemExit(f"bench --systems: {p} is not written yet, and the writer of synthetic models "
                         "(pyriver_dev.synth) is in pyriver's repository, not in the installed package: run it "
                         "once from a checkout's root (python -m pyriver.cli bench --systems ..., or with "
                         "PYTHONPATH=<checkout>); the file stays in the cache for later runs") from None
    return synth


def ensure_model(dtype: str, size: str = "1b") -> Path:
    """The synthetic model, written once into the cache. Q8_0 is llama.cpp's quantization of the
    F16 file for 8b (numpy's Q8_0 would take minutes)."""
    p = model_path(dtype, size)
    if not p.exists():
        if dtype == "q8_0" and size != "1b":
            src = ensure_model("f16", size)
            print(f"writing {p} (llama.cpp quantize of {src.name})", file=sys.stderr)
            with replacing(p) as tmp:
                quantize(src, tmp, "q8_0")
        else:
            print(f"writing {p} (synthetic, {dtype})", file=sys.stderr)
            _synth(p).write_llama(p, dtype=dtype, tokenizer_from=str(models.resolve(None)), **SPECS[size])
    return p


def block_bytes(path: str) -> Dict[str, float]:
    """Bytes of each block's weights and of the head (norm + output matrix)."""
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


def _inprocess(a, cfgs, runs, rtype, dev) -> None:
    """All settings in one process (a model of many GiB is loaded twice, not once per run): one
    Llama with the river (full depth = no exit rule, the same graph as without a river; forced
    exits by set_exit) and one on the uniform file, alternating run by run."""
    kw = dict(n_ctx=16 + a.gen_tokens + 16, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, **dev)
    with Llama(cfgs[0]["model"], river=rtype, exit_threshold=2.0, **kw) as llm, \
            Llama(cfgs[-1]["model"], river=None, **kw) as uni:
        prompt = text_prompt(lambda b: llm.tokenize(b, add_bos=False), 16)

        def decode(m, n):
            return n / greedy(m, prompt, n).steps_s

        decode(llm, 8), decode(uni, 8)   # warm-up: graphs built, CUDA graphs captured
        for r in range(a.repeats):
            for c in (cfgs if r % 2 == 0 else cfgs[::-1]):
                if c["name"] == "uniform":
                    runs[c["name"]].append(decode(uni, a.gen_tokens))
                    continue
                llm.set_exit(2.0, 1, c.get("force_exit_layer", -1))
                runs[c["name"]].append(decode(llm, a.gen_tokens))


def default_exit_blocks(n_layer: int, size: str) -> List[int]:
    """After L/2 for the 1B (as measured before); after L/4, L/2 and 3L/4 for the 8B."""
    if size == "1b":
        return [n_layer // 2 - 1]
    return [n_layer * k // 4 - 1 for k in (1, 2, 3)]


def main(a) -> int:
    """`pyriver bench --systems` (its arguments are bench's)."""
    path = str(ensure_model(a.systems_dtype, a.systems_size))
    rtype = a.river or DEFAULT_RIVER
    with Llama(path, n_ctx=16, verbose=False, river=rtype) as llm:
        sidecar, L = llm.river_path, llm.info["n_layer"]
    blocks = a.exit_blocks or ([a.force_exit_layer] if a.force_exit_layer >= 0 else default_exit_blocks(L, a.systems_size))
    dev = engine_kwargs({"n_gpu_layers": a.n_gpu_layers, "flash_attn": a.flash_attn})
    base = {"model": path, "threads": a.threads, "n_prompt": 16, "n_gen": a.gen_tokens, **dev}
    uniform = requantized(path, rtype)
    cfgs = [dict(base, name="full", engine="pyriver")]
    cfgs += [dict(base, name=f"exit after {b}", engine="pyriver", river=rtype, tau=2.0, force_exit_layer=b) for b in blocks]
    # The kernels' own ceiling: every block at the river type, full depth.
    cfgs.append(dict(base, name="uniform", engine="pyriver", model=uniform))
    runs: Dict[str, list] = {c["name"]: [] for c in cfgs}
    if a.inprocess:
        _inprocess(a, cfgs, runs, rtype, dev)
    else:
        for r in range(a.repeats):
            for c in (cfgs if r % 2 == 0 else cfgs[::-1]):
                runs[c["name"]].append(run_worker(c)["decode_tok_s"])
    med = {k: statistics.median(v) for k, v in runs.items()}
    full = med["full"]
    bb, ub, rb = block_bytes(path), block_bytes(uniform), block_bytes(sidecar)
    # Bytes predict the uniform model's speedup too: how far the kernels themselves are from
    # memory-bound on this machine.
    pred_uni = sum(bb.values()) / sum(ub.values())
    res = {"model": path, "size": a.systems_size, "backbone": a.systems_dtype, "river": rtype, "n_layer": L,
           "threads": a.threads, "n_gpu_layers": a.n_gpu_layers, "flash_attn": a.flash_attn, "repeats": a.repeats,
           "decode_tok_s": runs, "exits": {},
           "uniform_measured_speedup": med["uniform"] / full, "uniform_predicted_speedup": pred_uni,
           "uniform_efficiency": (med["uniform"] / full) / pred_uni}
    print(f"synthetic {a.systems_size} {a.systems_dtype} backbone, {rtype} river, {L} blocks, n_gpu_layers {a.n_gpu_layers}")
    print(f"decode tok/s median: full {full:.2f}, uniform {rtype} {med['uniform']:.2f}")
    for b in blocks:
        m = med[f"exit after {b}"] / full
        pred = predicted_speedup(bb, rb, b, L)
        res["exits"][str(b)] = {"decode_tok_s": med[f"exit after {b}"], "measured_speedup": m,
                                "predicted_speedup": pred, "efficiency": m / pred}
        print(f"exit after block {b:>2}: {med[f'exit after {b}']:.2f} tok/s, measured speedup {m:.3f}, "
              f"predicted by bytes {pred:.3f}, efficiency {m / pred:.3f}")
    print(f"uniform: measured speedup {res['uniform_measured_speedup']:.3f}, predicted by bytes {pred_uni:.3f}, "
          f"efficiency {res['uniform_efficiency']:.3f}")
    if len(blocks) == 1:   # the single-exit fields of earlier results
        res.update(exit_block=blocks[0], **{k: v for k, v in res["exits"][str(blocks[0])].items() if k != "decode_tok_s"})
    if a.json:
        write_json(a.json, res)
    return 0
