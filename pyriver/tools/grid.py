"""`pyriver bench MODEL -p 512 -n 128 ...`: llama-bench's grid on pyriver. Each test as llama-bench
runs it (test_prompt / test_gen): a warm-up (the whole prompt, one generated token), then -r
repetitions from an empty cache, each -d tokens first (untimed), then the prompt in -b batches
(the first token BOS where the vocabulary adds one, the rest random) and the generated tokens one
decode each (random, logits read and not sampled); t/s = (n_prompt + n_gen) / time of a repetition,
averaged. --llama-cpp adds llama.cpp's row of each test (llama-cpp-python, same process, the
repetitions of both engines alternated); --llama-bench runs llama-bench's binary on the same lists
and adds its rows; --spec adds, for each -n, the model's own greedy answer to a code-edit prompt at
full depth and in each mode (grid_spec.py). Settings an engine refuses (a cache type, say) give a
row that says why, as llama-bench skips what it cannot run."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from pyriver import __version__, models
from pyriver.api.llama import Llama
from pyriver.engine.backends import devices
from pyriver.engine.model_desc import describe

from pyriver.tools.engine import LlamaCppEngine
from pyriver.tools.grid_args import Instance, check, instances, parse, type_name
from pyriver.tools.grid_out import PRINTERS, Result, from_llama_bench, md_columns

SEED = 1234


def machine() -> Dict[str, str]:
    """cpu_info, gpu_info and backends as llama-bench reads them from ggml's devices."""
    ds = devices()
    gpus = [d for d in ds if d["type"] in ("gpu", "igpu")]
    names = sorted({"".join(c for c in d["name"] if not c.isdigit()).split("[")[0] for d in ds if d["type"] != "cpu"})
    return {"cpu_info": ", ".join(d["description"] for d in ds if d["type"] in ("cpu", "accel")),
            "gpu_info": ", ".join(d["description"] for d in gpus), "backends": ",".join(names) or "CPU"}


def build_commit() -> str:
    """pyriver's commit (its git checkout's, else its version): the row's build_commit."""
    try:
        root = Path(__file__).resolve().parents[2]
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        return f"pyriver-{sha}" if sha else f"pyriver-{__version__}"
    except (OSError, subprocess.SubprocessError):
        return f"pyriver-{__version__}"


