"""DeepSeek R1 and V3.1: calls in a `<｜tool▁calls▁begin｜>` section (test-chat.cpp's
llama-cpp-deepseek-r1, DeepSeek-R1-Distill-Qwen-32B and DeepSeek-V3.1 cases):
R1   `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}```<｜tool▁call▁end｜>`,
V3.1 `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`.
Their thinking (<think>...</think>) is split by pyriver.text.reasoning before this parse."""
from __future__ import annotations

from pyriver.text.toolcalls.marked import Marked
from pyriver.text.toolcalls.until import excluding


class DeepSeek(Marked):
    section_open, section_close = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
    call_open, call_close = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
    ws_before_args = True
    content_until = (section_open,)

    def __init__(self, fenced: bool):
        self.fenced = fenced
        self.name = "deepseek-r1" if fenced else "deepseek-v3.1"
        if fenced:
            self.before_name, self.after_name, self.args_after = "function<｜tool▁sep｜>", "\n```json\n", "```"
        else:
            self.after_name = "<｜tool▁sep｜>"

    def required_root(self, conv, tools, parallel: bool) -> str:
        """llama.cpp's autoparser: `space ("<think>" until("</think>") "</think>")? content? calls`,
        the content up to the section. llama.cpp's grammar starts at the generation prompt (its
        sampler is fed the prompt's "<think>" first); here the model's text is the grammar's, so the
        opening tag is optional: a block the prompt opened closes before content and calls."""
        think = excluding(conv, ("</think>",), "reasoning")
        content = excluding(conv, self.content_until, "content")
        return f'space ( "<think>"? {think} "</think>" )? {content}? ( {self.root(conv, tools, parallel, True)} )'
