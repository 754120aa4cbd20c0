"""One benchmark measurement in a fresh process (so that its peak RSS is one engine's alone):
load pyriver or llama.cpp, prefill a prompt of fixed prose, decode greedily (the first WARMUP steps
untimed), report speeds.

    python -m pyriver.tools.worker '{"engine": "pyriver", "model": ..., "threads": 2, "n_prompt": 512, "n_gen": 128}'
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from typing import Dict, List

import numpy as np

from pyriver.api.llama import Llama
from pyriver.engine.rpc import register_for_llama_cpp

from pyriver.tools.engine import LlamaCppEngine, greedy

TEXT = ("The river carries the water of the mountains down to the sea. Along its banks, towns grew where "
        "boats could land, and people traded grain, wool and stories. ")
METRICS = ("prefill_tok_s", "decode_tok_s", "ttft_ms", "peak_rss_mib")
WARMUP = 8   # decode steps before the timed ones, in every engine (graphs built, CUDA graphs captured)


def text_prompt(tokenize, n: int) -> List[int]:
    """n tokens of TEXT repeated."""
    toks: List[int] = []
    while len(toks) < n:
        toks += tokenize(TEXT.encode())
    return toks[:n]


def engine_kwargs(cfg: Dict) -> Dict:
    """n_gpu_layers, tensor_split and flash attention of a measurement, the same for both engines."""
    kw = {"n_gpu_layers": cfg.get("n_gpu_layers", 0), "flash_attn": bool(cfg.get("flash_attn", False))}
    if cfg.get("tensor_split"):
        kw["tensor_split"] = cfg["tensor_split"]
    for k in ("type_k", "type_v"):   # the KV cache types (-ctk/-ctv), both engines
        if cfg.get(k) is not None:
            kw[k] = cfg[k]
    return kw


def worker(cfg: Dict) -> Dict:
    """One measurement in this process: load, prefill n_prompt tokens, decode n_gen greedily."""
    n_ctx = cfg["n_prompt"] + cfg["n_gen"] + WARMUP + 8
    th = cfg["threads"]
    if cfg["engine"] == "pyriver":
        kw = {"river": None}   # River off means off, whatever a calibration says
        if cfg.get("river"):
            kw = dict(river=cfg["river"], exit_threshold=cfg["tau"], min_exit_layer=cfg.get("min_exit_layer"),
                      force_exit_layer=cfg.get("force_exit_layer", -1), river_force=cfg.get("river_force", False))
        llm = Llama(cfg["model"], n_ctx=n_ctx, n_batch=512, n_threads=th, n_threads_batch=th, verbose=False,
                    **engine_kwargs(cfg), rpc_servers=cfg.get("rpc_servers"), batch_invariant=cfg.get("batch_invariant"),
                    engine=cfg.get("pyriver_engine", "auto"), batch_layout=cfg.get("batch_layout", False), **kw)
    else:
        if cfg.get("rpc_servers"):
            # llama.cpp's --rpc: the servers' devices join ggml's device list of this process.
            register_for_llama_cpp(cfg["rpc_servers"])
        llm = LlamaCppEngine(cfg["model"], n_ctx, th, **engine_kwargs(cfg))
    prompt = text_prompt(lambda b: llm.tokenize(b, add_bos=False), cfg["n_prompt"])
    run = greedy(llm, prompt, WARMUP + cfg["n_gen"], warmup=WARMUP)
    res = {"prefill_tok_s": cfg["n_prompt"] / run.prefill_s, "decode_tok_s": cfg["n_gen"] / run.steps_s,
           "ttft_ms": 1000 * run.prefill_s, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    if run.exits:
        res["mean_exit_layer"] = float(np.mean(run.exits))
    if cfg["engine"] == "pyriver":
        res["kv_mib"] = llm.kv_cache()["bytes"] / 2**20
    return res


def run_worker(cfg: Dict) -> Dict:
    """worker(cfg) in a fresh process."""
    cmd = [sys.executable, "-m", "pyriver.tools.worker", json.dumps(cfg)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"{cfg['name']} worker failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m pyriver.tools.worker CONFIG_JSON (pyriver bench runs it)", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(worker(json.loads(sys.argv[1]))))
