"""`pyriver serve --engine llama.cpp`: the batched server (several slots, continuous batching) on
llama.cpp's own graphs. A real server process and the openai client; greedy texts equal
llama_cpp.Llama's on the same file, with requests decoded together (up to a tie of the reference's
two best tokens, where a multi-row step's last bits may turn them). On a recurrent/hybrid memory
(lfm2), which cannot be cut part-way, a slot's cache is reused whole or not at all."""
from __future__ import annotations

import llama_cpp
import openai
import pytest

from server_proc import ServerProcess, http, together
from test_engine_llamacpp import NATIVE   # the ten native architectures' files, one each

PROMPTS = ["Once upon a time, a river", "The capital of France is", "def fib(n):"]
CHAT = [{"role": "user", "content": "Name three rivers."}]
N = 16
ARGS = ("--engine", "llama.cpp", "--ctx", "256", "--threads", "2")
# the reference: llama_cpp.Llama with the servers' default attention (-fa auto: flash attention, as llama-server's)
REF = dict(n_ctx=256, n_threads=2, verbose=False, flash_attn=True)


# Requests decoded together compute multi-row steps, whose last bits are not a one-row step's on
# every CPU (llama.cpp's own batch-mates change them too): a greedy text may part from the reference
# only where the reference's two best tokens tie within TIE (seen on an AVX2-only CPU: a synthetic
# Gemma 3's 13th token, 0.000105 apart).
TIE = 1e-3


def _reference(path):
    """llama_cpp.Llama's greedy texts alone, by prompt, and its chat answer, each as (text, its tokens,
    the gap between the two best log-probabilities at each)."""
    ref = llama_cpp.Llama(path, **REF, logits_all=True)

    def gap(top):
        v = sorted(top, reverse=True)
        return v[0] - v[1] if len(v) > 1 else float("inf")
    try:
        out = {}
        for p in PROMPTS:
            r = ref(p, max_tokens=N, temperature=0.0, logprobs=2)["choices"][0]
            out[p] = (r["text"], r["logprobs"]["tokens"], [gap(t.values()) for t in r["logprobs"]["top_logprobs"]])
        c = ref.create_chat_completion(CHAT, max_tokens=N, temperature=0.0, logprobs=True, top_logprobs=2)
        lp = c["choices"][0]["logprobs"]["content"]
        out["chat"] = (c["choices"][0]["message"]["content"], [t["token"] for t in lp],
                       [gap([x["logprob"] for x in t["top_logprobs"]]) for t in lp])
    finally:
        ref.close()
    return out


def _agrees(text, want) -> bool:
    """text is the reference's greedy text, or follows it up to a token where the reference's two best
    tied within TIE."""
    ref_text, tokens, gaps = want
    if text == ref_text:
        return True
    done = ""
    for t, g in zip(tokens, gaps):
        if not text.startswith(done + t):
            return g < TIE
        done += t
    return False


def test_agrees_holds_texts_to_the_reference_up_to_a_tie():
    want = ("a b c", ["a", " b", " c"], [0.5, 0.0001, 0.2])
    assert _agrees("a b c", want) and _agrees("a b x", want) is False and _agrees("a x", want)
    assert _agrees("x", want) is False and _agrees("a b c d", want) is False


def _together(client, prompts):
    """The greedy texts of prompts sent at once (each its own client thread)."""
    return together(lambda p: client.completions.create(model="m", prompt=p, max_tokens=N,
                                                        temperature=0.0).choices[0].text, prompts)


@pytest.fixture(scope="module", params=["granite", "smollm2"])
def served(request, foreign_paths, smol_path):
    path = smol_path if request.param == "smollm2" else foreign_paths[request.param]
    want = _reference(path)
    s = ServerProcess(path, "--parallel", "3", *ARGS)
    yield path, s, openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0), want
    s.close()


def test_concurrent_texts_equal_llama_cpp(served):
    _, s, client, want = served
    got = _together(client, PROMPTS)
    assert all(_agrees(got[p], want[p]) for p in PROMPTS), (got, want)
    c = client.chat.completions.create(model="m", messages=CHAT, max_tokens=N, temperature=0.0)
    assert c.choices[0].message.content == want["chat"][0]   # one request alone: one-row steps
    streamed = client.completions.create(model="m", prompt=PROMPTS[0], max_tokens=N, temperature=0.0, stream=True)
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == want[PROMPTS[0]][0]


