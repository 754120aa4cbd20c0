"""KV cache: truncation, prefix reuse, and positions."""
from __future__ import annotations

import numpy as np


def test_truncate_then_continue_equals_fresh(llm):
    a = llm.tokenize(b"The quick brown fox jumps over the lazy dog.")
    x = llm.tokenize(b" Meanwhile, somewhere else entirely", add_bos=False)
    b = llm.tokenize(b" The dog wakes up and", add_bos=False)
    # Fresh: a then b, in the same steps as below.
    llm.reset()
    llm.decode_logits(a)
    fresh = llm.decode_logits(b, logits_all=True)
    # Dirty: a, x, truncate back to a, then b.
    llm.reset()
    llm.decode_logits(a)
    llm.decode_logits(x)
    llm.context.truncate(len(a))
    again = llm.decode_logits(b, logits_all=True)
    assert np.array_equal(fresh, again)


def test_prefix_reuse_gives_same_text(llm):
    prompt = "List three fruits:"
    llm.reset()
    first = llm(prompt, max_tokens=24, temperature=0)["choices"][0]["text"]
    # A second call with the same prompt reuses all but the last prompt token.
    second = llm(prompt, max_tokens=24, temperature=0)["choices"][0]["text"]
    assert llm.last_stats["prompt_eval_tokens"] == 1
    llm.reset()
    third = llm(prompt, max_tokens=24, temperature=0)["choices"][0]["text"]
    assert first == second == third


def test_batch_split_matches_single_batch(smol_path):
    """With batch_invariant=True a prompt split over several n_batch steps gives the logits of one
    step, bit for bit."""
    from pyriver import Llama
    text = b"In the beginning there was a river, and the river ran to the sea. " * 6
    with Llama(smol_path, n_ctx=512, n_batch=512, verbose=False, batch_invariant=True) as one, \
            Llama(smol_path, n_ctx=512, n_batch=32, verbose=False, batch_invariant=True) as split:
        toks = one.tokenize(text)
        assert len(toks) > 64
        l1 = one.decode_logits(toks, logits_all=True)
        l2 = split.decode_logits(toks, logits_all=True)
        assert l1.shape == l2.shape == (len(toks), one.n_vocab())
        assert np.array_equal(l1, l2)
