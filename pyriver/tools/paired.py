"""`pyriver bench --paired`: pyriver at full depth against llama.cpp (llama-cpp-python) in one
process, every prompt and every decode step alternated between them (the first engine swapped each
time). On a shared machine a run in a process of its own moves by 15-30% with the load, far more
than the few percent between two engines on the same kernels; alternated step by step, the noise
falls on both alike and the ratio within a repeat is read to about 1%.

Per repeat: a prompt of --prompt-tokens from an empty cache by each engine, then WARMUP untimed
and --gen-tokens timed greedy steps each, each engine fed its own argmax, logits compared bit for
bit after the prompt and every step. Reported: per engine the median over repeats of its prefill
and decode speed, and the median (min..max) of the per-repeat ratios to llama.cpp. Peak RSS needs
a process per engine: the default mode measures it."""
from __future__ import annotations

import time
from typing import Dict, List

import numpy as np

from pyriver import models
from pyriver.cli.args import tensor_split
from pyriver.api.llama import Llama
from pyriver.speculative.lossless import stats as lossless_stats

from pyriver.tools.engine import LlamaCppEngine
from pyriver.tools.results import conditions, summary, write_json
from pyriver.tools.worker import WARMUP, engine_kwargs, text_prompt

NAMES = ("llama.cpp", "pyriver")


def _timed(engine, tokens: List[int]):
    t = time.perf_counter()
    logits = engine.decode_logits(tokens)[-1]
    return logits, time.perf_counter() - t


def _repeat(engines: Dict, prompt: List[int], n_gen: int, flip: int, bar=None) -> Dict:
    """One repeat: the prompt, then the steps, each alternated; times in seconds. bar: advanced by
    the prompt's tokens, then by one a step. More engines than the two (compare's anchor) take
    turns in rotation."""
    names = list(engines)
    order = lambda i: names[(i + flip) % len(names):] + names[:(i + flip) % len(names)]   # two: swapped each time
    logits, prefill = {}, {}
    for k in order(0):
        engines[k].reset()
        logits[k], prefill[k] = _timed(engines[k], prompt)
    if bar is not None:
        bar.update(len(prompt))
    equal = bool(np.array_equal(logits["pyriver"], logits["llama.cpp"]))
    steps: Dict[str, List[float]] = {k: [] for k in names}
    for i in range(WARMUP + n_gen):
        for k in order(i + 1):
            logits[k], dt = _timed(engines[k], [int(np.argmax(logits[k]))])
            if i >= WARMUP:
                steps[k].append(dt)
        if bar is not None:
            bar.update(1)
        equal = equal and bool(np.array_equal(logits["pyriver"], logits["llama.cpp"]))
    n_prompt = len(prompt)
    return {"prefill_tok_s": {k: n_prompt / prefill[k] for k in names},
            "decode_tok_s": {k: n_gen / sum(steps[k]) for k in names},
            "logits_equal": equal}


METRICS = ("prefill_tok_s", "decode_tok_s")


def measure(engines: Dict, prompt: List[int], n_gen: int, repeats: int, bar=None) -> List[Dict]:
    """engines {"llama.cpp": ..., "pyriver": ..., and any more}: an untimed prompt each (graphs
    built, buffers allocated), then the repeats, the first engine rotated each time. Shared by
    `pyriver compare`'s speed of each point (there pyriver may run a River setting, its logits then
    differing, and an anchor engine takes its turns too)."""
    for e in engines.values():
        e.reset()
        e.decode_logits(prompt)
    return [_repeat(engines, prompt, n_gen, r % len(engines), bar) for r in range(repeats)]


def _generation(engine, prompt: List[int], n_gen: int) -> Dict:
    """One timed generation from an empty cache: the prompt, then n_gen greedy tokens. pyriver's
    Llama generates as its mode does (lossless: verify steps of several tokens; Llama.last_stats has
    the seconds); llama.cpp takes n_gen decode steps, each fed its own argmax."""
    engine.reset()
    if isinstance(engine, Llama):
        engine.create_completion(prompt, max_tokens=n_gen + 1, temperature=0.0)   # the first token is the prompt's
        st = engine.last_stats
        if not st["decode_tokens"]:
            raise ValueError("the model ended its generation after the prompt: no decode steps to time (another -p)")
        return {"prefill_tok_s": len(prompt) / st["prompt_s"], "decode_tok_s": st["decode_tokens"] / st["decode_s"],
                "lossless": lossless_stats(st.get("lossless"))}
    logits, prefill = _timed(engine, prompt)
    steps = 0.0
    for _ in range(n_gen):
        logits, dt = _timed(engine, [int(np.argmax(logits))])
        steps += dt
    return {"prefill_tok_s": len(prompt) / prefill, "decode_tok_s": n_gen / steps}


