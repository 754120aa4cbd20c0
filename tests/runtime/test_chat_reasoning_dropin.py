"""Llama.create_chat_completion on a thinking model returns what llama-cpp-python 0.3.36 returns:
the thinking stays inside `content` (llama_cpp parses no reasoning; pyriver.Llama is its drop-in),
plain and streamed, on SmolLM2 under Qwen3.5's template (it opens <think> itself), the answer held
by a grammar. The split into reasoning_content is the server's (tests/runtime/test_server_reasoning.py)."""
from __future__ import annotations

import shutil

import pytest
from gguf import GGUFValueType

pytestmark = pytest.mark.slow

TEXT = "abc</think>The answer"
GRAMMAR = 'root ::= "abc</think>The answer"'
MSG = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def thinking_gguf(tmp_path_factory, smol_path):
    from pyriver.tools import llama_server as ls
    from pyriver.tools.gguf_io import rewrite_kv
    tmpl = (ls.sdist_root() / "vendor" / "llama.cpp" / "models" / "templates" / "Qwen3.5-4B.jinja").read_text()
    p = tmp_path_factory.mktemp("think") / "smol-qwen35.gguf"
    shutil.copy(smol_path, p)
    return str(rewrite_kv(p, {"tokenizer.chat_template": (tmpl, GGUFValueType.STRING)}))


def _answers(llm):
    from llama_cpp import LlamaGrammar
    g = LlamaGrammar.from_string(GRAMMAR, verbose=False)
    plain = llm.create_chat_completion(MSG, max_tokens=30, temperature=0, grammar=g)["choices"][0]["message"]
    deltas = [ch["choices"][0]["delta"] for ch in llm.create_chat_completion(
        MSG, max_tokens=30, temperature=0, grammar=LlamaGrammar.from_string(GRAMMAR, verbose=False), stream=True)]
    return plain, "".join(d.get("content") or "" for d in deltas), [d for d in deltas if "reasoning_content" in d]


def test_thinking_stays_in_content_as_llama_cpp_python_returns_it(thinking_gguf):
    import llama_cpp

    from pyriver import Llama
    ref = llama_cpp.Llama(thinking_gguf, n_ctx=512, n_threads=2, verbose=False)
    try:
        theirs = _answers(ref)
    finally:
        ref.close()
    with Llama(thinking_gguf, n_ctx=512, n_threads=2, verbose=False) as llm:
        ours = _answers(llm)
    assert theirs[0] == {"role": "assistant", "content": TEXT} and theirs[1] == TEXT and theirs[2] == []
    assert ours == theirs
