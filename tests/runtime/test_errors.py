"""Bad input: a clear Python exception each time, and the process keeps working afterwards."""
from __future__ import annotations

import pytest

from pyriver import BackendError, ContextFullError, Llama, ModelLoadError


def _still_works(path):
    with Llama(path, n_ctx=64, verbose=False) as llm:
        out = llm("Hello", max_tokens=4, temperature=0)
        assert out["usage"]["completion_tokens"] >= 1


def test_missing_file(smol_path):
    with pytest.raises(FileNotFoundError, match="no_such_model.gguf"):
        Llama("/nonexistent/dir/no_such_model.gguf", verbose=False)
    _still_works(smol_path)


@pytest.mark.parametrize("kind,pattern", [
    ("not_gguf", "not a GGUF"),
    ("truncated", "truncated"),
    ("truncated_header", "GGUF"),
    ("bad_arch", "unsupported architecture 'nosucharch'"),
    ("wrong_shape", "attn_q.weight' has shape"),
    ("missing_tensor", "ffn_up.weight' is missing"),
])
def test_bad_model_files(bad_files, smol_path, kind, pattern):
    with pytest.raises(ModelLoadError, match=pattern):
        Llama(bad_files[kind], verbose=False)
    _still_works(smol_path)


def test_token_out_of_range(smol_path):
    with Llama(smol_path, n_ctx=64, verbose=False) as llm:
        with pytest.raises(ValueError, match="out of range"):
            llm.decode_logits([1, 2, llm.n_vocab()])
        with pytest.raises(ValueError, match="out of range"):
            llm.decode_logits([-1])
        with pytest.raises(ValueError, match="out of range"):
            llm([5, 10**9], max_tokens=2)
        assert llm.n_tokens == 0   # nothing was half-applied
        assert llm("Hi", max_tokens=2, temperature=0)["usage"]["completion_tokens"] >= 1


def test_prompt_longer_than_context(smol_path):
    with Llama(smol_path, n_ctx=32, verbose=False) as llm:
        with pytest.raises(ContextFullError, match="exceed context window of 32"):
            llm("word " * 100, max_tokens=4)
        assert llm("Hi", max_tokens=2, temperature=0)["usage"]["completion_tokens"] >= 1


def test_decode_past_context_end(smol_path):
    with Llama(smol_path, n_ctx=32, verbose=False) as llm:
        llm.decode_logits(list(range(100, 130)))
        with pytest.raises(ContextFullError, match="do not fit"):
            llm.decode_logits([5, 6, 7])
        assert llm.n_tokens == 30
        llm.decode_logits([5, 6])   # the last two slots still work
        with pytest.raises(ContextFullError):
            llm.decode_logits([7])
        llm.reset()
        assert llm.decode_logits([1, 2, 3]).shape == (1, llm.n_vocab())


def test_generation_reaching_context_end_is_length(smol_path):
    with Llama(smol_path, n_ctx=24, verbose=False) as llm:
        out = llm("Count: one, two, three,", max_tokens=100, temperature=0)
        assert out["choices"][0]["finish_reason"] == "length"
        assert out["usage"]["total_tokens"] <= 24


def test_unsupported_parameter(smol_path):
    """A llama_cpp argument at a value pyriver cannot honour is refused by name (unknown keywords are
    ignored as llama_cpp ignores them: test_llama_api.py)."""
    with pytest.raises(ValueError, match="attention_type=1 is not supported: pyriver's attention is causal"):
        Llama(smol_path, attention_type=1, verbose=False)
    with pytest.raises(ValueError, match="Unsupported cache type: 99"):   # not one of llama.cpp's cache types
        Llama(smol_path, type_k=99, verbose=False)


def test_bad_context_params(smol_path):
    with pytest.raises(ValueError, match="thread"):
        Llama(smol_path, n_threads=-3, verbose=False)


def test_context_bigger_than_memory_is_refused_before_allocating(smol_path):
    """A KV cache the machine cannot hold is refused with the sizes named, before any allocation
    (Linux would otherwise overcommit and leave it to the OOM killer)."""
    import resource
    n_ctx = 4_000_000   # 30 blocks x 2 x 192 x 2 bytes per token: 86 GiB
    with open("/proc/meminfo") as f:
        avail_gib = next(int(l.split()[1]) for l in f if l.startswith("MemAvailable:")) / 2**20
    if avail_gib > 86:
        pytest.skip("this machine could hold it")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(BackendError, match=r"KV cache of n_ctx=4000000 needs 85\.\d\d GiB .* available"):
        Llama(smol_path, n_ctx=n_ctx, verbose=False)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024   # KiB: nothing big touched
