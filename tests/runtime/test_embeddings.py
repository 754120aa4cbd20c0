"""Embeddings (`Llama(embedding=True)`, `embed`, `create_embedding`) against llama-cpp-python's on the
same GGUF: every pooling, normalize on and off, list inputs, the response shape, truncation and errors."""
from __future__ import annotations

import numpy as np
import pytest

TEXTS = ["The river flows to the sea.", "Embeddings map text to vectors."]
POOLINGS = {"none": 0, "mean": 1, "cls": 2, "last": 3}
# Measured max |pyriver - llama.cpp| on the CPU: 0 for pooling none/cls/last (bit for bit), ~3e-6
# for mean (pyriver averages in float64, llama.cpp in a float32 product). pr_embed uses llama.cpp's
# kernels for many tokens also in the CPU's batch-invariant default, whose one-token products were
# 0.4 away; both settings are checked.
ATOL = {False: 1e-4, None: 1e-4}
MAX_DIFF: dict = {}   # the largest difference seen per (model, batch_invariant), printed with -s


def _close(ours, ref, key, atol):
    ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert ours.shape == ref.shape
    d = float(np.max(np.abs(ours - ref)))
    MAX_DIFF[key] = max(MAX_DIFF.get(key, 0.0), d)
    print(f"max |diff| {key}: {d:.2e}")
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=atol)


_REFS: dict = {}


def _ref(path, pooling=-1, n_ctx=512):
    """llama-cpp-python's Llama(embedding=True) on the file, one per setting for the module."""
    import llama_cpp
    key = (path, pooling, n_ctx)
    if key not in _REFS:
        _REFS[key] = llama_cpp.Llama(path, embedding=True, pooling_type=pooling, n_ctx=n_ctx, n_threads=2,
                                     verbose=False)
    return _REFS[key]


def _ours(path, pooling=-1, batch_invariant=False, **kw):
    from pyriver import Llama
    return Llama(path, embedding=True, pooling_type=pooling, n_ctx=kw.pop("n_ctx", 512), n_threads=2, verbose=False,
                 river=kw.pop("river", None), batch_invariant=batch_invariant, **kw)


@pytest.fixture(scope="module", autouse=True)
def _free_refs():
    yield
    for r in _REFS.values():
        r.close()
    _REFS.clear()


@pytest.mark.parametrize("pooling", list(POOLINGS))
@pytest.mark.parametrize("batch_invariant", [False, None], ids=["llamacpp_kernels", "default"])
def test_smollm2_matches_llama_cpp(smol_path, pooling, batch_invariant):
    p = POOLINGS[pooling]
    ref = _ref(smol_path, p)
    with _ours(smol_path, p, batch_invariant) as llm:
        assert llm.pooling_type() == ref.pooling_type() == p
        for text in TEXTS:
            for normalize in (False, True):
                ours, theirs = llm.embed(text, normalize=normalize), ref.embed(text, normalize=normalize)
                n_tok = len(ref.tokenize(text.encode()))
                if p == 0:   # one vector per token
                    assert len(ours) == n_tok and len(ours[0]) == llm.n_embd() == ref.n_embd()
                else:
                    assert len(ours) == ref.n_embd() and isinstance(ours[0], float)
                if normalize:
                    norms = np.linalg.norm(np.atleast_2d(ours), axis=1)
                    np.testing.assert_allclose(norms, 1.0, rtol=1e-6)
                _close(ours, theirs, ("smollm2", batch_invariant), ATOL[batch_invariant])


def test_default_pooling_is_the_files(smol_path):
    """No pooling_type: the GGUF's <arch>.pooling_type, else llama.cpp's NONE (SmolLM2 has none)."""
    ref = _ref(smol_path)
    with _ours(smol_path) as llm:
        assert llm.meta("llama.pooling_type") is None
        assert llm.pooling_type() == ref.pooling_type() == 0
        out = llm.embed(TEXTS[0])
        assert len(out) == len(llm.tokenize(TEXTS[0].encode()))
        _close(out, ref.embed(TEXTS[0]), ("smollm2", False), ATOL[False])


