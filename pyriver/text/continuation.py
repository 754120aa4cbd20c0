"""A final assistant message continued rather than answered, as llama.cpp 0.3.36 renders it
(common_chat_templates_apply with continue_final_message; its autoparser's generate_parser): the
messages before it without the generation prompt, then the generation prompt; where the template
thinks (enable_thinking on or off), the generation prompt is cut before the template's reasoning start,
which is written with the message's reasoning, then, to continue the content, the reasoning end and
the content. So Qwen3's prefill "Sure" continues after "<think>\\n\\n</think>\\n\\n", as in
llama-server, where the plain generation prompt would leave the model inside an open <think>."""
from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from pyriver.text import toolcalls
from pyriver.text.template_render import ChatTemplate

# llama.cpp's probe texts (common/chat-diff-analyzer.cpp)
_USER = "U_USER_MSG Hello END_U"
_ANSWER = "A_ASST_MSG I can help END_A"
_THINKING = "REASON_PART I am thinking END_R"
# a marker: a tag in angle or square brackets (segmentize_markers), with the whitespace around it
_PRE = re.compile(r"(<[^<>\s][^<>]*>|\[[^\[\]\s][^\[\]]*\])(\s*)$")
_POST = re.compile(r"^(\s*)(<[^<>\s][^<>]*>|\[[^\[\]\s][^\[\]]*\])(\s*)")


def mode(message: Dict, asked) -> str:
    """"content" or "reasoning": what continues (llama.cpp's COMMON_CHAT_CONTINUATION_AUTO: the
    reasoning where the message has reasoning and no content)."""
    if asked in ("content", "reasoning_content"):
        return "reasoning" if asked == "reasoning_content" else "content"
    return "reasoning" if message.get("reasoning_content") and not message.get("content") else "content"


def reasoning_marks(template) -> Optional[Tuple[str, str]]:
    """(start, end) of the template's reasoning as it writes them, whitespace included ("<think>\\n",
    "\\n</think>\\n\\n"), or None where it does not think: the tag before and after a reasoning it
    renders (the analyzer's compare_reasoning_presence), else the old Qwen and DeepSeek templates'
    bare tags (its workaround for templates that split content on </think>); where llama.cpp has a
    handler of its own for the template (Gemma 4, Kimi K2, gpt-oss, Ministral 3), that handler's."""
    return _marks(template.source)


@lru_cache(maxsize=64)   # by source, as the tool-call caps checks (pyriver.text.toolcalls.requests)
def _marks(source: str) -> Optional[Tuple[str, str]]:
    fam = toolcalls.family_of(source)
    if fam.continue_marks is not None:   # llama.cpp's specialized handler of the template
        return fam.continue_marks
    marks = None
    try:
        out = ChatTemplate(source, "", "").render(
            [{"role": "user", "content": _USER},
             {"role": "assistant", "content": _ANSWER, "reasoning_content": _THINKING}],
            add_generation_prompt=False, enable_thinking=True)
    except Exception:   # a template that refuses the probe: no reasoning found, as llama.cpp's analysis
        out = ""
    i = out.find(_THINKING)
    if i >= 0:
        pre, post = _PRE.search(out[:i]), _POST.match(out[i + len(_THINKING):])
        if post is not None:
            marks = ("".join(pre.groups()) if pre is not None else "", "".join(post.groups()))
    elif "content.split('</think>')" in source and "reasoning_content" not in source:
        marks = ("<think>", "</think>")
    if marks is not None and "laguna_glm_thinking" in source:   # llama.cpp's Laguna patch: bare tags
        marks = (marks[0].strip(), marks[1].strip())
    return marks


def continued(template, messages: List[Dict], asked, **extra) -> str:
    """The prompt that continues messages[-1] (an assistant message; asked: the request's
    continue_final_message, True or None for llama.cpp's auto)."""
    *before, last = messages
    head = template.render(before, add_generation_prompt=False, **extra)
    with_prompt = toolcalls.family_of(template.source).complete_prompt(
        template.render(before, add_generation_prompt=True, **extra))
    gen, what = with_prompt[len(os.path.commonprefix([head, with_prompt])):], mode(last, asked)
    marks = reasoning_marks(template)
    if marks is not None:
        start, end = marks
        if start and start in gen:
            gen = gen[:gen.find(start)]
        gen += start + (last.get("reasoning_content") or "") + (end if what == "content" else "")
    return head + gen + ((last.get("content") or "") if what == "content" else "")
