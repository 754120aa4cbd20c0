"""Anthropic's Messages API on a real `pyriver serve`, through the official `anthropic` SDK: a tool loop
(a forced tool_use, its tool_result back, the answer), streaming equal to the plain answer,
count_tokens, stop sequences, bad blocks as 400; the plain text equal to llama-server's /v1/messages
on the same file, and to pyriver's own chat route for the same conversation. The SDK sends no
temperature (its create() has none): both servers run greedy by --temp 0."""
from __future__ import annotations

import json

import pytest

from server_proc import ServerProcess, http, llama_server

anthropic = pytest.importorskip("anthropic")

WEATHER = {"name": "get_weather", "description": "The weather in a city today.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
PLAIN = dict(model="m", max_tokens=24, system="You answer in one sentence.",
             messages=[{"role": "user", "content": "Name a river in France."}])


@pytest.fixture(scope="module")
def server(smol_path):
    s = ServerProcess(smol_path, "--parallel", "2", "--ctx", "1024", "--threads", "2", "--no-lossless", "--temp", "0")
    yield s
    s.close()


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)


def test_tool_loop(client, server):
    first = client.messages.create(model="m", max_tokens=64, messages=ASK, tools=[WEATHER],
                                   tool_choice={"type": "tool", "name": "get_weather"})
    assert first.stop_reason == "tool_use" and first.role == "assistant"
    use = [b for b in first.content if b.type == "tool_use"]
    assert len(use) == 1 and use[0].name == "get_weather" and isinstance(use[0].input.get("city"), str)
    turn = ASK + [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use[0].id,
                                                "content": "Sunny, 21 degrees."}]}]
    answer = client.messages.create(model="m", max_tokens=32, messages=turn, tools=[WEATHER])
    assert answer.stop_reason in ("end_turn", "max_tokens") and answer.content[0].type == "text"
    # the same conversation through the OpenAI route: the same text (one chat plan under both)
    call = {"id": use[0].id, "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(use[0].input)}}
    oai = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": use[0].id, "content": "Sunny, 21 degrees."}]
    status, body = http("POST", server.url + "/v1/chat/completions", {
        "messages": oai, "max_tokens": 32, "temperature": 0.0,
        "tools": [{"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                    "parameters": WEATHER["input_schema"]}}]})
    assert status == 200 and body["choices"][0]["message"]["content"] == answer.content[0].text
    # streamed: the same blocks, tool_use included
    with client.messages.stream(model="m", max_tokens=64, messages=ASK, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather"}) as s:
        final = s.get_final_message()
    assert [b.model_dump(exclude={"id"}) for b in final.content] == [b.model_dump(exclude={"id"}) for b in first.content]
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == first.usage.output_tokens


def test_stream_count_tokens_and_stop_sequences(client):
    plain = client.messages.create(**PLAIN)
    text = plain.content[0].text
    assert plain.usage.input_tokens == client.messages.count_tokens(
        model="m", system=PLAIN["system"], messages=PLAIN["messages"]).input_tokens
    with client.messages.stream(**PLAIN) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == text and final.stop_reason == plain.stop_reason and final.content[0].text == text
    word = text.split()[2]
    cut = client.messages.create(**dict(PLAIN, stop_sequences=["zzzz", word]))
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == word
    assert cut.content[0].text == text[:text.index(word)]


def test_bad_blocks_are_400(client):
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="m", max_tokens=8, messages=ASK, tool_choice={"type": "sometimes"}, tools=[WEATHER])


EMPTY = [("/v1/messages", {"model": "m", "max_tokens": 8, "messages": []}),
         ("/v1/messages", {"model": "m", "max_tokens": 8, "messages": [], "system": "Be brief."}),
         ("/v1/messages/count_tokens", {"model": "m", "messages": []}),
         ("/v1/chat/completions", {"max_tokens": 8, "messages": []})]


def _empty_answers(url):
    out = []
    for path, body in EMPTY:
        code, got = http("POST", url + path, body)
        assert code == 200, (path, got)
        out.append(got.get("content") or got.get("input_tokens") or got["choices"][0]["message"]["content"])
        if path == "/v1/messages":   # llama.cpp's test_anthropic_empty_messages
            assert got["type"] == "message"
    return out


@pytest.mark.peer
def test_empty_messages_are_answered_as_llama_server_does(server, smol_path):
    # llama-server is permissive: no messages render the generation prompt alone (issue 70, item 5)
    ours = _empty_answers(server.url)
    p = llama_server("-m", smol_path, "-c", "1024", "-np", "1", "-t", "2", "--temp", "0")
    try:
        assert ours == _empty_answers(p.url)
    finally:
        p.close()


@pytest.mark.peer
def test_plain_text_is_llama_server_s(client, smol_path):
    ours = client.messages.create(**PLAIN)
    p = llama_server("-m", smol_path, "-c", "1024", "-np", "1", "-t", "2", "--temp", "0")
    try:
        theirs = anthropic.Anthropic(base_url=p.url, api_key="x", max_retries=0).messages.create(**PLAIN)
    finally:
        p.close()
    assert ours.content[0].text == theirs.content[0].text
    assert (ours.stop_reason, ours.usage.input_tokens, ours.usage.output_tokens) == \
        (theirs.stop_reason, theirs.usage.input_tokens, theirs.usage.output_tokens)


RED = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": RED}}
TOOL_TURN = [{"role": "user", "content": "Fix the bug"},
             {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "main.py"}]}]


def test_image_blocks_without_projector_say_so(client):
    """Image blocks (a user's, and inside a tool_result) reach the media path: without --mmproj, a 400 that names it."""
    for content in ([IMAGE, {"type": "text", "text": "What is this?"}],
                    [{"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "File"}, IMAGE]}]):
        with pytest.raises(anthropic.BadRequestError) as e:
            client.messages.create(model="m", max_tokens=8, messages=TOOL_TURN[:2] + [{"role": "user", "content": content}])
        assert "image input is not supported" in str(e.value).lower()


def test_thinking_in_history_is_rendered(smol_path, tmp_path):
    """An assistant's thinking blocks reach the template as reasoning_content (count_tokens and the chat alike)."""
    tpl = tmp_path / "t.jinja"
    tpl.write_text("{% for m in messages %}{{ m.role }}:{% if m.reasoning_content %}<think>{{ m.reasoning_content }}"
                   "</think>{% endif %}{{ m.content or '' }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
    s = ServerProcess(smol_path, "--ctx", "512", "--parallel", "1", "--threads", "2", "--no-lossless",
                      "--jinja", "--chat-template-file", str(tpl))
    try:
        c = anthropic.Anthropic(base_url=s.url, api_key="x", max_retries=0)
        think = [dict(TOOL_TURN[1], content=[{"type": "thinking", "thinking": "Look at the files first.", "signature": ""}]
                      + TOOL_TURN[1]["content"])]
        plain = c.messages.count_tokens(model="m", messages=TOOL_TURN, tools=[WEATHER]).input_tokens
        more = c.messages.count_tokens(model="m", messages=TOOL_TURN[:1] + think + TOOL_TURN[2:], tools=[WEATHER]).input_tokens
        assert more > plain
        ans = c.messages.create(model="m", max_tokens=1, messages=TOOL_TURN[:1] + think + TOOL_TURN[2:], tools=[WEATHER])
        assert ans.usage.input_tokens == more
    finally:
        s.close()


def test_image_blocks_with_projector(tinygemma3):
    """With --mmproj, image blocks (base64; inside a tool_result too) are the chat's image_url parts: the
    same prompt tokens as the OpenAI route's request with the image as a data: URL."""
    text, proj = tinygemma3
    s = ServerProcess("-m", text, "--mmproj", proj, "-np", "1", "-c", "1024", "-t", "2", "--temp", "0")
    try:
        c = anthropic.Anthropic(base_url=s.url, api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": [IMAGE, {"type": "text", "text": "What is this?"}]}]
        r = c.messages.create(model="m", max_tokens=4, messages=msgs)
        assert r.content[0].type == "text" and r.usage.input_tokens == c.messages.count_tokens(model="m", messages=msgs).input_tokens
        oai = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + RED}},
                                            {"type": "text", "text": "What is this?"}]}]
        status, body = http("POST", s.url + "/v1/chat/completions", {"messages": oai, "max_tokens": 4, "temperature": 0})
        assert status == 200 and body["usage"]["prompt_tokens"] == r.usage.input_tokens
        assert body["choices"][0]["message"]["content"] == r.content[0].text
        tool = TOOL_TURN[:2] + [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                                              "content": [{"type": "text", "text": "File"}, IMAGE]}]}]
        no_image = TOOL_TURN[:2] + [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                                                  "content": [{"type": "text", "text": "File"}]}]}]
        assert c.messages.count_tokens(model="m", messages=tool).input_tokens > \
            c.messages.count_tokens(model="m", messages=no_image).input_tokens
        assert c.messages.create(model="m", max_tokens=2, messages=tool).content
    finally:
        s.close()
