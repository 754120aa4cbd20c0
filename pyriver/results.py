"""What every `bench` / `eval` / `sweep` / `calibrate` result carries: the conditions it was
measured under (so two runs can be compared), written as JSON that follows pyriver/schemas/."""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Dict

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


def conditions(model_path: str, threads: int, **extra) -> Dict:
    import llama_cpp

    from . import __version__
    from .backends import devices
    from .river import file_sha256
    d = {"model": os.path.abspath(model_path), "model_sha256": file_sha256(model_path),
         "model_bytes": os.path.getsize(model_path), "threads": threads, "machine": platform.machine(),
         "cpus": os.cpu_count(), "python": platform.python_version(), "pyriver": __version__,
         "llama_cpp_python": llama_cpp.__version__, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
         "accelerators": [d["description"] for d in devices() if d["type"] != "cpu"]}
    d.update(extra)
    return d


def write_json(path: str, obj: Dict) -> None:
    """Atomically (a partial file never replaces a complete one)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def schema(name: str) -> Dict:
    """The JSON schema of a command's output (bench, eval, sweep, calibrate)."""
    return json.loads((SCHEMA_DIR / f"{name}.json").read_text())
