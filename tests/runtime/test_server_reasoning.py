"""A thinking model's answer on `pyriver serve` as llama-server gives it (issue 70, item 2): SmolLM2
with Qwen3's chat template (the model opens <think>) and with Qwen3.5's (the template opens it),
from llama.cpp's models/templates, the answer held by a grammar to fixed text; content,
reasoning_content and the streamed deltas field by field, for each reasoning_format and a budget of
0, thinking blocks of /v1/messages and reasoning items of /v1/responses (plain and streamed);
a bad format or budget gets llama-server's message (a 400, never its 500)."""
from __future__ import annotations

import json

import pytest

from server_proc import ServerProcess, http, llama_server, sse

pytestmark = pytest.mark.slow

MSG = [{"role": "user", "content": "Hi"}]
FORMATS = [None, "none", "deepseek", "deepseek-legacy", "auto"]


def _template(name: str) -> str:
    from pyriver.tools import llama_server as ls
    return str(ls.sdist_root() / "vendor" / "llama.cpp" / "models" / "templates" / name)


def _answers(url: str, opens: bool) -> dict:
    text = "abc</think>The answer" if opens else "<think>abc</think>The answer"
    out = {}
    for fmt in FORMATS:
        body = {"messages": MSG, "max_tokens": 30, "temperature": 0, "grammar": "root ::= " + json.dumps(text)}
        if fmt:
            body["reasoning_format"] = fmt
        code, got = http("POST", url + "/v1/chat/completions", body)
        assert code == 200, got
        out[fmt] = got["choices"][0]["message"]
        lines = [json.loads(ln[6:]) for ln in sse(url, "/v1/chat/completions", dict(body, stream=True))
                 if ln.startswith("data: {")]
        out[f"{fmt} stream"] = [ch["choices"][0]["delta"] for ch in lines if ch.get("choices")]
    code, got = http("POST", url + "/v1/chat/completions", {"messages": MSG, "max_tokens": 12, "temperature": 0,
                                                            "reasoning_budget_tokens": 0})
    assert code == 200, got
    out["budget 0"] = got["choices"][0]["message"]
    # N > 0: N tokens of thinking, then the message and the end tag forced (llama.cpp's budget sampler)
    for name, extra in (("budget 3", {"reasoning_budget_tokens": 3}), ("budget none", {}),
                        ("budget 2 message", {"thinking_budget_tokens": 2, "reasoning_budget_message": " Enough."})):
        body = dict({"messages": MSG, "max_tokens": 16, "temperature": 0, "reasoning_format": "none"}, **extra)
        code, got = http("POST", url + "/v1/chat/completions", body)
        assert code == 200, got
        out[name] = got["choices"][0]["message"]["content"]
        lines = [json.loads(ln[6:]) for ln in sse(url, "/v1/chat/completions", dict(body, stream=True))
                 if ln.startswith("data: {")]
        out[name + " stream"] = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in lines if ch.get("choices"))
    # Anthropic's Messages: thinking blocks (the model's own words at temperature 0, 12 tokens)
    msg = {"model": "m", "max_tokens": 12, "temperature": 0, "messages": MSG}
    code, got = http("POST", url + "/v1/messages", msg)
    assert code == 200, got
    out["messages"] = got["content"]
    out["messages stream"] = _events(url, "/v1/messages", dict(msg, stream=True), "content_block_")
    # OpenAI's Responses: a reasoning item before the message (ids apart)
    resp = {"input": "Hi", "max_output_tokens": 30, "temperature": 0, "grammar": "root ::= " + json.dumps(text)}
    code, got = http("POST", url + "/v1/responses", resp)
    assert code == 200, got
    out["responses"] = [{k: v for k, v in item.items() if k != "id"} for item in got["output"]]
    out["responses stream"] = _events(url, "/v1/responses", dict(resp, stream=True), "response.output_item",
                                      "response.reasoning_text", "response.output_text")
    for bad in ({"reasoning_format": "xx"}, {"reasoning_budget_tokens": -2}):
        code, got = http("POST", url + "/v1/chat/completions", dict({"messages": MSG, "max_tokens": 2}, **bad))
        out[json.dumps(bad)] = (code, got["error"]["message"])
    code, got = http("POST", url + "/v1/chat/completions", {"messages": [], "max_tokens": 2})
    out["no messages"] = (code, got["error"]["message"] if code != 200 else "")
    return out


