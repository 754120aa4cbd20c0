"""Long context on a real `pyriver serve`, against llama-server on the same file: the context shift
keeps a request's n_keep tokens (llama-server's rule, server/context_shift.py) and --cache-reuse
moves a cached prompt's chunks to their new places instead of computing them again (timings'
cache_n / prompt_n as llama-server reports them). On the llama.cpp engine both move cached rows as
llama-server does (llama_memory_seq_rm + seq_add), so the tokens are llama-server's; so does the
native engine (pr_seq_drop: the rows move, their keys rotated as llama.cpp's K-shift rotates them,
bit for bit: test_kv_shift.py), whose tokens are llama-server's up to the shift and its own after it
(llama.cpp's new tokens land in other cells: test_native_engine_shift_moves_rows_as_llama_server)."""
from __future__ import annotations

import re
import urllib.request

import pytest

from server_proc import ServerProcess, http, llama_server

pytestmark = pytest.mark.slow

# llama-server pads n_ctx to 256: both servers get one slot of 256 rows
CTX = ("-np", "1", "-t", "2")
STORY = "Once upon a time, in a small village by the sea, there lived an old fisherman named"


def _gen(url, **extra):
    code, r = http("POST", url + "/completion", {"prompt": STORY, "n_predict": 300, "temperature": 0,
                                                 "ignore_eos": True, "return_tokens": True, "cache_prompt": False,
                                                 **extra})
    assert code == 200, r
    assert r["tokens_predicted"] == 300
    return r["tokens"]


@pytest.fixture(scope="module")
def peer(smol_path):
    s = llama_server("-m", smol_path, "-c", "256", "--context-shift", "--cache-reuse", "8", *CTX)
    yield s
    s.close()


@pytest.fixture(scope="module")
def ours(smol_path):
    s = ServerProcess(smol_path, "--ctx", "256", "--context-shift", "--no-lossless", "--engine", "llama.cpp",
                      "--cache-reuse", "8", *CTX)
    yield s
    s.close()


def test_context_shift_keeps_n_keep_tokens_as_llama_server(peer, ours):
    for keep in (0, 40, -1):
        assert _gen(ours.url, n_keep=keep) == _gen(peer.url, n_keep=keep), keep
    assert _gen(ours.url, n_keep=40) != _gen(ours.url, n_keep=0)   # what is kept decides what follows
    assert _gen(ours.url, n_keep=40, n_discard=20) == _gen(peer.url, n_keep=40, n_discard=20)


def test_native_engine_shift_keeps_n_keep_tokens(smol_path, peer):
    s = ServerProcess(smol_path, "--ctx", "256", "--context-shift", "--no-lossless", "--engine", "native",
                      "--keep", "40", *CTX)
    try:
        kept = _gen(s.url)   # --keep 40: the server's n_keep
        assert kept == _gen(s.url, n_keep=40) and kept != _gen(s.url, n_keep=0)
        ref = _gen(peer.url, n_keep=40)
        n_before = 256 - 1 - len(http("POST", s.url + "/tokenize", {"content": STORY})[1]["tokens"])
        assert kept[:n_before] == ref[:n_before]   # up to the shift: llama-server's tokens
    finally:
        s.close()


# The native engine against llama-server on the same cache: its shifted keys are llama.cpp's there
KEEP = 40   # the servers' --keep: a request without n_keep keeps this many tokens
NATIVE_CASES = {"f16": ("-fa", "off"), "q8_0": ("-fa", "on", "-ctk", "q8_0")}


@pytest.fixture(scope="module", params=list(NATIVE_CASES))
def native_pair(request, smol_path):
    x = ("--context-shift", "--cache-reuse", "8", "--keep", str(KEEP), "--metrics", *CTX, *NATIVE_CASES[request.param])
    peer = llama_server("-m", smol_path, "-c", "256", *x)
    try:
        ours = ServerProcess(smol_path, "--ctx", "256", "--no-lossless", "--engine", "native", *x)
        ours.case = request.param
    except BaseException:
        peer.close()
        raise
    yield peer, ours
    ours.close()
    peer.close()


def _decodes(url):
    """llama-server's llamacpp:n_decode_total: steps run, prompt chunks included."""
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    return float(re.search(r"^llamacpp:n_decode_total (\S+)", text, re.M).group(1))


def _native_choices(smol_path, case, prompt, answer, n_keep, n_discard):
    """The native engine's greedy choices along `answer` after `prompt`, in the server's settings,
    shifting as the server does (context_shift.plan where the cache is full): the server's own text
    if its shifts are right."""
    from pyriver import Llama
    from pyriver.api.batch import BatchDecoder, Feed
    from pyriver.server.context_shift import plan
    fa = NATIVE_CASES[case][1] == "on"
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, engine="native", river=None, flash_attn=fa,
               type_k=case, batch_layout=True, tiled_verify=True) as llm:
        dec = BatchDecoder(llm, 1)
        try:
            out = dec.step([Feed(seq=0, tokens=prompt, prompt=True)])
            chosen = [int(out[0][0].argmax())]
            for t in answer[:-1]:
                if dec.pos(0) + 1 >= 256:
                    keep, drop = plan(len(prompt), dec.pos(0), 256, n_keep, n_discard, llm.vocab.add_bos)
                    dec.drop(0, keep, keep + drop)
                chosen.append(int(dec.step([Feed(seq=0, tokens=[t])])[0][0].argmax()))
            return chosen
        finally:
            dec.close()


