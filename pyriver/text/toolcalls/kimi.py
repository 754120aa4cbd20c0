"""Kimi K2 (Instruct and Thinking): `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>`; the call's id is
`functions.NAME:IDX` (llama.cpp's common/parsers/kimi-k2.cpp; test-chat.cpp's moonshotai-Kimi-K2 case)."""
from __future__ import annotations

import re
from typing import Sequence

from pyriver.text.toolcalls.family import alts, args_rules, lit
from pyriver.text.toolcalls.marked import Marked

_HEAD = re.compile(r"functions\.([^:<]+):(\d+)<\|tool_call_argument_begin\|>")


class KimiK2(Marked):
    name = "kimi-k2"
    section_open, section_close = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
    call_open, call_close = "<|tool_call_begin|>", "<|tool_call_end|>"
    before_name, after_name = "functions.", ":0<|tool_call_argument_begin|>"
    close_optional = True
    continue_marks = ("<think>", "</think>")   # common/parsers/kimi-k2.cpp
    lead_space = False   # llama.cpp's parser: generation prompt + content, no space() between
    words = ("<|tool_call_begin|>",)   # llama.cpp's lazy trigger: the call, not the section
    # required: reasoning and content up to the section or a call (llama.cpp's until_one_of)
    content_until = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>")

    def root(self, conv, tools, parallel: bool, force: bool) -> str:
        """llama.cpp's common/parsers/kimi-k2.cpp: the section's opening optional, then calls
        `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>?`,
        the section's end optional; lazily (auto) from a call's opening on."""
        one = conv.add_rule("tool-call", alts([
            f'{lit(conv, "<|tool_call_begin|>functions." + n + ":")} [0-9]+ {lit(conv, "<|tool_call_argument_begin|>")} '
            f'{r} {lit(conv, self.call_close)}?' for n, r, _ in args_rules(conv, tools)]))
        calls = f"{one} ( {one} )*" if parallel else one
        calls = f"{calls} {lit(conv, self.section_close)}?"
        return f"{lit(conv, self.section_open)}? {calls}" if force else calls

    def head(self, text: str, k: int, partial: bool, names: Sequence[str]):
        m = _HEAD.match(text, k)
        if m and m.group(1) in names:
            return "done", m.group(1), f"functions.{m.group(1)}:{m.group(2)}", m.end()
        if partial and _coming(text[k:], names):
            return "partial", None, "", len(text)
        return "fail", None, "", k


def _coming(rest: str, names: Sequence[str]) -> bool:
    """Whether rest may still become `functions.NAME:IDX<|tool_call_argument_begin|>`."""
    for n in names:
        head = f"functions.{n}:"
        if head.startswith(rest):
            return True
        if rest.startswith(head):
            tail = rest[len(head):].lstrip("0123456789")
            return "<|tool_call_argument_begin|>".startswith(tail)
    return False
