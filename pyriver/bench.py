"""`pyriver bench`: pyriver (River off and on) against llama.cpp (llama-cpp-python) on the same
GGUF and threads, and against llama.cpp running the model requantized to the river type.

Every repeat of every engine runs in a fresh process (so peak RSS is that engine's alone), and
the engines rotate within each repeat (so machine noise falls on all). Reported: medians, min
and max, and ratios to llama.cpp on the same file. Timings exclude model loading."""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

from .results import write_json

TEXT = ("The river carries the water of the mountains down to the sea. Along its banks, towns grew where "
        "boats could land, and people traded grain, wool and stories. ")
METRICS = ("prefill_tok_s", "decode_tok_s", "ttft_ms", "peak_rss_mib")


def _prompt(tokenize, n: int) -> List[int]:
    toks: List[int] = []
    while len(toks) < n:
        toks += tokenize(TEXT.encode())
    return toks[:n]


def _device_kw(cfg: Dict) -> Dict:
    """n_gpu_layers, tensor_split and flash attention, the same for both engines."""
    kw = {"n_gpu_layers": cfg.get("n_gpu_layers", 0), "flash_attn": bool(cfg.get("flash_attn", False))}
    if cfg.get("tensor_split"):
        kw["tensor_split"] = cfg["tensor_split"]
    return kw


def _args_device_kw(a) -> Dict:
    """The device settings of a command's arguments (--n-gpu-layers, --flash-attn, --tensor-split)."""
    split = getattr(a, "tensor_split", None)
    return _device_kw({"n_gpu_layers": getattr(a, "n_gpu_layers", 0), "flash_attn": getattr(a, "flash_attn", False),
                       "tensor_split": [float(x) for x in split.split(",")] if split else None})


