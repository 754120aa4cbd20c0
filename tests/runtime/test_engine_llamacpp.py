"""The llama.cpp engine (pyriver.engine.llamacpp): architectures pyriver has no builder for run on
llama.cpp's own graphs, chosen automatically, and any file on request (engine="llama.cpp"). On it
the everyday Llama surface gives llama-cpp-python's texts and logits on the same file; River is
refused by name. The pair tests run on each foreign architecture's file and, with
engine="llama.cpp", on one file of each of pyriver's ten native architectures (their native-engine
parity is test_parity's)."""
from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from pyriver import Llama
from pyriver.api.batch import Feed
from pyriver.errors import ContextFullError, ModelLoadError

# synth_foreign's architectures, llama.cpp's loaders only (conftest.foreign_paths)
FOREIGN = {"granite": {}, "lfm2": {}, "qwen35": {}, "qwen35moe": {}, "gemma4": {}, "gpt-oss": {}, "granitehybrid": {},
           "llama4": {}, "glm4": {}, "glm4moe": {}, "deepseek2": {}}
# pyriver's ten native architectures (native/arch.cpp), one ARCH_SPECS file each (conftest.arch_paths),
# on the llama.cpp engine by request
NATIVE = {"llama": "llama_biases", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3", "mistral3": "mistral3",
          "gemma2": "gemma2", "smollm3": "smollm3", "olmo2": "olmo2", "phi3": "phi3", "qwen3moe": "qwen3moe"}
PROMPT = "Once upon a time, a river"
KW = dict(n_ctx=256, n_threads=2, verbose=False)


def _engine(arch) -> dict:
    """How a pair test asks for the llama.cpp engine: a foreign file gets it by itself."""
    return {"engine": "llama.cpp"} if arch in NATIVE else {}


@pytest.fixture(scope="module", params=sorted(FOREIGN) + sorted(NATIVE))
def pair(request):
    """(arch, pyriver.Llama on the llama.cpp engine, llama_cpp.Llama) on one synthetic file, logits_all on both."""
    arch = request.param
    p = (request.getfixturevalue("foreign_paths")[arch] if arch in FOREIGN
         else request.getfixturevalue("arch_paths")[NATIVE[arch]])
    mine = Llama(p, logits_all=True, **_engine(arch), **KW)
    ref = llama_cpp.Llama(p, logits_all=True, **KW)
    yield request.param, mine, ref
    mine.close()
    ref.close()


def _text(llm, prompt=PROMPT, **kw):
    return llm(prompt, max_tokens=kw.pop("max_tokens", 16), **kw)["choices"][0]["text"]


def test_auto_engine_and_greedy_text(pair):
    arch, mine, ref = pair
    assert mine.engine == "llama.cpp" and mine.info["arch"] == arch
    assert _text(mine, temperature=0) == _text(ref, temperature=0)


def test_logits_equal_llama_cpp(pair):
    _, mine, ref = pair
    toks = ref.tokenize(b"Rivers run to the sea, and the sea")
    for llm in (mine, ref):
        llm.reset()
        llm.eval(toks[:5])
        llm.eval(toks[5:])   # a second call appends (the cache is kept)
    assert np.array_equal(mine.scores[:len(toks)], ref.scores[:len(toks)])


