"""LangChain (langchain-community 0.4): `LlamaCpp` (invoke, stream) and `ChatLlamaCpp` (invoke,
with_structured_output with a pydantic schema). Both build their client with
`from llama_cpp import Llama` when the object is made, so the test swaps `llama_cpp.Llama`."""
from __future__ import annotations

import warnings

import llama_cpp
import pytest
from pydantic import BaseModel

from both import CLASSES, check_class, swapped

pytestmark = pytest.mark.clients

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)   # "langchain-community is being sunset"
    from langchain_community.chat_models import ChatLlamaCpp
    from langchain_community.llms import LlamaCpp


class City(BaseModel):
    city: str
    country: str


@pytest.fixture(scope="module")
def runs(smol_path):
    out = {}
    for name, cls in CLASSES.items():
        with swapped(llama_cpp, cls):
            llm = LlamaCpp(model_path=smol_path, temperature=0, max_tokens=16, n_ctx=512, n_threads=2,
                           streaming=False, verbose=False)
            chat = ChatLlamaCpp(model_path=smol_path, temperature=0, max_tokens=48, n_ctx=512, n_threads=2,
                                verbose=False)
        r = {"llm_client": llm.client, "chat_client": chat.client,
             "invoke": llm.invoke("The capital of France is"),
             "stream": list(llm.stream("Rivers are")),
             "chat": chat.invoke("What is a river?").content,
             "structured": chat.with_structured_output(City, include_raw=True).invoke("Name a city and its country.")}
        out[name] = r
        llm.client.close()
        chat.client.close()
    return out


def test_langchain_builds_the_swapped_class(runs):
    for name, r in runs.items():
        check_class(r["llm_client"], name)
        check_class(r["chat_client"], name)


def test_langchain_llamacpp_invoke_and_stream(runs):
    ref, ours = runs["llama_cpp"], runs["pyriver"]
    assert ours["invoke"] == ref["invoke"] and ours["invoke"].strip()
    assert ours["stream"] == ref["stream"] and len(ours["stream"]) > 8   # the same chunks, token by token


def test_langchain_chat_invoke(runs):
    assert runs["pyriver"]["chat"] == runs["llama_cpp"]["chat"] and runs["pyriver"]["chat"].strip()


def test_langchain_chat_with_structured_output(runs):
    """with_structured_output binds the schema as a tool with a named tool_choice. Both classes
    answer with a call that validates; the arguments differ, as the prompts do: llama_cpp's
    GGUF-template handler renders the chat (SmolLM2's template ignores tools) and constrains the
    bare arguments, pyriver offers the tools in a system message and constrains a Hermes
    `<tool_call>` (as llama-server does; docs/api.md, Structured output and tools)."""
    for name, r in runs.items():
        s = r["structured"]
        assert s["parsing_error"] is None, f"{name}: {s['parsing_error']}"
        assert isinstance(s["parsed"], City), f"{name}: {s['raw']!r}"
        assert s["raw"].tool_calls[0]["name"] == "City"
