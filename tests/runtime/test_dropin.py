"""A script written for llama_cpp.Llama runs unchanged on pyriver.Llama, with the same texts
at temperature 0, and the object survives what callers do to it."""
from __future__ import annotations

import threading

import pytest

SCRIPT = '''
def script(Llama, path, **kw):
    llm = Llama(model_path=path, n_ctx=512, n_threads=2, seed=7, verbose=False, **kw)
    out = {}
    out["completion"] = llm("Q: Name the planets in order.\\nA:", max_tokens=32, temperature=0, stop=["Q:"])
    out["stream"] = "".join(c["choices"][0]["text"] for c in llm("The river", max_tokens=24, temperature=0, stream=True))
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello to a river."}]
    out["chat"] = llm.create_chat_completion(messages=msgs, max_tokens=24, temperature=0)
    out["chat_stream"] = "".join(c["choices"][0]["delta"].get("content", "")
                                 for c in llm.create_chat_completion(messages=msgs, max_tokens=24, temperature=0, stream=True))
    toks = llm.tokenize(b"Hello world")
    out["tokens"] = toks
    out["detok"] = llm.detokenize(toks)
    out["facts"] = (llm.n_ctx(), llm.n_vocab(), llm.token_bos(), llm.token_eos())
    return out
'''


def _shape(d):
    if isinstance(d, dict):
        return {k: _shape(v) for k, v in d.items() if k not in ("river",)}
    if isinstance(d, list):
        return [_shape(x) for x in d[:1]]
    return type(d).__name__


# pyriver's default runs llama.cpp's kernels for whole prompts in steps of n_ubatch tokens, as
# llama-cpp-python does by default; batch_invariant=True computes every token as a single-token
# step does, which is llama.cpp with n_batch=1. Either way the texts are the same.
PAIRS = {"stepwise": ({"n_batch": 1}, {"batch_invariant": True}), "default": ({}, {})}


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_script_runs_unchanged_with_same_texts(smol_path, pair):
    import llama_cpp
    from pyriver import Llama
    ns = {}
    exec(SCRIPT, ns)
    ref_kw, our_kw = PAIRS[pair]
    ref = ns["script"](llama_cpp.Llama, smol_path, **ref_kw)
    got = ns["script"](Llama, smol_path, **our_kw)
    assert got["completion"]["choices"][0]["text"] == ref["completion"]["choices"][0]["text"]
    assert got["completion"]["choices"][0]["finish_reason"] == ref["completion"]["choices"][0]["finish_reason"]
    assert got["completion"]["usage"] == ref["completion"]["usage"]
    assert got["stream"] == ref["stream"]
    assert got["chat"]["choices"][0]["message"] == ref["chat"]["choices"][0]["message"]
    assert got["chat_stream"] == ref["chat_stream"] == ref["chat"]["choices"][0]["message"]["content"]
    assert got["tokens"] == ref["tokens"] and got["detok"] == ref["detok"] and got["facts"] == ref["facts"]
    for key in ("completion", "chat"):
        assert _shape(got[key]) == _shape(ref[key]), key


def test_logprobs_shape_and_values(smol_path):
    from pyriver import Llama
    with Llama(smol_path, n_ctx=256, verbose=False) as llm:
        r = llm("The sky is", max_tokens=6, temperature=0, logprobs=3)
        lp = r["choices"][0]["logprobs"]
        assert set(lp) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
        assert "".join(lp["tokens"]) == r["choices"][0]["text"]
        assert all(v <= 0 for v in lp["token_logprobs"])
        # Greedy: the chosen token is the most likely one.
        for chosen, tops in zip(lp["token_logprobs"], lp["top_logprobs"]):
            assert chosen == pytest.approx(max(tops.values()))
        chunks = [c for c in llm("The sky is", max_tokens=6, temperature=0, logprobs=3, stream=True)
                  if c["choices"][0]["text"]]
        assert "".join("".join(c["choices"][0]["logprobs"]["tokens"]) for c in chunks) == r["choices"][0]["text"]