def measure_generations(engines: Dict, prompt: List[int], n_gen: int, repeats: int, bar=None) -> List[Dict]:
    """As measure, where pyriver's steps yield several tokens (lossless mode, `pyriver compare`'s
    lossless points): the engines take turns generation by generation, not step by step, after an
    untimed one each (WARMUP tokens). Each repeat also keeps pyriver's lossless statistics."""
    for e in engines.values():
        _generation(e, prompt, WARMUP)
    reps = []
    names = list(engines)
    for r in range(repeats):
        got = {}
        for k in names[r % len(names):] + names[:r % len(names)]:
            got[k] = _generation(engines[k], prompt, n_gen)
            if bar is not None:
                bar.update(len(prompt) + n_gen)
        reps.append({m: {k: got[k][m] for k in names} for m in METRICS})
        reps[-1].update(logits_equal=False, lossless=got["pyriver"].get("lossless"))
    return reps


def ratio(reps: List[Dict], metric: str, num: str, den: str) -> Dict:
    """The summary of num's per-repeat ratios to den's."""
    return summary([r[metric][num] / r[metric][den] for r in reps])


def bar_total(prompt_tokens: int, n_gen: int, repeats: int) -> int:
    """What measure()'s bar counts: per repeat the prompt's tokens and each step (warm-up ones too)."""
    return repeats * (prompt_tokens + WARMUP + n_gen)


def summarize(reps: List[Dict]) -> Dict:
    """Per engine the median (min, max) of each metric over the repeats, and of pyriver's per-repeat ratios."""
    return {"engines": {k: {m: summary([r[m][k] for r in reps]) for m in METRICS} for k in reps[0][METRICS[0]]},
            "ratio_to_llama_cpp": {m: ratio(reps, m, "pyriver", "llama.cpp") for m in METRICS},
            "logits_equal": all(r["logits_equal"] for r in reps)}


def paired(a) -> int:
    path = str(models.resolve(a.model, progress=True))
    n_ctx = a.prompt_tokens + a.gen_tokens + WARMUP + 8
    kw = engine_kwargs({"n_gpu_layers": a.n_gpu_layers, "flash_attn": a.flash_attn,
                        "tensor_split": tensor_split(a.tensor_split)})
    engines = {"llama.cpp": LlamaCppEngine(path, n_ctx, a.threads, **kw),
               "pyriver": Llama(path, n_ctx=n_ctx, n_batch=512, n_threads=a.threads, n_threads_batch=a.threads,
                                verbose=False, river=None, engine=a.engine, **kw)}
    prompt = text_prompt(lambda b: engines["llama.cpp"].tokenize(b, add_bos=False), a.prompt_tokens)
    reps = measure(engines, prompt, a.gen_tokens, a.repeats)
    for e in engines.values():
        e.close()
    res = {"schema": "pyriver.bench-paired/1",
           "conditions": conditions(path, a.threads, prompt_tokens=a.prompt_tokens, gen_tokens=a.gen_tokens,
                                    repeats=a.repeats, prompt_set="bench.TEXT (fixed prose, repeated to length)",
                                    n_gpu_layers=a.n_gpu_layers, flash_attn=a.flash_attn, warmup_steps=WARMUP,
                                    pyriver_engine=engines["pyriver"].engine),
           **summarize(reps)}
    print(f"\nmodel {path.rsplit('/', 1)[-1]}  threads {a.threads}  prompt {a.prompt_tokens}  gen {a.gen_tokens}  "
          f"repeats {a.repeats}  pyriver engine {res['conditions']['pyriver_engine']}  (one process, prompts and steps "
          "alternated)")
    print(f"{'engine':<12}{'prefill tok/s':>16}{'decode tok/s':>16}")
    for k in NAMES:
        print(f"{k:<12}" + "".join(f"{res['engines'][k][m]['median']:>16.1f}" for m in METRICS))
    rr = res["ratio_to_llama_cpp"]
    print("pyriver / llama.cpp, median of the per-repeat ratios (min..max): " + ", ".join(
        f"{m.split('_')[0]} {rr[m]['median']:.3f} ({rr[m]['min']:.3f}..{rr[m]['max']:.3f})" for m in METRICS))
    print(f"logits equal to llama.cpp's after the prompt and every step: {'yes' if res['logits_equal'] else 'NO'}")
    if a.json:
        write_json(a.json, res)
    return 0
