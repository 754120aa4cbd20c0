"""Structured output and tools through a real `pyriver serve` process and the real `openai`
client: response_format json_object / json_schema, llama.cpp's grammar and json_schema fields on
both endpoints, streamed and not, several requests at once (each slot has its own grammar state);
the tool loop; bad grammars and schemas are 400s in bounded time and the server keeps serving."""
from __future__ import annotations

import json
import re
import threading
import time

import jsonschema
import openai
import pytest

from pyriver_dev import toolcall_check as TC

from helpers import assert_json_object
from server_proc import ServerProcess, http, sse

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer"},   # llama-cpp-python 0.3.36's converter does not enforce minimum/maximum
    "pets": {"type": "array", "items": {"type": "object", "properties": {
        "kind": {"enum": ["cat", "dog"]}, "legs": {"enum": [2, 4]}}, "required": ["kind"]}, "maxItems": 2}},
    "required": ["name", "age", "pets"]}
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 15},
                                         "country": {"enum": ["France", "Peru", "Japan"]},
                                         "big": {"type": "boolean"}}, "required": ["city", "country", "big"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                          "required": ["city"]}}}


@pytest.fixture(scope="module")
def server(smol_path):
    s = ServerProcess(smol_path, "--parallel", "3", "--ctx", "1024", "--threads", "2", "--metrics")
    yield s
    s.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def _chat(client, content, stream=False, **kw):
    msgs = [{"role": "user", "content": content}]
    r = client.chat.completions.create(model=client.models.list().data[0].id, messages=msgs,
                                       stream=stream, **kw)
    if not stream:
        return r.choices[0].message.content, r.choices[0].finish_reason
    chunks = list(r)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), \
        [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason][-1]


@pytest.mark.parametrize("stream", [False, True])
def test_json_formats_validate(client, stream):
    for prompt, schema in (("Describe a person with pets as JSON.", PERSON), ("A big city as JSON.", CITY)):
        for kw in (dict(temperature=0.0), dict(temperature=0.9, seed=7)):
            text, _ = _chat(client, prompt, stream, max_tokens=200, response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}, **kw)
            jsonschema.validate(json.loads(text), schema)
            # any JSON object: unbounded, so a question this model answers briefly
            text, finish = _chat(client, 'Return a JSON object with one key "answer" giving the capital of France.',
                                 stream, max_tokens=300, response_format={"type": "json_object"}, **kw)
            assert_json_object(text, finish)


def test_completions_grammar_and_json_schema_fields(server, client):
    model = client.models.list().data[0].id
    for stream in (False, True):
        r = client.completions.create(model=model, prompt="Three digits:", max_tokens=16, stream=stream,
                                      temperature=0.8, seed=3,
                                      extra_body={"grammar": 'root ::= "[" [0-9] ("," [0-9]){2} "]"'})
        text = "".join(c.choices[0].text for c in r) if stream else r.choices[0].text
        assert re.fullmatch(r"\[\d,\d,\d\]", text), text
        r = client.completions.create(model=model, prompt="A city:", max_tokens=120, stream=stream, temperature=0.0,
                                      extra_body={"json_schema": CITY})
        text = "".join(c.choices[0].text for c in r) if stream else r.choices[0].text
        jsonschema.validate(json.loads(text), CITY)
    text, _ = _chat(client, "yes or no?", max_tokens=8, temperature=0.0, extra_body={"grammar": 'root ::= "yes" | "no"'})
    assert text in ("yes", "no")


def test_slots_keep_their_own_grammar(server, client):
    """Three requests at once, three grammars: each answer is in its own language."""
    model = client.models.list().data[0].id
    grammars = {'root ::= "[" [0-9] ("," [0-9]){2} "]"': r"\[\d,\d,\d\]", 'root ::= ("yes" | "no") "!"': r"(yes|no)!",
                'root ::= [a-z]{3} "-" [a-z]{3}': r"[a-z]{3}-[a-z]{3}"}
    out = {}

    def one(g):
        r = client.completions.create(model=model, prompt="Answer:", max_tokens=20, temperature=0.9, seed=11,
                                      extra_body={"grammar": g})
        out[g] = r.choices[0].text
    ts = [threading.Thread(target=one, args=(g,)) for g in grammars for _ in range(2)]
    [t.start() for t in ts]
    [t.join(120) for t in ts]
    for g, pat in grammars.items():
        assert re.fullmatch(pat, out[g]), (g, out[g])


