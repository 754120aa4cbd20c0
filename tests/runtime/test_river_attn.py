"""Rivers whose attention is the backbone's (river spec TYPE+attn-backbone): the sidecar holds only
the FFN matrices and declares the attention kept; attach binds the backbone's own attention tensors
to the river blocks, so an exited token runs the backbone's attention and a low-bit FFN."""
from __future__ import annotations

import os
import shutil

import gguf
import numpy as np
import pytest

from helpers import RIVER_PROMPT, forced_logits, model_path, rewrite_sidecar, river_copy
from pyriver import Llama, ModelLoadError
from pyriver.engine import river as R
from pyriver.tools.engine import feed, greedy

KW = dict(n_ctx=256, n_threads=2, verbose=False)
KEPT = "pyriver.river.backbone_matrices"


@pytest.fixture(scope="module")
def model(smol_path, tmp_path_factory):
    return river_copy(smol_path, tmp_path_factory.mktemp("attn"), 16)


def test_the_rivers_attention_is_the_backbones(model, tmp_path):
    path, prompt, tokens, ref, L = model
    blocks = [3, L - 1, 10, 1, L - 1, L - 2]
    with Llama(path, river="q4_0", exit_threshold=2.0, **KW) as plain:
        base, _ = forced_logits(plain, prompt, tokens, blocks)
        plain_path = plain.river_path
    with Llama(path, river="q4_0+attn-backbone", **KW) as llm:
        assert llm.river_path.endswith("m.river-q4_0+attn-backbone.gguf")
        r = gguf.GGUFReader(llm.river_path)
        types = {t.name: t.tensor_type.name for t in r.tensors}
        assert not [n for n in types if ".attn_" in n] and types["blk.0.ffn_up.weight"] == "Q4_0"
        assert len(types) == 3 * L and "output.weight" not in types
        assert r.fields[KEPT].contents() == "attn"
        llm.set_exit(2.0, 1)   # never exiting: full depth's bits
        assert np.array_equal(np.stack(feed(llm, prompt, tokens, keep_logits=True).logits), ref)
        got, exits = forced_logits(llm, prompt, tokens, blocks)
        attn_path = llm.river_path
    assert set(exits) == set(blocks)
    assert os.path.getsize(attn_path) < os.path.getsize(plain_path)
    # The plain q4_0 river with its attention tensors replaced by the backbone's bytes (and no
    # declaration): the same computation, so the same bits, and not the plain river's.
    backbone = {t.name: t for t in gguf.GGUFReader(path).tensors if ".attn_" in t.name}
    hybrid = rewrite_sidecar(plain_path, tmp_path / "hybrid.gguf", tensors=backbone)
    with Llama(path, river=hybrid, exit_threshold=2.0, **KW) as llm:
        same, _ = forced_logits(llm, prompt, tokens, blocks)
    assert np.array_equal(got, same)
    # The prompt ran at full depth in both; every exited step differs from the plain river's (and
    # so do the full-depth steps after one: they read the K/V the exited tokens wrote).
    assert np.array_equal(got[0], base[0])
    assert all(not np.array_equal(got[i + 1], base[i + 1]) for i, e in enumerate(exits) if e < L - 1)