def values(inst: Instance, desc: Dict, mach: Dict, commit: str) -> Dict[str, str]:
    return {"build_commit": commit, "build_number": "0", **mach, "model_filename": inst.model,
            "model_type": desc["type"], "model_size": str(desc["size"]), "model_n_params": str(desc["n_params"]),
            "n_batch": str(inst.n_batch), "n_ubatch": str(inst.n_ubatch), "n_threads": str(inst.n_threads),
            "type_k": type_name(inst.type_k), "type_v": type_name(inst.type_v), "n_gpu_layers": str(inst.n_gpu_layers),
            "flash_attn": str(inst.flash_attn), "n_prompt": str(inst.n_prompt), "n_gen": str(inst.n_gen),
            "n_depth": str(inst.n_depth), "test_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _kw(inst: Instance) -> Dict:
    """Both engines' constructor arguments for a test (n_batch clamped to n_ctx, as llama.cpp clamps it)."""
    n_batch = min(inst.n_batch, inst.n_ctx)
    kw = dict(n_batch=n_batch, n_ubatch=min(inst.n_ubatch, n_batch), n_gpu_layers=inst.n_gpu_layers,
              flash_attn=inst.flash_attn == 1)   # auto: the engines' default (off)
    if inst.type_k != 1 or inst.type_v != 1:
        kw.update(type_k=inst.type_k, type_v=inst.type_v)
    return kw


def open_pyriver(inst: Instance, engine: str):
    return Llama(inst.model, n_ctx=inst.n_ctx, n_threads=inst.n_threads, n_threads_batch=inst.n_threads,
                 verbose=False, river=None, engine=engine, **_kw(inst))


def open_llama_cpp(inst: Instance):
    kw = _kw(inst)
    return LlamaCppEngine(inst.model, inst.n_ctx, inst.n_threads, **kw)


class Runner:
    """One engine's tests: llama-bench's test_prompt and test_gen on its decode_logits."""

    def __init__(self, llm, n_batch: int):
        self.llm, self.n_batch = llm, n_batch
        bos = llm.tokenize(b"", add_bos=True)
        self.bos = bos[0] if bos else None
        self.n_vocab = llm.n_vocab()
        self.rng = random.Random(SEED)

    def prompt(self, n: int) -> None:
        done = 0
        while done < n:
            k = min(n - done, self.n_batch)
            toks = [self.rng.randrange(self.n_vocab) for _ in range(k)]
            if done == 0 and self.bos is not None:
                toks[0] = self.bos
            self.llm.decode_logits(toks)
            done += k

    def gen(self, n: int) -> None:
        tok = self.bos if self.bos is not None else self.rng.randrange(self.n_vocab)
        for _ in range(n):
            self.llm.decode_logits([tok])
            tok = self.rng.randrange(self.n_vocab)

    def warmup(self, inst: Instance) -> None:
        self.llm.reset()
        if inst.n_prompt:
            self.prompt(inst.n_prompt)
        if inst.n_gen:
            self.gen(1)

    def repetition(self, inst: Instance) -> int:
        self.llm.reset()
        if inst.n_depth:
            self.prompt(inst.n_depth)
        t = time.perf_counter_ns()
        if inst.n_prompt:
            self.prompt(inst.n_prompt)
        if inst.n_gen:
            self.gen(inst.n_gen)
        return time.perf_counter_ns() - t


def run_test(inst: Instance, opens: Dict[str, Callable], reps: int, warmup: bool, base: Dict[str, str]) -> List[Result]:
    """One test on every engine: each opened (a refusal is that row's error), warmed up, then the
    repetitions alternated between engines (the first swapped each time) so noise falls on all."""
    results, runners = {}, {}
    for name, open_ in opens.items():
        results[name] = Result(dict(base), engine=name)
        try:
            runners[name] = Runner(open_(inst), min(inst.n_batch, inst.n_ctx))
        except (ValueError, RuntimeError, OSError) as e:
            results[name].error = str(e).splitlines()[0] if str(e) else type(e).__name__
    try:
        if warmup:
            for r in runners.values():
                r.warmup(inst)
        names = list(runners)
        for i in range(reps):
            order = names if i % 2 == 0 else names[::-1]
            for name in order:
                results[name].samples_ns.append(runners[name].repetition(inst))
    finally:
        for r in runners.values():
            r.llm.close()
    return list(results.values())


def llama_bench_binary(path: Optional[str]) -> str:
    if path and path != "auto":
        return path
    from pyriver.tools.llama_server import binary   # llama-bench is built beside llama-server
    exe = binary().parent / "llama-bench"
    if not exe.exists():
        raise FileNotFoundError(f"no llama-bench at {exe}: build its target in llama-server's build directory "
                                "(cmake --build <dir> --target llama-bench) or give --llama-bench PATH")
    return str(exe)


def llama_bench_args(a, model: str) -> List[str]:
    """llama-bench's command line for the same grid: the lists as parsed (each value), -m, -o jsonl."""
    flat = lambda v: [x for xs in v for x in (xs if isinstance(xs, list) else [xs])]
    out = ["-m", model]
    for flag, name, fmt in (("-p", "n_prompt", str), ("-n", "n_gen", str), ("-d", "n_depth", str),
                            ("-b", "n_batch", str), ("-ub", "n_ubatch", str), ("-t", "n_threads", str),
                            ("-ngl", "n_gpu_layers", str), ("-fa", "flash_attn", {1: "on", 0: "off", -1: "auto"}.get),
                            ("-ctk", "type_k", type_name), ("-ctv", "type_v", type_name)):
        v = getattr(a, name)
        if v is not None:
            out += [flag, ",".join(fmt(x) for x in flat(v))]
    for p, n in a.pg or []:
        out += ["-pg", f"{p},{n}"]
    if a.n_threads is None:   # pyriver's default: every CPU (llama-bench's: the physical cores)
        out += ["-t", str(os.cpu_count() or 1)]
    return out + ["-r", str(a.reps)] + (["--no-warmup"] if a.no_warmup else []) + ["-o", "jsonl"]


def run_llama_bench(exe: str, a, model: str) -> List[Result]:
    cmd = [exe] + llama_bench_args(a, model)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return [from_llama_bench(json.loads(line)) for line in p.stdout.splitlines() if line.startswith("{")]


def main(argv: List[str]) -> int:
    a = parse(argv)
    err = check(a)
    if err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    path = str(models.resolve(a.model, progress=True))
    insts = instances(a, [path])
    desc, mach, commit = describe(path), machine(), build_commit()
    opens: Dict[str, Callable] = {"pyriver": lambda i: open_pyriver(i, a.engine)}
    if a.llama_cpp:
        opens["llama.cpp"] = open_llama_cpp
    pr = PRINTERS[a.output](sys.stdout)
    pr.header(md_columns(a, mach["backends"]))
    for inst in insts:
        for r in run_test(inst, opens, a.reps, not a.no_warmup, values(inst, desc, mach, commit)):
            pr.test(r)
        if a.spec and inst.n_gen and not inst.n_prompt:
            from pyriver.tools.grid_spec import spec_rows
            for r in spec_rows(inst, a.spec, a.reps, values(inst, desc, mach, commit)):
                pr.test(r)
    if a.llama_bench:
        for r in run_llama_bench(llama_bench_binary(a.llama_bench), a, path):
            pr.test(r)
    pr.footer(commit)
    return 0
