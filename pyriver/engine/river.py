"""River sidecars of the native engine: building them (natively, with a progress bar) and binding
them to a loaded native model. Where they live: sidecar.py; exit statistics: pyriver.river.stats."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from tqdm import tqdm

from pyriver.models.cache import file_sha256
from pyriver.engine import interrupts
from pyriver.engine.binding import check, ffi, lib, read_text
from pyriver.river.sidecar import parse_spec, sidecar_path


def build(model_handle, model_path: str, river_type: str, out: Path, *, force: bool = False,
          progress: bool = True, sha256: Optional[str] = None) -> str:
    """Write the sidecar for river_type (a spec: see parse_spec); returns the fallback report (one
    line per tensor whose type differs from the request)."""
    spec = parse_spec(river_type)
    sha256 = sha256 or file_sha256(model_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    bar = None
    if progress:
        bar = tqdm(desc=f"river {river_type}", unit="tensor", leave=False, mininterval=0.5)
    raised = []

    def on_error(exc_type, exc, tb):
        # Anything raised in the callback (the bar's own errors; Ctrl-C is held, see interrupts)
        # cancels the build; it is re-raised once the native side has cleaned up.
        raised.append(exc if exc is not None else exc_type())
        return 1

    @ffi.callback("int32_t(int32_t, int32_t, void *)", onerror=on_error)
    def on_progress(done, total, _user):
        if bar is not None:
            bar.total = total
            bar.update(done - bar.n)
        return 1 if interrupts.caught() else 0

    try:
        with interrupts.held():   # Ctrl-C in a log line's callback, not lost (interrupts)
            status = lib.pr_river_build(model_handle, spec.blocks.encode(), (spec.head or "").encode(),
                                        int(spec.keep_attn), 1 if force else 0, sha256.encode(), str(out).encode(),
                                        os.cpu_count() or 1, on_progress, ffi.NULL)
    finally:
        if bar is not None:
            bar.close()
    if raised:
        raise raised[0]
    check(status)
    return read_text(lambda buf, size, needed: lib.pr_river_report(model_handle, buf, size, needed))


def attach(model_handle, sidecar: Path, sha256: str, use_mmap: bool = True) -> None:
    with interrupts.held():   # the river's matrices are repacked, with a log line each
        status = lib.pr_river_attach(model_handle, str(sidecar).encode(), sha256.encode(), 1 if use_mmap else 0)
    check(status)


def prepare(model_handle, model_path: str, river: str, *, force: bool = False, rebuild: bool = False,
            progress: bool = True, use_mmap: bool = True, verbose: bool = False) -> Path:
    """Bind `river` (a type name or a sidecar path) to the loaded model, building the sidecar when
    it does not exist yet (or when rebuild is asked)."""
    sha = file_sha256(model_path)
    looks_like_path = river.endswith(".gguf") or os.sep in river
    if looks_like_path:
        path = Path(river)
        if not path.exists():
            raise FileNotFoundError(f"river sidecar not found: {river}")
    else:
        path = sidecar_path(model_path, river, sha)
        if rebuild or not path.exists():
            report = build(model_handle, model_path, river, path, force=force, progress=progress, sha256=sha)
            if report and verbose:
                print(report, end="")
    try:
        attach(model_handle, path, sha, use_mmap)
    except Exception as e:
        raise type(e)(f"{e} (rebuild it with river_rebuild=True)") from None
    return path
