"""Timed greedy generation, shared by `pyriver bench --lossless` and `pyriver calibrate`'s lossless
points: lossless mode's speed depends on how many drafts the backbone keeps, so it is measured on
the model's own answers (not teacher-forced)."""
from __future__ import annotations

import time
from typing import Dict, List


def _answer(llm, p: Dict, n: int):
    if p.get("chat", True):
        r = llm.create_chat_completion([{"role": "user", "content": p["prompt"]}], max_tokens=n, temperature=0)
        return r, r["choices"][0]["message"]["content"]
    r = llm.create_completion(p["prompt"], max_tokens=n, temperature=0)
    return r, r["choices"][0]["text"]


def greedy_answers(llm, prompts: List[Dict], n: int) -> Dict:
    """Greedy answers of up to n tokens to every prompt ({"prompt", "chat"}), on a pyriver or a
    llama-cpp-python Llama. Each prompt is evaluated (and cached) before the clock starts, so tok/s
    is decode only; lossless draft statistics are summed over the prompts."""
    toks = secs = 0.0
    texts, drafted, accepted, steps = [], 0, 0, 0
    for p in prompts:
        _answer(llm, p, 1)   # the prompt is cached now
        t0 = time.perf_counter()
        r, text = _answer(llm, p, n)
        secs += time.perf_counter() - t0
        toks += r["usage"]["completion_tokens"]
        texts.append(text)
        ls = (llm.river_stats() or {}).get("lossless") if hasattr(llm, "river_stats") else None
        if ls:
            drafted, accepted, steps = drafted + ls["drafted"], accepted + ls["accepted"], steps + ls["verify_steps"]
    # None: no token generated (llama-cpp-python's chat handler may end at once, e.g. on Gemma 3)
    return {"tok_s": toks / secs if toks else None, "texts": texts, "drafted": drafted, "accepted": accepted,
            "verify_steps": steps}
