"""Fidelity of River against full depth on the same model file (`pyriver eval`), and the
measurements that `sweep` and `calibrate` share.

Reference: the model's own full-depth greedy continuation of each prompt. A River run is
teacher-forced along it token by token (decode steps, so exits apply); its top-1 token is
compared with the reference's at every position. Until the first miss the River's own greedy
text is the reference's, so the first miss is the length of the identical greedy continuation.
Perplexity is computed with token-by-token decoding too. The competitor, llama.cpp running the
model uniformly requantized to the river type, is measured against the same references."""
from __future__ import annotations

import time
from typing import Dict, List, Sequence

import numpy as np


class LlamaCppEngine:
    """llama.cpp (llama-cpp-python) behind the three calls these measurements use."""

    def __init__(self, path: str, n_ctx: int, threads: int, **device_kw):
        import llama_cpp
        self.model_path = path
        # n_batch = n_ctx keeps the run in one batch list; n_ubatch = 512 makes llama.cpp compute
        # the prompt in the same 512-token steps as pyriver.
        self._llm = llama_cpp.Llama(path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=512, n_threads=threads,
                                    n_threads_batch=threads, verbose=False, **device_kw)
        self.info = {"n_layer": 0}

    def reset(self) -> None:
        self._llm.reset()

    def tokenize(self, text: bytes, add_bos: bool = True) -> List[int]:
        return self._llm.tokenize(text, add_bos=add_bos)

    def eval(self, tokens: Sequence[int]) -> np.ndarray:
        """The last token's logits. (llama-cpp-python keeps `scores` only with logits_all, so
        they are read from the context.)"""
        import llama_cpp
        self._llm.eval(list(tokens))
        ptr = llama_cpp.llama_get_logits_ith(self._llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(1, self._llm.n_vocab())).copy()

    def close(self) -> None:
        self._llm.close()


def _dev(a):
    """--n-gpu-layers and --flash-attn, the same for every engine."""
    from .bench import _args_device_kw
    return _args_device_kw(a)


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
        full.reset()
        logits = full.eval(toks)[-1]
        cont = []
        for _ in range(n_tokens):
            t = int(np.argmax(logits))
            cont.append(t)
            logits = full.eval([t])[-1]
            if bar is not None:
                bar.update(1)
        refs.append({"id": p["id"], "category": p["category"], "tokens": toks, "continuation": cont})
    return refs


def teacher_forced(llm, refs: Sequence[Dict], bar=None) -> Dict:
    """Top-1 agreement along the references, identical-continuation lengths, exits, and the
    decode speed of these steps (seconds of the single-token evals only)."""
    agree = total = 0
    exits: List[int] = []
    identical: List[int] = []
    per_cat: Dict[str, List[int]] = {}
    decode_s = 0.0
    for r in refs:
        llm.reset()
        logits = llm.eval(r["tokens"])[-1]
        first_miss = None
        hits = 0
        for i, t in enumerate(r["continuation"]):
            ok = int(np.argmax(logits)) == t
            hits += ok
            if not ok and first_miss is None:
                first_miss = i
            t0 = time.perf_counter()
            logits = llm.eval([t])[-1]
            decode_s += time.perf_counter() - t0
            if getattr(llm, "river_path", None):   # without a river every token runs all blocks
                exits.extend(llm.last_exits)
            if bar is not None:
                bar.update(1)
        agree += hits
        total += len(r["continuation"])
        c = per_cat.setdefault(r["category"], [0, 0])
        c[0] += hits
        c[1] += len(r["continuation"])
        identical.append(len(r["continuation"]) if first_miss is None else first_miss)
    from .river import exit_stats
    st = exit_stats(exits, llm.info["n_layer"])
    st.pop("exit_layers", None)
    st.pop("tokens", None)
    return {"top1_agreement": agree / total, "positions": total,
            "top1_by_category": {k: v[0] / v[1] for k, v in sorted(per_cat.items())},
            "mean_identical_prefix": float(np.mean(identical)), "identical_prefix": identical,
            "decode_tok_s": total / decode_s if decode_s > 0 else None, **st}


def text_tokens(llm, texts: Sequence[Dict], max_tokens: int) -> List[List[int]]:
    out = []
    for t in texts:
        toks = llm.tokenize(t["text"].encode("utf-8"), add_bos=True)[:max_tokens]
        if len(toks) < 2:
            raise ValueError(f"text {t['id']} has fewer than 2 tokens")
        out.append(toks)
    return out


def perplexity(llm, token_lists: Sequence[List[int]], bar=None) -> Dict:
    """exp(mean negative log-likelihood) of each next token, one decode step per token."""
    nll = 0.0
    n = 0
    for toks in token_lists:
        llm.reset()
        logits = llm.eval(toks[:1])[-1]
        for t in toks[1:]:
            x = logits.astype(np.float64)
            m = x.max()
            nll += m + np.log(np.exp(x - m).sum()) - x[t]
            n += 1
            logits = llm.eval([t])[-1]
            if bar is not None:
                bar.update(1)
    return {"perplexity": float(np.exp(nll / n)), "text_tokens": n}


