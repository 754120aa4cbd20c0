"""llama-server's side of `pyriver serve`: started by a llama-server command line, its native
/completion, /tokenize, /detokenize, /apply-template, CORS, X-Api-Key, any model name, the
un-prefixed routes, system_fingerprint and timings; seed -1 and chat logprobs (issue 28). A real
server process; the real `openai` client for the OpenAI routes, urllib for the native ones."""
from __future__ import annotations

import json
import re

import openai
import pytest

from server_proc import ServerProcess, http, sse

KEY = "sk-llamacpp"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def server(smol_path):
    # llama-server's own flags: the whole context split over the slots, default seed, temperature, n_predict
    s = ServerProcess("-m", smol_path, "-c", "1024", "-np", "2", "--seed", "42", "--temp", "0.8", "-n", "48",
                      "--alias", "tinyllama-2", "--api-key", KEY, "-t", "2", "--jinja", "--metrics", "-ngl", "0")
    yield s
    s.close()


H = {"Authorization": f"Bearer {KEY}"}


def post(server, path, body, headers=H):
    return http("POST", server.url + path, body, headers)


def client(server, prefix="/v1"):
    return openai.OpenAI(base_url=server.url + prefix, api_key=KEY, max_retries=0)


def test_llama_server_command_line(server):
    code, got = http("GET", server.url + "/models", None, H)
    assert code == 200 and got["data"][0]["id"] == "tinyllama-2"
    # -c 1024 over -np 2: 512 tokens a slot
    code, got = post(server, "/v1/completions", {"prompt": "word " * 600, "max_tokens": 2})
    assert code == 400 and "the context holds 512" in got["error"]["message"]
    assert got["error"]["type"] == "exceed_context_size_error" and got["error"]["n_ctx"] == 512
    assert got["error"]["n_prompt_tokens"] > 512
    # -n 48 is the default of a request that gives none; its own n_predict wins (llama-server 0.3.36 gives 100
    # tokens for n_predict 100 under -n 48)
    code, got = post(server, "/completion", {"prompt": PROMPT, "ignore_eos": True})
    assert code == 200 and got["tokens_predicted"] == 48 and got["generation_settings"]["n_predict"] == 48
    code, got = post(server, "/completion", {"prompt": PROMPT, "n_predict": 60, "ignore_eos": True})
    assert code == 200 and got["tokens_predicted"] == 60 and got["generation_settings"]["n_predict"] == 60
    # --seed 42 is every request's default seed: two requests at temperature 1 agree
    a = post(server, "/completion", {"prompt": PROMPT, "n_predict": 12, "temperature": 1.0})[1]
    b = post(server, "/completion", {"prompt": PROMPT, "n_predict": 12, "temperature": 1.0})[1]
    assert a["content"] == b["content"] and a["generation_settings"]["seed"] == 42


@pytest.mark.parametrize("stream", [False, True])
def test_seed_minus_one_is_a_random_seed(server, stream):
    texts = set()
    for _ in range(3):
        body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 1.5, "seed": -1, "stream": stream}
        if stream:
            lines = list(sse(server.url, "/v1/completions", body, H))
            assert lines[-1] == "data: [DONE]"
            texts.add("".join(json.loads(ln[6:])["choices"][0]["text"] for ln in lines[:-1]))
        else:
            code, got = post(server, "/v1/completions", body)
            assert code == 200, got
            texts.add(got["choices"][0]["text"])
    assert len(texts) > 1   # random, not the server's default seed 42
    code, got = post(server, "/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "seed": -1,
                                                   "max_tokens": 4})
    assert code == 200, got


