"""llama-server's context shift (server-context.cpp, "Shift context"): which tokens a full slot keeps
and drops, and the request fields that steer it (n_keep, n_discard), checked as llama-server checks
them (server-schema.cpp's hard limits)."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from pyriver.server.schema import APIError

INT32_MAX = 2147483647
# name: (lowest value, highest), llama-server's hard limits
LIMITS = {"n_keep": (-1, INT32_MAX), "n_discard": (0, INT32_MAX), "n_cache_reuse": (0, INT32_MAX)}


def check_fields(body: Dict) -> Dict[str, Optional[int]]:
    """The request's n_keep / n_discard / n_cache_reuse (None: absent or null, the server's default);
    a value out of llama-server's limits is its 400."""
    out: Dict[str, Optional[int]] = {}
    for name, (lo, hi) in LIMITS.items():
        v = body.get(name)
        if v is None:
            out[name] = None
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise APIError(400, f"Field '{name}': '{name}' must be an integer, got {str(v)[:80]}", param=name)
        if not lo <= v <= hi:
            raise APIError(400, f"Field '{name}': Value must be between {lo} <= value <= {hi}, but got {v}", param=name)
        out[name] = v
    return out


def plan(n_prompt: int, n_cached: int, n_ctx: int, n_keep: int, n_discard: int, add_bos: bool) -> Tuple[int, int]:
    """(kept, dropped): the first `kept` cached tokens stay, the next `dropped` go, the rest move
    down. n_keep < 0 keeps the whole prompt; a BOS is kept on top of n_keep; at least 4 positions
    stay free; n_discard 0 drops half of what is not kept, and at least one token stays after the
    kept ones."""
    keep = n_prompt if n_keep < 0 else n_keep
    if add_bos:
        keep += 1
    keep = min(n_ctx - 4, keep)
    n_left = n_cached - keep
    drop = n_discard if n_discard else n_left // 2
    return keep, max(0, min(drop, max(0, n_left - 1)))