def progress(total: int, desc: str):
    import sys

    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="tok", file=sys.stderr, mininterval=0.5, leave=False)


def run_eval(a) -> int:
    """`pyriver eval`: every (min layer, tau) of one river type against full depth; with
    --competitor also llama.cpp on the model requantized to the river type."""
    import sys

    from . import Llama, datasets
    from .results import conditions, write_json
    prompts = datasets.subset(datasets.load_prompts(a.prompts), a.limit)
    texts = datasets.subset(datasets.load_texts(a.text), a.text_limit) if a.text_tokens > 0 else []
    full = Llama(a.model, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, river=None, **_dev(a))
    path = full.model_path
    from .calibration import apply_to_args
    apply_to_args(a, path, tau_list=True)
    if a.river is None:
        raise ValueError("eval measures River against full depth: pass --river TYPE (or calibrate the model first)")
    L = full.info["n_layer"]
    for mn in a.min_exit_layer:   # before the references are computed, not after
        if not 0 <= mn < L:
            raise ValueError(f"--min-exit-layer {mn} is outside this model's blocks [0, {L})")
    res: Dict = {"schema": "pyriver.eval/1", "interrupted": False, "full_depth": {}, "results": []}
    res["conditions"] = conditions(
        path, a.threads, river=a.river, prompt_set=datasets.set_name(a.prompts, a.limit), prompts=len(prompts),
        tokens_per_prompt=a.n, text_set=datasets.set_name(a.text, a.text_limit) if texts else None, texts=len(texts),
        text_tokens_max=a.text_tokens, ctx=a.ctx, taus=a.tau, min_exit_layers=a.min_exit_layer, calibrated=a.calibrated,
        n_gpu_layers=a.n_gpu_layers, flash_attn=a.flash_attn)
    done = 0

    def report(r: Dict) -> None:
        ppl = f", perplexity {r['perplexity']:.3f} ({100 * r['perplexity_change']:+.2f}%)" if "perplexity" in r else ""
        mean = r["mean_exit_layer"]
        label = (f"river {r['river']} tau {r['tau']:.4g} min layer {r['min_exit_layer']}" if r["kind"] == "river"
                 else f"uniform {r['river']} (llama.cpp)")
        print(f"{label}: top-1 agreement {r['top1_agreement']:.4f} ({r['positions']} positions), identical greedy "
              f"prefix {r['mean_identical_prefix']:.1f} tokens, mean exit block "
              f"{'-' if mean is None else f'{mean:.2f}'}, river work {100 * r['river_work_share']:.1f}%{ppl}")
        if r.get("histogram"):
            print("  exit histogram: " + " ".join(f"{k}:{v}" for k, v in sorted(r["histogram"].items())))

    try:
        bar = progress(len(prompts) * a.n, "references")
        refs = references(full, prompts, a.n, bar)
        bar.close()
        toks = text_tokens(full, texts, a.text_tokens)
        if toks:
            bar = progress(sum(len(t) - 1 for t in toks), "perplexity, full depth")
            res["full_depth"] = perplexity(full, toks, bar)
            bar.close()
            print(f"full depth: perplexity {res['full_depth']['perplexity']:.3f} over {res['full_depth']['text_tokens']} tokens")
        full.close()
        llm = Llama(path, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                    river=a.river, river_force=a.river_force, exit_threshold=2.0, **_dev(a))
        res["conditions"]["sidecar"] = llm.river_path
        settings = [(mn, tau) for mn in a.min_exit_layer for tau in a.tau]
        engines = [("river", llm, mn, tau) for mn, tau in settings]
        if a.competitor:
            from .bench import requantized
            engines.append(("uniform", None, None, None))
        for kind, eng, mn, tau in engines:
            if kind == "river":
                eng.set_exit(tau, mn)
            else:
                eng = LlamaCppEngine(requantized(path, a.river), a.ctx, a.threads, **_dev(a))
            bar = progress(len(refs) * a.n + sum(len(t) - 1 for t in toks), f"{kind} {tau or a.river}")
            r = {"kind": kind, "river": a.river, "tau": tau, "min_exit_layer": mn, **teacher_forced(eng, refs, bar)}
            r.pop("decode_tok_s")   # speed is `bench`'s and `sweep`'s job, not measured under these conditions
            if toks:
                p = perplexity(eng, toks, bar)
                r.update(perplexity=p["perplexity"], perplexity_change=p["perplexity"] / res["full_depth"]["perplexity"] - 1)
            if kind == "uniform":
                r["model"] = eng.model_path
                eng.close()
            bar.close()
            res["results"].append(r)
            report(r)
            done += 1
    except KeyboardInterrupt:
        res["interrupted"] = True
        print(f"\ninterrupted: {done} setting(s) measured, kept above" + (" and in --json" if a.json else ""), file=sys.stderr)
    if a.json:
        write_json(a.json, res)
    return 130 if res["interrupted"] else 0
