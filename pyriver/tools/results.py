"""What every `bench` / `eval` / `sweep` / `calibrate` result carries: the conditions it was
measured under (so two runs can be compared), summaries of repeated measurements, written as JSON
that follows pyriver/tools/schemas/."""
from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Dict, List

import llama_cpp

from pyriver import __version__
from pyriver.atomic import write_text
from pyriver.engine.backends import devices
from pyriver.models.cache import file_sha256

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


def conditions(model_path: str, threads: int, **extra) -> Dict:
    d = {"model": os.path.abspath(model_path), "model_sha256": file_sha256(model_path),
         "model_bytes": os.path.getsize(model_path), "threads": threads, "machine": platform.machine(),
         "cpus": os.cpu_count(), "python": platform.python_version(), "pyriver": __version__,
         "llama_cpp_python": llama_cpp.__version__, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
         "accelerators": [d["description"] for d in devices() if d["type"] != "cpu"]}
    d.update(extra)
    return d


def summary(vals: List[float]) -> Dict:
    """Median, min, max and every value of repeated measurements."""
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": vals}


def write_json(path: str, obj: Dict) -> None:
    """Atomically (a partial file never replaces a complete one)."""
    write_text(path, json.dumps(obj, indent=1))


def schema(name: str) -> Dict:
    """The JSON schema of a command's output (bench, eval, sweep, calibrate)."""
    return json.loads((SCHEMA_DIR / f"{name}.json").read_text())
