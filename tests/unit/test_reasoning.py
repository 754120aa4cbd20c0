"""pyriver.text.reasoning: the split of thinking from the answer, on the answers llama-server
(llama.cpp's autoparser) gave for these texts with Qwen3's template (the model opens <think>) and
Qwen3.5's (the template opens it: its generation prompt ends "<think>\\n")."""
from __future__ import annotations

import pytest

from pyriver.text import reasoning as R

QWEN3 = "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
TAGS = R.template_tags(QWEN3)
OPEN = R.opened("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n", TAGS)

# text -> llama-server's (reasoning_content, content) with the model opening <think> / the template opening it
CASES = [
    ("<think>abc</think>The answer", ("abc", "The answer"), ("<think>abc", "The answer")),
    ("<think>\nabc\n</think>\n\nThe answer", ("abc\n", "The answer"), ("<think>\nabc\n", "The answer")),
    ("  <think>abc</think>x", ("abc", "x"), ("<think>abc", "x")),
    ("abc", ("", "abc"), ("abc", "")),
    ("<think>abc", ("abc", ""), ("<think>abc", "")),
    ("<think>a</think>b<think>c</think>d", ("a", "b<think>c</think>d"), ("<think>a", "b<think>c</think>d")),
    ("<think> \n </think>\n\nThe answer", ("", "The answer"), ("<think> \n ", "The answer")),
    ("ab</thi", ("", "ab</thi"), ("ab", "")),
    ("\n\n</think>\n\nok", ("", "</think>\n\nok"), ("", "ok")),
    ("x<think>y</think>z", ("", "x<think>y</think>z"), ("x<think>y", "z")),
]


def test_tags_and_the_opened_tail():
    assert (TAGS.start, TAGS.end, TAGS.channels) == ("<think>", "</think>", False) and OPEN == "<think>\n"
    assert R.template_tags("{{ messages }}") is None
    assert R.opened("<|im_start|>assistant\n", TAGS) == ""
    # a closed empty block (enable_thinking false) is parsed too; a tag in an earlier turn is not
    assert R.opened("assistant\n<think>\n\n</think>\n\n", TAGS) == "<think>\n\n</think>\n\n"
    assert R.opened("<think>x</think>y<|im_end|>\n<|im_start|>assistant\n", TAGS) == ""


@pytest.mark.parametrize("text,model_opens,template_opens", CASES)
def test_split_is_llama_server_s(text, model_opens, template_opens):
    assert R.split(text, TAGS, "deepseek") == model_opens
    assert R.split(text, TAGS, "auto", OPEN) == template_opens
    assert R.split(text, TAGS, "deepseek-legacy", OPEN) == template_opens


def test_format_none_keeps_the_text():
    assert R.split("<think>abc</think>The answer", TAGS, "none") == ("", "<think>abc</think>The answer")
    assert R.split("abc</think>The answer", TAGS, "none", OPEN) == ("", "<think>\nabc</think>The answer")
    assert R.split("<think>abc</think>x", None, "auto") == ("", "<think>abc</think>x")   # no tags: all content


def test_stream_deltas_are_llama_server_s():
    s = R.Stream(TAGS, "deepseek")
    toks = ["<", "t", "h", "ink", ">", "a", "b", "c", "</", "t", "h", "ink", ">", "The", " answer"]
    assert [d for t in toks for d in s.feed(t)] == [
        {"reasoning_content": "a"}, {"reasoning_content": "b"}, {"reasoning_content": "c"},
        {"content": "The"}, {"content": " answer"}]
    s = R.Stream(TAGS, "none", OPEN)
    assert [d for t in ["a", "b"] for d in s.feed(t)] == [{"content": "<think>\na"}, {"content": "b"}]


def test_unknown_format_is_llama_cpp_s_error():
    assert R.check_format("deepseek-legacy") == "deepseek-legacy"
    for bad in ("xx", 3, None):
        with pytest.raises(ValueError, match=f"Unknown reasoning format: {bad}"):
            R.check_format(bad)


GEMMA4_SRC = "{{- '<|tool_call>call:' + function['name'] -}}{{- '<|channel>thought\\n<channel|>' -}}"
# text -> llama-server's (reasoning_content, content) under Gemma 4's template (thinking on), and with
# reasoning_format none its content (tests/runtime/test_server_reasoning_gemma4.py holds them live)
GEMMA4 = [
    ("<|channel>thought\nabc<channel|>The answer", ("abc", "The answer")),
    ("The answer", ("", "The answer")),
    ("<|channel>thought\nabc", ("abc", "")),
    ("<|channel>thought\nabc<channel|>The answer<|channel>thought\n<channel|>", ("abc", "The answer")),
    ("<|channel>thought\nabc<channel|>The<channel|> answer", ("abc", "The")),
    ("  <|channel>thought abc \n<channel|>  The answer", ("abc \n", "    The answer")),
    ("<|channel><|channel>thought\nabc<channel|>X", ("abc", "X")),
    ("<|channel>thought\nA<channel|>B<|channel>thought\nC<channel|>D", ("AC", "BD")),
    ("<|channel>thought\n  \n<channel|>X", ("", "X")),
    ("X<|channel>thought\nabc<channel|>Y", ("abc", "XY")),
    ("<|channel>thought\nabc<channel|>a <|", ("abc", "a ")),
    ("<|channel>thought<channel|>Hello, world!", ("", "Hello, world!")),   # test-chat.cpp's budget 0 case
    ("a<|tool_call>call:f{x:<|", ("", "a<|tool_call>call:f{x:<|")),   # past a call: the tool parser's text
]


def test_gemma4_tags():
    assert R.template_tags(GEMMA4_SRC) == R.GEMMA4 and R.GEMMA4.channels
    assert R.template_tags(GEMMA4_SRC.replace("call:'", "'")) is None   # llama.cpp's Gemma 4 test: its call opener
    off = "<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    assert R.opened(off, R.GEMMA4) == "<|channel>thought\n<channel|>"
    assert R.opened("<|turn>user\nHi<turn|>\n<|turn>model\n", R.GEMMA4) == ""


@pytest.mark.parametrize("text,want", GEMMA4)
def test_gemma4_split_is_llama_server_s(text, want):
    assert R.split(text, R.GEMMA4, "auto") == want
    assert R.split(text, R.GEMMA4, "auto", "<|channel>thought\n<channel|>") == want   # thinking off
    s = R.Stream(R.GEMMA4, "auto")
    deltas = [d for ch in text for d in s.feed(ch)]
    assert ("".join(d.get("reasoning_content", "") for d in deltas),
            "".join(d.get("content", "") for d in deltas)) == want


def test_gemma4_format_none():
    text = "  <|channel>thought abc \n<channel|>  The answer"
    assert R.split(text, R.GEMMA4, "none") == ("", text)
    assert R.split("<|channel><|channel>thought\nabc<channel|>X", R.GEMMA4, "none") == ("", "<|channel>thought\nabc<channel|>X")
    assert R.split("X", R.GEMMA4, "none", "<|channel>thought\n<channel|>") == ("", "<|channel>thought\n<channel|>X")
