"""The ggml devices of this process (CPU, GPUs, registered RPC servers)."""
from __future__ import annotations

from typing import Dict, List, Sequence

from pyriver.engine.binding import lib, read_text


def devices() -> List[Dict[str, str]]:
    """One dict per ggml device: name ("CPU", "CUDA0", "RPC0[...]"), description, type
    ("cpu", "gpu", "igpu", "accel")."""
    out = []
    for line in read_text(lib.pr_devices).splitlines():
        name, desc, kind = (line.split("\t") + ["", ""])[:3]
        out.append({"name": name, "description": desc, "type": kind})
    return out


def device_key(names: Sequence[str]) -> str:
    """Which device a measurement was made on, as a calibration records it: the devices a model's
    blocks and head run on (Engine.devices), each once in order, with its description, so that a
    CPU and a GPU, or two GPU models under the same name (CUDA0), are told apart."""
    desc = {d["name"]: d["description"] for d in devices()}
    seen = list(dict.fromkeys(names))
    return " + ".join(f"{n} ({desc[n]})" if desc.get(n) else n for n in seen)
