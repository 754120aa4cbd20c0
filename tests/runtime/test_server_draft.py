"""Drafters in the server (issue 28): a draft model (--model-draft) and n-gram lookup
(--spec-type ngram-simple) draft for each slot and the model verifies in the batch step; a
stream's tokens are the ones the model samples without drafts. Real server processes, the real
openai client; --batch-invariant so that a verify step's logits are a decode step's bit for bit."""
from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from server_proc import ServerProcess, http

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, in a small village,",
           "List three colors: red, green,", "The quick brown fox jumps over the lazy dog. The quick brown fox"]
COMMON = ("-np", "4", "-t", "2", "--ctx", "256", "--batch-invariant")


@pytest.fixture(scope="module")
def servers(smol_path, synth_paths):
    """No drafter; SmolLM2 drafting for itself (every draft right); a random-weight model with
    SmolLM2's vocabulary (drafts mostly wrong); n-gram lookup."""
    out = {}
    try:
        out["plain"] = ServerProcess(smol_path, *COMMON, "--no-lossless")
        out["self"] = ServerProcess(smol_path, *COMMON, "--model-draft", smol_path, "--spec-draft-n-max", "6")
        out["random"] = ServerProcess(smol_path, *COMMON, "-md", synth_paths["mha"], "--spec-draft-n-max", "4")
        out["ngram"] = ServerProcess(smol_path, *COMMON, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n",
                                     "2", "--spec-ngram-simple-size-m", "8")
        # lossless mode's n-gram drafter (pyriver.speculative.draft's, no river) with the draft length by cost, the
        # request's n-grams only (the store of earlier requests' texts: test_server_draft_store)
        out["lossless-ngram"] = ServerProcess(smol_path, *COMMON, "--lossless", "--lossless-draft", "ngram",
                                              "--draft-max", "6", "--draft-cost", "default", "--no-draft-store")
        yield out
    finally:
        for s in out.values():
            s.close()


def complete(server, prompt, **kw):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    r = c.completions.create(model="m", prompt=prompt, max_tokens=kw.pop("max_tokens", 40), **kw)
    return r.choices[0].text, r.choices[0].finish_reason


def all_streams(server, **kw):
    """Every prompt at once: 4 slots decode together, drafting each."""
    with ThreadPoolExecutor(len(PROMPTS)) as ex:
        return list(ex.map(lambda p: complete(server, p, **kw), PROMPTS))


@pytest.mark.parametrize("drafter", ["self", "random", "ngram", "lossless-ngram"])
def test_drafts_change_no_token_greedy(servers, drafter):
    want = all_streams(servers["plain"], temperature=0.0)
    assert all_streams(servers[drafter], temperature=0.0) == want


@pytest.mark.parametrize("drafter", ["self", "random"])
def test_drafts_change_no_token_sampled(servers, drafter):
    # each position is sampled as without drafts, with the same random draws
    kw = dict(temperature=0.9, top_p=0.95, seed=7)
    assert [complete(servers[drafter], p, **kw) for p in PROMPTS[:3]] == \
        [complete(servers["plain"], p, **kw) for p in PROMPTS[:3]]


def test_draft_stats(servers):
    body = {"prompt": PROMPTS[0], "n_predict": 32, "temperature": 0.0, "ignore_eos": True}
    t_self = http("POST", servers["self"].url + "/completion", body)[1]["timings"]
    t_rand = http("POST", servers["random"].url + "/completion", body)[1]["timings"]
    assert t_self["draft_n"] > 0 and t_self["draft_n_accepted"] == t_self["draft_n"]   # its own drafts: all right
    assert t_rand["draft_n"] > 0 and t_rand["draft_n_accepted"] < t_rand["draft_n"]
    assert "draft_n" not in http("POST", servers["plain"].url + "/completion", body)[1]["timings"]


def test_lossless_drafter_reaches_the_scheduler(servers, smol_path):
    """--lossless --lossless-draft ngram --draft-cost default: the requests' lossless statistics name
    the n-gram drafter and the draft length by cost, and it drafts on a text that repeats itself."""
    body = {"prompt": PROMPTS[4], "n_predict": 32, "temperature": 0.0, "ignore_eos": True}
    code, got = http("POST", servers["lossless-ngram"].url + "/completion", body)
    assert code == 200, got
    assert got["timings"]["draft_n"] > 0
    c = openai.OpenAI(base_url=servers["lossless-ngram"].url + "/v1", api_key="x", max_retries=0)
    r = c.completions.create(model="m", prompt=PROMPTS[4], max_tokens=32, temperature=0.0)
    ls = r.model_extra["river"]["lossless"]
    assert ls["draft"] == "SuffixLookup" and ls["draft_length"] == "by cost"
    assert set(ls["by_source"]) == {"ngram"} and ls["by_source"]["ngram"]["drafted"] > 0
    assert http("GET", servers["lossless-ngram"].url + "/river")[1]["river"]["draft"] == "SuffixLookup"
    # A lone stream drafts what Llama's lossless mode drafts with the same drafter and cost rule.
    from pyriver import Llama
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river=None, batch_invariant=True, lossless=True,
               draft_model="ngram", draft_max=6, draft_cost="default") as llm:
        want = llm(PROMPTS[4], max_tokens=32, temperature=0)
    assert r.choices[0].text == want["choices"][0]["text"]
    assert (ls["drafted"], ls["accepted"]) == (want["river"]["lossless"]["drafted"], want["river"]["lossless"]["accepted"])


