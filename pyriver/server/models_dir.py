"""The models of a --models-dir, named as llama-server's router names them: a GGUF file by its name
without ".gguf", a folder (a model in several files) by the folder's name. Companion files are
not models: llama-server's (mmproj*, mtp-/dspark-/dflash- drafts) and pyriver's River sidecars
(NAME.river-TYPE.gguf beside NAME.gguf)."""
from __future__ import annotations

import os
from typing import Dict

_DRAFT_PREFIXES = ("mtp-", "dspark-", "dflash-")


def _companion(fname: str) -> bool:
    return "mmproj" in fname or fname.startswith(_DRAFT_PREFIXES) or ".river-" in fname


def _folder_model(path: str) -> str:
    """The model file of a folder: its first shard (-00001-of-), else its one other GGUF; "" if none."""
    model = ""
    for f in sorted(os.listdir(path)):
        if not f.endswith(".gguf") or _companion(f):
            continue
        if "-00001-of-" in f:
            return os.path.join(path, f)
        model = os.path.join(path, f)
    return model


def scan(models_dir: str) -> Dict[str, str]:
    """{model name: GGUF path}, sorted by name; a clear ValueError for a directory that is not one."""
    if not os.path.isdir(models_dir):
        raise ValueError(f"--models-dir: '{models_dir}' does not exist or is not a directory")
    out = {}
    for f in sorted(os.listdir(models_dir)):
        path = os.path.join(models_dir, f)
        if os.path.isdir(path):
            model = _folder_model(path)
            if model:
                out[f] = model
        elif f.endswith(".gguf") and not _companion(f):
            out[f.replace(".gguf", "")] = path   # llama-server drops every ".gguf" of the name
    return dict(sorted(out.items()))
