"""Gemma 4's thinking on `pyriver serve` as llama-server splits it (llama.cpp's peg-gemma4 parser):
SmolLM2 under Gemma 4's template from llama.cpp's models/templates (thinking on by default), the
answer held by a grammar to fixed texts: thought blocks `<|channel>thought ... <channel|>` before,
among and after the content, unfinished, empty, after an empty channel, with whitespace around, an
unmatched `<channel|>` that ends the answer, and a text that ends in the first characters of a
channel (held back, also once the answer ends: llama.cpp's final parse is lenient too). Content, reasoning_content and the
streamed deltas field by field, with reasoning_format none and with thinking off (the generation
prompt's empty thought block); a budget of 0."""
from __future__ import annotations

import json

import pytest

from pyriver.tools import llama_server as ls
from server_proc import ServerProcess, http, llama_server, sse

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not ls.binary().is_file(), reason="llama-server is not built into the cache")]

MSG = [{"role": "user", "content": "Hi"}]
TEXTS = ["<|channel>thought\nabc<channel|>The answer", "The answer", "<|channel>thought\nabc",
         "<|channel>thought\nabc<channel|>The answer<|channel>thought\n<channel|>",
         "<|channel>thought\nabc<channel|>The<channel|> answer", "  <|channel>thought abc \n<channel|>  The answer",
         "<|channel><|channel>thought\nabc<channel|>X", "<|channel>thought\nA<channel|>B<|channel>thought\nC<channel|>D",
         "<|channel>thought\n  \n<channel|>X", "X<|channel>thought\nabc<channel|>Y", "<|channel>thought\nabc<channel|>a <|"]
# request fields of each variant: thinking on (the default) and off, reasoning split or not
VARIANTS = {"auto": {}, "none": {"reasoning_format": "none"},
            "off": {"chat_template_kwargs": {"enable_thinking": False}},
            "off none": {"chat_template_kwargs": {"enable_thinking": False}, "reasoning_format": "none"}}


def _answers(url: str) -> dict:
    out = {}
    for text in TEXTS:
        for name, extra in VARIANTS.items():
            body = dict({"messages": MSG, "max_tokens": 120, "temperature": 0,
                         "grammar": "root ::= " + json.dumps(text)}, **extra)
            code, got = http("POST", url + "/v1/chat/completions", body)
            assert code == 200, got
            lines = [json.loads(ln[6:]) for ln in sse(url, "/v1/chat/completions", dict(body, stream=True))
                     if ln.startswith("data: {")]
            out[text, name] = (got["choices"][0]["message"], got["choices"][0]["finish_reason"],
                               [ch["choices"][0]["delta"] for ch in lines if ch.get("choices")])
    code, got = http("POST", url + "/v1/chat/completions", {"messages": MSG, "max_tokens": 12, "temperature": 0,
                                                            "reasoning_budget_tokens": 0})
    assert code == 200, got
    out["budget 0"] = got["choices"][0]["message"]
    return out


@pytest.fixture(scope="module")
def both(smol_path):
    tmpl = ls.sdist_root() / "vendor" / "llama.cpp" / "models" / "templates" / "google-gemma-4-31B-it.jinja"
    args = ("-m", smol_path, "-c", "1024", "-np", "1", "-t", "2", "--jinja", "--chat-template-file", str(tmpl))
    answers = {}
    for start, extra in ((llama_server, ()), (ServerProcess, ("--no-lossless",))):
        s = start(*args, *extra)
        try:
            answers[start.__name__] = _answers(s.url)
        finally:
            s.close()
    return answers["llama_server"], answers["ServerProcess"]


def _joined(deltas):
    return {k: "".join(d.get(k) or "" for d in deltas) for k in ("content", "reasoning_content")}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_split_as_llama_server(both, variant):
    peer, ours = both
    for text in TEXTS:
        want, got = peer[text, variant], ours[text, variant]
        assert got[:2] == want[:2], text
        if "none" in variant:   # the same text; pyriver holds a "<" back a token longer (a stop string's start)
            assert _joined(got[2]) == _joined(want[2]), text
        else:
            assert got[2] == want[2], text


def test_budget_zero_as_llama_server(both):
    peer, ours = both
    assert ours["budget 0"] == peer["budget 0"]


def test_the_texts_split(both):
    """What the comparison stands on: llama-server splits thought from content, and holds a channel's
    first characters at the end back."""
    peer, _ = both
    assert peer[TEXTS[0], "auto"][0] == {"role": "assistant", "content": "The answer", "reasoning_content": "abc"}
    assert peer[TEXTS[7], "auto"][0]["reasoning_content"] == "AC"
    assert peer[TEXTS[-1], "auto"][0]["content"] == "a "
    assert _joined(peer[TEXTS[-1], "auto"][2])["content"] == "a "
