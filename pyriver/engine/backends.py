"""The ggml devices of this process (CPU, GPUs, registered RPC servers)."""
from __future__ import annotations

from typing import Dict, List

from ..native import lib, read_text


def devices() -> List[Dict[str, str]]:
    """One dict per ggml device: name ("CPU", "CUDA0", "RPC0[...]"), description, type
    ("cpu", "gpu", "igpu", "accel")."""
    out = []
    for line in read_text(lib.pr_devices).splitlines():
        name, desc, kind = (line.split("\t") + ["", ""])[:3]
        out.append({"name": name, "description": desc, "type": kind})
    return out
