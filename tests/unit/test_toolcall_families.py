"""Every tool-call family pyriver.text.toolcalls knows, on the texts llama.cpp's own tests hold it
to (tests/test-chat.cpp in llama-cpp-python 0.3.36's sdist: the model output, the expected content,
reasoning and calls): the family read off the template as llama.cpp's chat.cpp reads it, the calls
parsed, a stream's deltas adding up to the same message, and the forcing grammar accepting the
family's own syntax (llama.cpp's grammar parser)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyriver.text import toolcalls as T

SPECIAL = {"type": "function", "function": {"name": "special_function", "description": "I'm special",
                                            "parameters": {"type": "object", "properties": {
                                                "arg1": {"type": "integer", "description": "The arg."}},
                                                "required": ["arg1"]}}}
GET_TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
EDIT = {"type": "function", "function": {"name": "edit", "parameters": {"type": "object", "properties": {
    "oldString": {"type": "string"}, "newString": {"type": "string"}, "replaceAll": {"type": "boolean"}},
    "required": ["oldString", "newString"]}}}

# (template file, a marker that makes the family's template in the source, family)
TEMPLATES = [
    ("Qwen-Qwen3-0.6B", "hermes"), ("Qwen-Qwen2.5-7B-Instruct", "hermes"),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes"), ("ibm-granite-granite-4.0", "hermes"),
    ("Qwen3-Coder", "qwen3-coder"), ("Qwen3.5-4B", "qwen3-coder"), ("openai-gpt-oss-120b", "gpt-oss"),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3"), ("meta-llama-Llama-3.3-70B-Instruct", "llama3"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral-nemo"),
    ("mistralai-Ministral-3-14B-Reasoning-2512", "mistral-args"),
    ("Mistral-Small-3.2-24B-Instruct-2506", "mistral-args"),
    ("llama-cpp-deepseek-r1", "deepseek-r1"), ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1"),
    ("deepseek-ai-DeepSeek-V3.1", "deepseek-v3.1"), ("meetkai-functionary-medium-v3.1", "functionary-v3.1"),
    ("meetkai-functionary-medium-v3.2", "functionary-v3.2"), ("moonshotai-Kimi-K2", "kimi-k2"),
    ("Kimi-K2-Thinking", "kimi-k2"), ("ibm-granite-granite-3.3-2B-Instruct", "granite-3"),
    ("google-gemma-2-2b-it", "generic"), ("google-gemma-4-31B-it", "gemma4"),
    ("google-gemma-4-31B-it-interleaved", "gemma4"), ("GLM-4.6", "glm"), ("GLM-4.7-Flash", "glm"),
    ("poolside-Laguna-XS.2", "glm"), ("ByteDance-Seed-OSS", "seed-oss"), ("MiniMax-M2", "minimax-m2"),
]


def _templates_dir():
    """llama.cpp's models/templates in the unpacked sdist (pyriver.tools.llama_server), if there."""
    from pyriver.tools import llama_server
    root = llama_server.cache_dir() / "llama-server"
    for d in sorted(root.glob("*/llama_cpp_python-*/vendor/llama.cpp/models/templates")) if root.is_dir() else []:
        return d
    return None


@pytest.mark.parametrize("name,family", TEMPLATES)
def test_family_of_llama_cpp_templates(name, family):
    d = _templates_dir()
    if d is None:
        pytest.skip("llama-cpp-python's sdist is not unpacked (pyriver.tools.llama_server)")
    assert T.family_of((d / f"{name}.jinja").read_text()).name == family


@pytest.mark.parametrize("name,parallel", [("meta-llama-Llama-3.1-8B-Instruct", False), ("Qwen-Qwen2.5-7B-Instruct", True),
                                           ("meetkai-functionary-medium-v3.1", True), ("moonshotai-Kimi-K2", True)])
def test_parallel_calls_unset_as_llama_servers_caps(name, parallel):
    """parallel_tool_calls unset: llama-server's template caps (a second call rendered; Llama 3.x's
    template raises "only supports single tool-calls"): its grammar repeats calls only then."""
    d = _templates_dir()
    if d is None:
        pytest.skip("llama-cpp-python's sdist is not unpacked (pyriver.tools.llama_server)")
    assert T.plan([SPECIAL], "required", None, (d / f"{name}.jinja").read_text()).parallel is parallel


