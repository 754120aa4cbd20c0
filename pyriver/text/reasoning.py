"""A reasoning model's thinking apart from its answer, as llama-server splits it (llama.cpp's
common/chat.cpp autoparser, parsed by chat-peg-parser.cpp). llama-cpp-python binds no part of
llama.cpp's common/, so the rule is written out here, checked against llama-server's answers
(tests/runtime/test_server_reasoning.py):

- the template's thinking tags (<think> and </think>, and the few other pairs llama.cpp knows)
  are found in its source; a template without them has no reasoning, its text all content;
- the generated text is parsed after the generation prompt's tail from its opening tag, so a
  template that opens <think> itself (Qwen3.5, DeepSeek-R1) has its answer's start as reasoning;
- whitespace before the opening tag, after it and after the closing tag is skipped; reasoning runs
  to the closing tag (a closing tag cut short at the end is held back); whitespace-only reasoning
  is dropped; an opening tag later in the text is content;
- reasoning_format none: no split, and the text after the generation prompt's tail, opening tag
  included, is all content (leading whitespace skipped); auto, deepseek and deepseek-legacy split
  alike (llama.cpp's PEG parsers no longer keep the tags in content for deepseek-legacy);
- a stream's deltas are the differences between successive parses, reasoning before content;
- Gemma 4 (llama.cpp's peg-gemma4 parser) thinks in channels: `<|channel>thought` ... `<channel|>`
  blocks may stand anywhere among the content; each block's reasoning (after whitespace) is joined,
  the content around them joined as written (no whitespace skipped), empty `<|channel>`s before a
  thought block dropped, and an unmatched `<channel|>` ends the answer (the rest is not read).
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from pyriver.text.toolcalls import gemma4
from pyriver.text.toolcalls.jsontext import held as _held

FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")
_WS = " \t\n\r"
# Pairs llama.cpp's templates think in (models/templates): DeepSeek/Qwen/GLM..., Seed-OSS, Command R7B, Magistral
_PAIRS = (("<think>", "</think>"), ("<seed:think>", "</seed:think>"),
          ("<|START_THINKING|>", "<|END_THINKING|>"), ("[THINK]", "[/THINK]"))


def check_format(name) -> str:
    """The reasoning format, or llama.cpp's error for one it does not know."""
    if not isinstance(name, str) or name not in FORMATS:
        raise ValueError(f"Unknown reasoning format: {name}")
    return name


class Tags(NamedTuple):
    start: str
    end: str
    channels: bool = False   # Gemma 4's: thought blocks among the content (split_channels)


GEMMA4 = Tags(gemma4.THOUGHT, gemma4.THOUGHT_END, True)
_CHANNEL = "<|channel>"


def template_tags(source: Optional[str]) -> Optional[Tags]:
    """The thinking tags a chat template writes, None for a template that does not think."""
    if source and gemma4.is_gemma4(source):   # llama.cpp's Gemma 4 handler sets its thinking tags
        return GEMMA4
    for start, end in _PAIRS:
        if source and end in source:
            return Tags(start, end)
    return None


def budget_end_tags(source: Optional[str], tags: Tags) -> List[str]:
    """The end sequences llama-server's budget sampler watches for, the first forced when the budget
    runs out (chat_params.thinking_end_tags): the Qwen3-Coder family's handler (common/chat.cpp's
    detection; Qwen3.5, Nemotron Nano 3) ends thinking with "\n</think>", "</think>" or "<tool_call>";
    the autoparser's, the template's closing tag. llama.cpp's other specialized handlers (DeepSeek's
    also at its tool-call opener, LFM2, Ling, Ministral...) are not written out here."""
    if source and tags.start == "<think>" and "<tool_call>" in source and "<function=" in source \
            and "<parameter=" in source and "'<tool_call><function=' ~ tool_call.name ~ '>'" not in source:
        return ["\n</think>", "</think>", "<tool_call>"]
    return [tags.end]


def opened(prompt: str, tags: Optional[Tags]) -> str:
    """The generation prompt's tail from an opening tag the template wrote itself ("<think>\\n"),
    or "": the text the model's answer is parsed after. Only a tail that is the tag, whitespace
    and at most a closed empty block counts (a tag in an earlier message does not)."""
    if tags is None:
        return ""
    i = prompt.rfind(tags.start)
    if i < 0:
        return ""
    tail = prompt[i:]
    rest = tail[len(tags.start):].strip(_WS)
    return tail if rest in ("", tags.end) else ""


