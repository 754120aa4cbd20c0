"""Fidelity of River against full depth on the same model file.

Reference: the model's own full-depth greedy continuation of each prompt. Then the River run is
teacher-forced along that reference, token by token (decode steps, so exits apply), and at every
position its top-1 token is compared with the reference's. Also reported: the mean exit block,
the share of block work done on the river, and the exit histogram."""
from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence

import numpy as np


def load_prompts(path: Optional[str]) -> List[str]:
    if path is None:
        from .prompts import PROMPTS
        return [p for _, p in PROMPTS]
    out = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not a JSON line ({e.msg})") from None
            text = obj.get("prompt") if isinstance(obj, dict) else None
            if not isinstance(text, str) or not text:
                raise ValueError(f"{path}:{i}: each line needs a non-empty \"prompt\" string")
            out.append(text)
    if not out:
        raise ValueError(f"{path}: no prompts")
    return out


def chat_tokens(llm, prompt: str) -> List[int]:
    from .chat import template_for
    text = template_for(llm).render([{"role": "user", "content": prompt}])
    return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def references(full, prompts: Sequence[str], n_tokens: int) -> List[Dict]:
    """Full-depth greedy continuations (not stopped at end-of-generation: a fixed length)."""
    refs = []
    for p in prompts:
        toks = chat_tokens(full, p)
        full.reset()
        logits = full.eval(toks)[-1]
        cont = []
        for _ in range(n_tokens):
            t = int(np.argmax(logits))
            cont.append(t)
            logits = full.eval([t])[-1]
        refs.append({"prompt": p, "tokens": toks, "continuation": cont})
    return refs


def teacher_forced(llm, refs: Sequence[Dict]) -> Dict:
    agree = total = 0
    exits: List[int] = []
    identical = []
    for r in refs:
        llm.reset()
        logits = llm.eval(r["tokens"])[-1]
        first_miss = None
        for i, t in enumerate(r["continuation"]):
            ok = int(np.argmax(logits)) == t
            agree += ok
            total += 1
            if not ok and first_miss is None:
                first_miss = i
            logits = llm.eval([t])[-1]
            exits.extend(llm.last_exits)
        identical.append(len(r["continuation"]) if first_miss is None else first_miss)
    from .river import exit_stats
    st = exit_stats(exits, llm.info["n_layer"])
    st.pop("exit_layers")
    return {"top1_agreement": agree / total, "positions": total,
            "mean_identical_prefix": float(np.mean(identical)), **st}