@pytest.mark.parametrize("pooling", ["none", "mean"])
def test_gemma3_matches_llama_cpp(gemma_path, pooling):
    p = POOLINGS[pooling]
    ref = _ref(gemma_path, p)
    with _ours(gemma_path, p) as llm:
        for text in TEXTS:
            _close(llm.embed(text, normalize=True), ref.embed(text, normalize=True), ("gemma3", False), ATOL[False])


def test_create_embedding_shape(smol_path):
    ref = _ref(smol_path, 1)
    with _ours(smol_path, 1) as llm:
        ours, theirs = llm.create_embedding(TEXTS), ref.create_embedding(TEXTS)
        one = llm.create_embedding(TEXTS[0], model="m")
        n = sum(len(llm.tokenize(t.encode())) for t in TEXTS)

    def shape(r):
        return {k: v for k, v in r.items() if k not in ("data", "model")}, [
            {k: (len(v) if k == "embedding" else v) for k, v in d.items()} for d in r["data"]]

    assert shape(ours) == shape(theirs)
    assert ours["object"] == "list" and [d["object"] for d in ours["data"]] == ["embedding", "embedding"]
    assert [d["index"] for d in ours["data"]] == [0, 1]
    assert ours["usage"] == {"prompt_tokens": n, "total_tokens": n} == theirs["usage"]
    assert ours["model"] == llm.model_path and one["model"] == "m" and len(one["data"]) == 1
    for a, b in zip(ours["data"], theirs["data"]):
        _close(a["embedding"], b["embedding"], ("smollm2", False), ATOL[False])


@pytest.mark.parametrize("pooling", ["mean", "none"])
def test_list_input_equals_individual(smol_path, pooling):
    p = POOLINGS[pooling]
    ref = _ref(smol_path, p)
    texts = TEXTS + ["A third, longer input to embed together with the two others in one call."]
    with _ours(smol_path, p) as llm:
        batched, count = llm.embed(texts, return_count=True)
        single = [llm.embed(t) for t in texts]
    assert count == sum(len(ref.tokenize(t.encode())) for t in texts)
    assert len(batched) == len(texts)
    for b, s in zip(batched, single):
        np.testing.assert_allclose(b, s, rtol=0, atol=1e-4)
    # llama_cpp batches a list into one decode; with pooling NONE its read-back of the second and
    # later inputs is offset wrongly (llama.py: pos += size, not size * n_embd), so the reference
    # there is its single-input embed.
    theirs = ref.embed(texts) if p != 0 else [ref.embed(t) for t in texts]
    for b, t in zip(batched, theirs):
        _close(b, t, ("smollm2", False), ATOL[False])


def test_embed_needs_embedding_true(smol_path):
    import llama_cpp
    from pyriver import Llama
    ref = llama_cpp.Llama(smol_path, n_ctx=128, n_threads=2, verbose=False)
    with Llama(smol_path, n_ctx=128, n_threads=2, verbose=False, river=None) as llm:
        for m in (ref, llm):
            with pytest.raises(RuntimeError, match="embedding=True"):
                m.embed("hello")
            with pytest.raises(RuntimeError, match="embedding=True"):
                m.create_embedding("hello")
        # still usable
        assert llm("The capital of France is", max_tokens=2, temperature=0)["choices"][0]["text"]
    ref.close()


