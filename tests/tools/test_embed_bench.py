"""pyriver_dev.embed_bench (peer): /v1/embeddings of `pyriver serve --embedding` against
llama-server's on the same file: each text's vector the same (cosine), a text's vector in a batch
the one it gets alone, and a throughput figure for each server."""
from __future__ import annotations

import json

import pytest

from pyriver.tools import llama_server
from pyriver_dev import embed_bench


@pytest.mark.peer
@pytest.mark.slow
@pytest.mark.skipif(not llama_server.binary().is_file(), reason="llama-server is not built into the cache")
def test_embeddings_match_llama_server_and_are_timed(smol_path, tmp_path):
    out = tmp_path / "embed.json"
    assert embed_bench.main([smol_path, "-r", "1", "--rounds", "1", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["min_cosine"] > 0.9999                              # each text alone: llama-server's vector
    assert d["min_cosine_batch_vs_alone"]["pyriver"] > 0.9999    # in a batch: the same vector
    assert all(v > 0 for v in d["tok_s"].values()) and len(d["ratios"]) == 1
