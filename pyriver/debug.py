"""The native engine's testing and benchmark knobs (pyriver.engine.debug), under their public name."""
from .engine.debug import (exit_forecasts, graph_input_reads, graph_runs, joined, kv_fill, place_layers,  # noqa: F401
                           tiled_gemm, tiled_gemm_runs, tiled_in_use)
