"""Llama's keyword-only extras, llama-server's samplers (issue 70, item 4): DRY (with its sequence
breakers), XTC, top-n-sigma and dynamic temperature in create_completion / __call__ and
create_chat_completion, through the one chain builder (pyriver.engine.sampling), give llama-server's
text for the same seed on the same SmolLM2 file (its /completion and /v1/chat/completions, the same
settings); without them llama_cpp's chain is unchanged, and bad values are Python exceptions."""
from __future__ import annotations

import pytest

from server_proc import http, llama_server

PROMPT = "Write a list of fruits, one per line:\n1. apple\n2. banana\n3."
REPEATS = "I like the red car and the blue car. " * 3 + "I like the red car and the"   # DRY's repeats
N = 24
CASES = {   # name: (prompt, the sampling fields: Llama's keywords and llama-server's request fields alike)
    "dry": (REPEATS, dict(seed=7, temperature=0.9, dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2,
                          dry_penalty_last_n=32)),
    "dry_breakers": (REPEATS, dict(seed=7, temperature=0.9, dry_multiplier=0.8, dry_allowed_length=2,
                                   dry_sequence_breakers=["car"])),
    "xtc": (PROMPT, dict(seed=11, temperature=1.0, xtc_probability=0.7, xtc_threshold=0.05)),
    "top_n_sigma": (PROMPT, dict(seed=5, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, top_n_sigma=1.0)),
    "dynatemp": (PROMPT, dict(seed=9, temperature=1.0, dynatemp_range=0.8, dynatemp_exponent=1.5, top_k=0,
                              min_p=0.0)),
}
CHAT = [{"role": "user", "content": REPEATS}]
CHAT_CASE = "xtc"


@pytest.fixture(scope="module")
def peer(smol_path):
    """llama-server's texts: each case on /completion, the DRY case on /v1/chat/completions."""
    p = llama_server("-m", smol_path, "-c", "1024", "-np", "1", "-t", "2")
    try:
        out = {}
        for name, (prompt, fields) in CASES.items():
            status, r = http("POST", p.url + "/completion", dict(fields, prompt=prompt, n_predict=N))
            assert status == 200, (name, r)
            out[name] = r["content"]
        status, r = http("POST", p.url + "/v1/chat/completions", dict(CASES[CHAT_CASE][1], messages=CHAT, max_tokens=N))
        assert status == 200, r
        out["chat"] = r["choices"][0]["message"]["content"]
        return out
    finally:
        p.close()


@pytest.fixture(scope="module")
def ours(smol_path):
    from pyriver import Llama
    # flash attention on: llama-server's -fa auto on the CPU (the same logits to the last bit)
    m = Llama(smol_path, n_ctx=1024, n_threads=2, verbose=False, lossless=False, flash_attn=True)
    yield m
    m.close()


@pytest.mark.slow
@pytest.mark.peer
@pytest.mark.parametrize("case", list(CASES))
def test_extras_give_llama_server_s_text(case, ours, peer):
    prompt, fields = CASES[case]
    got = ours(prompt, max_tokens=N, **fields)["choices"][0]["text"]
    assert got == peer[case], case
    # the case tests something: without its sampler (the breakers case: with the default breakers) the text differs
    without = ({k: v for k, v in fields.items() if k != "dry_sequence_breakers"} if "dry_sequence_breakers" in fields
               else {k: v for k, v in fields.items() if k in ("seed", "temperature", "top_k", "top_p", "min_p")})
    plain = ours.create_completion(prompt, max_tokens=N, **without)["choices"][0]["text"]
    assert plain != got, "the sampler changed nothing here: the case tests nothing"


@pytest.mark.slow
@pytest.mark.peer
def test_chat_extras_give_llama_server_s_text(ours, peer):
    fields = CASES[CHAT_CASE][1]
    got = ours.create_chat_completion(CHAT, max_tokens=N, **fields)["choices"][0]["message"]["content"]
    assert got == peer["chat"]
    plain = ours.create_chat_completion(CHAT, max_tokens=N, seed=fields["seed"], temperature=fields["temperature"])
    assert plain["choices"][0]["message"]["content"] != got, "the sampler changed nothing here: the case tests nothing"


@pytest.mark.slow
def test_absent_extras_leave_llama_cpp_s_chain(ours):
    """Off-values of the extras are no extras: the same text as a call without them."""
    base = ours(PROMPT, max_tokens=12, seed=3, temperature=1.0)["choices"][0]["text"]
    off = ours(PROMPT, max_tokens=12, seed=3, temperature=1.0, dry_multiplier=0.0, xtc_probability=0.0,
               top_n_sigma=-1.0, dynatemp_range=0.0)["choices"][0]["text"]
    assert off == base


@pytest.mark.slow
def test_bad_extras_are_python_exceptions(ours):
    with pytest.raises(ValueError, match="xtc_probability"):
        ours(PROMPT, max_tokens=2, xtc_probability=2.0)
    with pytest.raises(ValueError, match="dry_multiplier"):
        ours(PROMPT, max_tokens=2, dry_multiplier=-1.0)
    with pytest.raises(TypeError, match="dry_sequence_breakers"):
        ours(PROMPT, max_tokens=2, dry_multiplier=0.8, dry_sequence_breakers="car")
    with pytest.raises(TypeError):   # keyword-only: llama_cpp's positional signature is unchanged
        ours.create_completion(PROMPT, None, 2, 0.8, 0.95, 0.05, 1.0, None, False, None, 0.0, 0.0, 1.0, 40, False,
                               None, 1.0, 0, 5.0, 0.1, None, None, None, None, None, 0.5)