def test_abandoned_stream_leaves_object_correct(smol_path):
    from pyriver import Llama
    with Llama(smol_path, n_ctx=512, verbose=False) as llm:
        want = llm("A story about a boat:", max_tokens=30, temperature=0)["choices"][0]["text"]
        it = llm("Something else entirely, about mountains", max_tokens=50, temperature=0, stream=True)
        for _ in range(5):
            next(it)
        del it
        assert llm("A story about a boat:", max_tokens=30, temperature=0)["choices"][0]["text"] == want


def test_keyboard_interrupt_during_generation(smol_path):
    from pyriver import Llama
    with Llama(smol_path, n_ctx=512, verbose=False) as llm:
        want = llm("Tell me about rain.", max_tokens=20, temperature=0)["choices"][0]["text"]
        n = 0
        with pytest.raises(KeyboardInterrupt):
            for _ in llm("Tell me about snow, at length.", max_tokens=100, temperature=0, stream=True):
                n += 1
                if n == 7:
                    raise KeyboardInterrupt
        assert llm("Tell me about rain.", max_tokens=20, temperature=0)["choices"][0]["text"] == want


def test_two_threads_share_one_llama(smol_path):
    from pyriver import Llama
    with Llama(smol_path, n_ctx=1024, verbose=False) as llm:
        prompts = ["The first river", "A second, different prompt about cities"]
        want = [llm(p, max_tokens=24, temperature=0)["choices"][0]["text"] for p in prompts]
        got = [None, None]

        def work(i):
            for _ in range(2):
                got[i] = "".join(c["choices"][0]["text"] for c in llm(prompts[i], max_tokens=24, temperature=0, stream=True))

        th = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in th:
            t.start()
        for t in th:
            t.join(timeout=300)
        assert got == want


def test_two_llamas_in_one_process(smol_path, synth_paths):
    from pyriver import Llama
    a = Llama(smol_path, n_ctx=128, verbose=False)
    b = Llama(synth_paths["mha"], n_ctx=128, verbose=False)
    ta = a("Hello", max_tokens=8, temperature=0)["choices"][0]["text"]
    b("Hello", max_tokens=8, temperature=0)
    assert a("Hello", max_tokens=8, temperature=0)["choices"][0]["text"] == ta
    a.close()
    b.close()
    with pytest.raises(RuntimeError, match="closed"):
        a.decode_logits([1])


def test_unsupported_arguments_are_errors(smol_path):
    from pyriver import Llama
    with pytest.raises(TypeError, match="chat_handler"):
        Llama(smol_path, chat_handler=object(), verbose=False)
    with pytest.raises(ValueError, match="chat_format"):
        Llama(smol_path, chat_format="no-such-format", verbose=False)
    with Llama(smol_path, n_ctx=64, verbose=False) as llm:
        with pytest.raises(TypeError, match="no_such_argument"):
            llm("hi", no_such_argument=1)
        with pytest.raises(ValueError, match="does not parse"):   # grammars are supported (pyriver.text.grammar)
            llm("hi", grammar="root ::= x")


def test_from_pretrained_offline_is_a_clear_error(monkeypatch):
    from pyriver import Llama
    from pyriver.models import ModelFetchError
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises((ModelFetchError, ImportError)):
        Llama.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "smollm2-135m-instruct-q4_k_m.gguf")


def test_prompt_steps_are_llama_cpps(request):
    """A prompt longer than a step runs in steps of min(n_batch, n_ubatch) tokens, as llama_cpp's
    decode splits it: every token's logits bit for bit. Gemma 3 270M, whose repacked K-quant GEMM
    adds a step's columns in groups of 4 (the rest one by one), so the split shows (control)."""
    import llama_cpp
    import numpy as np
    from helpers import model_path
    from pyriver import Llama
    path = model_path(request, "gemma3_270m")
    text = b"In the beginning there was a river, and the river ran to the sea. " * 6
    ref = llama_cpp.Llama(path, n_ctx=512, n_batch=256, n_ubatch=30, n_threads=2, logits_all=True, verbose=False)
    toks = ref.tokenize(text)
    assert len(toks) > 90
    ref.eval(toks)
    want = np.array(ref.scores[:len(toks)])
    ref.close()
    with Llama(path, n_ctx=512, n_batch=256, n_ubatch=30, n_threads=2, verbose=False) as llm:
        assert np.array_equal(llm.decode_logits(toks, logits_all=True), want)
    with Llama(path, n_ctx=512, n_batch=256, n_threads=2, verbose=False) as llm:
        assert not np.array_equal(llm.decode_logits(toks, logits_all=True), want)