def test_lossless_river_drafts_by_cost(smol_path):
    """--river q4_0 --lossless --draft-cost default: each slot's river drafts by cost, as Llama's
    lossless mode drafts alone (the CPU table's river draft costs 0.77 of a step: it never pays here)."""
    s = ServerProcess(smol_path, *COMMON, "--river", "q4_0", "--lossless", "--draft-cost", "default")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        r = c.completions.create(model="m", prompt=PROMPTS[4], max_tokens=24, temperature=0.0)
    finally:
        s.close()
    ls = r.model_extra["river"]["lossless"]
    assert ls["draft_length"] == "by cost" and set(ls["by_source"]) == {"river"}
    from pyriver import Llama
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, river="q4_0", batch_invariant=True, lossless=True,
               draft_cost="default") as llm:
        want = llm(PROMPTS[4], max_tokens=24, temperature=0)
    assert r.choices[0].text == want["choices"][0]["text"]
    assert (ls["drafted"], ls["accepted"]) == (want["river"]["lossless"]["drafted"], want["river"]["lossless"]["accepted"])


def test_drafts_stop_at_the_context(servers, smol_path):
    """A prompt 4 tokens short of a 256-token slot with 6-token drafts: the stream ends at the
    context, never past it, and says why."""
    s = servers["self"]
    toks = http("POST", s.url + "/tokenize", {"content": "Hello " * 300})[1]["tokens"][:252]
    code, got = http("POST", s.url + "/completion", {"prompt": toks, "temperature": 0.0, "n_predict": 100})
    assert code == 200, got
    assert got["tokens_predicted"] == 256 - 252 and got["truncated"] is True and got["stop_type"] == "limit"
    assert got["timings"]["draft_n"] > 0


def test_context_shift_with_drafts(smol_path):
    s = ServerProcess(smol_path, "-np", "1", "-t", "2", "--ctx", "128", "--context-shift", "-md", smol_path,
                      "--spec-draft-n-max", "4")
    try:
        prompt = "Hello " * 100
        code, got = http("POST", s.url + "/completion", {"prompt": prompt, "temperature": 0.0, "n_predict": 120,
                                                        "ignore_eos": True})
        assert code == 200, got
        assert got["tokens_predicted"] == 120 and got["truncated"] is True and got["timings"]["draft_n"] > 0
        # the slot goes on serving
        assert complete(s, PROMPTS[0], temperature=0.0, max_tokens=4)[1] == "length"
    finally:
        s.close()


def test_default_kernels_same_tokens(smol_path):
    """Without --batch-invariant a verify step's rows still get a decode step's bits (they run in
    a step of their own with one-token products): a lone stream's sampled tokens are the ones it
    gets without drafts (llama.cpp's test_with_and_without_draft request)."""
    body = {"prompt": "I believe the meaning of life is", "temperature": 0.2, "top_k": 5, "seed": 4242,
            "n_predict": 24, "return_tokens": True}
    got = {}
    for name, extra in (("plain", ("--no-lossless",)), ("draft", ("-md", smol_path, "--spec-draft-n-max", "8"))):
        s = ServerProcess(smol_path, "-np", "1", "-t", "2", "--ctx", "512", *extra)
        try:
            got[name] = [http("POST", s.url + "/completion", dict(body, prompt=p))[1]["tokens"] for p in PROMPTS[:3]]
        finally:
            s.close()
    assert got["draft"] == got["plain"]


def test_vocabulary_rule(smol_path, gemma_path, synth_paths):
    from pyriver.server.drafting import check_vocab
    check_vocab(smol_path, synth_paths["mha"])   # SmolLM2's tokenizer, other weights: accepted
    with pytest.raises(ValueError, match="does not share the model's vocabulary"):
        check_vocab(smol_path, gemma_path)


def refusal(*args: str) -> str:
    p = subprocess.run([sys.executable, "-m", "pyriver.server", *args, "--port", "9"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    return p.stderr


def test_other_vocabulary_refused_at_start(smol_path, gemma_path):
    err = refusal(smol_path, "--model-draft", gemma_path)
    assert "does not share the model's vocabulary" in err and "Traceback" not in err


@pytest.mark.parametrize("args,words", [
    (["--river", "q4_0", "--lossless", "--model-draft", "X"], "one drafter per server"),
    (["--river", "q4_0", "--spec-type", "ngram-simple"], "--river without --lossless"),
    (["--spec-type", "ngram-mod"], "not built in pyriver"),
    (["--spec-type", "draft-simple"], "needs --model-draft"),
    (["--spec-synth-rates", "0.5"], "needs a drafter"),
    (["--spec-type", "ngram-simple", "--spec-synth-rates", "0.5"], "must give 48 values"),
    (["--model-draft", "/nonexistent/draft.gguf"], "draft.gguf"),
    (["--river", "q4_0", "--lossless", "--lossless-draft", "both"], "not from both"),
    (["--river", "q4_0", "--lossless", "--lossless-draft", "ngram"], "leave out --river"),
    (["--lossless-draft", "ngram"], "add --lossless"),
    (["--river", "q4_0", "--draft-cost", "default"], "add --lossless"),
    (["--lossless"], "need --river"),
    (["--lossless", "--lossless-draft", "bigram"], "invalid choice: 'bigram'"),
    (["--lossless", "--lossless-draft", "ngram", "--draft-cost", "/nonexistent/vc.json"], "not a readable file"),
    (["--lossless", "--lossless-draft", "ngram", "--spec-type", "ngram-simple"], "one drafter per server"),
])
def test_bad_drafter_settings_refused(smol_path, args, words):
    err = refusal(smol_path, *args)
    assert words in err and "Traceback" not in err
