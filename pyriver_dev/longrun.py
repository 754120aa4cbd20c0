"""Long-run check: many chat turns on one Llama (River on), streaming, with the oldest turns
dropped when the context fills and a fresh conversation every few turns, then repeated
load/close cycles. Samples resident memory, file descriptors and threads as it goes, so a leak
shows as a slope after warm-up.

    python -m pyriver_dev.longrun --tokens 10000 --json longrun.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, List, Optional

from tqdm import tqdm

from pyriver import models
from pyriver.api.llama import DEFAULT_RIVER, Llama

from pyriver.tools.prompts import PROMPTS


def proc_sample() -> Dict[str, float]:
    """This process's resident memory now and at its peak (MiB), open fds and threads (Linux)."""
    d = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                d[k] = int(v.split()[0]) / 1024
    return {"rss_mib": d.get("VmRSS", 0.0), "peak_rss_mib": d.get("VmHWM", 0.0),
            "fds": len(os.listdir("/proc/self/fd")), "threads": len(os.listdir("/proc/self/task"))}


def _fit(llm, messages: List[Dict], max_tokens: int) -> List[Dict]:
    """Drop the oldest user/assistant pairs until the prompt and the answer fit in n_ctx."""
    while len(messages) > 1:
        n = len(llm.chat_tokens(messages))
        if n + max_tokens <= llm.n_ctx():
            break
        messages = messages[2:]
    return messages


def run(model: Optional[str] = None, *, tokens: int = 10000, river: Optional[str] = DEFAULT_RIVER, tau: float = 0.975,
        n_ctx: int = 512, max_tokens: int = 128, turns_per_conversation: int = 6, reloads: int = 10,
        n_threads: int = 2, seed: int = 1, progress: bool = True) -> Dict:
    path = str(models.resolve(model))
    kw = dict(n_ctx=n_ctx, n_threads=n_threads, verbose=False)
    if river:
        kw.update(river=river, exit_threshold=tau)
    samples: List[Dict] = [dict(tokens=0, turn=0, **proc_sample())]
    t0 = time.time()
    bar = None
    if progress:
        bar = tqdm(total=tokens, unit="tok", desc="long run")
    generated = turn = shifts = resets = 0
    llm = Llama(path, **kw)
    messages: List[Dict] = []
    try:
        while generated < tokens:
            if turn % turns_per_conversation == 0:
                messages, resets = [], resets + (turn > 0)
            messages.append({"role": "user", "content": PROMPTS[turn % len(PROMPTS)][1]})
            fitted = _fit(llm, messages, max_tokens)
            shifts += fitted is not messages
            messages = fitted
            parts = []
            for chunk in llm.create_chat_completion(messages, stream=True, max_tokens=max_tokens,
                                                    temperature=0.7, seed=seed + turn):
                parts.append(chunk["choices"][0]["delta"].get("content", ""))
            n = llm.n_generated
            generated += n
            turn += 1
            messages.append({"role": "assistant", "content": "".join(parts)})
            samples.append(dict(tokens=generated, turn=turn, **proc_sample()))
            if bar is not None:
                bar.update(n)
    except KeyboardInterrupt:
        print("interrupted: partial results", file=sys.stderr)
    finally:
        if bar is not None:
            bar.close()
        llm.close()
    before_reloads = proc_sample()
    cycles = []
    for _ in range(reloads):
        with Llama(path, **kw) as m:
            m("The river", max_tokens=8, temperature=0)
        cycles.append(proc_sample())
    return {"model": path, "river": river, "tau": tau, "n_ctx": n_ctx, "max_tokens": max_tokens, "n_threads": n_threads,
            "seed": seed, "tokens": generated, "turns": turn, "context_shifts": shifts, "resets": resets,
            "seconds": time.time() - t0, "samples": samples, "before_reloads": before_reloads, "reloads": cycles}


def summary(res: Dict, warmup_tokens: int = 1000) -> Dict:
    """RSS after warm-up (min, max, growth from first to last sample) and fd/thread counts."""
    warm = [s for s in res["samples"] if s["tokens"] >= warmup_tokens] or res["samples"][-1:]
    after = [s["rss_mib"] for s in warm]
    out = {"rss_after_warmup_min": min(after), "rss_after_warmup_max": max(after),
           "rss_growth_after_warmup": warm[-1]["rss_mib"] - warm[0]["rss_mib"],
           "fds": (warm[0]["fds"], warm[-1]["fds"]), "threads": (warm[0]["threads"], warm[-1]["threads"])}
    if res["reloads"]:
        r = [res["before_reloads"]] + res["reloads"]
        out.update(reload_rss=(r[1]["rss_mib"], r[-1]["rss_mib"]), reload_fds=(r[0]["fds"], r[-1]["fds"]),
                   reload_threads=(r[0]["threads"], r[-1]["threads"]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyriver_dev.longrun")
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--tokens", type=int, default=10000)
    ap.add_argument("--river", default=DEFAULT_RIVER, help="river type, or 'none'")
    ap.add_argument("--tau", type=float, default=0.975)
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--reloads", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--every", type=int, default=1000, help="table rows every this many tokens")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    res = run(a.model, tokens=a.tokens, river=None if a.river == "none" else a.river, tau=a.tau, n_ctx=a.n_ctx,
              reloads=a.reloads, n_threads=a.threads)
    print(f"{res['tokens']} tokens, {res['turns']} turns, {res['context_shifts']} context shifts, "
          f"{res['resets']} new conversations, {res['seconds']:.0f} s")
    print(f"{'tokens':>7} {'RSS MiB':>8} {'peak MiB':>9} {'fds':>4} {'threads':>7}")
    mark = 0
    for s in res["samples"]:
        if s["tokens"] >= mark or s is res["samples"][-1]:
            print(f"{s['tokens']:>7} {s['rss_mib']:>8.1f} {s['peak_rss_mib']:>9.1f} {s['fds']:>4} {s['threads']:>7}")
            mark = (s["tokens"] // a.every + 1) * a.every
    sm = summary(res)
    print(json.dumps(sm))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({**res, "summary": sm}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
