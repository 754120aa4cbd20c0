"""Llama(draft_store=...) (issue 71): lossless mode's n-gram drafts learn across calls and Llamas
of the same model; the text stays full depth's (batch-invariant: decode steps' bit for bit); a
store of another model, or a file that is not a good store, is refused."""
from __future__ import annotations

import pytest

from pyriver import Llama
from pyriver.speculative.store import DraftStore, DraftStoreError

KW = dict(n_ctx=1024, n_threads=2, verbose=False, river=None, batch_invariant=True)
MSGS = [{"role": "user", "content": "Write a Python function that returns the sum of the squares of a list."}]


def _chat(llm, msgs=MSGS):
    out = llm.create_chat_completion(messages=msgs, max_tokens=60, temperature=0)["choices"][0]["message"]["content"]
    return out, (llm.river_stats() or {}).get("lossless")


@pytest.fixture(scope="module")
def reference(smol_path):
    with Llama(smol_path, **KW) as full:
        return _chat(full)[0]


def test_a_repeated_answer_is_drafted_from_the_store(smol_path, reference):
    with Llama(smol_path, lossless=True, draft_model="ngram", draft_max=16, draft_store=True, **KW) as llm:
        first, s1 = _chat(llm)
        assert llm.draft_store is not None and len(llm.draft_store) == 1
        second, s2 = _chat(llm)
    assert first == second == reference
    store = s2["by_source"]["store"]
    assert store["accepted"] >= 40, s2   # most of the answer came from the store
    assert s2["verify_steps"] < s1["verify_steps"] / 3, (s1, s2)
    assert "store" not in s1.get("by_source", {})


def test_shared_between_llamas_of_the_same_model(smol_path, reference):
    with Llama(smol_path, lossless=True, draft_model="ngram", draft_max=16, draft_store=True, **KW) as a:
        _chat(a)
        with Llama(smol_path, lossless=True, draft_model="ngram", draft_max=16, draft_store=a.draft_store, **KW) as b:
            text, st = _chat(b)
    assert text == reference and st["by_source"]["store"]["accepted"] >= 40


def test_without_a_store_nothing_is_drafted_from_earlier_calls(smol_path):
    with Llama(smol_path, lossless=True, draft_model="ngram", draft_max=16, **KW) as llm:
        _chat(llm)
        _, st = _chat(llm)
    assert llm.draft_store is None and "store" not in st.get("by_source", {})


def test_kept_in_a_file(smol_path, reference, tmp_path):
    p = tmp_path / "store.bin"
    with Llama(smol_path, lossless=True, draft_model="ngram", draft_max=16, draft_store=str(p), **KW) as llm:
        _chat(llm)
    assert p.exists()   # written back at close
    with Llama(smol_path, lossless=True, draft_model="ngram", draft_max=16, draft_store=str(p), **KW) as llm:
        text, st = _chat(llm)
    assert text == reference and st["by_source"]["store"]["accepted"] >= 40


def test_another_models_store_is_refused(smol_path, gemma_path, tmp_path):
    with pytest.raises(ValueError, match="another model"):
        Llama(smol_path, lossless=True, draft_model="ngram", draft_store=DraftStore("0" * 64), **KW)
    p = tmp_path / "gemma.bin"
    with Llama(gemma_path, n_ctx=256, n_threads=2, verbose=False, river=None, draft_store=str(p)) as g:
        g.draft_store.add(list(range(10, 40)))
    with pytest.raises(DraftStoreError, match="another model"):
        Llama(smol_path, lossless=True, draft_model="ngram", draft_store=str(p), **KW)
    p.write_bytes(p.read_bytes()[:-3])
    with pytest.raises(DraftStoreError, match="truncated"):
        Llama(gemma_path, n_ctx=256, n_threads=2, verbose=False, river=None, draft_store=str(p))