def worker(cfg: Dict) -> Dict:
    """One measurement in this process: load, prefill n_prompt tokens, decode n_gen greedily."""
    import numpy as np
    n_ctx = cfg["n_prompt"] + cfg["n_gen"] + 8
    th = cfg["threads"]
    exits: List[int] = []
    if cfg["engine"] == "pyriver":
        from pyriver import Llama
        kw = {"river": None}   # River off means off, whatever a calibration says
        if cfg.get("river"):
            kw = dict(river=cfg["river"], exit_threshold=cfg["tau"], min_exit_layer=cfg.get("min_exit_layer"),
                      force_exit_layer=cfg.get("force_exit_layer", -1), river_force=cfg.get("river_force", False))
        llm = Llama(cfg["model"], n_ctx=n_ctx, n_batch=512, n_threads=th, n_threads_batch=th, verbose=False,
                    **_device_kw(cfg), rpc_servers=cfg.get("rpc_servers"), **kw)
        tokenize = lambda b: llm.tokenize(b, add_bos=False)
        prefill = lambda t: llm.eval(t)[-1]

        def step(t):
            out = llm.eval([t])[-1]
            if cfg.get("river"):
                exits.extend(llm.last_exits)
            return out
    else:
        from .evaluate import LlamaCppEngine
        if cfg.get("rpc_servers"):
            # llama.cpp's --rpc: the servers' devices join ggml's device list of this process.
            from .rpc import register_for_llama_cpp
            register_for_llama_cpp(cfg["rpc_servers"])
        llm = LlamaCppEngine(cfg["model"], n_ctx, th, **_device_kw(cfg))
        tokenize = lambda b: llm.tokenize(b, add_bos=False)
        prefill = lambda t: llm.eval(t)[-1]
        step = lambda t: llm.eval([t])[-1]
    prompt = _prompt(tokenize, cfg["n_prompt"])
    t0 = time.perf_counter()
    tok = int(np.argmax(prefill(prompt)))
    t1 = time.perf_counter()   # the first token is known: time to first token
    for _ in range(cfg["n_gen"]):
        tok = int(np.argmax(step(tok)))
    t2 = time.perf_counter()
    res = {"prefill_tok_s": cfg["n_prompt"] / (t1 - t0), "decode_tok_s": cfg["n_gen"] / (t2 - t1),
           "ttft_ms": 1000 * (t1 - t0), "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    if exits:
        res["mean_exit_layer"] = float(np.mean(exits))
    return res


def _run_worker(cfg: Dict) -> Dict:
    cmd = [sys.executable, "-m", "pyriver.bench", "--worker", json.dumps(cfg)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"{cfg['name']} worker failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _summary(vals: List[float]) -> Dict:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": vals}


# llama.cpp has no "all q3_K" file type: a K-quant river type is matched by its _S mix (that
# type for nearly every matrix). MXFP4's only file type (MXFP4_MOE) keeps a dense model's matrices
# in Q8_0, so an mxfp4 river has no uniform counterpart.
UNIFORM_FTYPE = {"q2_k": "q2_k", "q3_k": "q3_k_s", "q4_k": "q4_k_s", "q5_k": "q5_k_s", "q6_k": "q6_k", "mxfp4": None}


def uniform_ftype(river_type: str) -> Optional[str]:
    """llama.cpp's file type for "the whole model at river_type", or None when it has none."""
    return UNIFORM_FTYPE.get(river_type.lower(), river_type.lower())


def requantized(path: str, river_type: str) -> str:
    """The model requantized by llama.cpp to the file type matching river_type (cached)."""
    from . import models
    from .river import file_sha256
    from .synth import quantize
    ftype = uniform_ftype(river_type)
    if ftype is None:
        raise ValueError(f"llama.cpp has no uniform {river_type} file type for dense models "
                         "(MXFP4_MOE keeps non-expert matrices in Q8_0)")
    out = models.cache_dir() / "requantized" / f"{file_sha256(path)[:16]}-{os.path.basename(path)[:-5]}.{ftype}.gguf"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        try:
            quantize(path, tmp, ftype)
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                tmp.unlink()
    return str(out)


def engines_for(a, path: str) -> List[Dict]:
    base = {"model": path, "threads": a.threads, "n_prompt": a.prompt_tokens, "n_gen": a.gen_tokens,
            "n_gpu_layers": a.n_gpu_layers, "rpc_servers": a.rpc_servers, "flash_attn": a.flash_attn,
            "tensor_split": [float(x) for x in a.tensor_split.split(",")] if a.tensor_split else None}
    es = [dict(base, name="llama.cpp", engine="llama.cpp"), dict(base, name="pyriver", engine="pyriver")]
    if a.river:
        for tau in a.tau:
            es.append(dict(base, name=f"pyriver river={a.river} tau={tau}", engine="pyriver", river=a.river, tau=tau,
                           min_exit_layer=a.min_exit_layer, force_exit_layer=a.force_exit_layer,
                           river_force=a.river_force))
        if a.competitor:
            es.append(dict(base, name=f"llama.cpp {a.river}", engine="llama.cpp", model=requantized(path, a.river)))
    return es


def main(a) -> int:
    from . import models
    path = str(models.resolve(a.model, progress=True))
    from .calibration import apply_to_args
    apply_to_args(a, path, tau_list=False)
    engines = engines_for(a, path)
    if a.river:
        # Build the sidecar once, outside the timed workers.
        from . import Llama
        Llama(path, n_ctx=16, verbose=False, river=a.river, river_force=a.river_force).close()
    runs: Dict[str, List[Dict]] = {e["name"]: [] for e in engines}
    from tqdm import tqdm

    from .results import conditions
    interrupted = False
    bar = tqdm(total=a.repeats * len(engines), desc="bench", unit="run", file=sys.stderr)
    try:
        for r in range(a.repeats):
            k = r % len(engines)
            for e in engines[k:] + engines[:k]:
                runs[e["name"]].append(_run_worker(e))
                bar.update(1)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: reporting the repeats that finished", file=sys.stderr)
    finally:
        bar.close()
    n = min(len(v) for v in runs.values())
    if n == 0:
        print("no complete repeat", file=sys.stderr)
        return 130 if interrupted else 1
    res = {
        "schema": "pyriver.bench/1", "interrupted": interrupted,
        "conditions": conditions(path, a.threads, prompt_tokens=a.prompt_tokens, gen_tokens=a.gen_tokens, repeats=n,
                                 prompt_set="bench.TEXT (fixed prose, repeated to length)", river=a.river, tau=a.tau,
                                 min_exit_layer=a.min_exit_layer, force_exit_layer=a.force_exit_layer,
                                 calibrated=a.calibrated, n_gpu_layers=a.n_gpu_layers, rpc_servers=a.rpc_servers,
                                 tensor_split=a.tensor_split, flash_attn=a.flash_attn),
        "engines": {},
    }
    for e in engines:
        rr = runs[e["name"]][:n]
        d = {m: _summary([x[m] for x in rr]) for m in METRICS}
        d["mean_exit_layer"] = statistics.median(x["mean_exit_layer"] for x in rr) if "mean_exit_layer" in rr[0] else None
        d["model"] = e["model"]
        res["engines"][e["name"]] = d
    ref = res["engines"]["llama.cpp"]
    base = res["engines"]["pyriver"]
    for name, d in res["engines"].items():
        d["ratio_to_llama_cpp"] = {m: d[m]["median"] / ref[m]["median"] for m in METRICS}
        d["ratio_to_pyriver_full_depth"] = {m: d[m]["median"] / base[m]["median"] for m in METRICS}
    print(f"\nmodel {os.path.basename(path)}  threads {a.threads}  prompt {a.prompt_tokens}  gen {a.gen_tokens}  repeats {n}")
    if a.rpc_servers:
        print(f"rpc_servers {a.rpc_servers}  n_gpu_layers {a.n_gpu_layers}  tensor_split {a.tensor_split or 'by free memory'}")
    print(f"{'engine':<34}{'prefill tok/s':>20}{'decode tok/s':>20}{'TTFT ms':>18}{'peak RSS MiB':>18}{'exit':>6}")
    for name, d in res["engines"].items():
        cells = [f"{d[m]['median']:.1f} ({d['ratio_to_llama_cpp'][m]:.2f}x)" for m in METRICS]
        ex = f"{d['mean_exit_layer']:.1f}" if d["mean_exit_layer"] is not None else ""
        print(f"{name:<34}{cells[0]:>20}{cells[1]:>20}{cells[2]:>18}{cells[3]:>18}{ex:>6}")
    print("medians over repeats; (ratio to llama.cpp on the same file). min..max and all values in --json.")
    if a.json:
        write_json(a.json, res)
    return 130 if interrupted else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(worker(json.loads(sys.argv[2]))))
    else:
        print("usage: pyriver bench MODEL (the worker mode is internal)", file=sys.stderr)
        sys.exit(2)


