"""Models on the Hugging Face Hub: references (``hf:OWNER/REPO/FILE``, ``OWNER/REPO:FILE``) and
downloads through the optional ``huggingface_hub`` (``pip install pyriver[hub]``), failing within
seconds when the hub cannot be reached."""
from __future__ import annotations

import os
import re
import socket
import urllib.parse
from pathlib import Path
from typing import Optional

from pyriver.errors import ModelFetchError

_HUB_CONNECT_TIMEOUT = float(os.environ.get("PYRIVER_HUB_CONNECT_TIMEOUT", "5"))

_HUB_COLON = re.compile(r"^([A-Za-z0-9][\w.-]*/[\w.-]+):(.+)$")


def parse_ref(s: str) -> Optional[tuple[str, str]]:
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
