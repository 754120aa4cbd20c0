"""River sidecars on disk: where a model's sidecars live (the one naming rule, for making a name
and for finding them all) and the calibration `pyriver calibrate` stores in them, read back for
`Llama(river="auto")`. No native library is needed here."""
from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import gguf

from .cache import cache_dir, file_sha256

#: Metadata keys of a stored calibration (enabled, exit_threshold, min_exit_layer, report).
CALIBRATION_PREFIX = "pyriver.calibration."

#: A river spec names the blocks' type and, optionally, a low-bit copy of the LM head that tokens
#: which exit use: "q4_0", or "q4_0+head-q4_0" (the head at q4_0, the backbone's for full depth).
HEAD_SEP = "+head-"


def parse_spec(river: str) -> Tuple[str, Optional[str]]:
    """(block type, head type or None) of a river spec."""
    blocks, sep, head = river.partition(HEAD_SEP)
    if not blocks or (sep and not head):
        raise ValueError(f"bad river spec {river!r}: TYPE or TYPE{HEAD_SEP}HEADTYPE (e.g. q4_0{HEAD_SEP}q4_0)")
    return blocks, head or None


def _places(model_path: str, sha256: Optional[str] = None) -> List[Tuple[Path, str]]:
    """(folder, file-name prefix) of this model's sidecars: next to the model, and, when the
    model's folder is read-only, in the cache (prefixed by the model's sha256), where new ones go."""
    mp = Path(model_path).resolve()
    stem = f"{mp.stem}.river-"
    places = [(mp.parent, stem)]
    if not os.access(mp.parent, os.W_OK):
        places.append((cache_dir() / "rivers", f"{(sha256 or file_sha256(mp))[:16]}-{stem}"))
    return places


def sidecar_path(model_path: str, river_type: str, sha256: Optional[str] = None) -> Path:
    """Where the sidecar of river_type is made: `<model>.river-<type>.gguf` (type in lower case)."""
    folder, prefix = _places(model_path, sha256)[-1]
    return folder / f"{prefix}{river_type.lower()}.gguf"


def sidecars(model_path: str) -> List[str]:
    """Every river sidecar of this model."""
    found: List[str] = []
    for folder, prefix in _places(model_path):
        found += glob.glob(glob.escape(str(folder / prefix)) + "*.gguf")
    return sorted(found)


def read_calibration(sidecar: str) -> Optional[Dict]:
    """The calibration record stored in a sidecar, or None."""
    try:
        r = gguf.GGUFReader(sidecar, "r")
    except (OSError, ValueError):
        return None
    f = r.fields.get(CALIBRATION_PREFIX + "report")
    if f is None:
        return None
    try:
        return json.loads(bytes(f.parts[f.data[0]]).decode("utf-8"))
    except (ValueError, IndexError):
        return None


def find_calibration(model_path: str) -> Optional[Dict]:
    """The enabled calibration of this model (the newest if several), with its sidecar path."""
    best = None
    for sc in sidecars(model_path):
        rec = read_calibration(sc)
        if rec and rec.get("enabled") and (best is None or rec.get("utc", "") > best.get("utc", "")):
            best = dict(rec, sidecar=sc)
    return best
