"""pyriver and llama.cpp behind one small interface, and the decoding loops every measurement and
test shares: greedy continuation, teacher forcing (a given token sequence fed one decode step at a
time), and perplexity.

An engine has reset(), tokenize(text, add_bos), decode_logits(tokens, logits_all=False) -> logits rows
(the last token's, or every token's), n_ctx(), close(), and, for exits, river_path and last_exits
(the exit block of each token of the last eval). pyriver.Llama is one; LlamaCppEngine wraps
llama-cpp-python's Llama."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import llama_cpp
import numpy as np
from tqdm import tqdm

from pyriver.engine import debug
from pyriver.engine.llamacpp import logits_ith
from pyriver.river.stats import exit_stats


class LlamaCppEngine:
    """llama.cpp (llama-cpp-python) as an engine. It never exits: no river, no exit blocks."""

    river_path = None
    last_exits: List[int] = []

    def __init__(self, path: str, n_ctx: int, threads: int, *, n_batch: Optional[int] = None,
                 n_ubatch: int = 512, logits_all: bool = False, **model_kw):
        self.model_path = path
        # n_batch = n_ctx (the default) keeps a run in one batch list; n_ubatch = 512 makes
        # llama.cpp compute a prompt in the same 512-token steps as pyriver.
        self._llm = llama_cpp.Llama(path, n_ctx=n_ctx, n_batch=n_batch or n_ctx, n_ubatch=n_ubatch, n_threads=threads,
                                    n_threads_batch=threads, logits_all=logits_all, verbose=False, **model_kw)
        self.info = {"n_layer": 0}

    def reset(self) -> None:
        self._llm.reset()

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        return self._llm.tokenize(text, add_bos=add_bos, special=special)

    def n_ctx(self) -> int:
        return self._llm.n_ctx()

    def n_vocab(self) -> int:
        return self._llm.n_vocab()

    def decode_logits(self, tokens: Sequence[int], logits_all: bool = False) -> np.ndarray:
        """Logits [1, n_vocab] of the last token, or [len(tokens), n_vocab] with logits_all (which
        needs an engine made with logits_all). llama-cpp-python keeps `scores` only with
        logits_all, so the last token's are read from its context."""
        n0 = self._llm.n_tokens
        self._llm.eval(list(tokens))
        if logits_all:
            return np.array(self._llm.scores[n0:self._llm.n_tokens])
        return logits_ith(self._llm.ctx, -1, self._llm.n_vocab())

    def close(self) -> None:
        self._llm.close()


class StepwiseEngine:
    """An engine fed one token per step, so that every position comes from a single-token decode:
    what a batch-invariant pyriver context computes in a step of any size (llama.cpp's kernels for
    one column), and so the reference it is compared with bit for bit. Everything but eval is the
    wrapped engine's."""

    river_path = None
    last_exits: List[int] = []

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def decode_logits(self, tokens: Sequence[int], logits_all: bool = False) -> np.ndarray:
        rows = [self.inner.decode_logits([t], logits_all=logits_all) for t in tokens]
        return np.concatenate(rows) if logits_all else rows[-1]


@dataclass
class Run:
    """What a decoding loop saw: the tokens it fed as decode steps; the seconds of the prompt and
    the first choice (prefill_s), of the decode steps' evals alone (decode_s) and of the whole
    loop of steps (steps_s); the exit blocks of the steps (with a river); with keep_logits, the logits after
    the prompt and after every step."""
    tokens: List[int] = field(default_factory=list)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    steps_s: float = 0.0
    exits: List[int] = field(default_factory=list)
    logits: List[np.ndarray] = field(default_factory=list)
    forecasts: List[int] = field(default_factory=list)   # exit_rule predicted/guarded: each step's forecast
    observed: List[int] = field(default_factory=list)    # ... and its first block at tau (pyriver.engine.debug.exit_forecasts)
    graphs: int = 0                                      # graphs the steps computed (native engine)


def feed(llm, prompt: Sequence[int], tokens: Optional[Sequence[int]] = None, n: int = 0, *,
         keep_logits: bool = False, before_step: Optional[Callable[[int, np.ndarray], None]] = None,
         warmup: int = 0) -> Run:
    """From a reset cache: the prompt, then one decode step per token. The tokens are the given
    ones (teacher forcing) or, without them, n greedy choices (argmax of the logits before each).
    before_step(i, logits) runs before step i, with the logits the step's token is judged by. The
    first `warmup` steps are left out of decode_s, steps_s and exits (one-time costs: graphs
    built, buffers allocated, CUDA graphs captured)."""
    river = bool(getattr(llm, "river_path", None))   # without a river every token runs all blocks
    forecast = river and getattr(llm, "exit_rule", "checked") != "checked"
    native = bool(getattr(llm, "_native_ctx", None))
    steps = len(tokens) if tokens is not None else n
    run = Run()
    llm.reset()
    t0 = time.perf_counter()
    logits = llm.decode_logits(prompt)[-1]
    choose = (lambda i: tokens[i]) if tokens is not None else (lambda i: int(np.argmax(logits)))
    tok = choose(0) if steps else None
    t1 = time.perf_counter()
    run.prefill_s = t1 - t0   # the first token is known: time to first token
    if keep_logits:
        run.logits.append(logits)
    t_steps = t1
    for i in range(steps):
        if i and i == warmup:
            t_steps = time.perf_counter()
        if i:
            tok = choose(i)
        run.tokens.append(tok)
        if before_step is not None:
            before_step(i, logits)
        g = debug.graph_runs(llm) if native else 0
        t = time.perf_counter()
        logits = llm.decode_logits([tok])[-1]
        if i >= warmup:
            run.decode_s += time.perf_counter() - t
            run.graphs += debug.graph_runs(llm) - g if native else 0
            if river:
                run.exits.extend(llm.last_exits)
            if forecast:
                f, o = debug.exit_forecasts(llm)
                run.forecasts += f
                run.observed += o
        if keep_logits:
            run.logits.append(logits)
    run.steps_s = time.perf_counter() - t_steps
    return run