def _check_modes(a, llm) -> List[Dict]:
    """The check settings --overhead and --inprocess compare: chunk x carry (x predict)."""
    chunks = a.chunks or [0]
    carry = {"on": [True], "off": [False], "both": [True, False]}[a.carry]
    predict = {"on": [True], "off": [False], "both": [False, True]}[getattr(a, "predict", "off")]
    return [dict(check_chunk=c, device_carry=d, predict=p) for c in chunks for d in carry for p in predict]


def _mode_name(m: Dict) -> str:
    return (f"chunk {m['check_chunk'] or 'auto'}" + ("" if m["device_carry"] else " host") +
            (" predict" if m["predict"] else ""))


def overhead(a) -> int:
    """The cost of the exit checks alone: one process, one river, alternating between tau 2.0
    (no checks) and tau 1.0 (every check computed, none passes), 128 decode tokens after 256 of
    context per run; one line per check mode (--chunks, --carry)."""
    import numpy as np

    from . import Llama, models
    path = str(models.resolve(a.model, progress=True))
    llm = Llama(path, n_ctx=1024, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                river=a.river or "q4_0", river_force=a.river_force, exit_threshold=2.0, rpc_servers=a.rpc_servers,
                **_args_device_kw(a))
    toks = _prompt(lambda b: llm.tokenize(b, add_bos=False), 256 + 128)
    modes = _check_modes(a, llm)
    configs = [("no checks (tau 2.0)", 2.0, modes[0])] + [(f"checks (tau 1.0) {_mode_name(m)}", 1.0, m) for m in modes]
    res: Dict[str, List[float]] = {c[0]: [] for c in configs}
    for _ in range(a.repeats):
        for label, tau, mode in configs:
            llm.set_exit(tau, a.min_exit_layer, **mode)
            llm.reset()
            llm.eval(toks[:256])
            t = time.perf_counter()
            for tok in toks[256:]:
                llm.eval([tok])
            res[label].append(128 / (time.perf_counter() - t))
    med = {k: float(np.median(v)) for k, v in res.items()}
    base = med[configs[0][0]]
    for k, v in res.items():
        extra = "" if k == configs[0][0] else f"  overhead {100 * (1 - med[k] / base):.1f}%"
        print(f"{k:<40} median {med[k]:.1f} tok/s  runs {[round(x, 1) for x in v]}{extra}")
    if a.json:
        write_json(a.json, {"model": path, "threads": a.threads, "n_gpu_layers": a.n_gpu_layers, "tok_s": res,
                            "median": med, "overhead": {k: 1 - m / base for k, m in med.items()}})
    return 0


