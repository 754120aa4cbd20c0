"""River: per-call exit statistics (building and binding sidecars is pyriver.engine.river's)."""
from __future__ import annotations

from typing import Dict, Sequence

import numpy as np


def exit_stats(exits: Sequence[int], n_layer: int) -> Dict:
    """Statistics of the exit blocks of generated tokens: mean, histogram, and the share of block
    work done on the river (blocks after the exit block over all blocks)."""
    e = np.asarray(list(exits), dtype=np.int64)
    if e.size == 0:
        return {"tokens": 0, "exit_layers": [], "mean_exit_layer": None, "histogram": {}, "river_work_share": 0.0}
    hist = {int(k): int(v) for k, v in zip(*np.unique(e, return_counts=True))}
    return {
        "tokens": int(e.size),
        "exit_layers": e.tolist(),
        "mean_exit_layer": float(e.mean()),
        "histogram": hist,
        "river_work_share": float((n_layer - 1 - e).sum() / (e.size * n_layer)),
    }
