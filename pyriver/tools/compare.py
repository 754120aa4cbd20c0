"""`pyriver compare`: several files of one model, requantizations of the first one by llama.cpp's
quantizer, and River settings on it, each a point of one table and one plane (issue 72 item 2):

- fidelity against one reference: llama-perplexity's KL divergence, Same top p and PPL ratio on its
  chunks of a text (pyriver.tools.kld, the rule of `pyriver eval --kl-divergence`: a file at full
  depth one batch a chunk, a River point decode steps over the scored half). The reference (the
  first MODEL, or --base, e.g. a Q8_0) writes DIR/base.kld once; every point is read against it.
- speed on this machine: prompt and decode tok/s of pyriver on the point (its file, or the first
  MODEL with the River setting), of llama.cpp (llama-cpp-python) on the same file, and of llama.cpp
  on the first MODEL (the anchor), every prompt and decode step alternated between them
  (pyriver.tools.paired, as `pyriver bench --paired`). Points are measured one after another, minutes
  apart: the plane and the frontier read each point's speed as its ratio to the anchor measured
  beside it (median of the per-repeat ratios), which a drifting machine moves far less than tok/s.

Resumable: DIR/compare.json holds each point's figures as soon as they are measured (its fidelity,
then its speed), and a rerun into the same DIR under the same conditions measures only what it
lacks. The frontier (no other point with a lower mean KLD that decodes at least as fast, or
faster at no more KLD; speed as the ratio to the anchor) is marked in the table and the PNG (sweep's rule
and drawing)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from tqdm import tqdm

from pyriver import models
from pyriver.api.llama import DEFAULT_DRAFT_MAX, DEFAULT_MIN_EXIT_LAYER, Llama
from pyriver.cli import TOOLS, guarded
from pyriver.cli.args import device_kwargs, positive
from pyriver.models.cache import file_sha256
from pyriver.river.sidecar import sidecar_path

from pyriver.tools import compare_out, kld, paired
from pyriver.tools.engine import LlamaCppEngine, progress
from pyriver.tools.quantize import ftype_constant, requantized_path, requantized_to
from pyriver.tools.results import conditions, write_json
from pyriver.tools.worker import WARMUP, text_prompt

SCHEMA = "pyriver.compare/1"
# the conditions a stored point must share with this run to be kept (the rest are recorded only)
SAME = ("reference_sha256", "text_sha256", "ctx", "chunks", "prompt_tokens", "gen_tokens", "repeats", "threads",
        "n_gpu_layers", "flash_attn")


def river_spec(s: str) -> Dict:
    """--river's TYPE:TAU[:MIN_EXIT_LAYER] (min exit layer: Llama's default)."""
    parts = s.split(":")
    try:
        if len(parts) not in (2, 3) or not parts[0]:
            raise ValueError
        tau = float(parts[1])
        mn = int(parts[2]) if len(parts) == 3 else DEFAULT_MIN_EXIT_LAYER
    except ValueError:
        raise argparse.ArgumentTypeError(f"a River point is TYPE:TAU[:MIN_EXIT_LAYER] (q4_0:0.985), got {s!r}") from None
    if not 0.0 < tau <= 1.0 or mn < 0:
        raise argparse.ArgumentTypeError(f"{s!r}: tau is in (0, 1], the min exit layer at least 0")
    return {"river": parts[0], "tau": tau, "min_exit_layer": mn}


def lossless_spec(s: str) -> Dict:
    """--lossless's DRAFT[:K]: the drafter (a river type, drafting on the River path at Llama's exit
    threshold, or "ngram") and the longest draft (default: lossless mode's)."""
    parts = s.split(":")
    try:
        if len(parts) not in (1, 2) or not parts[0]:
            raise ValueError
        k = int(parts[1]) if len(parts) == 2 else DEFAULT_DRAFT_MAX
    except ValueError:
        raise argparse.ArgumentTypeError(f"a lossless point is DRAFT[:K] (q4_0:2, ngram:4), got {s!r}") from None
    if k < 0:
        raise argparse.ArgumentTypeError(f"{s!r}: the draft length is at least 0")
    return {"draft": parts[0], "draft_max": k}


def comma_list(kind):
    def parse(s: str) -> List:
        return [kind(x.strip()) for x in s.split(",") if x.strip()]
    return parse


def ftype_name(s: str) -> str:
    try:
        ftype_constant(s)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return s.lower()


def parser() -> argparse.ArgumentParser:
    c = argparse.ArgumentParser(prog="pyriver compare", description=TOOLS["compare"][1])
    c.add_argument("models", nargs="*", metavar="MODEL", help="GGUF files (or registry names) of one model; the first "
                   "is the reference (unless --base), and the one --quantize and --river work on (default: SmolLM2 Q4_1)")
    c.add_argument("--quantize", type=comma_list(ftype_name), action="extend", default=[], metavar="FTYPES",
                   help="the first MODEL requantized by llama.cpp (llama_model_quantize) to these file types: "
                   "q4_0,q3_k_m,iq4_nl,... (cached)")
    c.add_argument("--river", type=comma_list(river_spec), action="extend", default=[], metavar="TYPE:TAU[:MIN],...",
                   help="River settings on the first MODEL: river type, exit threshold, min exit layer (default "
                   f"{DEFAULT_MIN_EXIT_LAYER}), e.g. q4_0:0.95,q4_0:0.985")
    c.add_argument("--lossless", type=comma_list(lossless_spec), action="extend", default=[], metavar="DRAFT[:K],...",
                   help="lossless mode on the first MODEL: drafts from a river type (on the River path) or ngram, at most K "
                   f"(default {DEFAULT_DRAFT_MAX}) a step; its KLD from verify steps of K + 1 rows, e.g. q4_0:2")
    c.add_argument("--base", default=None, metavar="GGUF", help="the reference model (e.g. a Q8_0 or F16 file of the "
                   "same model); default: the first MODEL")
    c.add_argument("--river-force", action="store_true", help="allow a river not cheaper than the backbone")
    k = c.add_argument_group("fidelity: llama-perplexity's KL divergence (its flags)")
    k.add_argument("-f", "--file", default=None, help="the text cut into chunks (UTF-8); needed for the first run into DIR")
    k.add_argument("-c", "--ctx", type=int, default=512, help="chunk size (default 512)")
    k.add_argument("--chunks", type=int, default=-1, help="at most this many chunks (default: all)")
    s = c.add_argument_group("speed: pyriver and llama.cpp on the same file, alternated step by step")
    s.add_argument("-p", "--prompt-tokens", type=positive, default=512, help="prompt tokens (default 512)")
    s.add_argument("-n", "--gen-tokens", type=positive, default=128, help="decode steps timed (default 128)")
    s.add_argument("-r", "--repeats", type=positive, default=3, help="repeats (default 3)")
    c.add_argument("--threads", "-t", type=positive, default=2)
    c.add_argument("--n-gpu-layers", type=int, default=0, help="last blocks (and the head) on devices, both engines; -1 = all")
    c.add_argument("--flash-attn", action="store_true", help="flash attention, every engine")
    c.add_argument("-o", "--output", default="compare", metavar="DIR",
                   help="writes DIR/compare.{json,md,csv,png} and DIR/base.kld; a rerun resumes (default: ./compare)")
    c.add_argument("--no-png", action="store_true", help="no plot (else it needs matplotlib: pyriver[eval])")
    return c


def plan(a, first: str) -> List[Dict]:
    """Every point, in the table's order: the files, the requantizations, the River settings."""
    pts = []
    for m in a.paths:
        pts.append({"key": f"file:{os.path.realpath(m)}", "name": Path(m).name[:-5] if m.endswith(".gguf") else Path(m).name,
                    "kind": "file", "model": m})
    for ft in dict.fromkeys(a.quantize):
        pts.append({"key": f"quantize:{ft}", "name": f"requantized {ft}", "kind": "quantized", "ftype": ft,
                    "model": str(requantized_path(first, ft))})
    for r in a.river:
        pts.append({"key": f"river:{r['river']}:{r['tau']:g}:{r['min_exit_layer']}",
                    "name": f"river {r['river']} tau {r['tau']:g} min {r['min_exit_layer']}", "kind": "river",
                    "model": first, **r})
    for d in a.lossless:
        pts.append({"key": f"lossless:{d['draft']}:{d['draft_max']}",
                    "name": f"lossless {d['draft']} drafts, draft-max {d['draft_max']}", "kind": "lossless", "model": first, **d})
    seen = set()
    return [p for p in pts if not (p["key"] in seen or seen.add(p["key"]))]


def _open(a, p: Dict, n_ctx: int) -> Llama:
    kw = dict(n_ctx=n_ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, **device_kwargs(a))
    if p["kind"] == "lossless":   # lossless mode with its drafter, as it generates (speed)
        ngram = p["draft"] == "ngram"
        return Llama(p["model"], river=None if ngram else p["draft"], river_force=a.river_force, lossless=True,
                     draft_model="ngram" if ngram else None, draft_max=p["draft_max"], **kw)
    if p["kind"] != "river":
        return Llama(p["model"], river=None, **kw)
    llm = Llama(p["model"], river=p["river"], river_force=a.river_force, exit_threshold=2.0, **kw)
    llm.set_exit(p["tau"], p["min_exit_layer"])
    return llm


def _log(out: Path, name: str):
    """llama-perplexity's lines of one pass, kept in DIR/logs/ (the table has their figures)."""
    out.mkdir(parents=True, exist_ok=True)
    return open(out / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name) + ".txt"), "w")