def test_chat_logprobs(server):
    msgs = [{"role": "user", "content": "Name a river."}]
    r = client(server).chat.completions.create(model="gpt-3.5-turbo", messages=msgs, max_tokens=8, temperature=0.0,
                                               logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0.0 and bytes(t.bytes).decode("utf-8", "ignore") == t.token
        assert len(t.top_logprobs) == 3
        assert t.top_logprobs[0].token == t.token   # greedy: the most likely one
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob)
    # The same request again finds its prompt cached and runs the last prompt token alone, as llama-server
    # does: a one-token step, whose row differs from the whole prompt's on some CPUs (SmolLM2's Q4_1 on
    # an AVX2-only one: 0.013 in this log-probability). So the streamed answer, also cached, is held to
    # the second non-streamed one, computed the same way.
    again = client(server).chat.completions.create(model="x", messages=msgs, max_tokens=8, temperature=0.0,
                                                   logprobs=True, top_logprobs=3)
    assert again.choices[0].message.content == r.choices[0].message.content
    s = client(server).chat.completions.create(model="x", messages=msgs, max_tokens=8, temperature=0.0,
                                               logprobs=True, top_logprobs=3, stream=True)
    toks, text = [], ""
    for ch in s:
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
            toks += [(t.token, round(t.logprob, 5)) for t in ch.choices[0].logprobs.content]
    assert text == r.choices[0].message.content
    assert toks == [(t.token, round(t.logprob, 5)) for t in again.choices[0].logprobs.content]
    # not asked: none
    r = client(server).chat.completions.create(model="x", messages=msgs, max_tokens=4, temperature=0.0)
    assert r.choices[0].logprobs is None


def test_cache_prompt_false_runs_the_whole_prompt(server):
    """llama-server's cache_prompt: false computes the prompt again from its first token, none of the
    slot's cache reused, so an identical request gives the first one's text bit for bit (reused, the
    prompt's last token runs alone and may part in its last bits); true (the default) reuses it."""
    body = {"prompt": PROMPT + " a city on the river", "n_predict": 6, "temperature": 0.0}
    first = post(server, "/completion", dict(body, cache_prompt=False))[1]
    reused = post(server, "/completion", body)[1]
    assert reused["timings"]["cache_n"] == first["tokens_evaluated"] - 1 and reused["timings"]["prompt_n"] == 1
    again = post(server, "/completion", dict(body, cache_prompt=False))[1]
    assert again["timings"]["cache_n"] == 0 and again["timings"]["prompt_n"] == again["tokens_evaluated"]
    assert again["content"] == first["content"]
    code, oai = post(server, "/v1/completions", {"prompt": body["prompt"], "max_tokens": 6, "temperature": 0.0,
                                                 "cache_prompt": False})
    assert code == 200 and oai["choices"][0]["text"] == first["content"]
    code, bad = post(server, "/v1/completions", {"prompt": PROMPT, "cache_prompt": "no"})
    assert code == 400 and bad["error"]["param"] == "cache_prompt"


def test_native_completion(server):
    want = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 10, "temperature": 0.0})[1]
    code, got = post(server, "/completion", {"prompt": PROMPT, "n_predict": 10, "temperature": 0.0,
                                             "return_tokens": True, "n_probs": 2})
    assert code == 200
    assert got["content"] == want["choices"][0]["text"]
    assert got["stop"] is True and got["stop_type"] in ("limit", "eos") and got["truncated"] is False
    assert got["tokens_predicted"] == len(got["tokens"]) == len(got["completion_probabilities"])
    assert got["timings"]["predicted_n"] == got["tokens_predicted"]
    assert got["timings"]["prompt_n"] + got["timings"]["cache_n"] == got["tokens_evaluated"]
    p = got["completion_probabilities"][0]
    assert p["id"] == got["tokens"][0] and len(p["top_logprobs"]) == 2 and p["top_logprobs"][0]["id"] == p["id"]
    # streamed: a chunk per token, then the final object with empty content
    lines = [json.loads(ln[6:]) for ln in sse(server.url, "/completion", {"prompt": PROMPT, "n_predict": 10,
                                                                          "temperature": 0.0, "stream": True}, H)]
    assert [c["stop"] for c in lines] == [False] * (len(lines) - 1) + [True]
    assert "".join(c["content"] for c in lines) == got["content"]
    assert lines[-1]["timings"]["predicted_n"] == got["tokens_predicted"]
    # a stop word, several prompts, a token prompt, response_fields
    code, got = post(server, "/completion", {"prompt": PROMPT, "n_predict": 10, "temperature": 0.0,
                                             "stop": [want["choices"][0]["text"][3:6]]})
    assert got["stop_type"] == "word" and got["stopping_word"] == want["choices"][0]["text"][3:6]
    toks = post(server, "/tokenize", {"content": PROMPT, "add_special": True})[1]["tokens"]
    code, got = post(server, "/completions", {"prompt": [toks, PROMPT], "n_predict": 6, "temperature": 0.0})
    assert code == 200 and len(got) == 2 and got[0]["content"] == got[1]["content"]
    code, got = post(server, "/completion", {"prompt": PROMPT, "n_predict": 3, "response_fields":
                                             ["content", "generation_settings/n_predict"]})
    assert set(got) == {"content", "generation_settings/n_predict"} and got["generation_settings/n_predict"] == 3


