"""draft_model=: llama-cpp-python's LlamaPromptLookupDecoding (or pyriver's PromptLookupDecoding)
drafts, full depth verifies. A script written for llama_cpp.Llama with a draft model runs
unchanged on pyriver.Llama, with the same texts."""
from __future__ import annotations

import numpy as np
import pytest

from pyriver import Llama, PromptLookupDecoding

SCRIPT = '''
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding


def script(Llama, path, **kw):
    llm = Llama(model_path=path, n_ctx=512, n_threads=2, seed=7, verbose=False,
                draft_model=LlamaPromptLookupDecoding(num_pred_tokens=4), **kw)
    code = "def add(a, b):\\n    return a + b\\n\\n\\ndef sub(a, b):\\n    return a - b\\n\\n\\ndef mul(a, b):"
    out = {"completion": llm(code, max_tokens=40, temperature=0)["choices"][0]["text"]}
    out["stream"] = "".join(c["choices"][0]["text"]
                            for c in llm("Repeat: the river runs to the sea. Repeat:", max_tokens=24, temperature=0,
                                         stream=True))
    msgs = [{"role": "user", "content": "Say 'a river, a river, a river'."}]
    out["chat"] = llm.create_chat_completion(messages=msgs, max_tokens=24, temperature=0)["choices"][0]["message"]
    return out, llm
'''


@pytest.mark.parametrize("pair", ["stepwise", "default"])
def test_script_with_a_draft_model_runs_unchanged(smol_path, pair):
    import llama_cpp
    ns = {}
    exec(SCRIPT, ns)
    # stepwise: n_ubatch=1, llama.cpp verifies the drafts one token per micro-batch, as pyriver's
    # batch-invariant steps compute them; then the text is also pyriver's text without drafts.
    # default: both verify with multi-token kernels, whose last bits differ from single steps', so
    # the speculative text may differ from the plain one (llama.cpp's does on the first prompt).
    # (n_batch=1 with a draft model fails inside llama-cpp-python 0.3.36.)
    ref_kw, our_kw = {"stepwise": ({"n_ubatch": 1}, {"batch_invariant": True}), "default": ({}, {})}[pair]
    ref, _ = ns["script"](llama_cpp.Llama, smol_path, **ref_kw)
    got, llm = ns["script"](Llama, smol_path, **our_kw)
    assert got == ref
    assert llm.lossless and llm.river_stats()["lossless"]["draft"] == "LlamaPromptLookupDecoding"
    if pair == "default":
        return llm.close()
    # Exactly what pyriver gives without drafts, with drafts kept (prompt lookup pays on repeats).
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river=None, batch_invariant=True) as full:
        code = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):"
        assert full(code, max_tokens=40, temperature=0)["choices"][0]["text"] == got["completion"]
    llm(code, max_tokens=40, temperature=0)
    ls = llm.river_stats()["lossless"]
    assert ls["accepted"] > 0 and ls["verify_steps"] < 40
    llm.close()


def test_pyriver_prompt_lookup_drafts_as_llama_cpp_python(smol_path):
    """Same proposals as llama-cpp-python's on random and repetitive sequences, and the same
    generation when passed to pyriver.Llama."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    rng = np.random.default_rng(0)
    for n_gram, n_pred in [(1, 3), (2, 10), (3, 5)]:
        ours, theirs = PromptLookupDecoding(n_gram, n_pred), LlamaPromptLookupDecoding(n_gram, n_pred)
        for _ in range(300):
            ids = rng.integers(0, 6, size=int(rng.integers(1, 40))).astype(np.intc)
            assert np.array_equal(ours(ids), theirs(ids)), ids
    texts = []
    for draft in (PromptLookupDecoding(num_pred_tokens=4), LlamaPromptLookupDecoding(num_pred_tokens=4)):
        with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river=None, draft_model=draft) as llm:
            texts.append(llm("one two three, one two three, one two", max_tokens=24, temperature=0)["choices"][0]["text"])
            texts.append(llm.river_stats()["lossless"]["accepted"])
    assert texts[0] == texts[2] and texts[1] == texts[3] > 0


def test_bad_draft_models_are_clear_errors(smol_path):
    with pytest.raises(TypeError, match="callable"):
        Llama(smol_path, n_ctx=64, verbose=False, river=None, draft_model=42)
    with pytest.raises(ValueError, match="unknown drafter"):   # a name: river, ngram or both
        Llama(smol_path, n_ctx=64, verbose=False, river=None, draft_model="bigram")
    with pytest.raises(ValueError, match="lossless=False"):
        Llama(smol_path, n_ctx=64, verbose=False, river=None, lossless=False, draft_model=PromptLookupDecoding())
    with pytest.raises(ValueError, match="drafts with a river"):
        Llama(smol_path, n_ctx=64, verbose=False, river=None, lossless=True)
    with Llama(smol_path, n_ctx=64, verbose=False, river=None,
               draft_model=lambda ids: np.array([10 ** 7], dtype=np.intc)) as llm:
        with pytest.raises(ValueError, match="out of range"):
            llm("The river", max_tokens=4, temperature=0)
        llm.set_lossless(False)   # the object stays usable
        assert llm("The river", max_tokens=4, temperature=0)["usage"]["completion_tokens"] == 4
