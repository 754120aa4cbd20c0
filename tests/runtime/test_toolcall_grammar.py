"""The grammars that hold tool calls, walked token by token on SmolLM2's vocabulary (llama.cpp's
grammar sampler): they take what llama.cpp's grammars take (common/chat-auto-parser-generator.cpp,
common/parsers/qwen3-coder.cpp) and refuse what those refuse."""
from __future__ import annotations

import pytest

from pyriver import Llama
from pyriver.text import toolcalls as T
from pyriver.text.grammar import Grammar

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


def takes(llm, gbnf: str, text: str) -> bool:
    """Whether the grammar takes the whole of text (its tokens one by one) and may end there."""
    g = Grammar(llm.vocab, gbnf)
    for t in llm.tokenize(text.encode(), add_bos=False, special=False):
        if not g.allows(t):
            return False
        g.accept(t)
    return g.allows(llm.token_eos())


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