def fidelity(a, p: Dict, base: str, n_ctx: int, logs: Path) -> Dict:
    """The point against the base file: kld.compare's figures, as `pyriver eval --kl-divergence` reads them
    (a lossless point: its verify steps of draft-max + 1 rows, on the model at full depth)."""
    verify = p["draft_max"] + 1 if p["kind"] == "lossless" else 0
    llm = kld.lossless_llama(p["model"], n_ctx, a.threads, **device_kwargs(a)) if verify else _open(a, p, n_ctx)
    try:
        with _log(logs, p["name"]) as f, contextlib.redirect_stdout(f):
            s = kld.compare(llm, base, p["kind"] == "river", a.chunks, f", {p['name']}", verify=verify)
        if p["kind"] == "river":
            p["sidecar"] = llm.river_path
    finally:
        llm.close()
    return s


def speed(a, p: Dict, first: str) -> Dict:
    """A point's speed: speed_steps, or for a lossless point speed_generations."""
    return (speed_generations if p["kind"] == "lossless" else speed_steps)(a, p, first)


def speed_generations(a, p: Dict, first: str) -> Dict:
    """A lossless point: pyriver in lossless mode on the first MODEL against llama.cpp on it (the
    anchor), taking turns generation by generation (a verify step yields several tokens, so they
    cannot alternate step by step): per repeat each runs the prompt and -n greedy tokens
    (paired.measure_generations)."""
    n_ctx = a.prompt_tokens + a.gen_tokens + WARMUP + 8
    engines = {"llama.cpp": LlamaCppEngine(first, n_ctx, a.threads, **device_kwargs(a))}
    try:
        engines["pyriver"] = _open(a, p, n_ctx)
        prompt = text_prompt(lambda b: engines["llama.cpp"].tokenize(b, add_bos=False), a.prompt_tokens)
        bar = progress(a.repeats * 2 * (len(prompt) + a.gen_tokens), f"speed, {p['name']}")
        reps = paired.measure_generations(engines, prompt, a.gen_tokens, a.repeats, bar)
        bar.close()
    finally:
        for e in engines.values():
            e.close()
    s = paired.summarize(reps)
    s["ratio_to_anchor"] = s["ratio_to_llama_cpp"]
    s["lossless"] = reps[-1]["lossless"]
    return s