def test_default_drafts_run_and_say_so(served):
    """The default n-gram drafts (the request's and the draft store's) verify with multi-token rows on
    this engine too, and the text stays greedy's. The same request again drafts on any measured table:
    its own match is long (SmolLM2 copies the prompt) or the store's is, the whole first text (the
    synthetic Granite's answer repeats one token, whose matches of 1 to 3 tokens must promise
    NGRAM_MARGIN over a plain step: CI's table once drafted none of them, this machine's 19)."""
    path, s, client, _ = served
    p = "1 2 3 1 2 3 1 2 3 1 2 3 1 2 3 1 2 3 1 2"
    want = _greedy_text(path, p, 3 * N)
    first = client.completions.create(model="m", prompt=p, max_tokens=3 * N, temperature=0.0)
    ls = first.model_extra["river"]["lossless"]
    assert ls["draft"] == "StoreLookup" and ls["verify_steps"] > 0, ls
    again = client.completions.create(model="m", prompt=p, max_tokens=3 * N, temperature=0.0)
    ls = again.model_extra["river"]["lossless"]
    assert ls["drafted"] > 0 and ls["accepted"] > 0, ls
    assert first.choices[0].text == want and again.choices[0].text == want


def test_bad_input_and_batch_invariance_refused(served, foreign_paths):
    _, s, client, _ = served
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="m", prompt=[10 ** 9], max_tokens=2)
    assert client.completions.create(model="m", prompt=PROMPTS[1], max_tokens=2, temperature=0.0).choices[0].text
    bad = ServerProcess(foreign_paths["granite"], "--batch-invariant", "--parallel", "2", *ARGS, wait=False)
    try:
        code, out = bad.exited()
        assert code == 1 and "batch_invariant=True" in out and "llama.cpp engine" in out, (code, out)
    finally:
        bad.close()


SERVED_FOREIGN = ["qwen35", "qwen35moe", "gemma4", "gpt-oss", "llama4", "granitehybrid"]


@pytest.mark.parametrize("arch", SERVED_FOREIGN + sorted(NATIVE))
def test_architectures_served_together(arch, foreign_paths, arch_paths):
    """The 2026 families of issue 40, and pyriver's ten native architectures asked to run on
    llama.cpp's graphs (--engine llama.cpp), through the batched server: three requests decoded
    together on three slots give llama_cpp.Llama's greedy texts alone, and its chat answer, so the
    llama.cpp engine's server is held to llama-cpp-python's numbers on both."""
    path = arch_paths[NATIVE[arch]] if arch in NATIVE else foreign_paths[arch]
    want = _reference(path)
    s = ServerProcess(path, "--parallel", "3", *ARGS)
    try:
        assert http("GET", s.url + "/river")[1]["engine"] == "llama.cpp"
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        got = _together(client, PROMPTS)
        assert all(_agrees(got[p], want[p]) for p in PROMPTS), (got, want)
        c = client.chat.completions.create(model="m", messages=CHAT, max_tokens=N, temperature=0.0)
        assert c.choices[0].message.content == want["chat"][0]   # alone: one-row steps
    finally:
        s.close()


@pytest.fixture(scope="module")
def lfm2(foreign_paths):
    s = ServerProcess(foreign_paths["lfm2"], "--parallel", "2", *ARGS)
    yield foreign_paths["lfm2"], s
    s.close()


def _complete(s, tokens, n=N):
    """llama-server's /completion on token ids: (generated ids, tokens_cached)."""
    status, r = http("POST", s.url + "/completion", {"prompt": tokens, "n_predict": n, "temperature": 0.0,
                                                      "return_tokens": True})
    assert status == 200, r
    return r["tokens"], r["tokens_cached"]


def test_lfm2_concurrent_texts_equal_llama_cpp(lfm2):
    path, s = lfm2
    want = _reference(path)
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
    got = _together(client, PROMPTS[:2])
    assert all(_agrees(got[p], want[p]) for p in PROMPTS[:2]), (got, want)
    # default drafts are off on a memory that cannot be cut part-way (a rejected draft would run the
    # slot's tokens again)
    r = client.completions.create(model="m", prompt="a b c d a b c d a b c d a b", max_tokens=4, temperature=0.0)
    assert not (r.model_extra.get("river") or {}).get("lossless")