def test_logit_bias_and_ignore_eos(server):
    base = post(server, "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0.0,
                                        "return_tokens": True})[1]
    first = base["tokens"][0]
    for bias in ([[first, False]], {str(first): -100}):
        got = post(server, "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0.0,
                                           "return_tokens": True, "logit_bias": bias})[1]
        assert got["tokens"][0] != first
    r = client(server).chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                               temperature=0.0)
    first_text = r.choices[0].message.content
    tok = post(server, "/tokenize", {"content": first_text})[1]["tokens"][0]
    r2 = client(server).chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=3, temperature=0.0, logit_bias={str(tok): -100})
    assert not r2.choices[0].message.content.startswith(first_text)
    got = post(server, "/completion", {"prompt": PROMPT, "n_predict": 2, "ignore_eos": True})[1]
    assert got["generation_settings"]["logit_bias"] and all(e["bias"] is None for e in
                                                             got["generation_settings"]["logit_bias"])
    assert post(server, "/completion", {"prompt": PROMPT, "n_predict": 2})[1]["generation_settings"]["logit_bias"] == []


def test_completion_tokens_are_counted_as_llama_server_counts_them(server):
    """usage.completion_tokens, timings.predicted_n and tokens_predicted are llama-server's n_decoded:
    every token sampled, the end-of-generation token that ends the answer included (never handed
    over as text or logprobs); after a stop string, none past the token that completed it. Against
    llama-server 0.3.36 on this file, greedy: "What is the capital of France? One word." gives
    "The capital of France is Paris." in 7 tokens and the end token, usage 8 on both (pyriver
    counted 7 before); max_tokens 3 gives 3 on both; the stop string "7" in a count 19 on both."""
    msgs = [{"role": "user", "content": "What is the capital of France? One word."}]
    r = client(server).chat.completions.create(model="x", messages=msgs, max_tokens=64, temperature=0.0, logprobs=True)
    assert r.choices[0].finish_reason == "stop"
    handed = len(r.choices[0].logprobs.content)   # the tokens of the text
    assert r.usage.completion_tokens == handed + 1 == r.timings["predicted_n"]
    s = client(server).chat.completions.create(model="x", messages=msgs, max_tokens=64, temperature=0.0, stream=True,
                                               stream_options={"include_usage": True})
    assert [c.usage.completion_tokens for c in s if c.usage] == [handed + 1]
    r = client(server).chat.completions.create(model="x", messages=msgs, max_tokens=3, temperature=0.0)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3
    # the native route: tokens_predicted counts the end token (llama-server's tokens list also holds it)
    code, got = post(server, "/completion", {"prompt": PROMPT, "n_predict": 64, "temperature": 0.0,
                                             "return_tokens": True})
    if got["stop_type"] == "eos":
        assert got["tokens_predicted"] == len(got["tokens"]) + 1 == got["timings"]["predicted_n"]
    # a stop string: the tokens up to the one that completes it
    count = [{"role": "user", "content": "Count from 1 to 20, comma separated."}]
    full = client(server).chat.completions.create(model="x", messages=count, max_tokens=64, temperature=0.0,
                                                  logprobs=True)
    pieces = [t.token for t in full.choices[0].logprobs.content]
    upto = next(k for k in range(1, len(pieces) + 1) if "7" in "".join(pieces[:k]))
    r = client(server).chat.completions.create(model="x", messages=count, max_tokens=64, temperature=0.0, stop=["7"])
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == upto


