"""llama-cpp-python's Llama API on pyriver.Llama (issue 26): constructor arguments, eval /
sample / generate with llama_cpp's prefix reuse, scores, save_state / load_state with llama_cpp's
LlamaState and caches, logits processors, logit_bias, stopping criteria, mirostat, seeds, chat
formats and logprobs; each against llama_cpp.Llama on the same file where it has a reference
(temperature 0, llama.cpp's kernels: batch_invariant=False), and bad input."""
from __future__ import annotations

import inspect
import itertools

import llama_cpp
import numpy as np
import pytest

from pyriver import Llama

KW = dict(n_ctx=64, n_batch=64, n_ubatch=64, n_threads=2, n_threads_batch=2, logits_all=False, verbose=False)
OURS = dict(KW, batch_invariant=False, river=None)
PROMPT = "The quick brown fox"


def _gen(model, tokens, n=3, **kw):
    return list(itertools.islice(model.generate(tokens, temp=0.0, **kw), n))


@pytest.fixture(scope="module")
def ref(smol_path):
    m = llama_cpp.Llama(smol_path, **KW)
    yield m
    m.close()


@pytest.fixture(scope="module")
def ours(smol_path):
    with Llama(smol_path, **OURS) as m:
        yield m


@pytest.fixture(scope="module")
def tokens(ref):
    return ref.tokenize(PROMPT.encode(), add_bos=True, special=True)


@pytest.fixture(scope="module")
def expected(ref, tokens):
    ref.reset()
    return _gen(ref, tokens)


# -- constructor ------------------------------------------------------------------------------
def test_every_llama_cpp_constructor_argument_is_accepted_at_its_default(smol_path):
    sig = inspect.signature(llama_cpp.Llama.__init__)
    defaults = {k: p.default for k, p in sig.parameters.items()
                if k not in ("self", "model_path", "kwargs") and p.default is not inspect.Parameter.empty}
    assert len(defaults) >= 44
    defaults.update(n_ctx=64, verbose=False)
    with Llama(smol_path, **defaults) as m:
        assert m.n_ctx() == 64 and m.n_batch == 64 and m.n_ubatch == 64 and m._is_recurrent is False


@pytest.mark.parametrize("kw, err, match", [
    ({"lora_path": "x.gguf", "engine": "native"}, ValueError, "LoRA"),
    ({"type_k": llama_cpp.GGML_TYPE_Q4_K}, ValueError, "Unsupported cache type"),
    ({"type_v": llama_cpp.GGML_TYPE_Q8_0}, ValueError, "quantized V cache requires flash_attn"),
    ({"rope_freq_base": -1.0}, ValueError, "rope_freq_base"),
    ({"kv_overrides": {"a": 1}}, ValueError, "kv_overrides"),
    ({"numa": True}, ValueError, "numa"),
    ({"chat_format": "no-such"}, ValueError, "chat_format"),
])
def test_arguments_pyriver_cannot_honour_are_refused_by_name(smol_path, kw, err, match):
    with pytest.raises(err, match=match):
        Llama(smol_path, **dict(OURS, **kw))


def test_unknown_arguments_are_ignored_as_llama_cpp_ignores_them(smol_path):
    """LangChain passes f16_kv and n_parts, which llama_cpp takes through its **kwargs."""
    with pytest.warns(UserWarning, match="f16_kv, n_parts"):
        m = Llama(smol_path, n_ctx=64, n_parts=-1, f16_kv=True, verbose=True)
    m.close()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Llama(smol_path, n_ctx=64, f16_kv=True, verbose=False).close()


def test_rope_overrides_give_llama_cpp_s_logits(smol_path):
    """rope_freq_base / rope_freq_scale as llama.cpp's context parameters (LangChain passes 10000
    and 1.0 whatever the model): the same logits as llama_cpp with the same values."""
    toks = [1, 504, 3158, 282, 4649, 314, 3575, 30, 378, 1191, 282]
    kw = dict(n_ctx=64, verbose=False, rope_freq_base=10000.0, rope_freq_scale=0.5, logits_all=True)
    ref = llama_cpp.Llama(smol_path, **kw)
    ref.eval(toks)
    with Llama(smol_path, **kw) as m, Llama(smol_path, n_ctx=64, verbose=False) as plain:
        m.eval(toks)
        plain.eval(toks)
        assert np.array_equal(m.scores[len(toks) - 1], ref.scores[len(toks) - 1])
        assert not np.array_equal(plain.scores[len(toks) - 1], ref.scores[len(toks) - 1])


