"""create_completion(suffix=...) (pyriver/text/infill.py): llama-cpp-python's fill-in-the-middle
prompt layout with the model's own FIM tokens. llama_cpp 0.3.36 puts token id 0 where the FIM
tokens go (a TODO in its source), so the reference is llama_cpp.Llama completing the same prompt
given as token ids (FIM tokens from llama.cpp's vocab, as llama-server's /infill lays them out)."""
from __future__ import annotations

import llama_cpp
import pytest

PREFIX = "def fibonacci(n):\n    "
SUFFIX = "\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"


def _fim_ids(ref, prefix, suffix):
    v = ref._model.vocab
    pre, suf, mid = (llama_cpp.llama_vocab_fim_pre(v), llama_cpp.llama_vocab_fim_suf(v), llama_cpp.llama_vocab_fim_mid(v))
    assert min(pre, suf, mid) >= 0
    return ([pre] + ref.tokenize(prefix.encode(), add_bos=False, special=False) + [suf]
            + ref.tokenize(suffix.encode(), add_bos=False, special=False) + [mid])


def test_fim_prompt_and_text_are_llama_cpp_s_with_the_model_s_tokens(qwen15_path):
    from pyriver import Llama
    ref = llama_cpp.Llama(qwen15_path, n_ctx=256, n_threads=2, verbose=False)
    ids = _fim_ids(ref, PREFIX, SUFFIX)
    want = ref.create_completion(ids, max_tokens=12, temperature=0)
    suf_at = ids.index(llama_cpp.llama_vocab_fim_suf(ref._model.vocab))
    spm_ids = ids[suf_at:-1] + ids[:suf_at] + ids[-1:]
    want_spm = ref.create_completion(spm_ids, max_tokens=12, temperature=0)
    ref.close()
    with Llama(qwen15_path, n_ctx=256, n_threads=2, river=None, verbose=False) as llm:
        got = llm.create_completion(PREFIX, suffix=SUFFIX, max_tokens=12, temperature=0)
        assert got["usage"]["prompt_tokens"] == len(ids)
        assert got["choices"][0]["text"] == want["choices"][0]["text"]
        assert got["choices"][0]["text"].strip()
        llm.spm_infill = True
        got = llm.create_completion(PREFIX, suffix=SUFFIX, max_tokens=12, temperature=0)
        assert got["choices"][0]["text"] == want_spm["choices"][0]["text"]


def test_a_model_without_fim_tokens_appends_the_suffix_as_llama_cpp_s_rule(llm):
    plain = llm("The river", max_tokens=6, temperature=0)["choices"][0]["text"]
    got = llm("The river", suffix=" THE END", max_tokens=6, temperature=0)
    assert got["choices"][0]["text"] == plain + " THE END"
    with pytest.raises(TypeError, match="suffix"):
        llm("The river", suffix=3, max_tokens=2)