def test_tokenize_detokenize_apply_template(server):
    text = "A river 媽 🤗"
    toks = post(server, "/tokenize", {"content": text})[1]["tokens"]
    assert post(server, "/detokenize", {"tokens": toks})[1]["content"] == text
    pieces = post(server, "/tokenize", {"content": text, "with_pieces": True})[1]["tokens"]
    assert [p["id"] for p in pieces] == toks
    assert b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
                    for p in pieces) == text.encode()
    bos = post(server, "/tokenize", {"content": text, "add_special": True})[1]["tokens"]
    assert bos[1:] == toks or bos == toks   # BOS only where the vocabulary adds one
    msgs = [{"role": "user", "content": "Hi"}]
    got = post(server, "/apply-template", {"messages": msgs})[1]["prompt"]
    assert got.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    got = post(server, "/apply-template", {"messages": msgs, "add_generation_prompt": False})[1]["prompt"]
    assert got.endswith("<|im_start|>user\nHi<|im_end|>\n")


def test_openai_extras_and_aliases(server):
    c = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)   # un-prefixed routes
    r = c.chat.completions.create(model="gpt-3.5-turbo", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert r.system_fingerprint.startswith("b") and r.model == "tinyllama-2"
    assert r.timings["predicted_n"] == r.usage.completion_tokens
    assert c.models.list().data[0].id == "tinyllama-2"
    code, got = post(server, "/chat/completions/input_tokens", {"messages": [{"role": "user", "content": "Hi"}]})
    assert code == 200 and got["input_tokens"] == r.usage.prompt_tokens
    r = client(server).completions.create(model="davinci-002", prompt=PROMPT, max_tokens=4)
    assert r.system_fingerprint.startswith("b") and r.timings["predicted_n"] == r.usage.completion_tokens
    lines = list(sse(server.url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                         "max_tokens": 4, "stream": True,
                                                         "stream_options": {"include_usage": True}}, H))
    last = json.loads(lines[-2][6:])
    assert last["choices"] == [] and last["timings"]["predicted_n"] == last["usage"]["completion_tokens"]
    # X-Api-Key beside Bearer; /health and /v1/health need no key
    assert post(server, "/completion", {"prompt": PROMPT, "n_predict": 2}, {"X-Api-Key": KEY})[0] == 200
    assert post(server, "/completion", {"prompt": PROMPT, "n_predict": 2}, {"X-Api-Key": "no"})[0] == 401
    assert post(server, "/tokenize", {"content": "x"}, {})[0] == 401
    assert http("GET", server.url + "/v1/health")[0] == 200


