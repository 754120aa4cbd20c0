"""A seeded mutation fuzzer for pyriver's GGUF loaders (the model and the river sidecar).

Each case is a mutation of a real file: a byte flip or an interesting integer written into the
header, metadata or tensor-info region, or a truncation at a section boundary or at random. A
case must end in a loaded model or a Python exception. Cases run in a child process, one after
another; the child reports each case before running it, so when the child dies (a crash) or stops
answering (a hang, over the per-case time bound) the parent knows the case, keeps its input, and
starts a new child at the next case.

    python -m pyriver_dev.fuzz --cases 10000 --out tests/fuzz_regressions
    python -m pyriver_dev.fuzz --engine llama.cpp --source models/synthetic/foreign_qwen35.gguf --cases 300

With --engine llama.cpp a case goes through what Llama(..., engine="llama.cpp") does with a file
(llama.cpp's own loader, a context, one step): the load path of every architecture pyriver has no
builder for.
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple

import gguf

from pyriver import models

from pyriver_dev import synth

INTERESTING = [0, 1, 2, 3, 4, 7, 8, 31, 32, 255, 256, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
               0x100000000, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 1 << 40]


def _meta_end(path: str) -> int:
    """Where the tensor data starts (header + metadata + tensor infos, aligned), from gguf."""
    return int(gguf.GGUFReader(path).data_offset)


def mutate(data: bytes, rng: random.Random, meta_end: int) -> Tuple[bytes, str]:
    kind = rng.choice(["flip", "flip", "int", "int", "int", "truncate", "truncate_meta", "splice"])
    b = bytearray(data)
    if kind == "flip":
        n = rng.randint(1, 8)
        for _ in range(n):
            i = rng.randrange(meta_end)
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b), f"flip x{n} in header"
    if kind == "int":
        i = rng.randrange(0, meta_end - 8)
        v = rng.choice(INTERESTING)
        width = rng.choice([4, 8])
        b[i:i + width] = struct.pack("<Q" if width == 8 else "<I", v & ((1 << (8 * width)) - 1))
        return bytes(b), f"int {v:#x} ({width} bytes) at {i}"
    if kind == "truncate":
        n = rng.randrange(len(b))
        return bytes(b[:n]), f"truncate at {n}"
    if kind == "truncate_meta":
        n = rng.randrange(meta_end + 1)
        return bytes(b[:n]), f"truncate in header at {n}"
    i, j = sorted(rng.randrange(meta_end) for _ in range(2))
    k = rng.randrange(meta_end)
    b[k:k + (j - i)] = data[i:j]
    return bytes(b[:len(data)]), f"splice {i}:{j} -> {k}"


def _load_llamacpp(path: str) -> None:
    """Llama's path through the llama.cpp engine: the model, the vocabulary, a context and a step
    (a shape or hyper-parameter llama.cpp's loader lets through may abort only in a graph)."""
    from pyriver import Llama
    with Llama(path, n_ctx=16, n_batch=16, n_threads=1, engine="llama.cpp", verbose=False) as llm:
        llm.eval(llm.tokenize(b"Hi", add_bos=True)[:4] or [0])


def _child(src: str, kind: str, seed: int, start: int, count: int, backbone: Optional[str],
           engine: str = "native") -> None:
    """Runs cases start..start+count-1; prints 'CASE i' before and 'OK i <outcome>' after each (0:
    loaded; else the exception's class and message)."""
    # The native engine and llama.cpp's vocabulary only here, in the child that loads cases.
    import llama_cpp._logger

    from pyriver.engine import ModelArgs, river
    from pyriver.engine.native import NativeEngine
    from pyriver.errors import PyriverError
    from pyriver.engine.vocab import Vocab
    llama_cpp._logger.set_verbose(False)
    data = Path(src).read_bytes()
    meta_end = _meta_end(src)
    tmp = Path(tempfile.mkdtemp(prefix="pyriver-fuzz-"))
    signal.signal(signal.SIGALRM, signal.SIG_DFL)   # a case over its time bound ends the child
    for i in range(start, start + count):
        rng = random.Random(seed * 1_000_003 + i)
        blob, what = mutate(data, rng, meta_end)
        f = tmp / f"case-{i}.gguf"
        f.write_bytes(blob)
        print(f"CASE {i} {what}", flush=True)
        signal.alarm(10)
        st, msg = "0", "loaded"
        try:
            if kind == "model" and engine == "llama.cpp":
                _load_llamacpp(str(f))
            elif kind == "model":
                NativeEngine(str(f), ModelArgs()).close()
                # What pyriver.Llama does next: llama.cpp's vocabulary from the same file.
                try:
                    Vocab(str(f)).close()
                except ValueError:
                    pass
            else:   # a fresh backbone each time: a sidecar binds to the model once
                e = NativeEngine(backbone, ModelArgs())
                try:
                    river.attach(e.model, f, "")
                finally:
                    e.close()
        except (ValueError, PyriverError) as e:   # the native statuses' exceptions (pyriver.engine.binding.check)
            st, msg = type(e).__name__, str(e)
        signal.alarm(0)
        if st != "0" and not msg:
            print(f"BAD {i} status {st} without a message", flush=True)
        print(f"OK {i} {st} {msg[:100]}", flush=True)
        f.unlink()


def run(src: str, kind: str, cases: int, seed: int, out_dir: Optional[Path], backbone: Optional[str] = None,
        quiet: bool = False, engine: str = "native") -> dict:
    """Runs the fuzzer; returns counts and the crashing/hanging cases (inputs kept in out_dir)."""
    data = Path(src).read_bytes()
    meta_end = _meta_end(src)
    crashes: List[dict] = []
    outcomes = {"loaded": 0, "error": 0, "bad_message": 0}
    i = 0
    t0 = time.time()
    while i < cases:
        cmd = [sys.executable, "-m", "pyriver_dev.fuzz", "--child", src, kind, str(seed), str(i), str(cases - i),
               backbone or "", engine]
        err = tempfile.TemporaryFile(mode="w+")   # not a pipe: a chatty child must never block on it
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        last = None
        for line in p.stdout:
            if line.startswith("CASE "):
                last = int(line.split()[1])
            elif line.startswith("OK "):
                parts = line.split(maxsplit=3)
                outcomes["loaded" if parts[2] == "0" else "error"] += 1
                i = int(parts[1]) + 1
            elif line.startswith("BAD "):
                outcomes["bad_message"] += 1
        p.wait()
        err.seek(0)
        stderr = err.read()
        err.close()
        if p.returncode != 0 and last is not None and last >= i:
            rng = random.Random(seed * 1_000_003 + last)
            blob, what = mutate(data, rng, meta_end)
            rec = {"case": last, "mutation": what, "returncode": p.returncode, "stderr": stderr[-500:]}
            if out_dir is not None:
                out_dir.mkdir(parents=True, exist_ok=True)
                name = f"{kind}-{engine}-seed{seed}-case{last}.gguf"
                (out_dir / name).write_bytes(blob)
                rec["file"] = name
            crashes.append(rec)
            if not quiet:
                print(f"case {last}: child died ({p.returncode}) on {what}", file=sys.stderr)
            i = last + 1
        elif p.returncode != 0:
            raise RuntimeError(f"fuzz child failed before any case: {stderr[-1000:]}")
    return {"kind": kind, "engine": engine, "source": src, "seed": seed, "cases": cases, "seconds": time.time() - t0,
            **outcomes, "crashes": crashes}


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--child":
        _, src, kind, seed, start, count, backbone, engine = argv
        _child(src, kind, int(seed), int(start), int(count), backbone or None, engine)
        return 0
    ap = argparse.ArgumentParser(prog="python -m pyriver_dev.fuzz")
    ap.add_argument("--source", default=None, help="GGUF to mutate (default: a small synthetic model)")
    ap.add_argument("--kind", choices=["model", "river"], default="model")
    ap.add_argument("--engine", choices=["native", "llama.cpp"], default="native",
                    help="the model loader a case goes through (a river sidecar is the native engine's)")
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="folder for crashing inputs")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    src, backbone = a.source, None
    if src is None or a.kind == "river":
        from pyriver.api.llama import Llama  # the parent loads the library only to build a sidecar
        base = models.cache_dir() / "synthetic" / "fuzz-base.gguf"
        if not base.exists():
            base.parent.mkdir(parents=True, exist_ok=True)
            synth.write_llama(base, n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_ff=128, tokenizer_from=str(models.resolve(None)))
        backbone = str(base)
        if a.kind == "river":
            side = base.with_name("fuzz-base.river-q8_0.gguf")
            if not side.exists():
                Llama(str(base), n_ctx=8, verbose=False, river="q8_0").close()
            src = src or str(side)
        else:
            src = src or str(base)
    if a.kind == "river" and a.engine != "native":
        ap.error("--kind river: a river sidecar attaches to the native engine only")
    res = run(src, a.kind, a.cases, a.seed, Path(a.out) if a.out else None, backbone, engine=a.engine)
    print(f"{res['cases']} cases of {res['kind']} in {res['seconds']:.0f} s: {res['loaded']} loaded, {res['error']} clear errors, "
          f"{len(res['crashes'])} crashes or hangs, {res['bad_message']} errors without a message")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0 if not res["crashes"] and not res["bad_message"] else 1


if __name__ == "__main__":
    sys.exit(main())
