"""(f) of issue 69: River on a shape whose decode is bandwidth-bound, with a real model's exit profile.

The small real models are bound by launches on a GPU, so what River saves in bytes does not show
there. Here a synthetic llama of Llama 3.1 8B's shape (F16 backbone: about 16 GB read per token)
gets the exit profile the 1.5B measured on the H200 (the exit-block histogram of one point of
`pyriver sweep`, scaled from its depth to this one): each decode step's exit block is drawn from
that profile (seeded) and forced before the step runs (`set_exit(..., force_exit_layer=b)`: one
graph per token, the exit decided beforehand, as a predicted exit is). Measured in one process,
interleaved per repeat: full depth, the profile, and forced exits at a quarter, half and three
quarters of the depth; beside them the speedup the bytes of weights read predict.

  python3 scripts/gpu/exit_profile.py --dir DIR --write [--size 8b]     # the model and its river, once
  python3 scripts/gpu/exit_profile.py --dir DIR --profile plane.json --n-gpu-layers -1 --json out.json

--vocab: a GGUF whose tokenizer the synthetic file copies (default: pyriver's default model)."""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

SIZES = {   # 8b: pyriver.tools.systems' Llama 3.1 8B shape; tiny: the CPU rehearsal
    "8b": dict(n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, tied_output=False, seed=8),
    "tiny": dict(n_layer=8, n_embd=256, n_head=4, n_head_kv=2, n_ff=704, tied_output=True, seed=8),
}
RIVER = "q4_0"   # the river the profile was measured with
REPO = Path(__file__).resolve().parents[2]   # pyriver_dev (synth) is the repository's, not the wheel's


def paths(d: Path, size: str):
    return d / f"llama-{size}-f16.gguf"


def write(a) -> int:
    from pyriver import Llama
    sys.path.append(str(REPO))   # after the installed pyriver: only pyriver_dev comes from the tree
    from pyriver_dev import synth
    p = paths(Path(a.dir), a.size)
    t = time.time()
    if not p.exists():
        tmp = p.with_suffix(".tmp.gguf")
        vocab = a.vocab if a.vocab and Path(a.vocab).exists() else None   # None: the default model's
        synth.write_llama(tmp, dtype="f16", tokenizer_from=vocab, **SIZES[a.size])
        tmp.replace(p)
    print(f"model {p} {p.stat().st_size / 2**30:.2f} GiB in {time.time() - t:.0f} s", flush=True)
    t = time.time()
    with Llama(str(p), n_ctx=16, verbose=False, river=RIVER) as llm:   # the river sidecar, built once
        print(f"river {llm.river_path} in {time.time() - t:.0f} s")
    return 0


def load_profile(path: str, river: str, tau: float):
    """{exit block: count} and the depth of the sweep point (river, tau) in a sweep JSON (or a
    stage JSON holding one under results.sweep)."""
    d = json.load(open(path))
    sw = d.get("results", {}).get("sweep", d)
    for p in sw["points"]:
        if p.get("kind") == "river" and p.get("river") == river and abs(p.get("tau", 0) - tau) < 1e-9 \
                and p.get("exit_rule", "checked") == "checked":
            return {int(k): v for k, v in p["histogram"].items()}, p
    raise SystemExit(f"no river {river} tau {tau} point in {path}")


def scaled(hist, n_from: int, n_to: int):
    """Exit blocks of a model of n_from blocks mapped to n_to by depth fraction; the last block
    (no exit) stays the last."""
    out = {}
    for b, c in hist.items():
        nb = n_to - 1 if b >= n_from - 1 else min(n_to - 2, max(0, round((b + 1) * n_to / n_from) - 1))
        out[nb] = out.get(nb, 0) + c
    return out