def test_sampled_stream_stop_logprobs(pair, request):
    arch, mine, ref = pair
    for kw in (dict(temperature=0.8, seed=3), dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)):
        assert _text(mine, **kw) == _text(ref, **kw)
    want = _text(ref, temperature=0)
    got = "".join(c["choices"][0]["text"] for c in mine(PROMPT, max_tokens=16, temperature=0, stream=True))
    assert got == want
    words = want.split()   # a random-weight file's text may have fewer than three words: then its middle
    stop = words[2] if len(words) > 2 else want[len(want) // 2:len(want) // 2 + 3]
    assert stop.strip()
    assert _text(mine, temperature=0, stop=[stop]) == _text(ref, temperature=0, stop=[stop])
    a = mine(PROMPT, max_tokens=4, temperature=0, logprobs=3)["choices"][0]["logprobs"]
    b = ref(PROMPT, max_tokens=4, temperature=0, logprobs=3)["choices"][0]["logprobs"]
    assert a["tokens"] == b["tokens"]
    np.testing.assert_allclose(a["token_logprobs"], b["token_logprobs"], rtol=1e-5, atol=1e-5)


def test_chat_completion(pair):
    _, mine, ref = pair
    msgs = [{"role": "user", "content": "Name a river."}]
    a = mine.create_chat_completion(msgs, max_tokens=12, temperature=0)["choices"][0]["message"]["content"]
    b = ref.create_chat_completion(msgs, max_tokens=12, temperature=0)["choices"][0]["message"]["content"]
    assert a == b


def test_prefix_reuse_and_rewind(pair):
    """A second prompt sharing a prefix reuses the cache (on lfm2's recurrent blocks the kept
    tokens run again): the text is a fresh context's."""
    _, mine, ref = pair
    _text(mine, "Once upon a time, a river ran through the hills", temperature=0)
    assert _text(mine, "Once upon a time, a mountain", temperature=0) == _text(ref, "Once upon a time, a mountain",
                                                                                temperature=0)
    toks = mine.tokenize(PROMPT.encode())
    mine.reset()
    mine.eval(toks)
    mine.n_tokens = 3   # llama_cpp's rewind
    mine.eval(toks[3:])
    ref.reset()
    ref.eval(toks)
    assert np.array_equal(mine.scores[len(toks) - 1], ref.scores[len(toks) - 1])


def test_generate_sample_state(pair):
    _, mine, ref = pair
    toks = mine.tokenize(PROMPT.encode())
    out = []
    for t in mine.generate(toks, temp=0.0):
        out.append(t)
        if len(out) == 6:
            break
    want = []
    for t in ref.generate(toks, temp=0.0):
        want.append(t)
        if len(want) == 6:
            break
    assert out == want
    mine.reset()
    mine.eval(toks)
    state = mine.save_state()
    first = mine.sample(temp=0.0)
    mine.reset()
    mine.eval(mine.tokenize(b"something else entirely"))
    mine.load_state(state)
    mine.eval([first])
    logits_after = mine.scores[mine.n_tokens - 1].copy()
    ref.reset()
    ref.eval(toks)
    ref.eval([first])   # the same steps as restored-then-one-token
    assert np.array_equal(logits_after, ref.scores[len(toks)])


def test_river_refused_by_name(pair):
    arch, mine, _ = pair
    path = mine.model_path
    with pytest.raises(ValueError, match=rf"River needs pyriver's own graphs.*'{arch}'.*llama\.cpp engine"):
        Llama(path, river="q4_0", **_engine(arch), **KW)
    with pytest.raises(ValueError, match=f"'{arch}'"):
        mine.set_exit(0.9)
    with pytest.raises(ValueError, match="lossless mode with river drafts"):
        Llama(path, lossless=True, **_engine(arch), **KW)


def test_ngram_lossless_drafts(pair):
    """Lossless n-gram drafts sit above the engine: the text is greedy's."""
    arch, mine, ref = pair
    fast = Llama(mine.model_path, lossless=True, draft_model="ngram", **_engine(arch), **KW)
    prompt = "a b c d a b c d a b c d a b"
    try:
        assert fast.engine == "llama.cpp"
        assert _text(fast, prompt, max_tokens=24, temperature=0) == _text(ref, prompt, max_tokens=24, temperature=0)
        assert fast.last_stats["lossless"]["verify_steps"] > 0
    finally:
        fast.close()


def test_bad_input_is_an_exception(pair):
    _, mine, _ = pair
    with pytest.raises(ValueError, match="out of range"):
        mine.eval([mine.n_vocab()])
    mine.reset()
    with pytest.raises(ContextFullError):
        mine.eval([1] * (mine.n_ctx() + 1))
    from pyriver.api.batch import BatchDecoder
    dec = BatchDecoder(mine, 2)
    with pytest.raises(ValueError, match="out of range"):
        dec.step([Feed(0, [mine.n_vocab()])])
    with pytest.raises(ValueError, match="batch invariance"):
        dec.set_batch_invariant(True)
    dec.close()
    assert _text(mine, temperature=0, max_tokens=2)   # still usable


def test_engine_argument(foreign_paths, smol_path, tmp_path):
    with pytest.raises(ValueError, match="engine must be one of"):
        Llama(smol_path, engine="vllm", **KW)
    with pytest.raises(ModelLoadError, match="unsupported architecture 'granite'"):
        Llama(foreign_paths["granite"], engine="native", **KW)
    # an architecture neither loads: both reasons are named
    from pyriver.tools import gguf_io
    import gguf
    plan = gguf_io.plan_from_file(gguf.GGUFReader(foreign_paths["granite"]))
    plan.kv["general.architecture"] = gguf_io.KV("nosucharch", gguf.GGUFValueType.STRING)
    bad = str(gguf_io.write_plan(tmp_path / "bad.gguf", plan))
    with pytest.raises(ModelLoadError, match="unsupported architecture 'nosucharch'.*llama.cpp could not load"):
        Llama(bad, **KW)


def test_use_mmap_reaches_llama_cpp(foreign_paths):
    """use_mmap as llama_cpp.Llama maps it onto 0.3.36's llama_model_params.load_mode (a field that
    is not there, use_mmap, would be set on the ctypes object and never read)."""
    for use_mmap, mode in ((False, llama_cpp.LLAMA_LOAD_MODE_NONE), (True, llama_cpp.LLAMA_LOAD_MODE_MMAP)):
        with Llama(foreign_paths["granite"], use_mmap=use_mmap, **KW) as mine:
            assert mine.model_params.load_mode == mode
            assert _text(mine, temperature=0, max_tokens=4)


def test_verbose_names_the_engine(foreign_paths, capfd):
    Llama(foreign_paths["granite"], n_ctx=64, n_threads=2, verbose=True).close()
    err = capfd.readouterr().err
    assert "pyriver: engine llama.cpp (pyriver has no builder for architecture 'granite')" in err


def test_smollm2_on_the_llamacpp_engine(smol_path):
    """A file pyriver builds, run on llama.cpp's graphs on request: llama-cpp-python's texts and
    logits; the default engine stays the native one."""
    assert Llama(smol_path, **KW).engine == "native"
    mine = Llama(smol_path, engine="llama.cpp", logits_all=True, **KW)
    ref = llama_cpp.Llama(smol_path, logits_all=True, **KW)
    for prompt in ("The capital of France is", "def fib(n):"):
        assert _text(mine, prompt, max_tokens=24, temperature=0) == _text(ref, prompt, max_tokens=24, temperature=0)
    toks = ref.tokenize(b"Rivers run to the sea")
    for llm in (mine, ref):
        llm.reset()
        llm.eval(toks)
    assert np.array_equal(mine.scores[:len(toks)], ref.scores[:len(toks)])
    msgs = [{"role": "user", "content": "What is a river?"}]
    assert (mine.create_chat_completion(msgs, max_tokens=16, temperature=0)["choices"][0]["message"]
            == ref.create_chat_completion(msgs, max_tokens=16, temperature=0)["choices"][0]["message"])
    assert mine.detokenize(mine.tokenize(b"Hello, world")) == b"Hello, world"


def test_embeddings_on_the_llamacpp_engine(smol_path):
    mine = Llama(smol_path, engine="llama.cpp", embedding=True, pooling_type=1, **KW)
    ref = llama_cpp.Llama(smol_path, embedding=True, pooling_type=1, **KW)
    a = np.asarray(mine.embed(["A river runs to the sea.", "Hello"], normalize=True))
    b = np.asarray(ref.embed(["A river runs to the sea.", "Hello"], normalize=True))
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_cli_engine_flag(foreign_paths, smol_path):
    """`pyriver run --engine llama.cpp` on any file, and the engine named with --verbose."""
    from helpers import child_env, pyriver_cli
    want = _text(llama_cpp.Llama(smol_path, **KW), "Rivers are", max_tokens=8, temperature=0)
    r = pyriver_cli("run", "-m", smol_path, "--engine", "llama.cpp", "--ctx", "256", "-t", "2", "-n", "8",
                    "--no-lossless", "--verbose", "Rivers are", env=child_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(want)
    assert "pyriver: engine llama.cpp (asked for) runs llama" in r.stderr