def speed_steps(a, p: Dict, first: str) -> Dict:
    """pyriver on the point against llama.cpp on its file, and against llama.cpp on the first MODEL
    (the anchor: one yardstick for every point, so that points measured minutes apart on a machine
    whose speed drifts are read by their ratios to it), all alternated step by step (paired.measure)."""
    n_ctx = a.prompt_tokens + a.gen_tokens + WARMUP + 8
    kw = device_kwargs(a)
    same = os.path.realpath(p["model"]) == os.path.realpath(first)   # llama.cpp on the point's file is the anchor
    engines = {"llama.cpp": LlamaCppEngine(p["model"], n_ctx, a.threads, **kw)}
    try:
        engines["pyriver"] = _open(a, p, n_ctx)
        if not same:
            engines["anchor"] = LlamaCppEngine(first, n_ctx, a.threads, **kw)
        prompt = text_prompt(lambda b: engines["llama.cpp"].tokenize(b, add_bos=False), a.prompt_tokens)
        bar = progress(paired.bar_total(len(prompt), a.gen_tokens, a.repeats), f"speed, {p['name']}")
        reps = paired.measure(engines, prompt, a.gen_tokens, a.repeats, bar)
        bar.close()
    finally:
        for e in engines.values():
            e.close()
    s = paired.summarize(reps)
    s["ratio_to_anchor"] = {m: paired.ratio(reps, m, "pyriver", "llama.cpp" if same else "anchor") for m in paired.METRICS}
    return s


