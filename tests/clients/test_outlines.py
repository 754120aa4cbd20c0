"""outlines 1.3: `outlines.from_llamacpp(llm)` and structured generation. What outlines reads of
the Llama: `tokenizer()` (tokenize, detokenize), `tokenizer_` (an `hf_tokenizer` there would
replace llama.cpp's vocabulary; pyriver's is llama.cpp's own), `token_eos()`, `n_vocab()` and
`model` (llama.cpp's llama_model_p: it walks the vocabulary with llama_model_get_vocab and
llama_token_to_piece to build its index), then `__call__` / `create_chat_completion` with
`logits_processor` (its constraint, over numpy logits), `stream=True`, and `reset()`."""
from __future__ import annotations

import re
from typing import Literal

import outlines
import pytest
from outlines.models.llamacpp import LlamaCppTokenizer
from outlines.types import Regex
from pydantic import BaseModel

from both import CLASSES

pytestmark = pytest.mark.clients


class City(BaseModel):
    city: str
    country: str


def test_outlines_reads_llama_cpps_vocabulary(llamas):
    ref, ours = (LlamaCppTokenizer(llamas[n]) for n in CLASSES)
    assert ours._hf_tokenizer is None and ref._hf_tokenizer is None
    assert len(ours.vocabulary) > 40000
    assert ours.vocabulary == ref.vocabulary
    assert (ours.eos_token_id, ours.eos_token) == (ref.eos_token_id, ref.eos_token)
    assert ours.encode("Hello world") == ref.encode("Hello world")
    assert ours.decode([19556, 905]) == ref.decode([19556, 905])


@pytest.fixture(scope="module")
def runs(llamas):
    out = {}
    for name, llm in llamas.items():
        chat, plain = outlines.from_llamacpp(llm), outlines.from_llamacpp(llm, chat_mode=False)
        out[name] = {
            "json": chat("Name a city and its country as JSON.", City, max_tokens=48, temperature=0),
            "choice": chat("Is the sky blue?", Literal["yes", "no"], max_tokens=4, temperature=0),
            "regex": list(plain.stream("The Eiffel Tower was finished in the year", Regex(r" [0-9]{4}"),
                                       max_tokens=8, temperature=0)),
        }
    return out


def test_outlines_json_schema(runs):
    assert runs["pyriver"]["json"] == runs["llama_cpp"]["json"]
    City.model_validate_json(runs["pyriver"]["json"])


def test_outlines_choice(runs):
    assert runs["pyriver"]["choice"] == runs["llama_cpp"]["choice"]
    assert runs["pyriver"]["choice"] in ("yes", "no")


def test_outlines_regex_stream(runs):
    ours = runs["pyriver"]["regex"]
    assert ours == runs["llama_cpp"]["regex"]
    assert re.fullmatch(r" [0-9]{4}", "".join(ours)), ours