def test_lfm2_slot_cache_is_reused_whole_or_not_at_all(lfm2):
    """llama.cpp's rule for a memory that cannot be cut part-way: a prompt that extends all of a
    slot's tokens (prompt and answer) reuses them; one that shares only part of them runs whole, on
    the slot that least recently started rather than on the one it shares a part with. Texts stay
    llama_cpp.Llama's."""
    path, s = lfm2
    ref = llama_cpp.Llama(path, **REF)
    first = ref.tokenize(b"The river runs to the sea, and the sea")
    gen, cached = _complete(s, first)
    assert cached == 0 and len(gen) == N
    # a continuation of the whole conversation so far: the slot's every token is reused (the last
    # one sampled never ran)
    more = first + gen + ref.tokenize(b" and then", add_bos=False)
    gen2, cached = _complete(s, more)
    assert cached == len(first) + N - 1
    # a prompt that shares only the first tokens with that slot (and the other slot's): runs whole
    part = first[:5] + ref.tokenize(b" mountains", add_bos=False)
    gen3, cached = _complete(s, part)
    assert cached == 0
    # ... and it ran on the other slot: the conversation's slot kept its tokens for the next turn
    again = more + gen2 + ref.tokenize(b" and so", add_bos=False)
    _, cached = _complete(s, again, 2)
    assert cached == len(more) + N - 1
    ref.close()
    for toks, got in ((more, gen2), (part, gen3)):
        assert got == _greedy_tokens(path, toks, len(got))


def _greedy_text(path, prompt, n=N):
    ref = llama_cpp.Llama(path, **REF)
    try:
        return ref(prompt, max_tokens=n, temperature=0.0)["choices"][0]["text"]
    finally:
        ref.close()


def _greedy_tokens(path, toks, n):
    """llama_cpp.Llama's greedy tokens after toks, on a fresh context."""
    ref = llama_cpp.Llama(path, **REF)
    try:
        out = []
        for t in ref.generate(toks, temp=0.0):
            out.append(t)
            if len(out) == n:
                return out
    finally:
        ref.close()


@pytest.mark.parametrize("arch,flags", [("lfm2", ("--lossless", "--lossless-draft", "ngram")),
                                        ("granite", ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
                                                     "--spec-ngram-simple-size-m", "4"))])
def test_asked_drafts_keep_greedy_text(foreign_paths, arch, flags):
    """Drafts asked for run on this engine: lossless mode on lfm2 (a rejected draft would replay the
    slot: its memory cannot be cut part-way), ngram-simple's verify rows share the step (no batch
    invariance here, as llama-server); the texts stay llama_cpp.Llama's."""
    path = foreign_paths[arch]
    p = "a b c d a b c d a b c d a b c d a b"
    s = ServerProcess(path, "--parallel", "2", *ARGS, *flags)
    try:
        status, r = http("POST", s.url + "/completion", {"prompt": p, "n_predict": N, "temperature": 0.0})
        assert status == 200, r
        assert r["content"] == _greedy_text(path, p)
        if arch == "granite":   # (lfm2's random weights do not go on with the pattern: nothing to draft)
            assert r["timings"]["draft_n"] > 0
        else:
            status, r = http("POST", s.url + "/v1/completions", {"prompt": p, "max_tokens": 4, "temperature": 0.0})
            assert r["river"]["lossless"]["verify_steps"] > 0
    finally:
        s.close()


def test_context_shift_and_river_refused(foreign_paths):
    path = foreign_paths["granite"]
    s = ServerProcess(path, "--parallel", "2", "--engine", "llama.cpp", "--ctx", "32", "--threads", "2",
                      "--context-shift", "--no-lossless")
    try:   # past the slot's 32 rows: half of the tokens go, generation goes on
        status, r = http("POST", s.url + "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 60,
                                                             "temperature": 0.0})
        assert status == 200 and r["usage"]["completion_tokens"] == 60, r
    finally:
        s.close()
    bad = ServerProcess(path, "--river", "q4_0", *ARGS, wait=False)
    try:
        code, out = bad.exited()
        assert code == 1 and "River needs pyriver's own graphs" in out and "'granite'" in out, (code, out)
    finally:
        bad.close()