def test_too_long_input(smol_path):
    """An input longer than n_ctx: truncated to n_batch = min(n_ctx, n_batch) with truncate=True (as
    llama_cpp), a ValueError without it; the Llama stays usable."""
    text = " ".join(["river"] * 200)
    ref = _ref(smol_path, 0, n_ctx=64)
    with _ours(smol_path, 0, n_ctx=64) as llm:
        assert len(llm.tokenize(text.encode())) > 64
        ours, n = llm.embed(text, return_count=True)
        assert n == 64 and len(ours) == 64
        _close(ours, ref.embed(text), ("smollm2", False), ATOL[False])
        with pytest.raises(ValueError, match="exceed batch size of 64"):
            ref.embed(text, truncate=False)
        with pytest.raises(ValueError, match="exceed batch size of 64"):
            llm.embed(text, truncate=False)
        with pytest.raises(ValueError, match="exceed batch size"):
            llm.embed(["short", text], truncate=False)
        _close(llm.embed("short"), ref.embed("short"), ("smollm2", False), ATOL[False])


def test_generation_after_embed(smol_path):
    """embed leaves the cache empty, as llama_cpp's (kv cleared, reset): a completion after it is
    the completion of a fresh Llama."""
    prompt = "Rivers are"
    with _ours(smol_path, 1) as llm:
        fresh = llm(prompt, max_tokens=12, temperature=0)["choices"][0]["text"]
        llm(prompt + " wide", max_tokens=4, temperature=0)
        llm.embed(TEXTS)
        assert llm.n_tokens == 0
        assert llm(prompt, max_tokens=12, temperature=0)["choices"][0]["text"] == fresh


def test_river_does_not_change_embeddings(smol_path):
    """Embeddings run at full depth whatever the exit rule, prefill exits included."""
    with _ours(smol_path, 1) as plain:
        want = plain.embed(TEXTS)
    with _ours(smol_path, 1, river="q4_0", force_exit_layer=2, prefill_exit=True) as fast:
        got = fast.embed(TEXTS)
        toks = fast.tokenize(TEXTS[0].encode())
        fast.decode_logits(toks)
        assert max(fast.last_exits) == 2   # this Llama's prompts do exit
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_rank_pooling_without_a_head(smol_path, tmp_path):
    """RANK on a causal model without a classifier head is llama.cpp's: the last token's row (its
    element 0 is llama-server's rerank score); a file with a head (cls.* tensors) is refused."""
    import gguf
    from pyriver.api.embedding import rank_head
    ref = _ref(smol_path, 3)   # llama.cpp's LAST: RANK's row on this file
    with _ours(smol_path, 4) as llm:
        assert llm.pooling_type() == 4
        _close(llm.embed(TEXTS[0]), ref.embed(TEXTS[0]), ("smollm2", "rank"), 1e-4)
    assert rank_head(smol_path, "llama") is False and rank_head(smol_path, "qwen3") is True
    headed = tmp_path / "headed.gguf"
    w = gguf.GGUFWriter(str(headed), "llama")
    w.add_tensor("cls.output.weight", np.zeros((1, 4), dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(ValueError, match="classifier head.*cls.output.weight"):
        rank_head(str(headed), "llama")


def test_bad_pooling_type(smol_path):
    with pytest.raises(ValueError, match="pooling_type"):
        _ours(smol_path, 9)
    with _ours(smol_path, 1) as llm:
        with pytest.raises(TypeError):
            llm.embed([1, 2, 3])


def test_native_embeddings_rows(smol_path):
    """pr_embeddings: n_tokens rows after pr_embed, none after a decode; pr_logits none after pr_embed."""
    from pyriver.engine.binding import ffi, lib
    with _ours(smol_path, 1) as llm:
        toks = llm.tokenize(b"two words")
        assert lib.pr_embed(llm._native_ctx, ffi.new("int32_t[]", toks), len(toks)) == 0
        assert lib.pr_embeddings(llm._native_ctx, len(toks) - 1) != ffi.NULL
        assert lib.pr_embeddings(llm._native_ctx, len(toks)) == ffi.NULL
        assert lib.pr_logits(llm._native_ctx, 0) == ffi.NULL
        assert lib.pr_embed(llm._native_ctx, ffi.new("int32_t[]", [10 ** 9]), 1) == 1   # PR_ERR_INVALID_ARG
        llm.reset()
        llm.decode_logits(toks)
        assert lib.pr_embeddings(llm._native_ctx, 0) == ffi.NULL