@pytest.mark.parametrize("stream", [False, True])
def test_tool_loop(client, stream):
    model = client.models.list().data[0].id
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=model, messages=msgs, tools=[WEATHER], tool_choice="required",
                                       temperature=0.0, max_tokens=60, stream=stream)
    if stream:
        chunks = list(r)
        # a call's arguments come as deltas (as llama-server streams them): gathered as a client does
        _, calls, finish = TC._gather(c.choices[0].model_dump() for c in chunks if c.choices)
    else:
        finish = r.choices[0].finish_reason
        calls = [tc.model_dump() for tc in r.choices[0].message.tool_calls]
        assert r.choices[0].message.content is None
    assert finish == "tool_calls" and calls
    for c in calls:
        assert c["function"]["name"] == "get_weather" and c["id"]
        jsonschema.validate(json.loads(c["function"]["arguments"]), WEATHER["function"]["parameters"])
    msgs += [{"role": "assistant", "content": None, "tool_calls": calls}]
    msgs += [{"role": "tool", "tool_call_id": c["id"], "content": "sunny, 21 C"} for c in calls]
    a = client.chat.completions.create(model=model, messages=msgs, tools=[WEATHER], temperature=0.0, max_tokens=30,
                                       tool_choice="none")
    assert a.choices[0].message.content and a.choices[0].finish_reason in ("stop", "length")
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " there"}]}]
    p = client.chat.completions.create(model=model, messages=parts, temperature=0.0, max_tokens=8)
    # text parts joined with a newline, as llama-server joins them (test_server_chat_bos checks it against it)
    s = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello\n there"}],
                                       temperature=0.0, max_tokens=8)
    assert p.choices[0].message.content == s.choices[0].message.content

BAD_TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}}

BAD = [({"grammar": 'root ::= "abc'}, "does not parse"), ({"grammar": 'root ::= x\nx ::= x "a"'}, "does not parse"),
       ({"grammar": 'root ::= "\\x00"'}, "allows no token"),
       ({"json_schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}, "schema"),
       ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": 3}}}}, "schema"),
       ({"response_format": {"type": "xml"}}, "response_format"),
       ({"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'}, "one of"),
       ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not in tools"),
       ({"tools": [BAD_TOOL], "tool_choice": "required"}, "cannot be turned into a grammar"),
       ({"tools": [BAD_TOOL]}, "cannot be turned into a grammar"),   # auto: its lazy grammar too
       ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools must be"),
       ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "image_url")]


def test_bad_requests_are_400_and_server_keeps_serving(server):
    for extra, words in BAD:
        for path in ("/v1/chat/completions", "/v1/completions"):
            if path == "/v1/completions" and ("tools" in extra or "messages" in extra):
                continue
            body = dict({"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"},
                        max_tokens=4, **extra)
            for stream in (False, True):
                t0 = time.perf_counter()
                status, resp = http("POST", server.url + path, dict(body, stream=stream), timeout=60)
                assert time.perf_counter() - t0 < 30
                assert status == 400, (extra, resp)
                assert words in resp["error"]["message"] and resp["error"]["type"] == "invalid_request_error"
    # a grammar that ends in a dead end after its first character: a 400, or an error event when streamed
    body = {"prompt": "Say a:", "max_tokens": 8, "temperature": 0.0, "grammar": 'root ::= "a" "\\x00"'}
    status, resp = http("POST", server.url + "/v1/completions", body)
    assert status == 400 and "allows no token" in resp["error"]["message"]
    lines = list(sse(server.url, "/v1/completions", dict(body, stream=True)))
    assert any("allows no token" in line for line in lines)
    _, m = http("GET", server.url + "/metrics")   # the dead-end request's slot is free
    assert re.search(r"^pyriver_slots_busy 0(\.0)?$", m, re.M), m
    status, ok = http("POST", server.url + "/v1/completions", {"prompt": "The sky is", "max_tokens": 4})
    assert status == 200 and ok["choices"][0]["text"]


def test_explosive_grammar_and_unparseable_call_end_cleanly(server, client):
    """A grammar of nested, ambiguous repetition ends in bounded time in the language; a tool call
    the model writes that does not parse (here forced by a grammar) is content, finish "stop"."""
    t0 = time.perf_counter()
    status, r = http("POST", server.url + "/v1/completions", {"prompt": "aaaa", "max_tokens": 40, "temperature": 0.0,
                                                              "grammar": 'root ::= ((("a"*)*)*)* "b"?'}, timeout=60)
    assert status == 200 and set(r["choices"][0]["text"]) <= set("ab") and time.perf_counter() - t0 < 30
    bad_call = "<tool_call>\nnot json\n</tool_call>"
    r = client.chat.completions.create(model=client.models.list().data[0].id, tools=[WEATHER], temperature=0.0,
                                       messages=[{"role": "user", "content": "Weather in Paris?"}], max_tokens=30,
                                       extra_body={"grammar": 'root ::= "<tool_call>\\nnot json\\n</tool_call>"'})
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    assert r.choices[0].message.content == bad_call