def test_native_engine_shift_moves_rows_as_llama_server(native_pair, smol_path):
    """The shift moves the cached rows, in llama-server's steps (none computes the moved tokens
    again: a recomputing shift runs them as an extra prompt chunk), and llama-server's tokens up to
    it. After it the tokens are the native engine's own choices across the same shifts, not always
    llama-server's: llama.cpp writes new tokens into the freed cells, out of position order, so its
    attention adds the rows in another order than ours, and SmolLM2's 8-bit activations can turn
    those bits into another token (on a Zen 3, 15 tokens after the first shift: logprobs 0.07 to 0.15
    apart there, 1e-4 before it; docs/server.md, --context-shift)."""
    peer, ours = native_pair
    case = ours.case
    prompt = http("POST", ours.url + "/tokenize", {"content": STORY})[1]["tokens"]
    n_before = 256 - 1 - len(prompt)   # tokens before the first shift
    for extra in ({}, {"n_keep": 0}, {"n_keep": 40, "n_discard": 20}):
        got = {}
        for s in native_pair:
            d0 = _decodes(s.url)
            got[s] = (_gen(s.url, **extra), _decodes(s.url) - d0)
        assert got[ours][1] == got[peer][1], extra
        assert got[ours][0][:n_before] == got[peer][0][:n_before], extra
        assert got[ours][0] == _native_choices(smol_path, case, prompt, got[ours][0], extra.get("n_keep", KEEP),
                                               extra.get("n_discard", 0)), extra


def _ask(url, prompt, **extra):
    code, r = http("POST", url + "/completion", {"prompt": prompt, "n_predict": 8, "temperature": 0,
                                                 "return_tokens": True, **extra})
    assert code == 200, r
    return r["tokens"], r["timings"]["cache_n"], r["timings"]["prompt_n"]


def test_cache_reuse_moves_chunks_as_llama_server(peer, ours, smol_path):
    body = ("The lighthouse keeper climbed the spiral stairs every evening to light the great lamp, "
            "and from the top he could see the fishing boats coming home across the bay. ") * 2
    # the second prompt leaves out the first's middle: after the common prefix its cached body moves up
    intro, middle = "Chapter one. ", "A line about the weather that the second prompt leaves out. "
    first, second = intro + middle + body, intro + body
    got = {}
    for name, url in (("peer", peer.url), ("ours", ours.url)):
        _ask(url, first)
        got[name] = _ask(url, second)
    tokens, cache_n, prompt_n = got["ours"]
    assert got["ours"] == got["peer"]
    assert cache_n > 40 and prompt_n < 30   # the body's rows were moved, not computed again
    first, second = "Chapter two. " + middle + body, "Chapter two. " + body   # prompts neither cache holds yet
    for name, url in (("peer", peer.url), ("ours", ours.url)):   # n_cache_reuse 0: the common prefix only
        _ask(url, first)
        got[name] = _ask(url, second, n_cache_reuse=0)
    assert got["ours"] == got["peer"] and got["ours"][1] < 5


def test_native_cache_reuse_moves_chunks_as_llama_server(native_pair):
    """--cache-reuse on the native engine: llama-server's cache_n / prompt_n and tokens."""
    peer, ours = native_pair
    body = ("The lighthouse keeper climbed the spiral stairs every evening to light the great lamp, "
            "and from the top he could see the fishing boats coming home across the bay. ") * 2
    middle = "A line about the weather that the second prompt leaves out. "
    got = {}
    for s in native_pair:
        _ask(s.url, "Chapter one. " + middle + body)
        got[s] = _ask(s.url, "Chapter one. " + body)
    assert got[ours] == got[peer]
    assert got[ours][1] > 40 and got[ours][2] < 30   # the body's rows were moved, not computed again


def test_bad_fields_are_llama_server_s_400(ours):
    for field, value in (("n_keep", -2), ("n_discard", -1), ("n_cache_reuse", -3)):
        code, r = http("POST", ours.url + "/completion", {"prompt": STORY, "n_predict": 1, field: value})
        assert code == 400 and f"Field '{field}': Value must be between" in r["error"]["message"], r
        code, r = http("POST", ours.url + "/v1/completions", {"prompt": STORY, "max_tokens": 1, field: value})
        assert code == 400 and f"Field '{field}'" in r["error"]["message"], r
