"""LlamaIndex (llama-index-llms-llama-cpp 0.7): `LlamaCPP` (complete, stream_chat). The
integration binds `Llama` when it is imported (`from llama_cpp import Llama` in
llama_index.llms.llama_cpp.base), so the test swaps that name."""
from __future__ import annotations

import pytest
from llama_index.core.llms import ChatMessage
import llama_index.llms.llama_cpp.base as li_base
from llama_index.llms.llama_cpp import LlamaCPP

from both import CLASSES, check_class, swapped

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def runs(smol_path):
    out = {}
    for name, cls in CLASSES.items():
        with swapped(li_base, cls):
            llm = LlamaCPP(model_path=smol_path, temperature=0, max_new_tokens=16, context_window=512,
                           model_kwargs={"n_threads": 2}, verbose=False)
        chat = [ChatMessage(role="system", content="You answer briefly."),
                ChatMessage(role="user", content="Name a river in Europe.")]
        out[name] = {"model": llm._model, "context_window": llm.metadata.context_window,
                     "complete": llm.complete("The capital of France is").text,
                     "stream_chat": [(r.delta, r.message.content) for r in llm.stream_chat(chat)]}
        llm._model.close()
    return out


def test_llamaindex_builds_the_swapped_class(runs):
    for name, r in runs.items():
        check_class(r["model"], name)
        assert r["context_window"] == 512   # LLMMetadata reads Llama.context_params.n_ctx


def test_llamaindex_complete(runs):
    assert runs["pyriver"]["complete"] == runs["llama_cpp"]["complete"] and runs["pyriver"]["complete"].strip()


def test_llamaindex_stream_chat(runs):
    ours, ref = runs["pyriver"]["stream_chat"], runs["llama_cpp"]["stream_chat"]
    assert ours == ref and len(ours) > 8   # each delta and the text so far