def test_cors(server, smol_path, tmp_path):
    for path in ("/completions", "/v1/chat/completions"):
        code, _ = http("OPTIONS", server.url + path, None, {"Origin": "http://web.example",
                                                            "Access-Control-Request-Method": "POST"})
        assert code == 200
    import urllib.request
    req = urllib.request.Request(server.url + "/completion", method="OPTIONS",
                                 headers={"Origin": "http://web.example", "Access-Control-Request-Method": "POST"})
    with urllib.request.urlopen(req) as r:
        wire = dict(r.headers.items())   # names as sent: clients that read a plain dict need llama-server's case
        assert {"Access-Control-Allow-Origin", "Access-Control-Allow-Methods", "Access-Control-Allow-Headers",
                "Access-Control-Allow-Credentials"} <= set(wire)
        assert r.headers["Access-Control-Allow-Origin"] == "http://web.example"
        assert r.headers["Access-Control-Allow-Methods"] == "GET, POST, DELETE, OPTIONS"
        assert r.headers["Access-Control-Allow-Headers"] == "*"
        assert r.headers["Access-Control-Allow-Credentials"] == "true"
    req = urllib.request.Request(server.url + "/health", headers={"Origin": "http://a.example"})
    with urllib.request.urlopen(req) as r:
        assert r.headers["Access-Control-Allow-Origin"] == "http://a.example"
    tpl = tmp_path / "t.jinja"   # a template file: {% break %}, date_string, a <think> it opens (--reasoning off:
    # llama-server's prompt leaves it open, tests/runtime/test_server_apply_template.py)
    tpl.write_text("[{{ date_string }}]{% for m in messages %}{{ m.content }}{% break %}{% endfor %}"
                   "{% if add_generation_prompt %}<A><think>\n{% endif %}")
    s = ServerProcess(smol_path, "--cors-origins", "localhost", "--ctx", "64", "--parallel", "1",
                      "--chat-template-file", str(tpl), "--reasoning", "off")
    try:
        import datetime
        msgs = [{"role": "user", "content": "Hi"}, {"role": "user", "content": "never"}]
        got = http("POST", s.url + "/apply-template", {"messages": msgs})[1]
        assert got["prompt"] == f"[{datetime.datetime.now():%d %b %Y}]Hi<A><think>\n"
        got = http("POST", s.url + "/apply-template", {"messages": msgs, "add_generation_prompt": False})[1]
        assert got["prompt"].endswith("]Hi")
        for origin, allowed in (("http://localhost:3000", True), ("http://[::1]", True),
                                ("http://localhost.evil.com", False), ("http://evil.com", False)):
            req = urllib.request.Request(s.url + "/completions", method="OPTIONS", headers={"Origin": origin})
            with urllib.request.urlopen(req) as r:
                assert r.status == 200
                assert r.headers.get("Access-Control-Allow-Origin") == (origin if allowed else None)
    finally:
        s.close()


BAD = [
    ("/completion", b"{nope", "not valid JSON"),
    ("/completion", [1, 2], "must be a JSON object"),
    ("/completion", {"n_predict": 3}, "'prompt' is required"),
    ("/completion", {"prompt": 5}, "'prompt' must be"),
    ("/completion", {"prompt": []}, "empty"),
    ("/completion", {"prompt": [1, -4]}, "out of range"),
    ("/completion", {"prompt": [[1, 2], {"x": 1}]}, "prompt_string"),
    ("/completion", {"prompt": "Hi", "n_predict": "3"}, "'n_predict' must be"),
    ("/completion", b'{"prompt": "Hi", "temperature": NaN}', "'temperature' must be"),
    ("/completion", {"prompt": "Hi", "top_p": 7}, "top_p"),
    ("/completion", {"prompt": "Hi", "n_probs": 10**6}, "n_probs"),
    ("/completion", {"prompt": "Hi", "seed": "x"}, "'seed' must be"),
    ("/completion", {"prompt": "Hi", "logit_bias": "x"}, "logit_bias"),
    ("/completion", {"prompt": "Hi", "logit_bias": [[1, "x"]]}, "logit_bias"),
    ("/completion", {"prompt": "Hi", "logit_bias": [[None, 1]]}, "logit_bias"),
    ("/completion", {"prompt": "Hi", "stop": [1]}, "'stop' must be"),
    ("/completion", {"prompt": "w " * 5000}, "context holds"),
    ("/completion", {"prompt": ["a", "b"], "stream": True}, "one prompt"),
    ("/tokenize", {"content": 5}, "'content' must be"),
    ("/tokenize", {"content": "x", "with_pieces": "yes"}, "with_pieces"),
    ("/detokenize", {"tokens": ["a"]}, "'tokens' must be"),
    ("/detokenize", {"tokens": [10**9]}, "out of range"),
    ("/apply-template", {"messages": "hi"}, "'messages' must be"),
    ("/apply-template", {"messages": [{"content": "x"}]}, "role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": "x"}}, "logit_bias"),
    # what the request fuzzer (pyriver_dev.server_fuzz) found answered 500: a lone surrogate, deep nesting
    ("/completion", b'{"prompt": "\\udcff"}', "UTF-8"),
    ("/v1/responses", b"[" * 100000, "not valid JSON"),
    # llama-server's prefill rules, its words
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "a"},
                                           {"role": "assistant", "content": "b"}]}, "2 or more assistant messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "a"}],
                              "continue_final_message": True, "add_generation_prompt": True},
     "both add_generation_prompt and continue_final_message"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "no"},
     "'add_generation_prompt' must be"),
]


