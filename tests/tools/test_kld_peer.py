"""`pyriver eval --kl-divergence` refereed by llama-perplexity (built from the same llama-cpp-python
sdist as llama-server, against the same libggml): SmolLM2 Q4_1 as the base, llama.cpp's q4_0
requantization evaluated, both ways: llama-perplexity's base file read by pyriver and pyriver's
read by llama-perplexity. Mean KLD and "Same top p" within 1% of its own on the same file."""
from __future__ import annotations

import re
import subprocess

import pytest

from helpers import pyriver_cli

pytestmark = pytest.mark.slow

N_CTX, CHUNKS = 128, 8


def _figures(out: str) -> dict:
    kld = re.search(r"^Mean\s+KLD:\s+(-?[\d.]+) ±", out, re.M)
    top = re.search(r"^Same top p:\s+([\d.]+) ±", out, re.M)
    assert kld and top, out[-3000:]
    return {"kld": float(kld.group(1)), "same_top": float(top.group(1))}


@pytest.fixture(scope="module")
def peer(smol_path, tmp_path_factory):
    from pyriver.tools import datasets
    from pyriver.tools.llama_server import ensure_perplexity
    from pyriver.tools.quantize import requantized
    exe = str(ensure_perplexity())
    d = tmp_path_factory.mktemp("kld")
    text = d / "text.txt"
    text.write_text("\n\n".join(t["text"] for t in datasets.load_texts("humaneval")) + "\n")
    return {"exe": exe, "dir": d, "text": str(text), "q": requantized(smol_path, "q4_0")}


def _perplexity(peer, model, *args):
    # -fa off: pyriver's default attention (llama-perplexity's "auto" turns flash attention on, whose
    # F16 cache alone is a KLD of 0.0025 on SmolLM2; docs/model-testing.md)
    r = subprocess.run([peer["exe"], "-m", model, "-c", str(N_CTX), "-t", "2", "-fa", "off", *args], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout + r.stderr


def test_kl_divergence_both_ways_within_1pct_of_llama_perplexity(peer, smol_path):
    ours, theirs = str(peer["dir"] / "pyriver.kld"), str(peer["dir"] / "llama.kld")
    r = pyriver_cli("eval", smol_path, "-f", peer["text"], "-c", str(N_CTX), "--chunks", str(CHUNKS),
                    "--kl-divergence-base", ours, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    _perplexity(peer, smol_path, "-f", peer["text"], "--chunks", str(CHUNKS), "--kl-divergence-base", theirs)
    with open(ours, "rb") as a, open(theirs, "rb") as b:   # the same header and tokens: the same chunks
        head = 20 + 4 * N_CTX * CHUNKS
        assert a.read(head) == b.read(head)
    seen = {}
    for base in (ours, theirs):
        r = pyriver_cli("eval", peer["q"], "--kl-divergence-base", base, "--kl-divergence", timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        got = _figures(r.stdout)
        want = _figures(_perplexity(peer, peer["q"], "--kl-divergence-base", base, "--kl-divergence"))
        assert want["kld"] > 0.001 and want["same_top"] < 100   # the requantization does move the logits
        assert got["kld"] == pytest.approx(want["kld"], rel=0.01), (base, got, want)
        assert got["same_top"] == pytest.approx(want["same_top"], rel=0.01), (base, got, want)
        seen[base] = want
    # the two bases hold the same model: llama-perplexity finds the same figures against either
    assert seen[ours]["kld"] == pytest.approx(seen[theirs]["kld"], rel=0.01), seen
    assert seen[ours]["same_top"] == pytest.approx(seen[theirs]["same_top"], rel=0.01), seen
