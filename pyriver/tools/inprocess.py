"""`pyriver bench` measurements made in one process, alternating settings on one Llama: the cost
of the exit checks alone (--overhead), River against full depth on the model's own text
(--inprocess), and a chat's second turn with and without prefix reuse (--chat-turns)."""
from __future__ import annotations

import statistics
from typing import Dict, List

import numpy as np

from pyriver.engine import debug
from pyriver import models
from pyriver.cli.args import device_kwargs
from pyriver.api.llama import DEFAULT_RIVER, Llama

from pyriver.tools.engine import feed, greedy, prompt_tokens
from pyriver.tools.results import write_json
from pyriver.tools.worker import TEXT, text_prompt


def _check_modes(a) -> List[Dict]:
    """The check settings --overhead and --inprocess compare: chunk x carry (x predict)."""
    chunks = a.chunks or [0]
    carry = {"on": [True], "off": [False], "both": [True, False]}[a.carry]
    predict = {"on": [True], "off": [False], "both": [False, True]}[getattr(a, "predict", "off")]
    return [dict(check_chunk=c, device_carry=d, predict=p) for c in chunks for d in carry for p in predict]


def _mode_name(m: Dict) -> str:
    return (f"chunk {m['check_chunk'] or 'auto'}" + ("" if m["device_carry"] else " host") +
            (" predict" if m["predict"] else ""))


def _river_llama(a, path: str) -> Llama:
    """The one Llama these measurements alternate on: a river bound, exits off until set."""
    return Llama(path, n_ctx=1024, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                 river=a.river or DEFAULT_RIVER, river_force=a.river_force, exit_threshold=2.0,
                 rpc_servers=a.rpc_servers, **device_kwargs(a))


def overhead(a) -> int:
    """The cost of the exit checks alone: one process, one river, alternating between tau 2.0
    (no checks) and tau 1.0 (every check computed, none passes), 128 decode tokens after 256 of
    context per run; one line per check mode (--chunks, --carry)."""
    path = str(models.resolve(a.model, progress=True))
    llm = _river_llama(a, path)
    toks = text_prompt(lambda b: llm.tokenize(b, add_bos=False), 256 + 128)
    modes = _check_modes(a)
    configs = [("no checks (tau 2.0)", 2.0, modes[0])] + [(f"checks (tau 1.0) {_mode_name(m)}", 1.0, m) for m in modes]
    res: Dict[str, List[float]] = {c[0]: [] for c in configs}
    for _ in range(a.repeats):
        for label, tau, mode in configs:
            llm.set_exit(tau, a.min_exit_layer, **mode)
            res[label].append(128 / feed(llm, toks[:256], toks[256:]).steps_s)
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
    path = str(models.resolve(a.model, progress=True))
    llm = _river_llama(a, path)
    prompt = prompt_tokens(llm, {"prompt": "Write a short essay about rivers and the cities built along them."})
    seq = greedy(llm, prompt, a.gen_tokens).tokens
    modes = _check_modes(a)
    configs = [(2.0, modes[0])] + [(t, m) for t in a.tau for m in modes]
    res: Dict[str, List[float]] = {}
    graphs: Dict[str, float] = {}
    exits: Dict[str, float] = {}
    for _ in range(a.repeats):
        for tau, mode in configs:
            key = "full depth" if tau > 1 else f"tau {tau} {_mode_name(mode)}"
            llm.set_exit(tau, a.min_exit_layer, **mode)
            g0 = []
            run = feed(llm, prompt, seq, before_step=lambda i, _: g0.append(debug.graph_runs(llm)) if i == 0 else None)
            res.setdefault(key, []).append(len(seq) / run.steps_s)
            graphs[key] = (debug.graph_runs(llm) - g0[0]) / len(seq)
            exits[key] = float(np.mean(run.exits))
    full = statistics.median(res["full depth"])
    for key, v in res.items():
        m = statistics.median(v)
        print(f"{key:<36} {m:7.1f} tok/s ({m / full:.2f}x)  graphs/token {graphs[key]:5.2f}  mean exit block {exits[key]:5.1f}")
    if a.json:
        write_json(a.json, {"model": path, "threads": a.threads, "n_gpu_layers": a.n_gpu_layers, "tok_s": res,
                            "graphs_per_token": graphs, "mean_exit": exits})
    return 0
