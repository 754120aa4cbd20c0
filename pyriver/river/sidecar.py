"""River sidecars on disk: where a model's sidecars live (the one naming rule, for making a name
and for finding them all) and the calibration `pyriver calibrate` stores in them, read back for
`Llama(river="auto")`. No native library is needed here."""
from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import gguf

from pyriver.models.cache import cache_dir, file_sha256

#: Metadata keys of a stored calibration (enabled, exit_threshold, min_exit_layer, report).
CALIBRATION_PREFIX = "pyriver.calibration."

#: A river spec names the blocks' type and options after it, each once, in any order:
#: "+head-HEADTYPE", a low-bit copy of the LM head that tokens which exit use (the backbone's for
#: full depth); "+attn-backbone", the river blocks' attention matrices are the backbone's own
#: (shared), only the FFN is requantized. E.g. "q4_0", "q4_0+head-q4_0", "q4_0+attn-backbone+head-q4_0".
HEAD_SEP = "+head-"
ATTN_BACKBONE = "+attn-backbone"


class RiverSpec(NamedTuple):
    blocks: str
    head: Optional[str] = None
    keep_attn: bool = False

    @property
    def name(self) -> str:
        """The spec in its one spelling (the sidecar's file name): TYPE[+attn-backbone][+head-HEADTYPE]."""
        return self.blocks + (ATTN_BACKBONE if self.keep_attn else "") + (HEAD_SEP + self.head if self.head else "")


def parse_spec(river: str) -> RiverSpec:
    """The block type, head type (or None) and whether attention stays the backbone's, of a river spec."""
    blocks, *opts = river.split("+")
    head, keep_attn = None, False
    bad = not blocks or len(set(opts)) != len(opts)
    for o in opts:
        if "+" + o == ATTN_BACKBONE:
            keep_attn = True
        elif ("+" + o).startswith(HEAD_SEP) and len(o) > len(HEAD_SEP) - 1 and head is None:
            head = o[len(HEAD_SEP) - 1:]
        else:
            bad = True
    if bad:
        raise ValueError(f"bad river spec {river!r}: TYPE, then optionally {HEAD_SEP}HEADTYPE and/or {ATTN_BACKBONE}, "
                         f"each once (e.g. q4_0{ATTN_BACKBONE}{HEAD_SEP}q4_0)")
    return RiverSpec(blocks, head, keep_attn)


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
    """Where the sidecar of river_type (a spec) is made: `<model>.river-<spec>.gguf` (the spec's one
    spelling, in lower case)."""
    folder, prefix = _places(model_path, sha256)[-1]
    return folder / f"{prefix}{parse_spec(river_type).name.lower()}.gguf"


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


def calibrated_exit_rule(cal: Optional[Dict], device: str) -> Optional[str]:
    """The exit rule `pyriver calibrate` chose by measurement on this device (backends.device_key)
    for the calibrated setting, or None: no calibration, or none measured on this device (a rule
    fastest on one device says nothing of another)."""
    got = ((cal or {}).get("exit_rules") or {}).get(device)
    return got.get("rule") if got else None
