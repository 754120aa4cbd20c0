"""pyriver's cache folder, the sha256 of a file remembered by a stamp (size, mtime, sha256), so
that a big file is hashed again only when it changed, and the key of a model's setting that a
measurement on this machine is cached under."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from pyriver.atomic import write_text

_CHUNK = 1 << 20  # hash block size


def cache_dir() -> Path:
    """Root of pyriver's cache: ``$PYRIVER_CACHE``, else ``$XDG_CACHE_HOME/pyriver``,
    else ``~/.cache/pyriver``.  Registry models go in ``cache_dir() / "models"``.
    The directory is not created here."""
    env = os.environ.get("PYRIVER_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pyriver"


def setting_key(llm, **what) -> str:
    """The key of a measurement of llm's model file in its setting on this machine (the file's real
    path, size and mtime, threads, devices, batch invariance, flash attention: SmolLM2's 48-row step
    costs 970 ms with it and 277 without on the 2-core Xeon; KV cache types other than f16) and of
    what was measured (what). A link
    to the file (a --models-dir entry) shares the file's measurement, so that the choices made from it
    (the prompt layout's threshold: the bits of a prompt step) are the file's wherever it is named."""
    st = os.stat(llm.model_path)
    args = getattr(getattr(llm, "context", None), "args", None)
    # a quantized cache's steps cost otherwise (flash attention dequantizes V rows); f16's keys stay as they were
    kv = [getattr(args, "type_k", 1), getattr(args, "type_v", 1)]
    what = {**what, **({"kv_types": kv} if kv != [1, 1] else {})}
    ident = {"path": os.path.realpath(llm.model_path), "size": st.st_size, "mtime": int(st.st_mtime), "threads": llm.n_threads,
             "threads_batch": llm.n_threads_batch, "devices": llm.devices(), "batch_invariant": llm.batch_invariant,
             "flash_attn": bool(getattr(getattr(getattr(llm, "context", None), "args", None), "flash_attn", False)), **what}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]


def sha256_file(path: "os.PathLike[str]") -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def read_stamp(stamp: Path, path: Path) -> Optional[str]:
    """The sha256 a stamp records for `path`, when the file's size and mtime still match it."""
    try:
        st = path.stat()
        d = json.loads(stamp.read_text())
        if d["size"] == st.st_size and d["mtime_ns"] == st.st_mtime_ns:
            return d["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def write_stamp(stamp: Path, path: Path, sha256: str) -> None:
    st = path.stat()
    write_text(stamp, json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}))


def file_sha256(path: "os.PathLike[str]") -> str:
    """sha256 of any file, its stamp kept in the cache (the file's own folder may be read-only)."""
    p = Path(path).resolve()
    key = hashlib.sha256(str(p).encode()).hexdigest()[:32]
    stamp = cache_dir() / "sha256" / f"{key}.json"
    digest = read_stamp(stamp, p)
    if digest is None:
        digest = sha256_file(p)
        try:
            write_stamp(stamp, p, digest)
        except OSError:
            pass
    return digest
