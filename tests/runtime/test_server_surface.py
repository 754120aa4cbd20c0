"""llama-server's surface that issue 44 brought to `pyriver serve`: prompt progress reports in
streams (return_progress), the __verbose field (--verbose or a request's verbose), a continued
message's text parts, --chat-template NAME in chats, --kv-unified's shared pool, --backend-sampling.
Real server processes (llama.cpp's own suite runs them too: pyriver.tools.server_suite)."""
from __future__ import annotations

import json
import math

import pytest

from server_proc import ServerProcess, http, sse, together

CHUNK = 16   # --prompt-chunk: prompt tokens a step, so a prompt reports progress several times
MSGS = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book " * 6}]


@pytest.fixture(scope="module")
def server(smol_path):
    s = ServerProcess(smol_path, "-c", "512", "-np", "1", "--no-lossless", "-t", "2", "--prompt-chunk", str(CHUNK),
                      "--backend-sampling")
    yield s
    s.close()


@pytest.fixture(scope="module")
def pooled(smol_path):
    # 256 tokens for 4 slots, each of which may take them all; --verbose: __verbose by default
    s = ServerProcess(smol_path, "-c", "256", "-np", "4", "--kv-unified", "--no-lossless", "-t", "2", "--verbose",
                      "--chat-template", "llama3")
    yield s
    s.close()


def post(s, path, body):
    return http("POST", s.url + path, body)


def events(s, path, body):
    return [json.loads(ln[6:]) for ln in sse(s.url, path, body) if ln.startswith("data: ") and ln != "data: [DONE]"]


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": MSGS}),
    ("/v1/completions", {"prompt": "Once upon a time " * 12}),
    ("/completion", {"prompt": "In a land far away " * 12}),
])
def test_return_progress(server, path, body):
    """A report when the slot starts (processed == cache), one after each prompt chunk (processed
    grows to total), all before the first token; none unless asked, none without a stream."""
    body = dict(body, max_tokens=4, n_predict=4, stream=True, return_progress=True)
    caches = []
    for _ in range(2):   # the second reuses the first's cache: its start says so
        evs = events(server, path, body)
        reports = [e["prompt_progress"] for e in evs if "prompt_progress" in e]
        first_text = next(i for i, e in enumerate(evs) if (e.get("content") or (e.get("choices") or [{}])[0].get(
            "text") or ((e.get("choices") or [{}])[0].get("delta") or {}).get("content")))
        assert all("prompt_progress" not in e for e in evs[first_text:])
        total, cache = reports[0]["total"], reports[0]["cache"]
        assert reports[0]["processed"] == cache
        caches.append(cache)
        assert [r["processed"] for r in reports[1:]] == [min(total, cache + CHUNK * i)
                                                        for i in range(1, math.ceil((total - cache) / CHUNK) + 1)]
        assert all(r["total"] == total and r["cache"] == cache and r["time_ms"] >= 0 for r in reports)
        if path == "/v1/chat/completions":   # llama-server's report chunk: the role delta with the report
            assert all(e["choices"][0]["delta"] == {"role": "assistant", "content": None}
                       for e in evs if "prompt_progress" in e)
    assert caches[1] == total - 1 > caches[0]
    assert not any("prompt_progress" in e for e in events(server, path, dict(body, return_progress=False)))
    code, got = post(server, path, dict(body, stream=False))
    assert code == 200 and "prompt_progress" not in json.dumps(got)