def _conditions(a, first: str, reference: str, text_sha: str) -> Dict:
    return conditions(first, a.threads, reference=os.path.abspath(reference), reference_sha256=file_sha256(reference),
                      text=os.path.abspath(a.file) if a.file else None, text_sha256=text_sha, ctx=a.ctx, chunks=a.chunks,
                      prompt_tokens=a.prompt_tokens, gen_tokens=a.gen_tokens, repeats=a.repeats, warmup_steps=WARMUP,
                      n_gpu_layers=a.n_gpu_layers, flash_attn=a.flash_attn)


def _resume(path: Path, cond: Dict) -> Optional[Dict]:
    """The stored results, if measured under this run's conditions (else a clear error)."""
    if not path.exists():
        return None
    res = json.loads(path.read_text())
    if res.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a {SCHEMA} file")
    old = res["conditions"]
    for k in SAME:
        if k in ("text_sha256",) and cond[k] is None:   # a rerun may leave out -f: the base holds the text
            continue
        if old.get(k) != cond[k]:
            raise ValueError(f"{path} was measured with {k} {old.get(k)!r}, this run has {cond[k]!r}: "
                             "give another -o DIR, or the same settings to resume it")
    return res


def measure(a) -> Dict:
    a.paths = [str(models.resolve(m, progress=True)) for m in (a.models or [None])]
    first = a.paths[0]
    reference = str(models.resolve(a.base, progress=True)) if a.base else first
    if not a.no_png:
        try:   # before the measurement, not after it
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("the plot needs matplotlib: pip install \"pyriver[eval]\" (or --no-png)") from None
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)
    store, base = out / "compare.json", out / "base.kld"
    text_sha = None
    if a.file:
        if not os.path.isfile(a.file):
            raise ValueError(f"-f {a.file}: no such file")
        text_sha = file_sha256(a.file)
    cond = _conditions(a, first, reference, text_sha)
    res = _resume(store, cond)
    if res is None or not base.exists():
        if not a.file:
            raise ValueError(f"the first run into {out} needs the text: -f FILE")
        with open(a.file, "rb") as f:
            text = f.read()
        text = text[:-1] if text.endswith(b"\n") else text   # llama.cpp's -f drops one final newline
        llm = Llama(reference, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, river=None,
                    **device_kwargs(a))
        tmp = out / ".base.kld.tmp"   # a base.kld is always whole
        try:
            with _log(out / "logs", "base") as f, contextlib.redirect_stdout(f):
                kld.write_base(llm, str(tmp), llm.tokenize(text, add_bos=True), a.ctx, a.chunks)
            os.replace(tmp, base)
        finally:
            llm.close()
            tmp.unlink(missing_ok=True)
        if res is None:   # (a lost base.kld is written again; the points read against it are kept: the same rows)
            res = {"schema": SCHEMA, "interrupted": False, "conditions": cond, "points": []}
            write_json(str(store), res)
        print(f"reference {Path(reference).name}: {kld.read_header(str(base)).n_chunk} chunks of {a.ctx} tokens -> {base}",
              file=sys.stderr)
    res["conditions"] = dict(res["conditions"], utc=cond["utc"])
    stored = {p["key"]: p for p in res["points"]}
    todo = plan(a, first)
    res["points"] = [stored.get(p["key"], p) for p in todo] + [p for k, p in stored.items() if k not in {q["key"] for q in todo}]
    want = [p for p in res["points"] if "kld" not in p or "speed" not in p]
    _quantize(first, [p for p in want if p["kind"] == "quantized"])
    skipped = len(res["points"]) - len(want)
    if skipped:
        print(f"compare: {skipped} point(s) already measured in {store}: kept", file=sys.stderr)
    n_ctx = kld.read_header(str(base)).n_ctx
    try:
        for p in want:
            if "kld" not in p:
                p["kld"] = fidelity(a, p, str(base), n_ctx, out / "logs")
                p["bytes"] = os.path.getsize(p["model"]) + (os.path.getsize(p["sidecar"]) if p.get("sidecar") else 0)
                write_json(str(store), res)
            if "speed" not in p:
                p["speed"] = speed(a, p, first)
                p["utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                write_json(str(store), res)
            print(compare_out.line(p), file=sys.stderr)
    except KeyboardInterrupt:
        res["interrupted"] = True
        print(f"\ninterrupted: the points measured are kept in {store}; run again to resume", file=sys.stderr)
    else:
        res["interrupted"] = False
    for p in res["points"]:
        if "kld" in p:
            _drafter_bytes(p)
    compare_out.mark(res["points"])
    write_json(str(store), res)
    return res


def _drafter_bytes(p: Dict) -> None:
    """A lossless point drafting from a river loads its sidecar too (made by its speed run at the
    latest): its MiB are the file's and the sidecar's, as a River point's."""
    if p["kind"] != "lossless" or p["draft"] == "ngram" or p.get("sidecar"):
        return
    side = sidecar_path(p["model"], p["draft"])
    if side.exists():
        p["sidecar"] = str(side)
        p["bytes"] = os.path.getsize(p["model"]) + os.path.getsize(side)


def _quantize(first: str, pts: List[Dict]) -> None:
    """The requantized files the points need, made now (before any point is measured): one bar step a file."""
    need = [p for p in pts if not os.path.exists(p["model"])]
    if not need:
        return
    bar = tqdm(need, desc="quantizing", unit="file", file=sys.stderr)
    for p in bar:
        bar.set_postfix_str(p["ftype"])
        requantized_to(first, p["ftype"])
    bar.close()


def main(argv: Optional[List[str]] = None) -> int:
    a = parser().parse_args(argv)
    res = measure(a)
    out = Path(a.output)
    md = compare_out.markdown(res)
    print(md)
    compare_out.write(res, out, png=not a.no_png)
    print(f"wrote {out / 'compare.md'}, .csv, .json" + ("" if a.no_png else ", .png"), file=sys.stderr)
    return 130 if res["interrupted"] else 0


if __name__ == "__main__":
    sys.exit(guarded(main, sys.argv[1:]))
