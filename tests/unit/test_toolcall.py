"""pyriver.text.toolcall on literal model outputs: each template family's tool-call syntax becomes
OpenAI tool_calls, text without calls stays content, streamed text is held only where a call may
start; request checks and the forcing grammar (llama.cpp's parser must accept it)."""
from __future__ import annotations

import json

import pytest

from pyriver.text import toolcall as T
from pyriver.text.structured import request_grammar, response_format_grammar
from pyriver.text.grammar import GrammarError

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]


def _plan(syntax_src="<tool_call>", choice="auto", parallel=None):
    return T.plan(TOOLS, choice, parallel, syntax_src)


def _names_args(calls):
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text,src,content,want", [
    # Qwen 2.5 / Hermes, two parallel calls after some text
    ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
     '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>', "<tool_call>", "Let me check.",
     [("get_weather", {"city": "Paris"}), ("get_time", {})]),
    # Llama 3.x: the JSON alone, "parameters"
    ('{"name": "get_weather", "parameters": {"city": "Oslo"}}', "<|start_header_id|>ipython", None,
     [("get_weather", {"city": "Oslo"})]),
    ('<|python_tag|>{"name": "get_time", "parameters": {}}', "<|start_header_id|>ipython", None, [("get_time", {})]),
    # Mistral
    ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "get_time", "arguments": {}}]',
     "[TOOL_CALLS]", None, [("get_weather", {"city": "Rome"}), ("get_time", {})]),
    # Qwen2.5-Coder with tools: the call in a code fence
    ('```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```', "<tool_call>", None,
     [("get_weather", {"city": "Paris"})]),
    # generic fallback: a bare JSON call; arguments given as a JSON string
    ('{"name": "get_weather", "arguments": "{\\"city\\": \\"Lima\\"}"}', "", None, [("get_weather", {"city": "Lima"})]),
])
def test_parse_families(text, src, content, want):
    got_content, calls = T.parse(text, _plan(src))
    assert got_content == content
    assert _names_args(calls) == want
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
    assert len({c["id"] for c in calls}) == len(calls)


@pytest.mark.parametrize("text", ["The weather is nice.", '{"name": "unknown_fn", "arguments": {}}',
                                  '{"city": "Paris"}', "<tool_call>\nnot json\n</tool_call>"])
def test_no_call_is_content(text):
    content, calls = T.parse(text, _plan())
    assert calls == [] and content == text
    msg, finish = T.message(text, "stop", _plan())
    assert msg == {"role": "assistant", "content": text} and finish == "stop"


def test_parallel_false_keeps_one_call():
    text = ('<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    assert len(T.parse(text, _plan(parallel=False))[1]) == 1
    assert len(T.parse(text, _plan())[1]) == 2


def _joined(deltas):
    """A stream's deltas put together as a client does: content, and each call's name and arguments."""
    content, calls = "", {}
    for d in deltas:
        content += d.get("content", "")
        for tc in d.get("tool_calls", []):
            c = calls.setdefault(tc["index"], {"id": tc.get("id"), "name": "", "arguments": ""})
            c["name"] += tc.get("function", {}).get("name", "")
            c["arguments"] += tc.get("function", {}).get("arguments", "")
    return content, [calls[i] for i in sorted(calls)]


def test_stream_holds_only_calls():
    """Content streams until a call may begin; the call streams as llama-server streams it: its
    id and name once the name is complete, then its arguments as they grow."""
    ds = T.DeltaStream(_plan())
    deltas = []
    for piece in ["It is ", "sunny. <tool", "_call>\n{\"name\": \"get_time\", ", "\"arguments\": {}}\n</tool_call>"]:
        deltas += ds.feed(piece)
    more, finish = ds.finish("stop")
    content, calls = _joined(deltas + more)
    assert content == "It is sunny. " and finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_time", {})]
    first = [d for d in deltas if "tool_calls" in d][0]["tool_calls"][0]
    assert first["index"] == 0 and first["id"].startswith("call_") and first["function"]["name"] == "get_time"
    ds = T.DeltaStream(_plan())
    assert ds.feed("No call <tool") == [{"content": "No call "}]
    assert ds.feed("s here") == [{"content": "<tools here"}]
    assert ds.finish("stop") == ([], "stop")


def test_stream_arguments_as_deltas():
    """The arguments arrive piece by piece (the model's JSON text), not at the end."""
    ds = T.DeltaStream(_plan())
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    deltas = []
    for ch in text:
        deltas += ds.feed(ch)
    more, finish = ds.finish("stop")
    args = [tc["function"].get("arguments", "") for d in deltas for tc in d.get("tool_calls", [])]
    assert len([a for a in args if a]) > 3 and "".join(args) == '{"city": "Paris"}'
    assert more == [] and finish == "tool_calls"


def test_plan_checks():
    assert T.plan(None, None, None, "") is None and T.plan(TOOLS, "none", None, "") is None
    for bad in ({"type": "function", "function": {"name": "nope"}}, "sometimes", {"type": "x"}):
        with pytest.raises(T.ToolError):
            T.plan(TOOLS, bad, None, "")
    with pytest.raises(T.ToolError):
        T.plan([{"function": {}}], "auto", None, "")
    with pytest.raises(T.ToolError):
        T.plan(None, "required", None, "")


def test_messages_normalized():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "noon"}]
    known = T.normalize_messages(msgs, True)
    assert known[0]["content"] == "ab" and known[1]["content"] == "" and known[1]["tool_calls"][0]["function"][
        "arguments"] == {} and known[2]["role"] == "tool"
    plain = T.normalize_messages(msgs, False)
    assert "<tool_call>" in plain[1]["content"] and "tool_calls" not in plain[1]
    assert plain[2] == {"role": "user", "content": "<tool_response>\nnoon\n</tool_response>"}
    with pytest.raises(T.ToolError, match="image_url"):
        T.normalize_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], True)


