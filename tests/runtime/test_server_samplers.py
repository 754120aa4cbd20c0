"""Every sampler llama-server's requests take, honoured as llama-server honours it (issue 70): DRY with
its sequence breakers, XTC, mirostat 1 and 2, top-n-sigma, dynamic temperature, typical, min_keep
and a request's `samplers` order, each with a seed, give llama-server's text on the same SmolLM2 file
on /completion and /v1/completions (and /v1/chat/completions for one), and their settings come back
in generation_settings. llama-server answers first, then `pyriver serve` on the same flags."""
from __future__ import annotations

import pytest

from server_proc import ServerProcess, http, llama_server

PROMPT = "Write a list of fruits, one per line:\n1. apple\n2. banana\n3."
# DRY penalizes what would extend a repeat: a prompt that repeats itself
REPEATS = "I like the red car and the blue car. " * 3 + "I like the red car and the"
N = 24
CASES = {   # name: the request's sampling fields (a seed each, so that every draw is llama-server's)
    "dry": dict(seed=7, temperature=0.9, dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2,
                dry_penalty_last_n=32, prompt=REPEATS),
    "dry_breakers": dict(seed=7, temperature=0.9, dry_multiplier=0.8, dry_allowed_length=2,
                         dry_sequence_breakers=["car"], prompt=REPEATS),
    "xtc": dict(seed=11, temperature=1.0, xtc_probability=0.7, xtc_threshold=0.05),
    "xtc_greedy": dict(seed=11, temperature=0.0, xtc_probability=1.0, xtc_threshold=0.05),   # no argmax shortcut
    "mirostat1": dict(seed=3, temperature=1.0, mirostat=1, mirostat_tau=4.0, mirostat_eta=0.2,
                      repeat_penalty=1.5),   # llama-server's mirostat chain has no penalties
    "mirostat2": dict(seed=3, temperature=0.9, mirostat=2, mirostat_tau=3.0, mirostat_eta=0.15),
    "top_n_sigma": dict(seed=5, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, top_n_sigma=1.0),
    "dynatemp": dict(seed=9, temperature=1.0, dynatemp_range=0.8, dynatemp_exponent=1.5, top_k=0, min_p=0.0),
    "typical": dict(seed=13, temperature=1.2, typical_p=0.6, top_k=0, top_p=1.0, min_p=0.0),
    "min_keep": dict(seed=17, temperature=1.5, top_p=0.01, min_p=0.9, min_keep=6),
    "samplers": dict(seed=19, temperature=1.3, top_k=8, top_p=0.5, samplers=["temperature", "top_p", "top_k"]),
    "samplers_letters": dict(seed=19, temperature=1.3, top_k=8, top_p=0.5, repeat_penalty=1.3, samplers="kpte"),
}
CHAT_CASE = "dry"
FLAGS = ("-c", "1024", "-np", "1", "-t", "2")


def _answers(url):
    """{case: (/completion's text, /v1/completions' text, its generation_settings)} and the chat case's text."""
    out = {}
    for name, fields in CASES.items():
        fields = dict({"prompt": PROMPT}, **fields)
        status, native = http("POST", url + "/completion", dict(fields, n_predict=N))
        assert status == 200, (name, native)
        status, v1 = http("POST", url + "/v1/completions", dict(fields, max_tokens=N))
        assert status == 200, (name, v1)
        out[name] = (native["content"], v1["choices"][0]["text"], native["generation_settings"])
    status, chat = http("POST", url + "/v1/chat/completions",
                        dict(CASES[CHAT_CASE], messages=[{"role": "user", "content": REPEATS}], max_tokens=N))
    assert status == 200, chat
    return out, chat["choices"][0]["message"]["content"]


@pytest.fixture(scope="module")
def llama_servers_answers(smol_path):
    p = llama_server("-m", smol_path, *FLAGS)
    try:
        return _answers(p.url)
    finally:
        p.close()


@pytest.fixture(scope="module")
def ours(smol_path):
    s = ServerProcess("-m", smol_path, *FLAGS, "--no-lossless", "--no-batch-layout")
    try:
        yield s, _answers(s.url)
    finally:
        s.close()


@pytest.mark.slow
@pytest.mark.peer
@pytest.mark.parametrize("case", list(CASES))
def test_sampler_gives_llama_servers_text(case, ours, llama_servers_answers):
    (mine, _), (theirs, _) = ours[1], llama_servers_answers
    assert mine[case][0] == theirs[case][0], case        # /completion
    assert mine[case][1] == theirs[case][1], case        # /v1/completions
    settings = mine[case][2]
    for k, v in CASES[case].items():
        if k == "prompt":
            continue
        want = theirs[case][2].get(k)
        if k == "samplers":
            assert settings[k] == want, (settings[k], want)
        elif k != "seed":
            assert settings[k] == pytest.approx(want), (k, settings[k], want)


@pytest.mark.slow
@pytest.mark.peer
def test_chat_sampler_gives_llama_servers_text(ours, llama_servers_answers):
    assert ours[1][1] == llama_servers_answers[1]


@pytest.mark.slow
def test_sampler_fields_out_of_range_are_400(ours):
    s = ours[0]
    for path, extra in (("/completion", {"n_predict": 2}), ("/v1/completions", {"max_tokens": 2})):
        for bad in ({"repeat_last_n": -1}, {"dry_penalty_last_n": -2}, {"mirostat": 3}, {"min_keep": -1},
                    {"xtc_probability": 2}, {"dry_sequence_breakers": []}, {"dry_sequence_breakers": "x"},
                    {"samplers": 5}, {"top_k": "x"}, {"mirostat_tau": "high"}, {"dry_allowed_length": -1}):
            status, r = http("POST", s.url + path, dict(bad, prompt=PROMPT, **extra))
            key = next(iter(bad))
            assert status == 400 and key in r["error"]["message"], (path, bad, r)
        status, r = http("POST", s.url + path, dict(prompt=PROMPT, no_such_field=[1, {"x": 2}], **extra))
        assert status == 200, r   # a field llama-server does not know is ignored, as llama-server ignores it