def _events(url: str, path: str, body: dict, *kinds: str) -> list:
    """The streamed events of these kinds, their data without ids."""
    out = []
    for ln in sse(url, path, body):
        if ln.startswith("data: {"):
            d = json.loads(ln[6:])
            if d.get("type", "").startswith(kinds):
                for k in ("item_id", "id"):
                    d.pop(k, None)
                if isinstance(d.get("item"), dict):
                    d["item"] = {k: v for k, v in d["item"].items() if k != "id"}
                out.append(d)
    return out


@pytest.fixture(scope="module", params=[("Qwen-Qwen3-0.6B.jinja", False), ("Qwen3.5-4B.jinja", True)],
                ids=["model-opens", "template-opens"])
def both(request, smol_path):
    name, opens = request.param
    args = ("-m", smol_path, "-c", "512", "-np", "1", "-t", "2", "--jinja", "--chat-template-file", _template(name))
    answers = {}
    for start, extra in ((llama_server, ()), (ServerProcess, ("--no-lossless",))):
        s = start(*args, *extra)
        try:
            answers[start.__name__] = _answers(s.url, opens)
        finally:
            s.close()
    return opens, answers["llama_server"], answers["ServerProcess"]


def _joined(deltas):
    return {k: "".join(d.get(k) or "" for d in deltas) for k in ("content", "reasoning_content")}


def test_reasoning_is_llama_server_s(both):
    opens, peer, ours = both
    for fmt in FORMATS:
        assert ours[fmt] == peer[fmt], fmt
        if fmt != "none":
            assert ours[f"{fmt} stream"] == peer[f"{fmt} stream"], fmt
        else:   # the same text; pyriver holds a "<" back a token longer (the template's EOS text is a stop string)
            assert _joined(ours["none stream"]) == _joined(peer["none stream"])
    assert peer["deepseek"] == {"role": "assistant", "content": "The answer", "reasoning_content": "abc"}
    assert peer["none"]["content"] == ("<think>\nabc</think>The answer" if opens else "<think>abc</think>The answer")


def test_budget_zero_ends_thinking_at_once(both):
    opens, peer, ours = both
    assert ours["budget 0"] == peer["budget 0"]
    assert "reasoning_content" not in peer["budget 0"]


def test_a_positive_budget_forces_the_end_tag_as_llama_server(both):
    opens, peer, ours = both
    for k in ("budget 3", "budget 2 message", "budget none"):
        assert ours[k] == peer[k], k
        assert ours[k + " stream"] == ours[k], k
    if opens:   # the template opens <think>: the budget acts (the model never closes it itself within 16 tokens)
        assert peer["budget 3"] != peer["budget none"] and "</think>" in peer["budget 3"]
        assert " Enough.\n</think>" in peer["budget 2 message"]   # Qwen3.5's handler forces "\n</think>" after the message


def test_bad_format_and_budget_get_llama_server_s_message(both):
    _, peer, ours = both
    assert ours['{"reasoning_format": "xx"}'] == (400, "Unknown reasoning format: xx")
    assert peer['{"reasoning_format": "xx"}'][1] == "Unknown reasoning format: xx"   # llama-server: a 500
    assert ours['{"reasoning_budget_tokens": -2}'] == peer['{"reasoning_budget_tokens": -2}']


def test_thinking_blocks_and_reasoning_items_are_llama_server_s(both):
    opens, peer, ours = both
    for k in ("messages", "messages stream", "responses", "responses stream"):
        assert ours[k] == peer[k], k
    assert [b["type"] for b in peer["messages"]] == (["thinking"] if opens else ["text"])
    assert [i["type"] for i in peer["responses"]] == ["reasoning", "message"]
    assert peer["responses"][0]["content"] == [{"text": "abc", "type": "reasoning_text"}]


def test_a_template_that_refuses_the_messages_is_a_400(both):
    """No messages under a template that cannot render them is the request's mistake, a 400, never a 500:
    Qwen3.5's raises "No messages provided."; Qwen3's reads messages[0].role, which jinja2 refuses where
    llama.cpp's engine takes it as undefined (llama-server answers it, 200: a difference)."""
    opens, peer, ours = both
    assert ours["no messages"][0] == 400
    assert ("No messages provided." if opens else "no element 0") in ours["no messages"][1]
    if not opens:
        assert peer["no messages"] == (200, "")