def measure(a) -> int:
    import numpy as np
    from pyriver import Llama
    from pyriver.tools.engine import feed
    from pyriver.tools.systems import block_bytes, predicted_speedup
    p = paths(Path(a.dir), a.size)
    hist, point = load_profile(a.profile, a.profile_river, a.profile_tau)
    n_src = 28 if "qwen" in point.get("sidecar", "qwen") else max(hist) + 1
    kw = dict(n_ctx=32 + a.tokens + 16, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
              n_gpu_layers=a.n_gpu_layers)
    with Llama(str(p), river=RIVER, exit_threshold=2.0, **kw) as llm:
        L = llm.info["n_layer"]
        prof = scaled(hist, n_src, L)
        blocks = sorted(prof)
        rng = random.Random(a.seed)
        sched = rng.choices(blocks, weights=[prof[b] for b in blocks], k=a.tokens)
        fixed = [L * k // 4 - 1 for k in (1, 2, 3)]
        prompt = llm.tokenize(b"The river runs to the sea and the sea runs", add_bos=True)[:16]
        bb, rb = block_bytes(str(p)), block_bytes(llm.river_path)
        pred = {b: (1.0 if b >= L - 1 else predicted_speedup(bb, rb, b, L)) for b in set(blocks) | set(fixed)}
        # the profile's byte prediction: time per token is the profile's mean of 1/speedup
        pred_profile = 1.0 / sum(prof[b] / pred[b] for b in blocks) * sum(prof.values())

        def run(kind):
            if kind == "profile":
                def step(i, _logits):
                    b = sched[i]
                    llm.set_exit(2.0, 1, -1 if b >= L - 1 else b)
                r = feed(llm, prompt, None, a.tokens, before_step=step, warmup=2)
            else:
                llm.set_exit(2.0, 1, -1 if kind == "full" else int(kind))
                r = feed(llm, prompt, None, a.tokens, warmup=2)
            return (a.tokens - 2) / r.decode_s

        kinds = ["full", "profile"] + [str(b) for b in fixed]
        for k in kinds:   # warm-up: graphs built, CUDA graphs captured
            run(k)
        runs = {k: [] for k in kinds}
        for r in range(a.repeats):
            for k in (kinds if r % 2 == 0 else kinds[::-1]):
                runs[k].append(run(k))
        ratio = {k: statistics.median(x / f for x, f in zip(runs[k], runs["full"])) for k in kinds}
        res = {"model": str(p), "size": a.size, "n_layer": L, "river": RIVER, "n_gpu_layers": a.n_gpu_layers,
               "threads": a.threads, "tokens": a.tokens, "repeats": a.repeats,
               "profile_source": {"file": a.profile, "river": a.profile_river, "tau": a.profile_tau,
                                  "n_layer": n_src, "histogram": hist, "mean_exit_layer": point.get("mean_exit_layer"),
                                  "top1_agreement": point.get("top1_agreement")},
               "profile": {str(b): prof[b] for b in blocks},
               "mean_exit_block": float(np.mean(sched)),
               "decode_tok_s": runs, "median_tok_s": {k: statistics.median(v) for k, v in runs.items()},
               "ratio_to_full": ratio,
               "predicted_by_bytes": {"profile": pred_profile, **{str(b): pred[b] for b in fixed}}}
    print(f"synthetic {a.size} F16, river {RIVER}, {L} blocks, n_gpu_layers {a.n_gpu_layers}; profile of "
          f"{a.profile_river} tau {a.profile_tau} ({n_src} blocks) scaled: mean exit block {res['mean_exit_block']:.1f}")
    for k in kinds:
        pr = res["predicted_by_bytes"].get(k)
        print(f"{k:>8}: {res['median_tok_s'][k]:8.1f} tok/s, {ratio[k]:.3f}x full depth"
              + (f", bytes predict {pr:.3f}x" if pr else ""))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--size", choices=sorted(SIZES), default="8b")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--vocab", default=None)
    ap.add_argument("--profile", default="docs/results/gpu/qwen1.5b/plane.json")
    ap.add_argument("--profile-river", default="q4_0")
    ap.add_argument("--profile-tau", type=float, default=0.97)
    ap.add_argument("--n-gpu-layers", type=int, default=-1)
    ap.add_argument("-t", "--threads", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("-r", "--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    Path(a.dir).mkdir(parents=True, exist_ok=True)
    return write(a) if a.write else measure(a)


if __name__ == "__main__":
    sys.exit(main())