AFTER_CLOSE = '''
import inspect, sys
from pyriver import Llama
llm = Llama(sys.argv[1], n_ctx=64, embedding=True, verbose=False)
llm.eval(llm.tokenize(b"Hi"))
llm.close()
msgs = [{"role": "user", "content": "hi"}]
args = {"tokenize": (b"hi",), "detokenize": ([1],), "eval": ([1],), "decode_logits": ([1],), "generate": ([1],),
        "create_completion": ("hi",), "__call__": ("hi",), "create_chat_completion": (msgs,),
        "create_chat_completion_openai_v1": (msgs,), "chat_tokens": (msgs,), "meta": ("general.architecture",),
        "set_exit": (0.9,), "attach_river": ("q4_0",), "embed": ("hi",), "create_embedding": ("hi",)}
for name in ["sample", "devices", "n_embd", "save_state", "reset", "tokenizer"] + sorted(args):
    try:
        r = getattr(llm, name)(*args.get(name, ()))
        if inspect.isgenerator(r):
            next(r)
        if name == "tokenizer":
            r.encode("hi")
        print(name, "ran")
    except RuntimeError as e:
        print(name, "RuntimeError", e)
print(llm.n_ctx(), llm.n_vocab(), llm.token_bos(), llm.metadata["general.architecture"])
'''


def test_every_call_after_close_is_a_clear_error(smol_path):
    """llama_cpp crashes here (freed handles); pyriver raises RuntimeError("... closed") from every
    call that needs the model, in a child process so that a crash fails the test, not the run."""
    import subprocess
    import sys
    from helpers import child_env
    r = subprocess.run([sys.executable, "-c", AFTER_CLOSE, smol_path], capture_output=True, text=True,
                       timeout=300, env=child_env())
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 22 and lines[-1].endswith("llama"), r.stdout
    assert all("RuntimeError" in ln and "closed" in ln for ln in lines[:-1]), r.stdout


def test_tokenize_takes_bytes_and_says_so(llm):
    with pytest.raises(TypeError, match="bytes"):
        llm.tokenize("a str")
    with pytest.raises(TypeError, match="bytes"):
        llm.tokenizer().tokenize("a str")
    with pytest.raises(ValueError, match="out of range"):
        llm.detokenize([llm.n_vocab()])
    assert llm.tokenize(bytearray(b"Hi")) == llm.tokenize(b"Hi")   # bytes-like too
    assert llm("Hi", max_tokens=2, temperature=0)["choices"][0]["text"] is not None   # still usable


def test_pickle_recreates_the_llama_from_its_arguments_as_llama_cpp(smol_path):
    import pickle
    from pyriver import Llama
    with Llama(smol_path, n_ctx=96, n_batch=32, seed=11, logits_all=True, verbose=False) as llm:
        want = llm("The river", max_tokens=6, temperature=0.9)["choices"][0]["text"]   # moves the seed on
        state = llm.__getstate__()
        assert state["seed"] == llm._seed != 11 and state["n_ctx"] == 96 and "tokenizer" not in state
        with pickle.loads(pickle.dumps(llm)) as copy:
            assert (copy.n_ctx(), copy.n_batch, copy._logits_all, copy._seed) == (96, 32, True, llm._seed)
            assert copy.n_tokens == 0   # the cache is not carried (llama_cpp's rule)
            copy.set_seed(11)
            assert copy("The river", max_tokens=6, temperature=0.9)["choices"][0]["text"] == want


def test_create_chat_completion_openai_v1(llm):
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    msgs = [{"role": "user", "content": "Say hi."}]
    r = llm.create_chat_completion_openai_v1(msgs, max_tokens=6, temperature=0)
    assert isinstance(r, ChatCompletion)
    assert r.choices[0].message.content == llm.create_chat_completion(msgs, max_tokens=6, temperature=0)[
        "choices"][0]["message"]["content"]
    chunks = list(llm.create_chat_completion_openai_v1(msgs, max_tokens=6, temperature=0, stream=True))
    assert chunks and all(isinstance(c, ChatCompletionChunk) for c in chunks)