def test_response_format_rules():
    assert response_format_grammar({"type": "text"}) is None
    assert "root" in response_format_grammar({"type": "json_object"})
    g = response_format_grammar({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"enum": ["p", "q"]}}, "required": ["a"]}}})
    assert '\\"p\\"' in g
    for bad in ({"type": "xml"}, {"type": "json_schema"}, "json", {"type": "json_object", "schema": 3}):
        with pytest.raises(GrammarError):
            response_format_grammar(bad)
    with pytest.raises(GrammarError, match="one of"):
        request_grammar({"type": "json_object"}, 'root ::= "a"')


# -- issue 39: forced calls always parse ------------------------------------------------------------
def test_schema_strings_refuse_raw_control_characters():
    """The JSON schema converter (pyriver.text.schema_gbnf, one for response formats and tool calls)
    gives strings llama.cpp's character rule: no raw control character (JSON forbids them), so
    every string the grammar allows parses; llama-cpp-python 0.3.36's rule `[^"\\\\]` let a raw
    newline through (a forced call came back as content)."""
    from pyriver.text.schema_gbnf import JSON_CHAR, schema_to_gbnf
    schema = {"type": "object", "properties": {"s": {"type": "string"}, "t": {"type": "string", "maxLength": 4},
                                               "free": {"type": "object"}}, "required": ["s"]}
    for g in (schema_to_gbnf(schema), response_format_grammar({"type": "json_object", "schema": schema}),
              T.call_grammar(_plan(choice="required")), T.call_grammar(_plan(choice="auto"), force=False)):
        rules = dict(line.split(" ::= ", 1) for line in g.splitlines())
        assert rules["char"] == JSON_CHAR and '\\x00-\\x1F' in rules["char"]
    # the caller's schema is not rewritten ($refs resolved on a copy)
    ref = {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"type": "string"}}}
    before = json.dumps(ref)
    schema_to_gbnf(ref)
    tool = {"type": "function", "function": {"name": "f", "parameters": ref}}
    T.call_grammar(T.plan([tool], "required", None, "<tool_call>"))
    assert json.dumps(ref) == before


def test_call_with_close_tag_in_a_string():
    """The call's JSON is read with a JSON decoder (as llama.cpp's parser does): a string
    argument holding </tool_call> or <tool_call> does not end or open a call."""
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "a</tool_call>b<tool_call>c"}}\n</tool_call>'
            ' done')
    content, calls = T.parse(text, _plan())
    assert _names_args(calls) == [("get_weather", {"city": "a</tool_call>b<tool_call>c"})] and content == "done"


def test_cut_call_is_content():
    """A call max_tokens cut short: finished by the model (parse), no call; cut by max_tokens, the
    call as far as it came with finish "length" (llama-server 0.3.36's lenient final parse, held
    to it by tests/runtime/test_toolcall_peer.py; streamed, the call's deltas as far as it came);
    complete calls before it are kept."""
    one = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    cut = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'
    assert T.parse(cut, _plan()) == (cut, [])
    msg, finish = T.message(cut, "length", _plan())
    assert finish == "length" and msg["content"] is None
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]] == [
        ("get_weather", '{"city": "Par')]
    ds = T.DeltaStream(_plan())   # streamed: the call as far as it came, as llama-server streams it
    content, calls = _joined(ds.feed(cut))
    assert content == "" and calls[0]["name"] == "get_weather" and calls[0]["arguments"] == '{"city": "Par'
    assert ds.finish("length") == ([], "length")
    content, calls = T.parse(one + "\n" + cut, _plan())
    assert content is None and _names_args(calls) == [("get_time", {})]


def test_cut_closing_tag_is_not_content():
    """A call whose closing tag max_tokens cut: the call, and no stray `</tool` in content (seen on
    `pyriver serve` with Qwen3's template: two parallel calls, the second's tag cut)."""
    text = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool'
    msg, finish = T.message(text, "length", _plan())
    assert msg["content"] is None and _names_args(msg["tool_calls"]) == [("get_time", {})]