# (family's template marker source, tools, model text, content, reasoning, calls [(name, arguments)], id)
CASES = [
    ("hermes", "<tool_call>", [SPECIAL],
     '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_call>', None, "", [("special_function", {"arg1": 1})]),
    ("hermes-content", "<tool_call>", [SPECIAL],
     "Hello, world!\nWhat's up?<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call>",
     "Hello, world!\nWhat's up?", "", [("special_function", {"arg1": 1})]),
    ("granite-4", "<tool_call>", [SPECIAL],
     '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>', None, "", [("special_function", {"arg1": 1})]),
    ("qwen3-coder", "<tool_call><function=<parameter=", [SPECIAL],
     "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>",
     None, "", [("special_function", {"arg1": 1})]),
    ("qwen3-coder-no-open", "<tool_call><function=<parameter=", [SPECIAL],
     "<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>",
     None, "", [("special_function", {"arg1": 1})]),
    ("qwen3-coder-content", "<tool_call><function=<parameter=", [SPECIAL],
     "Let me call it.\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>",
     "Let me call it.\n", "", [("special_function", {"arg1": 1})]),
    ("qwen3-coder-string", "<tool_call><function=<parameter=", [GET_TIME],
     '<tool_call>\n<function=get_time>\n<parameter=city>\nNew "York"\n</parameter>\n</function>\n</tool_call>',
     None, "", [("get_time", {"city": 'New "York"'})]),
    ("gpt-oss-role", "<|channel|>", [SPECIAL],
     ' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}', None, "", [("special_function", {"arg1": 1})]),
    ("gpt-oss-channel", "<|channel|>", [SPECIAL],
     '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}', None, "",
     [("special_function", {"arg1": 1})]),
    ("gpt-oss-constrain", "<|channel|>", [SPECIAL],
     ' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}', None, "",
     [("special_function", {"arg1": 1})]),
    ("gpt-oss-thoughts", "<|channel|>", [SPECIAL],
     "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant to=functions.special_function"
     '<|channel|>analysis<|message|>{"arg1": 1}', None, "I'm\nthinking", [("special_function", {"arg1": 1})]),
    ("gpt-oss-edit", "<|channel|>", [EDIT],
     "<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary to=functions.edit "
     '<|constrain|>json<|message|>{"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": false}',
     None, "Thinking about edit...",
     [("edit", {"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": False})]),
    ("gpt-oss-final", "<|channel|>", [SPECIAL],
     "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?",
     "Hello, world!\nWhat's up?", "I'm\nthinking", []),
    ("llama3", "<|start_header_id|>ipython", [SPECIAL],
     '{"name": "special_function", "parameters": {"arg1": 1}}', None, "", [("special_function", {"arg1": 1})]),
    ("llama3-builtin", "<|start_header_id|>ipython", [{"type": "function", "function": {"name": "brave_search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}}}}],
     '<|python_tag|>brave_search.call(query="weather in Paris")', None, "", [("brave_search", {"query": "weather in Paris"})]),
    ("mistral-nemo", "[TOOL_CALLS]", [SPECIAL],
     '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]', None, "",
     [("special_function", {"arg1": 1})]),
    ("ministral-3", "[SYSTEM_PROMPT][TOOL_CALLS][ARGS]", [SPECIAL],
     '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}', None, "", [("special_function", {"arg1": 1})]),
    ("mistral-small-3.2", "[TOOL_CALLS][ARGS][CALL_ID]", [SPECIAL],
     '[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}', None, "", [("special_function", {"arg1": 1})]),
    ("deepseek-r1", "<｜tool▁calls▁begin｜>```json", [SPECIAL],
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n```json\n{\"arg1\": 1}```"
     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", None, "", [("special_function", {"arg1": 1})]),
    ("deepseek-v3.1", "<｜tool▁calls▁begin｜>", [GET_TIME],
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"city\": \"XYZCITY\"}<｜tool▁call▁end｜>"
     "<｜tool▁calls▁end｜>", None, "", [("get_time", {"city": "XYZCITY"})]),
    ("functionary-v3.1", "<function=", [SPECIAL],
     '<function=special_function>{"arg1": 1}</function>', None, "", [("special_function", {"arg1": 1})]),
    ("functionary-v3.2", ">>>all >>>${recipient}", [SPECIAL],
     'special_function\n{"arg1": 1}', None, "", [("special_function", {"arg1": 1})]),
    ("functionary-v3.2-content", ">>>all >>>${recipient}", [SPECIAL],
     "all\nHello, world!\nWhat's up?", "Hello, world!\nWhat's up?", "", []),
    ("kimi-k2", "<|tool_calls_section_begin|><|tool_call_begin|>", [SPECIAL],
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin|>"
     '{"arg1": 1}<|tool_call_end|><|tool_calls_section_end|>', None, "", [("special_function", {"arg1": 1})]),
    ("granite-3", "<|tool_call|>", [SPECIAL],
     '<|tool_call|>[{"name": "special_function", "arguments": {"arg1": 1}}]', None, "", [("special_function", {"arg1": 1})]),
    # content before a call, as tool_choice required's grammar lets it come (llama.cpp's until())
    ("mistral-nemo-content", "[TOOL_CALLS]", [SPECIAL],
     'Sure.[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]', "Sure.", "",
     [("special_function", {"arg1": 1})]),
    ("ministral-3-content", "[SYSTEM_PROMPT][TOOL_CALLS][ARGS]", [SPECIAL],
     'Sure.[TOOL_CALLS]special_function[ARGS]{"arg1": 1}', "Sure.", "", [("special_function", {"arg1": 1})]),
    ("kimi-k2-content", "<|tool_calls_section_begin|><|tool_call_begin|>", [SPECIAL],
     "Sure.<|tool_call_begin|>functions.special_function:3<|tool_call_argument_begin|>{\"arg1\": 1}",
     "Sure.", "", [("special_function", {"arg1": 1})]),
    ("deepseek-v3.1-content", "<｜tool▁calls▁begin｜>", [GET_TIME],
     "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜> {\"city\": \"XYZCITY\"}<｜tool▁call▁end｜>"
     "<｜tool▁calls▁end｜>", "Sure.", "", [("get_time", {"city": "XYZCITY"})]),
    ("functionary-v3.1-content", "<function=", [SPECIAL],
     'Sure.\n<function=special_function> {"arg1": 1}</function>', "Sure.", "", [("special_function", {"arg1": 1})]),
    ("functionary-v3.2-two", ">>>all >>>${recipient}", [SPECIAL, GET_TIME],
     'special_function\n{"arg1": 1}get_time\n{"city": "X"}', None, "",
     [("special_function", {"arg1": 1}), ("get_time", {"city": "X"})]),
    ("llama3-content", "<|start_header_id|>ipython", [SPECIAL],
     'Sure. {"type": "function", "name": "special_function", "parameters": {"arg1": 1}}', "Sure.", "",
     [("special_function", {"arg1": 1})]),
]
# Gemma 4's, from test-chat.cpp's google-gemma-4-31B-it cases
G4 = "'<|tool_call>call:'"
TODO = {"type": "function", "function": {"name": "todo_list", "parameters": {"type": "object", "properties": {
    "todos": {"type": "array", "items": {"type": "string"}}}}}}
CONFIG = {"type": "function", "function": {"name": "set_config", "parameters": {"type": "object", "properties": {
    "config": {"type": "object"}}}}}
CASES += [
    ("gemma4", G4, [GET_TIME], '<|tool_call>call:get_time{city:<|"|>San Francisco<|"|>}<tool_call|>', None, "",
     [("get_time", {"city": "San Francisco"})]),
    ("gemma4-content", G4, [GET_TIME], "Hello, world!\nWhat's up?<|tool_call>call:get_time{city:<|\"|>Paris<|\"|>}<tool_call|>",
     "Hello, world!\nWhat's up?", "", [("get_time", {"city": "Paris"})]),
    ("gemma4-two", G4, [GET_TIME, SPECIAL],
     '<|tool_call>call:get_time{city:<|"|>London<|"|>}<tool_call|><|tool_call>call:special_function{arg1:-7}<tool_call|>',
     None, "", [("get_time", {"city": "London"}), ("special_function", {"arg1": -7})]),
    ("gemma4-values", G4, [TODO, CONFIG, SPECIAL],
     '<|tool_call>call:todo_list{todos:[<|"|>buy milk<|"|>,<|"|>walk dog<|"|>]}<tool_call|>'
     '<|tool_call>call:set_config{config:{theme:<|"|>dark<|"|>,count:3,x:1.5e10,on:true,off:false,no:null,e:{},a:[]}}<tool_call|>',
     None, "", [("todo_list", {"todos": ["buy milk", "walk dog"]}),
                ("set_config", {"config": {"theme": "dark", "count": 3, "x": 1.5e10, "on": True, "off": False,
                                           "no": None, "e": {}, "a": []}})]),
]
# GLM 4.x's key and value tags, from test-chat.cpp's GLM-4.6 and GLM-4.7-Flash cases; GLM-4.6's
# separators (newlines) read off a template that renders a call as its template does
GLM46 = ("{% for m in messages %}{% for tc in m.tool_calls or [] %}<tool_call>{{ tc.function.name }}\n"
         "{% for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>\n"
         "{% endfor %}</tool_call>{% endfor %}{% endfor %}")
GLM47 = "<tool_call><arg_key><arg_value>"
CASES += [
    ("glm-4.6", GLM46, [SPECIAL], "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
     None, "", [("special_function", {"arg1": 1})]),
    ("glm-4.7", GLM47, [SPECIAL], "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>",
     None, "", [("special_function", {"arg1": 1})]),
    ("glm-4.7-content", GLM47, [GET_TIME, SPECIAL],
     'Let me look.<tool_call>get_time<arg_key>city</arg_key><arg_value>New "York"\n</arg_value></tool_call>'
     "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>-2.5</arg_value></tool_call>",
     "Let me look.", "", [("get_time", {"city": 'New "York"\n'}), ("special_function", {"arg1": -2.5})]),
    ("seed-oss", "<seed:tool_call><function=<parameter=", [GET_TIME, SPECIAL],
     "<seed:tool_call>\n<function=get_time>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>"
     "<seed:tool_call>\n<function=special_function>\n<parameter=arg1>1</parameter>\n</function>\n</seed:tool_call>",
     None, "", [("get_time", {"city": "Paris"}), ("special_function", {"arg1": 1})]),
    ("minimax-m2", "<minimax:tool_call><invoke name=", [GET_TIME, SPECIAL],
     'Sure.\n<minimax:tool_call>\n<invoke name="get_time">\n<parameter name="city">Paris</parameter>\n</invoke>\n'
     '<invoke name="special_function">\n<parameter name="arg1">1</parameter>\n</invoke>\n</minimax:tool_call>',
     "Sure.", "", [("get_time", {"city": "Paris"}), ("special_function", {"arg1": 1})]),
]
IDS = {"mistral-nemo": "123456789", "kimi-k2": "functions.special_function:0", "mistral-small-3.2": "123456789"}


def _calls(calls):
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("case,src,tools,text,content,reasoning,calls", CASES, ids=[c[0] for c in CASES])
def test_parse(case, src, tools, text, content, reasoning, calls):
    tp = T.plan(tools, "auto", None, src)
    msg, finish = T.message(text, "stop", tp)
    assert msg["content"] == content
    assert msg.get("reasoning_content", "") == reasoning
    assert _calls(msg.get("tool_calls", [])) == calls
    assert finish == ("tool_calls" if calls else "stop")
    if case in IDS:
        assert msg["tool_calls"][0]["id"] == IDS[case]


def _joined(deltas):
    content, reasoning, calls = "", "", {}
    for d in deltas:
        content += d.get("content", "")
        reasoning += d.get("reasoning_content", "")
        for tc in d.get("tool_calls", []):
            c = calls.setdefault(tc["index"], {"id": tc.get("id"), "name": "", "arguments": ""})
            assert "id" not in tc or tc["id"] == c["id"]
            c["name"] += tc.get("function", {}).get("name", "")
            c["arguments"] += tc.get("function", {}).get("arguments", "")
    return content, reasoning, [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize("case,src,tools,text,content,reasoning,calls", CASES, ids=[c[0] for c in CASES])
def test_stream_adds_up(case, src, tools, text, content, reasoning, calls):
    """Fed a character at a time, the deltas add up to the message, and a call's arguments arrive
    before the end (JSON-argument families: as the model's own text)."""
    tp = T.plan(tools, "auto", None, src)
    ds, deltas, before_end = T.DeltaStream(tp), [], []
    for ch in text:
        deltas += ds.feed(ch)
    before_end = list(deltas)
    more, finish = ds.finish("stop")
    got_content, got_reasoning, got_calls = _joined(deltas + more)
    msg, _ = T.message(text, "stop", tp)
    if calls:
        assert finish == "tool_calls"
        assert [(c["name"], json.loads(c["arguments"])) for c in got_calls] == calls
        assert [c["function"]["arguments"] for c in msg["tool_calls"]] == [c["arguments"] for c in got_calls]
        if not case.startswith(("llama3-builtin",)):
            assert _joined(before_end)[2], "the call streamed before the end"
        if case in IDS and case != "mistral-nemo":   # Nemo's id comes after the arguments: llama-server
            assert got_calls[0]["id"] == IDS[case]           # keeps the id it gave the call first
    assert (got_content.strip() or None) == ((msg["content"] or "").strip() or None)
    assert got_reasoning == reasoning


@pytest.mark.parametrize("case,src,tools,text,content,reasoning,calls", CASES, ids=[c[0] for c in CASES])
def test_forced_grammar_accepts_the_family(case, src, tools, text, content, reasoning, calls):
    """tool_choice required: a grammar llama.cpp's parser compiles, of the family's own syntax."""
    if not calls:
        return
    import llama_cpp
    tp = T.plan(tools, "required", None, src)
    g = T.call_grammar(tp)
    assert g and llama_cpp.LlamaGrammar.from_string(g, verbose=False) is not None
    lazy = T.auto_grammar(tp)
    if tp.family.name == "llama3":   # llama.cpp's autoparser: no marker opens a call, so auto has no grammar
        assert lazy is None
        return
    assert lazy.words or lazy.patterns
    assert llama_cpp.LlamaGrammar.from_string(lazy.text, verbose=False) is not None


QWEN25 = "{%- if tools %}<tool_call>{%- endif %}"   # a Hermes-family template's marker
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.mark.parametrize("cut,calls,content", [
    ('<tool_call>\n{"name": "get_', [], '<tool_call>\n{"name": "get_'),   # the name cut: the text is the content
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city', [("get_weather", '{"city')], None),
])
def test_cut_call_as_llama_server_returns_it(cut, calls, content):
    """max_tokens cutting a call (llama-server, SmolLM2 under Qwen2.5's template, max_tokens 12 and
    19): its final parse is lenient, so a call whose name is complete comes back with its arguments
    so far, finish "length"; cut before the name, the answer's text is the content. Streamed, the
    same calls, no raw text."""
    tp = T.plan([WEATHER], "required", None, QWEN25)
    msg, finish = T.message(cut, "length", tp)
    assert finish == "length"
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls", [])] == calls
    assert msg["content"] == content
    ds = T.DeltaStream(tp)
    deltas = [d for ch in cut for d in ds.feed(ch)]
    more, sfinish = ds.finish("length")
    got_content, _, got_calls = _joined(deltas + more)
    assert sfinish == "length" and [(c["name"], c["arguments"]) for c in got_calls] == calls
    assert got_content == ""   # llama-server streams nothing of a call cut before its name


def test_hermes_comma_separated_calls_in_one_tag():
    """llama.cpp's Hermes grammar with parallel calls puts several calls in one tag, comma-separated
    (standard_json_tools); they parse as calls, not content."""
    tp = T.plan([WEATHER], "required", True, QWEN25)
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}, '
            '{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')
    msg, finish = T.message(text, "stop", tp)
    assert finish == "tool_calls" and msg["content"] is None
    assert [json.loads(c["function"]["arguments"])["city"] for c in msg["tool_calls"]] == ["Paris", "Rome"]


@pytest.mark.parametrize("text,args", [
    ('<|tool_call>call:set_config{config:{theme:<|"|>da', '{"config":{"theme":"da'),
    ('<|tool_call>call:set_config{config:{theme:<|', '{"config":{"theme":"'),
    ('<|tool_call>call:set_config{config:{the', '{"config":{"the'),
    ('<|tool_call>call:set_config{config:[1,', '{"config":[1,'),
    ('<|tool_call>call:set_config{', '{'),
    ('<|tool_call>call:set_config{config:{a:<|"|>x"y\n<|"|>}}', '{"config":{"a":"x\\"y\\n"}}'),
])
def test_gemma4_arguments_as_llama_cpp_writes_them(text, args):
    """gemma4_to_json: compact JSON, strings escaped, a value the text cuts short left open."""
    tp = T.plan([CONFIG], "auto", None, G4)
    p = T.read(text, tp, partial=True)
    assert [(c.name, c.arguments) for c in p.calls] == [("set_config", args)]


def test_gemma4_prompt_mends():
    """llama.cpp's Gemma 4 handler: results folded into the calling turn for a template without the
    forward scan; the model's turn opened after a result the template leaves it closed on."""
    fam = T.family_of(G4)
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function",
                                                               "function": {"name": "get_time", "arguments": {}}}]}
    msgs = [{"role": "user", "content": "Hi"}, call, {"role": "tool", "tool_call_id": "c0", "content": '{"r": "ok"}'},
            {"role": "assistant", "content": "Done."}]
    assert fam.prepare(msgs, G4) == [msgs[0], {"role": "assistant", "tool_calls": call["tool_calls"], "content": "Done.",
                                               "tool_responses": [{"name": "get_time", "response": {"r": "ok"}}]}]
    assert fam.prepare(msgs, G4 + "{#- OpenAI Chat Completions: -#}") == msgs
    assert fam.complete_prompt("x<turn|>\n") == "x<turn|>\n<|turn>model\n"
    assert fam.complete_prompt("<|turn>model\n") == "<|turn>model\n"


def test_glm_separators_read_off_the_template():
    from pyriver.text.toolcalls import keyvalue
    assert keyvalue.separators(GLM46) == ("\n", "\n", "\n")
    assert keyvalue.separators(GLM47) == ("", "", "")
    d = _templates_dir()
    if d is not None:
        assert keyvalue.separators((d / "GLM-4.6.jinja").read_text()) == ("\n", "\n", "\n")
        assert keyvalue.separators((d / "GLM-4.7-Flash.jinja").read_text()) == ("", "", "")


@pytest.mark.parametrize("text,args", [
    ("<tool_call>get_time<arg_key>city</arg_key>", '{"city":'),   # the key as its tag ends
    ("<tool_call>get_time<arg_key>city</arg_key><arg_value>", '{"city":"'),   # the quote as the value opens
    ("<tool_call>get_time<arg_key>city</arg_key><arg_value>Par</arg_v", '{"city":"Par'),
    ("<tool_call>get_time<arg_key>ci", "{"),
])
def test_glm_arguments_as_they_stream(text, args):
    """As llama-server's stream gave them for GLM-4.6 (tests/runtime/test_toolcall_peer.py)."""
    p = T.read(text, T.plan([GET_TIME], "auto", None, GLM47), partial=True)
    assert [(c.name, c.arguments) for c in p.calls] == [("get_time", args)]


@pytest.mark.parametrize("src,text,args", [
    ("<seed:tool_call><function=<parameter=", "<seed:tool_call>\n<function=get_time>\n<parameter=city>", '{"city":"'),
    ("<seed:tool_call><function=<parameter=", "<seed:tool_call>\n<function=get_time>\n<parameter=city>Pa", '{"city":"Pa'),
    ("<minimax:tool_call><invoke name=", '<minimax:tool_call>\n<invoke name="get_time">', "{"),
])
def test_tagged_arguments_as_they_stream(src, text, args):
    """As llama-server's stream gave them for Seed-OSS: the key and the value's quote as the key's tag ends."""
    p = T.read(text, T.plan([GET_TIME], "auto", None, src), partial=True)
    assert [(c.name, c.arguments) for c in p.calls] == [("get_time", args)]


def test_tagged_name_complete_only_with_its_tag():
    """llama-server holds no call for `<function=get_time` until its `>` (Seed-OSS) comes."""
    tp = T.plan([GET_TIME], "auto", None, "<seed:tool_call><function=<parameter=")
    assert T.read("<seed:tool_call>\n<function=get_time", tp, partial=True).calls == []
    assert T.message("<seed:tool_call>\n<function=get_time", "length", tp)[0]["content"] == "<seed:tool_call>\n<function=get_time"