@pytest.mark.parametrize("arch", ["qwen2", "phi3", "qwen3moe"])   # biases; a fused QKV; experts and a router
def test_each_architectures_attention_is_kept(request, arch, tmp_path):
    """The attention matrices of each table (attn_qkv included) stay out of the sidecar, every
    other river matrix is in it, and the river computes what a sidecar holding the backbone's
    attention bytes computes."""
    path = str(tmp_path / "m.gguf")
    shutil.copy(model_path(request, arch), path)
    backbone = gguf.GGUFReader(path).tensors
    kw = dict(n_ctx=128, n_threads=2, verbose=False, exit_threshold=2.0)
    with Llama(path, river="q4_0", **kw) as plain:
        L = plain.info["n_layer"]
        prompt = plain.tokenize(RIVER_PROMPT)
        tokens = greedy(plain, prompt, 6).tokens
        plain_path = plain.river_path
    with Llama(path, river="q4_0+attn-backbone", **kw) as llm:
        got, _ = forced_logits(llm, prompt, tokens, [0, L - 1, 1])
        kept = {t.name for t in gguf.GGUFReader(llm.river_path).tensors}
    attn = {t.name for t in backbone if ".attn_" in t.name and len(t.shape) > 1}
    assert attn and not kept & attn and kept == {t.name for t in gguf.GGUFReader(plain_path).tensors} - attn
    hybrid = rewrite_sidecar(plain_path, tmp_path / "hybrid.gguf", tensors={t.name: t for t in backbone if t.name in attn})
    with Llama(path, river=hybrid, **kw) as llm:
        same, _ = forced_logits(llm, prompt, tokens, [0, L - 1, 1])
    assert np.array_equal(got, same)


@pytest.mark.parametrize("spec", ["q4_0+attn-backbone+head-q4_0", "q4_0+head-q4_0+attn-backbone"])
def test_it_combines_with_the_low_bit_head(model, spec):
    path, prompt, tokens, ref, L = model
    blocks = [2, L - 1, 12]
    with Llama(path, river="q4_0+attn-backbone", exit_threshold=2.0, **KW) as llm:
        base, _ = forced_logits(llm, prompt, tokens, blocks)
    with Llama(path, river=spec, exit_threshold=2.0, **KW) as llm:
        assert llm.river_path.endswith("m.river-q4_0+attn-backbone+head-q4_0.gguf")   # one file, either spelling
        types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(llm.river_path).tensors}
        assert types["output.weight"] == "Q4_0" and not [n for n in types if ".attn_" in n]
        got, exits = forced_logits(llm, prompt, tokens, blocks)
    for i, e in enumerate(exits):   # only the head differs: exited steps' logits, not full depth's
        assert np.array_equal(got[i + 1], base[i + 1]) == (e == L - 1), i


def test_a_sidecar_that_contradicts_its_declaration_is_rejected(model, tmp_path):
    path, *_ = model
    kept, plain = tmp_path / "kept.gguf", tmp_path / "plain.gguf"
    with Llama(path, n_ctx=64, verbose=False) as llm:
        R.build(llm._native_model, path, "q4_0+attn-backbone", kept, progress=False)
        R.build(llm._native_model, path, "q4_0", plain, progress=False)
    cases = [
        # attention left out without the declaration
        (rewrite_sidecar(kept, tmp_path / "a.gguf", meta={KEPT: None}), "lacks tensor 'blk.0.attn_q.weight'"),
        # declared, but an FFN matrix missing
        (rewrite_sidecar(kept, tmp_path / "b.gguf", drop={"blk.3.ffn_down.weight"}), "lacks tensor 'blk.3.ffn_down.weight'"),
        # declared, and yet holding the attention
        (rewrite_sidecar(plain, tmp_path / "c.gguf", meta={KEPT: "attn"}), "declares its attention the backbone's but holds"),
        (rewrite_sidecar(kept, tmp_path / "d.gguf", meta={KEPT: "ffn"}), "keeps unknown backbone matrices 'ffn'"),
    ]
    for bad, msg in cases:
        with pytest.raises(ModelLoadError, match=msg):
            Llama(path, n_ctx=64, verbose=False, river=bad)
    with Llama(path, n_ctx=64, verbose=False, river=str(kept), exit_threshold=0.9) as llm:
        assert llm("Hi", max_tokens=4, temperature=0)["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("spec", ["q4_0+attn-q4_0", "q4_0+attn-backbone+attn-backbone", "+attn-backbone"])
def test_bad_attention_specs_are_refused(model, spec):
    path, *_ = model
    with pytest.raises(ValueError, match="river spec"):
        Llama(path, n_ctx=64, verbose=False, river=spec)
