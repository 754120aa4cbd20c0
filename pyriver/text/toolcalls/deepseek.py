"""DeepSeek R1 and V3.1: calls in a `<｜tool▁calls▁begin｜>` section (test-chat.cpp's
llama-cpp-deepseek-r1, DeepSeek-R1-Distill-Qwen-32B and DeepSeek-V3.1 cases):
R1   `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}```<｜tool▁call▁end｜>`,
V3.1 `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`.
Their thinking (<think>...</think>) is split by pyriver.text.reasoning before this parse."""
from __future__ import annotations

from pyriver.text.toolcalls.marked import Marked


class DeepSeek(Marked):
    section_open, section_close = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
    call_open, call_close = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"

    def __init__(self, fenced: bool):
        self.fenced = fenced
        self.name = "deepseek-r1" if fenced else "deepseek-v3.1"
        if fenced:
            self.before_name, self.after_name, self.args_after = "function<｜tool▁sep｜>", "\n```json\n", "```"
        else:
            self.after_name = "<｜tool▁sep｜>"