def test_vocab_only_tokenizes_as_llama_cpp(tmp_path):
    from pyriver.tools import llama_server
    path = str(llama_server.sdist_root() / "vendor" / "llama.cpp" / "models" / "ggml-vocab-llama-spm.gguf")
    llama = Llama(model_path=path, vocab_only=True, verbose=False)
    assert llama.tokenize(b"Hello World") == [1, 15043, 2787]
    assert llama.detokenize([1, 15043, 2787]) == b"Hello World"
    assert llama.tokenize(b"Hello World</s>", special=True) == [1, 15043, 2787, 2]
    assert llama.tokenize(b"", add_bos=True, special=True) == [llama.token_bos()]
    with pytest.raises(RuntimeError, match="vocab_only"):
        llama("Hello", max_tokens=1)


def test_metadata_and_model_facts_are_llama_cpp_s(ref, ours):
    assert ours.metadata == ref.metadata
    assert (ours.token_nl(), ours.n_embd(), ours.n_vocab()) == (ref.token_nl(), ref.n_embd(), ref.n_vocab())
    assert ours.tokenizer().encode("Hello world") == ref.tokenizer().encode("Hello world")
    assert ours.tokenizer().decode(ref.tokenize(b"Hello world")) == ref.tokenizer().decode(ref.tokenize(b"Hello world"))


# -- eval / sample / generate -------------------------------------------------------------------
def test_generate_matches_llama_cpp_and_leaves_n_tokens_as_it_does(ours, tokens, expected):
    ours.reset()
    assert _gen(ours, tokens) == expected
    assert ours.n_tokens == len(tokens) + len(expected) - 1
    assert ours.input_ids.shape == (ours.n_ctx(),) and ours.input_ids.dtype == np.intc


def test_exact_cached_prompt_is_sampled_without_reset(ours, tokens, expected):
    ours.reset()
    assert ours.eval(tokens) is None
    assert ours.n_tokens == len(tokens) and ours.input_ids[: ours.n_tokens].tolist() == tokens
    assert ours.sample(temp=0.0, idx=len(tokens) - 1) == expected[0]
    calls = []
    ours.reset = lambda: calls.append(1)   # llama_cpp's test tracks reset the same way
    try:
        version = ours.context.version
        gen = ours.generate(tokens, temp=0.0)
        assert next(gen) == expected[0]
        assert ours.context.version == version   # sampled from the live logits: nothing ran again
        gen.close()
        assert _gen(ours, tokens) == expected
    finally:
        del ours.reset
    assert calls == []
    assert ours.n_tokens == len(tokens) + len(expected) - 1


def test_shorter_prompt_reuses_the_prefix(ours, tokens, expected):
    ours.reset()
    ours.eval(tokens + ours.tokenize(b" jumps over the lazy dog", add_bos=False))
    assert _gen(ours, tokens) == expected
    # an edited history: the cache is cut at the first differing token
    other = ours.tokenize(b"The slow brown fox", add_bos=True)
    ours.reset()
    ours.eval(other)
    assert _gen(ours, tokens) == expected


def test_scores_with_logits_all_match_llama_cpp(smol_path, tokens):
    ref = llama_cpp.Llama(smol_path, **dict(KW, logits_all=True))
    ref.eval(tokens)
    with Llama(smol_path, **dict(OURS, logits_all=True)) as m:
        m.eval(tokens)
        assert m.scores.shape == (64, m.n_vocab()) and m._scores.shape == (len(tokens), m.n_vocab())
        assert np.array_equal(m._scores.argmax(1), ref._scores.argmax(1))
        assert np.allclose(m._scores, ref._scores, atol=0.05)
        with pytest.raises(ValueError, match="idx"):
            Llama.sample(m, temp=0.0, idx=len(tokens))   # not evaluated yet
    ref.close()


