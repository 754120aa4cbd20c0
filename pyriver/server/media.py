"""A request's media files, as llama-server reads them (tools/server/server-common.cpp, handle_media):
an http(s) URL fetched (10 MB, 10 s at most), a file:// URL only below --media-path (a relative path
without "..", llama.cpp's fs_validate_filename), a data: URI of an image, video or audio in base64,
else the text as raw base64. Anything else is a 400, before libmtmd sees a byte."""
from __future__ import annotations

import base64
import binascii
import os
import urllib.error
import urllib.request
from typing import Optional

from pyriver.server.schema import APIError

MAX_BYTES = 10 * 1024 * 1024   # llama-server's limits on a fetched file
TIMEOUT_S = 10
_FORBIDDEN = set(':*?"<>|') | {"\ufffd", "\ufeff", "\uff0e", "\u2215", "\u2216"}


def _bad(message: str) -> APIError:
    return APIError(400, message)


def b64decode(text: str) -> bytes:
    """llama-server's base64: whitespace ignored, padding optional; invalid input decodes to nothing."""
    s = "".join(text.split())
    try:
        return base64.b64decode(s + "=" * (-len(s) % 4), validate=True)
    except (binascii.Error, ValueError):
        return b""


def valid_relative(path: str) -> bool:
    """llama.cpp's fs_validate_filename(path, allow_subdirs=True): no control or reserved
    characters, no "..", no leading or trailing space, no trailing dot."""
    if not path or len(path.encode("utf-8", "surrogatepass")) > 255:
        return False
    for c in path:
        o = ord(c)
        if o <= 0x1F or o == 0x7F or 0x80 <= o <= 0x9F or 0xD800 <= o <= 0xDFFF or c in _FORBIDDEN:
            return False
    return not (path[0] == " " or path[-1] in " ." or ".." in path or path == ".")


def _fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "pyriver"}),
                                    timeout=TIMEOUT_S) as r:
            data = r.read(MAX_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise _bad(f"Failed to download image: {url[:200]}: {getattr(e, 'reason', e)}") from None
    if len(data) > MAX_BYTES:
        raise _bad(f"Failed to download image: {url[:200]} is larger than {MAX_BYTES} bytes")
    return data


def _local(url: str, media_path: Optional[str]) -> bytes:
    if not media_path:
        raise _bad("file:// URLs are not allowed unless --media-path is specified")
    rel = url[len("file://"):]
    if not valid_relative(rel):
        raise _bad(f"file path is not allowed: {rel[:200]}")
    full = os.path.join(media_path, rel.lstrip("/"))
    # valid_relative refuses "..": a symlink below the folder is the folder owner's choice, as llama-server's
    try:
        with open(full, "rb") as f:
            return f.read()
    except OSError:
        raise _bad(f"file does not exist or cannot be opened: {rel[:200]}") from None


def load(url, media_path: Optional[str]) -> bytes:
    """The bytes of one media reference (llama-server's handle_media)."""
    if not isinstance(url, str) or not url:
        raise _bad("a media part needs a URL, a data: URI or base64 data")
    if url.startswith("http"):
        return _fetch(url)
    if url.startswith("file://"):
        return _local(url, media_path)
    if url.startswith("data:"):
        parts = url.split(",")
        if len(parts) != 2:
            raise _bad("Invalid uri-encoded base64 value")
        head = parts[0]
        if not head.startswith(("data:image/", "data:video/", "data:audio/")):
            raise _bad(f"Invalid uri format: {head[:100]}")
        if not head.endswith("base64"):
            raise _bad("uri must be base64 encoded")
        return b64decode(parts[1])
    data = b64decode(url)
    if not data:
        raise _bad("Invalid base64 value")
    return data
