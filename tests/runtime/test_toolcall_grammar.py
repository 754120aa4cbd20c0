"""The grammars that hold tool calls, walked token by token on SmolLM2's vocabulary (llama.cpp's
grammar sampler): they take what llama.cpp's grammars take (common/chat-auto-parser-generator.cpp,
common/parsers/qwen3-coder.cpp) and refuse what those refuse."""
from __future__ import annotations

import pytest

from pyriver import Llama
from helpers import takes
from pyriver.text import toolcalls as T

HERMES = "{%- if tools %}<tool_call>{%- endif %}"
QWEN3_CODER = "{{ '<tool_call>' }}<function=<parameter="
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
EDIT = {"type": "function", "function": {"name": "edit", "parameters": {"type": "object", "properties": {
    "oldString": {"type": "string"}, "newString": {"type": "string"}, "replaceAll": {"type": "boolean"}},
    "required": ["oldString", "newString"]}}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def vocab(smol_path):
    m = Llama(smol_path, n_ctx=256, n_threads=1, verbose=False, river=None)
    yield m
    m.close()


def grammar(tools, choice, src, parallel=None):
    return T.call_grammar(T.plan(tools, choice, parallel, src))


@pytest.mark.parametrize("text,ok", [
    (CALL, True),
    ("Let me look that up.\n" + CALL, True),                 # content before a required call (llama.cpp's until)
    ("<tool_call><b>" + CALL, True),                          # "<tool_call>" not followed by "\n" is content
    ('<tool_call>\n{ "name" : "get_weather" ,\n "arguments": {"city": "Paris"} }\n</tool_call>', True),   # space()
    ("Let me look that up.", False),                         # required: a call must come
    ("<tool_call>\nnot json</tool_call>", False),
])
def test_hermes_required_grammar(vocab, text, ok):
    assert takes(vocab, grammar([WEATHER], "required", HERMES, parallel=False), text) is ok


def test_parallel_calls_repeat_tags(vocab):
    """Parallel calls: tags repeat (llama.cpp's one_or_more), calls also comma-separated in one tag;
    without them one tag (llama.cpp repeats tags there too: see hermes.py)."""
    two = CALL + "\n" + CALL
    assert takes(vocab, grammar([WEATHER], "required", HERMES, parallel=True), two)
    assert takes(vocab, grammar([WEATHER], "required", HERMES, parallel=True), CALL.replace("}}\n", "}}, " + CALL[12:-13] + "\n"))
    assert not takes(vocab, grammar([WEATHER], "required", HERMES, parallel=False), two)


def test_named_choice_keeps_the_call_first(vocab):
    """A named function (OpenAI's; llama-server takes only strings) is still the whole answer."""
    g = grammar([WEATHER], NAMED, HERMES)
    assert takes(vocab, g, CALL) and not takes(vocab, g, "Sure.\n" + CALL)


def _edit(*params):
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function=edit>\n{body}</function>\n</tool_call>"


@pytest.mark.parametrize("text,ok", [
    (_edit(("oldString", "a"), ("newString", "b")), True),
    (_edit(("newString", "b"), ("oldString", "a")), True),                 # required ones in any order
    (_edit(("newString", "b"), ("oldString", "a"), ("replaceAll", "true")), True),
    (_edit(("oldString", "a"), ("replaceAll", "true"), ("newString", "b")), False),   # optional ones after
    (_edit(("oldString", "a")), False),                                    # a required one missing
    ("I will edit it.\n" + _edit(("oldString", "a"), ("newString", "b")), True),      # content first
    (_edit(("oldString", "x\n</parameter"), ("newString", "b")), True),    # text up to the first close
])
def test_qwen3_coder_required_grammar(vocab, text, ok):
    assert takes(vocab, grammar([EDIT], "required", QWEN3_CODER, parallel=False), text) is ok


GAP = {   # a family's template marker source: (its call, a call named, its opening)
    "[TOOL_CALLS]": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}]',
    "[SYSTEM_PROMPT][TOOL_CALLS][ARGS]": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
    "<|tool_calls_section_begin|><|tool_call_begin|>":
        '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}',
    "<｜tool▁calls▁begin｜>": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}'
                             '<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "<|channel|>": '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}',
    "<function=": '<function=get_weather>{"city": "Paris"}</function>',
    "<|start_header_id|>ipython": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
}
BEFORE = {"<|channel|>": "<|channel|>analysis<|message|>Let me look that up.<|end|><|start|>assistant"}


@pytest.mark.parametrize("src", list(GAP))
def test_required_lets_content_come_first(vocab, src):
    """tool_choice required as llama.cpp builds it for Mistral Nemo / Ministral, Kimi K2, DeepSeek,
    gpt-oss, Functionary v3.1 and Llama 3.x: content (gpt-oss: analysis or preamble messages) may
    come before the call, a call must come; a named function is still the whole answer."""
    call, before = GAP[src], BEFORE.get(src, "Let me look that up.\n")
    g = grammar([WEATHER], "required", src, parallel=False)
    assert takes(vocab, g, call) and takes(vocab, g, before + call)
    assert not takes(vocab, g, before)
    named = grammar([WEATHER], NAMED, src)
    assert takes(vocab, named, call) and not takes(vocab, named, "Sure.\n" + call)