def test_sample_refuses_rows_it_does_not_have(ours, tokens):
    ours.reset()
    with pytest.raises(ValueError, match="evaluated"):
        ours.sample()
    ours.eval(tokens)
    with pytest.raises(ValueError, match="logits_all"):
        ours.sample(idx=0)
    assert ours.sample(temp=0.0) == ours.sample(temp=0.0, idx=len(tokens) - 1)


# -- state ------------------------------------------------------------------------------------
def test_save_and_load_state_restore_exactly(smol_path, ours, tokens, expected):
    ours.reset()
    ours.eval(tokens)
    state = ours.save_state()
    assert isinstance(state, llama_cpp.llama.LlamaState) and state.n_tokens == len(tokens)
    with Llama(smol_path, **OURS) as loaded:
        loaded.eval(loaded.tokenize(b"Something else entirely, longer", add_bos=True))
        loaded.load_state(state)
        assert loaded.n_tokens == len(tokens) and loaded.input_ids[: loaded.n_tokens].tolist() == tokens
        assert _gen(loaded, tokens) == expected
        assert loaded.n_tokens == len(tokens) + len(expected) - 1


def test_bad_states_are_refused_and_the_object_stays_usable(smol_path, ours, tokens, expected, synth_paths):
    ours.reset()
    ours.eval(tokens)
    good = ours.save_state()
    bad = []
    with Llama(smol_path, **dict(OURS, n_ctx=128)) as other:
        other.eval(tokens)
        bad.append((other.save_state(), "n_ctx"))
    with Llama(synth_paths["mha"], n_ctx=64, verbose=False, river=None) as other:
        other.eval([1, 2, 3])
        bad.append((other.save_state(), "another model"))
    for cut in (good.llama_state[:40], good.llama_state[:-7], b"garbage" * 10):
        bad.append((llama_cpp.llama.LlamaState(good.input_ids, good.scores, good.n_tokens, cut, len(cut), 0), ""))
    flipped = bytearray(good.llama_state)
    flipped[-len(flipped) // 2 - 200:] = b"\xff" * (len(flipped) // 2 + 200)   # the native header and rows
    bad.append((llama_cpp.llama.LlamaState(good.input_ids, good.scores, good.n_tokens, bytes(flipped),
                                           len(flipped), 0), ""))
    ours.reset()
    ours.eval(tokens[:2])
    _native_checks(ours, good)
    for state, match in bad:
        with pytest.raises(ValueError, match=match or None):   # "": any message (a cut or corrupt blob)
            ours.load_state(state)
        assert ours.n_tokens == 2   # unchanged
    assert _gen(ours, tokens) == expected


def _native_checks(llm, good):
    """pr_state_set checks its own header too (the JSON head in front of it is pyriver's)."""
    from pyriver.engine.binding import lib
    import struct
    from pyriver.api.state import MAGIC
    (n_head,) = struct.unpack_from("<Q", good.llama_state, len(MAGIC))
    native = bytearray(good.llama_state[len(MAGIC) + 8 + n_head:])
    for off, val in ((0, b"X"), (48, b"\x00\x02\x00\x00"), (len(native) - 1, None)):   # magic, n_ctx, length
        bad = bytearray(native)
        if val is None:
            bad = bad[:off]
        else:
            bad[off:off + len(val)] = val
        assert lib.pr_state_set(llm._native_ctx, 0, bytes(bad), len(bad)) != 0
        assert lib.pr_kv_pos(llm._native_ctx) == 2


def test_ram_cache_hit_loads_the_state_once(smol_path, tokens):
    fresh = llama_cpp.Llama(smol_path, **KW)
    want = fresh.create_completion(tokens, max_tokens=2, temperature=0.0, seed=1337)["choices"][0]["text"]
    fresh.close()
    cache = llama_cpp.LlamaRAMCache()
    with Llama(smol_path, **OURS) as writer:
        writer.set_cache(cache)
        writer.create_completion(tokens, max_tokens=2, temperature=0.0, seed=1337)
    with Llama(smol_path, **OURS) as cached:
        cached.set_cache(cache)
        calls = []
        real = cached.load_state
        cached.load_state = lambda s: (calls.append(1), real(s))
        out = cached.create_completion(tokens, max_tokens=2, temperature=0.0, seed=1337)
        assert calls == [1] and out["choices"][0]["text"] == want


def test_disk_cache_round_trip_and_a_corrupt_one(smol_path, tokens, tmp_path):
    cache = llama_cpp.LlamaDiskCache(cache_dir=str(tmp_path / "c"))
    with Llama(smol_path, **OURS) as m:
        m.set_cache(cache)
        a = m.create_completion(tokens, max_tokens=3, temperature=0.0)["choices"][0]["text"]
        m.reset()
        assert m.create_completion(tokens, max_tokens=3, temperature=0.0)["choices"][0]["text"] == a
        key = cache._find_longest_prefix_key(tuple(tokens))
        cache.cache[key] = "not a state"   # what a damaged or foreign cache may hand back
        m.reset()
        with pytest.raises(ValueError, match="pyriver state|cache"):
            m.create_completion(tokens, max_tokens=3, temperature=0.0)
        m.set_cache(None)
        assert m.create_completion(tokens, max_tokens=3, temperature=0.0)["choices"][0]["text"] == a


# -- sampling links -----------------------------------------------------------------------------
def test_logits_processor_logit_bias_and_stopping_criteria_match_llama_cpp(ref, ours):
    boost = ref.tokenize(b" river", add_bos=False)[0]

    def proc(input_ids, logits):
        assert isinstance(input_ids, np.ndarray) and logits.shape == (ref.n_vocab(),)
        logits[boost] += 30.0
        return logits

    def stop_after_3(input_ids, logits):
        return len(input_ids) >= n_prompt + 3

    n_prompt = len(ref.tokenize(b"Hello, my name is", add_bos=True, special=True))
    for kw in ({"logits_processor": llama_cpp.LogitsProcessorList([proc])},
               {"logit_bias": {boost: 30.0}},
               {"logit_bias": {str(boost): 30.0}},
               {"stopping_criteria": llama_cpp.StoppingCriteriaList([stop_after_3])},
               {"repeat_penalty": 1.5, "frequency_penalty": 0.5}):
        want = ref.create_completion("Hello, my name is", max_tokens=6, temperature=0.0, **kw)["choices"][0]
        got = ours.create_completion("Hello, my name is", max_tokens=6, temperature=0.0, **kw)["choices"][0]
        assert (got["text"], got["finish_reason"]) == (want["text"], want["finish_reason"]), kw


def test_raising_callbacks_and_bad_logit_bias_leave_the_object_usable(ours, tokens, expected):
    def boom(*a):
        raise RuntimeError("callback failed")
    with pytest.raises(ValueError, match="out of range"):
        ours.create_completion(PROMPT, max_tokens=2, logit_bias={ours.n_vocab(): 1.0})
    with pytest.raises(RuntimeError, match="callback failed"):
        ours.create_completion(PROMPT, max_tokens=2, logits_processor=llama_cpp.LogitsProcessorList([boom]))
    with pytest.raises(RuntimeError, match="callback failed"):
        ours.create_completion(PROMPT, max_tokens=2, stopping_criteria=llama_cpp.StoppingCriteriaList([boom]))
    with pytest.raises(RuntimeError, match="callback failed"):
        _gen(ours, tokens, logits_processor=llama_cpp.LogitsProcessorList([boom]))
    ours.reset()
    assert _gen(ours, tokens) == expected


@pytest.mark.parametrize("mode", [1, 2])
def test_mirostat_is_seeded_and_follows_its_target(ours, mode):
    """A tiny target surprise (tau) keeps only the top token: greedy; a large one samples."""
    def run(tau, seed):
        return ours.create_completion(PROMPT, max_tokens=8, temperature=0.8, mirostat_mode=mode,
                                      mirostat_tau=tau, seed=seed)["choices"][0]["text"]
    greedy = ours.create_completion(PROMPT, max_tokens=8, temperature=0.0)["choices"][0]["text"]
    assert run(0.1, 1) == run(0.1, 2) == greedy
    wide = [run(12.0, s) for s in (1, 2, 3)]
    assert wide == [run(12.0, s) for s in (1, 2, 3)]   # seeded
    assert any(w != greedy for w in wide)
    with pytest.raises(ValueError, match="mirostat_mode"):
        ours.create_completion(PROMPT, max_tokens=2, mirostat_mode=3)


def test_seeds_follow_llama_cpp(ours):
    def run():
        return ours.create_completion(PROMPT, max_tokens=6, temperature=1.0)["choices"][0]["text"]
    ours.set_seed(1337)
    a = [run(), run()]
    ours.set_seed(1337)
    assert [run(), run()] == a   # a seeded Llama repeats its sequence of runs
    ours.set_seed(llama_cpp.LLAMA_DEFAULT_SEED)
    firsts = {ours.sample(temp=5.0, top_p=1.0, min_p=0.0) for _ in range(12)}
    assert len(firsts) > 1   # LLAMA_DEFAULT_SEED: a fresh random seed each sampler


# -- logprobs and chat ----------------------------------------------------------------------------
def test_echo_logprobs_need_logits_all_as_in_llama_cpp(smol_path, ours):
    with pytest.raises(ValueError, match="logits_all"):
        ours.create_completion(PROMPT, max_tokens=2, echo=True, logprobs=2)
    ref = llama_cpp.Llama(smol_path, **dict(KW, logits_all=True))
    want = ref.create_completion(PROMPT, max_tokens=3, temperature=0.0, echo=True, logprobs=2)["choices"][0]
    p = ref.tokenize(PROMPT.encode(), add_bos=True, special=True)
    rows = np.array(ref._scores[: len(p)], dtype=np.float64)
    ref.close()
    with Llama(smol_path, **dict(OURS, logits_all=True)) as m:
        got = m.create_completion(PROMPT, max_tokens=3, temperature=0.0, echo=True, logprobs=2)["choices"][0]
    assert got["text"] == want["text"]
    # llama_cpp leaves out the last generated token (it has no scores row); pyriver has it
    n = len(want["logprobs"]["tokens"])
    assert len(got["logprobs"]["tokens"]) == n + 1
    assert got["logprobs"]["tokens"][:n] == want["logprobs"]["tokens"]
    assert got["logprobs"]["text_offset"][:n] == want["logprobs"]["text_offset"]
    assert got["logprobs"]["token_logprobs"][0] is None and got["logprobs"]["top_logprobs"][0] is None
    # token j of the prompt under the logits of token j - 1 (llama.cpp's rows)
    first = 1 if p[0] == m.token_bos() else 0
    lse = np.log(np.exp(rows - rows.max(1, keepdims=True)).sum(1)) + rows.max(1)
    for j in range(first + 1, len(p)):
        assert abs(got["logprobs"]["token_logprobs"][j - first] - (rows[j - 1, p[j]] - lse[j - 1])) < 0.05


def test_streamed_logprobs_have_llama_cpp_s_shape(ours):
    chunks = list(ours.create_completion(PROMPT, max_tokens=4, temperature=0.0, logprobs=2, stream=True))
    text = [c for c in chunks if c["choices"][0]["text"]]
    assert text and all(len(c["choices"][0]["logprobs"]["tokens"]) >= 1 for c in text)
    assert "".join(c["choices"][0]["text"] for c in text) == "".join(
        "".join(c["choices"][0]["logprobs"]["tokens"]) for c in text)


def test_chat_defaults_and_formats_are_llama_cpp_s(ref, ours):
    a = inspect.signature(llama_cpp.Llama.create_chat_completion).parameters
    b = inspect.signature(Llama.create_chat_completion).parameters
    assert {k: p.default for k, p in a.items() if k != "stop"} == {k: b[k].default for k in a if k != "stop"}
    msgs = [{"role": "user", "content": "Say hello."}]
    got = ours.create_chat_completion(msgs, max_tokens=5, temperature=0.0, logprobs=True, top_logprobs=2)
    lp = got["choices"][0]["logprobs"]["content"]
    assert lp and {"token", "logprob", "top_logprobs", "bytes"} <= set(lp[0]) and len(lp[0]["top_logprobs"]) >= 2
    ours.chat_format = "llama-2"   # llama_cpp's own formatter
    try:
        ref.chat_format = "llama-2"
        w = ref.create_chat_completion(msgs, max_tokens=5, temperature=0.0)["choices"][0]["message"]["content"]
        g = ours.create_chat_completion(msgs, max_tokens=5, temperature=0.0)["choices"][0]["message"]["content"]
        assert g == w
    finally:
        ours.chat_format = ref.chat_format = None


# -- River and lossless ---------------------------------------------------------------------------
def test_the_api_runs_with_a_river_and_in_lossless_mode(smol_path, tokens):
    with Llama(smol_path, **dict(OURS, river="q4_0", exit_threshold=0.9)) as r:
        a = _gen(r, tokens, 4)
        r.eval(tokens)
        st = r.save_state()
        r.reset()
        r.load_state(st)
        assert _gen(r, tokens, 4) == a
        assert r.create_completion(PROMPT, max_tokens=3, temperature=0.0, logit_bias={a[0]: -100.0})["choices"][0]["text"]
    with Llama(smol_path, **dict(OURS, river="q4_0", lossless=True)) as ll, Llama(smol_path, **OURS) as full:
        kw = dict(max_tokens=6, temperature=0.0, logit_bias={a[0]: -5.0})
        assert ll.create_completion(PROMPT, **kw)["choices"][0]["text"] == full.create_completion(PROMPT, **kw)["choices"][0]["text"]
        with pytest.raises(ValueError, match="lossless"):
            ll.create_completion(PROMPT, max_tokens=2, mirostat_mode=2)


# -- from_pretrained --------------------------------------------------------------------------------
def test_from_pretrained_matches_globs_as_llama_cpp(monkeypatch, smol_path):
    import huggingface_hub
    import pyriver.models.pretrained as pre
    files = ["org/repo/a-Q4_0.gguf", "org/repo/a-Q8_0.gguf", "org/repo/sub/a-Q4_1.gguf"]
    monkeypatch.setattr(pre, "_hub_unreachable", lambda endpoint: None)
    monkeypatch.setattr(huggingface_hub, "HfFileSystem", lambda: type("FS", (), {"ls": lambda self, r, recursive: files})())
    got = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda **kw: got.append(kw) or smol_path)
    with Llama.from_pretrained("org/repo", "*Q4_1.gguf", **OURS) as m:
        assert m.n_ctx() == 64
    assert (got[0]["filename"], got[0]["subfolder"]) == ("a-Q4_1.gguf", "sub")
    with pytest.raises(ValueError, match="Multiple files"):
        Llama.from_pretrained("org/repo", "*.gguf")
    with pytest.raises(ValueError, match="No file found"):
        Llama.from_pretrained("org/repo", "*Q2_K.gguf")


def test_from_pretrained_offline_is_a_clear_error(monkeypatch):
    from pyriver.errors import ModelFetchError
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelFetchError, match="Hub"):
        Llama.from_pretrained("org/repo", "*.gguf")


def test_generate_never_reuses_exited_tokens_as_prompt(smol_path):
    """With River on, tokens a decode step computed under the exit rule hold the river's K/V: when
    they come back as a prompt, generate runs them again at full depth (as create_completion does),
    so its first token's logits are a fresh Llama's."""
    kw = dict(n_ctx=128, n_threads=2, verbose=False, river="q4_0", force_exit_layer=1, river_force=True,
              batch_invariant=True)   # the same bits however the tokens were split into steps
    with Llama(smol_path, **kw) as a, Llama(smol_path, **kw) as fresh:
        prompt = a.tokenize(b"The river flows", add_bos=True)
        a.create_completion(prompt, max_tokens=6, temperature=0)
        seen = list(a.context.tokens)
        assert len(seen) > len(prompt)   # the answer's decode steps are in the cache
        next(a.generate(seen, temp=0.0))
        fresh.eval(seen)
        np.testing.assert_array_equal(a.sampling.logits_at(len(seen) - 1), fresh.sampling.logits_at(len(seen) - 1))
