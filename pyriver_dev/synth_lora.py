"""A LoRA adapter GGUF for a model, made without training: random low-rank A and B (a fixed seed) on
some of each block's matrices, in llama.cpp's adapter format (src/llama-adapter.cpp: general.type
"adapter", adapter.type "lora", adapter.lora.alpha, tensors NAME.lora_a [n_in, rank] and NAME.lora_b
[rank, n_out] in ggml order). gain sizes the change: the logits move measurably, the text stays
sane at the default (SmolLM2-135M-Instruct: tests/runtime/test_lora.py). For tests and examples.

    python -m pyriver_dev.synth_lora OUT.gguf [--base MODEL] [--rank 8] [--gain G] [--seed 0]"""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Optional, Sequence

import gguf
import numpy as np

from pyriver.atomic import replacing

TARGETS = ("attn_q", "attn_v", "ffn_gate", "ffn_up", "ffn_down")
DEFAULT_GAIN = 0.25
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.weight$")


def write_lora(out: "str | os.PathLike[str]", base: str, rank: int = 8, gain: float = DEFAULT_GAIN, seed: int = 0,
               targets: Sequence[str] = TARGETS) -> str:
    """Writes the adapter for base (a GGUF model) to out (atomically); returns out. With alpha equal
    to the rank, llama.cpp's scale of a pair is the adapter's scale: W x + scale * B (A x)."""
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    r = gguf.GGUFReader(base)
    arch = r.fields["general.architecture"].contents()
    rng = np.random.default_rng(seed)
    pairs = []
    for t in r.tensors:   # the file's order: the same adapter for the same seed
        m = _BLOCK.match(t.name)
        if m is None or m.group(2) not in targets:
            continue
        n_in, n_out = (int(d) for d in t.shape[:2])   # ggml order: ne0 = the input width
        # A x has the size of x / sqrt(n_in) per component, B (A x) gain times that per output
        a = rng.standard_normal((rank, n_in), dtype=np.float32) / np.float32(np.sqrt(n_in))
        b = rng.standard_normal((n_out, rank), dtype=np.float32) * np.float32(gain / np.sqrt(rank))
        pairs.append((t.name, a, b))
    if not pairs:
        raise ValueError(f"{base}: no tensor of {', '.join(targets)} to adapt")
    with replacing(out) as tmp:
        w = gguf.GGUFWriter(str(tmp), arch)
        w.add_type("adapter")
        w.add_string("adapter.type", "lora")
        w.add_float32("adapter.lora.alpha", float(rank))
        w.add_string("general.name", f"synthetic LoRA (rank {rank}, gain {gain}, seed {seed})")
        for name, a, b in pairs:   # numpy shapes are ggml's reversed
            w.add_tensor(f"{name}.lora_a", a)
            w.add_tensor(f"{name}.lora_b", b)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return str(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyriver_dev.synth_lora", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the adapter GGUF to write")
    ap.add_argument("--base", default=None, help="the model it adapts (default: SmolLM2-135M-Instruct Q4_1)")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--gain", type=float, default=DEFAULT_GAIN)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    from pyriver import models
    try:
        print(write_lora(a.out, str(models.resolve(a.base)), a.rank, a.gain, a.seed))
    except (ValueError, OSError) as e:
        print(f"synth_lora: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