def chat_turns(a) -> int:
    """Time to first token of a chat's second turn: with the first turn's prefix reused from the
    KV cache, and after a reset (the whole conversation prefilled again)."""
    from . import Llama, models
    path = str(models.resolve(a.model, progress=True))
    llm = Llama(path, n_ctx=2048, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, river=None)
    first = [{"role": "system", "content": "You are a helpful assistant who answers in detail."},
             {"role": "user", "content": TEXT * 4 + "Summarize this text."}]
    res: Dict[str, List[float]] = {"reuse": [], "reset": []}
    for _ in range(a.repeats):
        for mode in ("reuse", "reset"):
            llm.reset()
            reply = llm.create_chat_completion(first, max_tokens=48, temperature=0)["choices"][0]["message"]
            convo = first + [reply, {"role": "user", "content": "Now say it in one sentence."}]
            if mode == "reset":
                llm.reset()
            for _ in llm.create_chat_completion(convo, max_tokens=1, temperature=0, stream=True):
                pass
            res[mode].append(llm.last_stats["prompt_s"])   # the prefill before the first token
            res[mode + "_tokens"] = [llm.last_stats["prompt_eval_tokens"], llm.last_stats["prompt_tokens"]]
    for mode in ("reuse", "reset"):
        evald, total = res[mode + "_tokens"]
        print(f"second turn, {mode:<5}: time to first token median {1000 * statistics.median(res[mode]):.1f} ms "
              f"({evald} of {total} prompt tokens evaluated)")
    if a.json:
        write_json(a.json, {"model": path, "threads": a.threads, "seconds": res})
    return 0


def inprocess(a) -> int:
    """River against full depth in one process, alternating: decode tokens are the model's own
    full-depth greedy answer to a chat prompt (so exits are those of real text), short context.
    Reports tok/s medians and graph computations per token for each tau and check chunk."""
    import numpy as np

    from . import Llama, models
    from . import debug
    from .evaluate import prompt_tokens
    path = str(models.resolve(a.model, progress=True))
    llm = Llama(path, n_ctx=1024, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                river=a.river or "q4_0", river_force=a.river_force, exit_threshold=2.0, rpc_servers=a.rpc_servers,
                **_args_device_kw(a))
    prompt = prompt_tokens(llm, {"prompt": "Write a short essay about rivers and the cities built along them."})
    llm.reset()
    logits = llm.eval(prompt)[-1]
    seq = []
    for _ in range(a.gen_tokens):
        seq.append(int(np.argmax(logits)))
        logits = llm.eval([seq[-1]])[-1]
    modes = _check_modes(a, llm)
    configs = [(2.0, modes[0])] + [(t, m) for t in a.tau for m in modes]
    res: Dict[str, List[float]] = {}
    graphs: Dict[str, float] = {}
    exits: Dict[str, float] = {}
    for _ in range(a.repeats):
        for tau, mode in configs:
            key = "full depth" if tau > 1 else f"tau {tau} {_mode_name(mode)}"
            llm.set_exit(tau, a.min_exit_layer, **mode)
            llm.reset()
            llm.eval(prompt)
            g0, ex = debug.graph_runs(llm), []
            t = time.perf_counter()
            for tok in seq:
                llm.eval([tok])
                ex.extend(llm.last_exits)
            res.setdefault(key, []).append(len(seq) / (time.perf_counter() - t))
            graphs[key] = (debug.graph_runs(llm) - g0) / len(seq)
            exits[key] = float(np.mean(ex))
    full = statistics.median(res["full depth"])
    for key, v in res.items():
        m = statistics.median(v)
        print(f"{key:<36} {m:7.1f} tok/s ({m / full:.2f}x)  graphs/token {graphs[key]:5.2f}  mean exit block {exits[key]:5.1f}")
    if a.json:
        write_json(a.json, {"model": path, "threads": a.threads, "n_gpu_layers": a.n_gpu_layers, "tok_s": res,
                            "graphs_per_token": graphs, "mean_exit": exits})
    return 0