def split(text: str, tags: Optional[Tags], fmt: str = "auto", prefix: str = "") -> Tuple[str, str]:
    """(reasoning, content) of generated text; prefix: opened()'s tail of the prompt."""
    if tags is None:
        return "", text
    if tags.channels:
        return split_channels(prefix + text, tags, fmt)
    s = (prefix + text).lstrip(_WS)
    if fmt == "none":
        return "", s
    if not s.startswith(tags.start):
        if tags.start.startswith(s):   # the opening tag may still be coming
            return "", ""
        return "", s
    body = s[len(tags.start):].lstrip(_WS)
    k = body.find(tags.end)
    if k < 0:
        reasoning, content = body[:len(body) - _held(body, tags.end)], ""
    else:
        reasoning, content = body[:k], body[k + len(tags.end):].lstrip(_WS)
    return ("" if not reasoning.strip(_WS) else reasoning), content


def split_channels(s: str, tags: Tags, fmt: str = "auto") -> Tuple[str, str]:
    """Gemma 4's (reasoning, content) (see the module's docstring); with format none the thought
    blocks stay in the content as written. As llama.cpp's parse (lenient, also at the answer's end)
    a channel's or tag's first characters at the end are held back, except past a tool call's
    opening, where the text is the tool-call parser's (pyriver.text.toolcalls.gemma4). A channel
    other than thought (llama-server's 500, "does not match the expected peg-gemma4 format") keeps
    the rest of the text as content."""
    reasoning, content, i = [], [], 0
    while i < len(s):
        if s.startswith(_CHANNEL, i) or _CHANNEL.startswith(s[i:]):
            j = i
            while s.startswith(_CHANNEL, j) and not tags.start.startswith(s[j:j + len(tags.start)]):
                j += len(_CHANNEL)   # empty channels before a thought block
            if not s.startswith(tags.start, j):
                if tags.start.startswith(s[j:]):
                    break   # the block's opening still coming
                content.append(s[i:])
                break
            b = j + len(tags.start)
            while b < len(s) and s[b] in _WS:
                b += 1
            k = s.find(tags.end, b)
            if fmt == "none":   # the block as written (llama.cpp holds back its opening, not its end)
                content.append(s[j:] if k < 0 else s[j:k + len(tags.end)])
            else:
                reasoning.append(s[b:len(s) - _held(s, tags.end)] if k < 0 else s[b:k])
            if k < 0:
                break
            i = k + len(tags.end)
            continue
        k = min((x for x in (s.find(_CHANNEL, i), s.find(tags.end, i)) if x >= 0), default=len(s))
        piece = s[i:k]
        if k == len(s) and gemma4.OPEN not in "".join(content) + piece:   # a marker may be coming
            piece = piece[:len(piece) - max(_held(piece, _CHANNEL), _held(piece, tags.end))]
        content.append(piece)
        if k < len(s) and s.startswith(tags.end, k):
            break   # an unmatched end: llama.cpp's parse stops there
        i = k
    return "".join(reasoning), "".join(content)


def message_fields(reasoning: str, content: str) -> Dict[str, str]:
    """An assistant message's text fields, as llama-server writes them (reasoning_content only when there is some)."""
    return {"content": content, "reasoning_content": reasoning} if reasoning else {"content": content}


class Stream:
    """A stream's deltas: feed() the text of each token, get [{"reasoning_content": ...}, {"content": ...}]
    as llama-server sends them (each a chunk of its own)."""

    def __init__(self, tags: Optional[Tags], fmt: str = "auto", prefix: str = ""):
        self.tags, self.fmt, self.prefix = tags, fmt, prefix
        self.text = ""
        self.reasoning = self.content = ""

    def feed(self, text: str) -> List[Dict[str, str]]:
        if not text:
            return []
        self.text += text
        reasoning, content = split(self.text, self.tags, self.fmt, self.prefix)
        out = []
        if reasoning != self.reasoning:
            out.append({"reasoning_content": _diff(self.reasoning, reasoning)})
        if content != self.content:
            out.append({"content": _diff(self.content, content)})
        self.reasoning, self.content = reasoning, content
        return out


def _diff(old: str, new: str) -> str:
    """What new adds to old (llama.cpp's string_diff: new must extend old)."""
    return new[len(old):] if new.startswith(old) else new