def test_assistant_prefill_is_continued(server):
    """A trailing assistant message is continued, as llama-server's prefill: its prompt is the
    messages before it with the generation prompt, then its text (prompt tokens say so)."""
    user = [{"role": "user", "content": "Name a river."}]
    base = post(server, "/v1/chat/completions", {"messages": user, "max_tokens": 1})[1]["usage"]["prompt_tokens"]
    n_prefill = len(post(server, "/tokenize", {"content": " The Nile"})[1]["tokens"])
    for extra in ({}, {"continue_final_message": True, "add_generation_prompt": False}):
        code, got = post(server, "/v1/chat/completions", {"messages": user + [{"role": "assistant", "content": " The Nile"}],
                                                          "max_tokens": 1, **extra})
        assert code == 200 and got["usage"]["prompt_tokens"] == base + n_prefill, got


@pytest.mark.parametrize("path, body, words", BAD)
def test_bad_input_is_a_400(server, path, body, words):
    code, got = post(server, path, body)
    assert code == 400, (code, got)
    assert re.search(words, got["error"]["message"]), got
    assert post(server, "/completion", {"prompt": PROMPT, "n_predict": 2})[0] == 200


def test_bad_utf8_and_huge_strings(server):
    for path, key in (("/completion", b"prompt"), ("/tokenize", b"content"), ("/apply-template", b"messages"),
                      ("/detokenize", b"tokens")):
        for value in (b'"\xff\xfe"', b'"\xc3"', b'"' + b"a" * 300000 + b'"', b'{"a": [' * 50 + b']}' * 50):
            code, got = post(server, path, b'{"' + key + b'": ' + value + b"}")
            assert code == 400 or (path == "/tokenize" and code == 200 and value.startswith(b'"a')), (path, code, got)
    _, text = http("GET", server.url + "/metrics")
    assert re.search(r"^pyriver_slots_busy 0", text, re.M)


def test_several_choices(server):
    r = client(server).chat.completions.create(model="x", messages=[{"role": "user", "content": "Tell a story."}],
                                               max_tokens=6, temperature=1.5, seed=-1, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2] and all(c.message.content for c in r.choices)
    assert len({c.message.content for c in r.choices}) > 1
    code, got = post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "n": 2, "temperature": 0.0})
    assert code == 200 and [c["index"] for c in got["choices"]] == [0, 1]
    assert got["choices"][0]["text"] == got["choices"][1]["text"]   # greedy: the same text twice
    assert got["usage"]["completion_tokens"] == 2 * len(post(server, "/completion", {
        "prompt": PROMPT, "n_predict": 5, "temperature": 0.0, "return_tokens": True})[1]["tokens"])
    code, got = post(server, "/v1/completions", {"prompt": PROMPT, "n": 2, "stream": True})
    assert code == 400 and got["error"]["param"] == "n"


