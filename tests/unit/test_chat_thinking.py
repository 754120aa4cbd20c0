"""`pyriver chat` shows a thinking model's thoughts apart from its answer (pyriver.text.reasoning's
split) and keeps only the answer as the turn's content; a template that does not think is as before."""
from __future__ import annotations

import io
from types import SimpleNamespace

from pyriver.chat.app import ChatSession

QWEN35_TAIL = "{{- '<think>\\n' + reasoning_content + '\\n</think>\\n\\n' }}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"


class FakeLlm:
    """What ChatSession uses of a Llama: a template, its prompt, streamed chat chunks of fixed pieces."""
    river_path, exit_threshold, lossless = None, 2.0, False

    def __init__(self, source: str, prompt: str, pieces):
        self.chats = SimpleNamespace(template=SimpleNamespace(source=source))
        self.prompt, self.pieces = prompt, pieces

    def chat_prompt(self, messages):
        return self.prompt, False

    def create_chat_completion(self, messages, **kw):
        for p in self.pieces:
            yield {"choices": [{"delta": {"content": p}}]}


def test_thinking_is_shown_apart_and_not_kept_as_content():
    llm = FakeLlm(QWEN35_TAIL, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n",
                  ["ab", "c</th", "ink>\n\n", "The ", "answer"])
    s, out = ChatSession(llm, None, 16, 0.0, "q4_0"), io.StringIO()
    assert s.answer("Hi", out) == "The answer"
    assert out.getvalue() == "[thinking] abc\n[/thinking]\nThe answer\n"
    assert s.messages[-1] == {"role": "assistant", "content": "The answer", "reasoning_content": "abc"}


def test_a_template_without_thinking_prints_the_text():
    llm = FakeLlm("{{ messages }}", "user: Hi\nassistant:", ["<think>abc", "</think>x"])
    s, out = ChatSession(llm, None, 16, 0.0, "q4_0"), io.StringIO()
    assert s.answer("Hi", out) == "<think>abc</think>x"
    assert out.getvalue() == "<think>abc</think>x\n"
    assert s.messages[-1] == {"role": "assistant", "content": "<think>abc</think>x"}
