"""The ggml devices of this process (CPU, GPUs, registered RPC servers)."""
from __future__ import annotations

from typing import Dict, List

from ._native import check, ffi, lib


def devices() -> List[Dict[str, str]]:
    """One dict per ggml device: name ("CPU", "CUDA0", "RPC0[...]"), description, type
    ("cpu", "gpu", "igpu", "accel")."""
    buf = ffi.new("char[]", 1 << 14)
    check(lib.pr_devices(buf, len(buf)))
    out = []
    for line in ffi.string(buf).decode("utf-8", "replace").splitlines():
        name, desc, kind = (line.split("\t") + ["", ""])[:3]
        out.append({"name": name, "description": desc, "type": kind})
    return out