def test_several_addresses_and_a_builtin_template(smol_path):
    import socket
    hosts = ["127.0.0.1", "::1"]
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:   # no IPv6 loopback: the built-in template alone
        hosts = ["127.0.0.1"]
    s = ServerProcess(smol_path, "--host", ",".join(hosts), "--ctx", "64", "--parallel", "1",
                      "--chat-template", "command-r")   # llama.cpp's built-in template, by name
    try:
        for host in [f"[{h}]" if ":" in h else h for h in hosts]:
            url = f"http://{host}:{s.port}"
            assert http("GET", url + "/health")[0] == 200
            got = http("POST", url + "/apply-template", {"messages": [{"role": "user", "content": "Hi there"}]})[1]
            assert got["prompt"] == ("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
                                     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")
    finally:
        s.close()


def test_post_sampling_probs(server):
    got = post(server, "/completion", {"prompt": PROMPT, "n_predict": 4, "n_probs": 5, "temperature": 1.0,
                                       "post_sampling_probs": True, "top_k": 3})[1]
    for e in got["completion_probabilities"]:
        assert 0.0 < e["prob"] <= 1.0 and "logprob" not in e
        probs = [t["prob"] for t in e["top_probs"]]
        assert len(probs) <= 3 and probs == sorted(probs, reverse=True)   # top_k 3: three candidates at most
        assert sum(probs) == pytest.approx(1.0) and e["id"] in [t["id"] for t in e["top_probs"]]
    got = post(server, "/completion", {"prompt": PROMPT, "n_predict": 2, "n_probs": 5, "temperature": 0.0,
                                       "post_sampling_probs": True})[1]
    assert all(e["prob"] == 1.0 and [t["id"] for t in e["top_probs"]] == [e["id"]]
               for e in got["completion_probabilities"])   # greedy: one certain token


def test_responses(server):
    """/v1/responses through the openai client: the text of the same chat completion (greedy), its
    usage; streamed, the named events in order with the same text; llama-server's progress and
    timings when asked; bad input a 400."""
    c = client(server)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a river."}]
    want = c.chat.completions.create(model="x", messages=msgs, max_tokens=8, temperature=0)
    r = c.responses.create(model="gpt-4.1", instructions="Be brief.", input=[{"role": "user", "content": "Name a river."}],
                           max_output_tokens=8, temperature=0)
    assert r.id.startswith("resp_") and r.output[0].id.startswith("msg_") and r.model == "gpt-4.1"
    assert r.output_text == want.choices[0].message.content
    assert r.usage.input_tokens == want.usage.prompt_tokens and r.usage.output_tokens == want.usage.completion_tokens
    kinds, text = [], ""
    for ev in c.responses.create(model="x", instructions="Be brief.", max_output_tokens=8, temperature=0, stream=True,
                                 input=[{"role": "user", "content": [{"type": "input_text", "text": "Name a river."}]}]):
        kinds.append(ev.type)
        text += ev.delta if ev.type == "response.output_text.delta" else ""
        if ev.type == "response.completed":
            assert ev.response.output_text == text == r.output_text
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    got = [json.loads(line[6:]) for line in sse(server.url, "/responses", {
        "input": "Rivers " * 10, "max_output_tokens": 4, "stream": True, "timings_per_token": True,
        "return_progress": True}, headers=H) if line.startswith("data: ")]
    prog = [d for d in got if "prompt_progress" in d]
    assert len(prog) == 1 and prog[0]["type"] == "response.in_progress" and prog[0]["prompt_progress"]["total"] > 0
    assert all("timings" in d for d in got if d["type"] == "response.output_text.delta")
    assert got[-1]["type"] == "response.completed" and "timings" in got[-1]
    for body in ({"input": 5}, {"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, {},
                 {"input": "x", "previous_response_id": "resp_1"}, {"input": "x", "return_progress": "yes"}):
        code, err = post(server, "/v1/responses", body)
        assert code == 400 and "error" in err, (body, code, err)