def test_verbose_field(server):
    body = {"messages": MSGS, "max_tokens": 3}
    code, got = post(server, "/v1/chat/completions", body)
    assert code == 200 and "__verbose" not in got   # neither --verbose nor verbose: true
    code, got = post(server, "/v1/chat/completions", dict(body, verbose=True))
    v = got["__verbose"]
    assert "What is the best book" in v["prompt"] and v["content"] == got["choices"][0]["message"]["content"]
    assert v["tokens_evaluated"] == got["usage"]["prompt_tokens"] == len(post(server, "/tokenize", {
        "content": v["prompt"], "add_special": False})[1]["tokens"])
    assert v["tokens_predicted"] == got["usage"]["completion_tokens"] and v["generation_settings"]["n_predict"] == 3
    assert v["stop_type"] == {"length": "limit", "stop": "eos"}[got["choices"][0]["finish_reason"]]
    assert v["generation_settings"]["backend_sampling"] is False
    # a stop string: llama-server's stop type "word" and the word
    text = post(server, "/completion", {"prompt": "One, two, three, four,", "n_predict": 6, "temperature": 0})[1]["content"]
    word = text.strip().split()[0]
    code, got = post(server, "/v1/completions", {"prompt": "One, two, three, four,", "max_tokens": 6, "temperature": 0,
                                                 "stop": [word], "verbose": True})
    assert got["__verbose"]["stop_type"] == "word" and got["__verbose"]["stopping_word"] == word
    # streams: each completion chunk its native chunk, the chat's finishing chunk the result
    evs = events(server, "/v1/completions", {"prompt": "Hello", "max_tokens": 3, "stream": True, "verbose": True})
    assert all(e["__verbose"]["content"] == e["choices"][0]["text"] for e in evs if e["choices"][0]["text"])
    assert evs[-1]["__verbose"]["stop"] is True and evs[-1]["__verbose"]["content"] == ""
    evs = events(server, "/v1/chat/completions", dict(body, stream=True, verbose=True))
    assert [e["choices"][0]["finish_reason"] is not None for e in evs if "__verbose" in e] == [True]


def test_continued_text_parts_join_with_a_blank_line(server):
    """llama.cpp's render_content: a prefilled assistant message's text parts, a blank line between."""
    parts = [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]
    code, got = post(server, "/v1/chat/completions", {"messages": MSGS + [{"role": "assistant", "content": parts}],
                                                      "max_tokens": 1, "verbose": True})
    assert code == 200 and got["__verbose"]["prompt"].endswith("Wh\n\nill")


def test_backend_sampling_is_accepted(server):
    body = {"prompt": "The countries of Europe are:", "n_predict": 5, "n_probs": 3, "post_sampling_probs": True,
            "seed": 4242}
    a = post(server, "/completion", dict(body, backend_sampling=True))[1]
    b = post(server, "/completion", dict(body, backend_sampling=False))[1]
    assert a["generation_settings"]["backend_sampling"] is True and a["content"] == b["content"]
    assert a["completion_probabilities"] == b["completion_probabilities"]


@pytest.mark.parametrize("field", ["return_progress", "verbose", "backend_sampling"])
def test_bad_flags_are_a_400(server, field):
    for path, body in (("/v1/chat/completions", {"messages": MSGS}), ("/completion", {"prompt": "x"})):
        code, got = post(server, path, dict(body, **{field: "yes"}))
        assert code == 400 and got["error"]["param"] == field, got


def test_builtin_template_chat_with_verbose_default(pooled):
    code, got = post(pooled, "/v1/chat/completions", {"messages": MSGS, "max_tokens": 2})
    assert code == 200 and got["__verbose"]["prompt"].startswith("<|start_header_id|>system<|end_header_id|>\n\nBook")
    code, got = post(pooled, "/v1/chat/completions", {"messages": MSGS, "max_tokens": 2, "verbose": False})
    assert code == 200 and "__verbose" not in got


def test_kv_unified_pool(pooled):
    """Each slot may take the whole 256 tokens; together they hold no more: past it, an idle slot's
    cache goes first, then every busy request ends with llama-server's 500."""
    word = "river " * 150
    for prompt in (word, "lake " * 150):   # two slots of ~150 tokens: the second takes the first's idle room
        code, got = post(pooled, "/completion", {"prompt": prompt, "n_predict": 80, "ignore_eos": True})
        assert code == 200 and got["tokens_predicted"] == 80, got
    res = together(lambda i: post(pooled, "/completion", {"prompt": f"{i}", "n_predict": 90, "ignore_eos": True}),
                   range(4))
    assert any(code == 500 for code, _ in res.values())   # 4 x 91 tokens do not fit 256
    for code, got in res.values():
        assert (code == 200 and got["tokens_predicted"] == 90) or \
            (code == 500 and got["error"]["message"] == "Context size has been exceeded."
             and got["error"]["type"] == "server_error"), got