def greedy(llm, prompt: Sequence[int], n: int, **kw) -> Run:
    """The greedy continuation of prompt: n tokens, each fed back as a decode step."""
    return feed(llm, prompt, None, n, **kw)


def prompt_tokens(llm, item: Dict) -> List[int]:
    if item.get("chat", True):
        return llm.chat_tokens([{"role": "user", "content": item["prompt"]}])
    return llm.tokenize(item["prompt"].encode("utf-8"), add_bos=True)


def references(full, prompts: Sequence[Dict], n_tokens: int, bar=None) -> List[Dict]:
    """Full-depth greedy continuations (not stopped at end-of-generation: a fixed length)."""
    refs = []
    for p in prompts:
        toks = prompt_tokens(full, p)
        if len(toks) + n_tokens > full.n_ctx():
            raise ValueError(f"prompt {p['id']} ({len(toks)} tokens) + {n_tokens} does not fit n_ctx {full.n_ctx()}; raise --ctx")
        cont = greedy(full, toks, n_tokens, before_step=_tick(bar)).tokens
        refs.append({"id": p["id"], "category": p["category"], "tokens": toks, "continuation": cont})
    return refs


def progress(total: int, desc: str):
    """The progress bar (stderr) the loops below update once per decode step."""
    return tqdm(total=total, desc=desc, unit="tok", file=sys.stderr, mininterval=0.5, leave=False)


def _tick(bar):
    return None if bar is None else (lambda i, logits: bar.update(1))


def teacher_forced(llm, refs: Sequence[Dict], bar=None) -> Dict:
    """Top-1 agreement along the references, identical-continuation lengths, exits, and the
    decode speed of these steps (seconds of the single-token evals only)."""
    agree = total = 0
    exits: List[int] = []
    identical: List[int] = []
    per_cat: Dict[str, List[int]] = {}
    decode_s = 0.0
    graphs = 0
    fc: List[int] = []
    ob: List[int] = []
    for r in refs:
        cont = r["continuation"]
        hit = [False] * len(cont)

        def judge(i, logits):
            hit[i] = int(np.argmax(logits)) == cont[i]
            if bar is not None:
                bar.update(1)
        run = feed(llm, r["tokens"], cont, before_step=judge)
        decode_s += run.decode_s
        exits += run.exits
        graphs += run.graphs
        fc += run.forecasts
        ob += run.observed
        agree += sum(hit)
        total += len(cont)
        c = per_cat.setdefault(r["category"], [0, 0])
        c[0] += sum(hit)
        c[1] += len(cont)
        identical.append(hit.index(False) if False in hit else len(cont))
    st = exit_stats(exits, llm.info["n_layer"])
    st.pop("exit_layers", None)
    st.pop("tokens", None)
    return {"top1_agreement": agree / total, "positions": total,
            "top1_by_category": {k: v[0] / v[1] for k, v in sorted(per_cat.items())},
            "mean_identical_prefix": float(np.mean(identical)), "identical_prefix": identical,
            "decode_tok_s": total / decode_s if decode_s > 0 else None, "graphs_per_step": graphs / total if graphs else None,
            **forecast_stats(fc, ob), **st}


def forecast_stats(forecasts: Sequence[int], observed: Sequence[int]) -> Dict:
    """How the exit forecasts of predicted/guarded steps fared against the first block at tau each
    step showed: hit (the forecast was that block, or full depth with none), early (the forecast came
    before it: predicted left too early, guarded went on checking), late (backbone blocks past it)."""
    if not forecasts:
        return {}
    n = len(forecasts)
    early = sum(o < 0 or o > f for f, o in zip(forecasts, observed))   # o = -1: censored, its block lies past f
    hit = sum(o == f for f, o in zip(forecasts, observed))
    late = sum(0 <= o < f for f, o in zip(forecasts, observed))
    return {"forecast_hit": hit / n, "forecast_early": early / n, "forecast_late": late / n,
            "mean_forecast": float(np.mean(forecasts))}


def perplexity(llm, token_lists: Sequence[List[int]], bar=None) -> Dict:
    """exp(mean negative log-likelihood) of each next token, one decode step per token."""
    nll = [0.0]
    n = 0
    for toks in token_lists:
        def score(i, logits, toks=toks):
            x = logits.astype(np.float64)
            m = x.max()
            nll[0] += m + np.log(np.exp(x - m).sum()) - x[toks[i + 1]]
            if bar is not None:
                bar.update(1)
        feed(llm, toks[:1], toks[1:], before_step=score)
        n += len(toks) - 1
    return {"perplexity": float(np.exp(nll[0] / n)), "text_tokens": n}
