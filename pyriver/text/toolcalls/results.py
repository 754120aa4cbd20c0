"""A model's answer read back through its family: the finished message (content, reasoning,
tool_calls, finish reason "tool_calls") and a stream's deltas, each the difference between
successive parses of the text so far, as llama-server computes them (llama.cpp's
common_chat_msg_diff::compute_diffs): content and reasoning as they grow, a new call with its id,
name and arguments so far, then each call's arguments as they grow."""
from __future__ import annotations

import uuid
from typing import Dict, List, Optional, Tuple

from pyriver.text.grammar import LazyGrammar
from pyriver.text.schema_gbnf import SchemaConverter
from pyriver.text.toolcalls.family import Call, Parsed, llama_space
from pyriver.text.toolcalls.requests import ToolPlan


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def read(text: str, tp: ToolPlan, partial: bool = False) -> Parsed:
    """The family's parse of text (partial: a stream's text so far, or an answer max_tokens cut,
    parsed leniently as llama-server does); without parallel calls, the first call alone."""
    p = tp.family.parse(text, tp.tools, partial)
    if tp.family.lead_space and text.startswith(p.content):
        p.content = p.content.lstrip()
    if not tp.parallel and len(p.calls) > 1:
        p.calls = p.calls[:1]
    return p


def _content(p: Parsed, tp: ToolPlan) -> Optional[str]:
    """The content beside calls: None where there is none."""
    c = p.content.strip() if tp.family.strip_content else p.content
    return c if c.strip() else None


def _openai(c: Call, cid: str) -> Dict:
    return {"id": cid, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}


def parse(text: str, tp: ToolPlan) -> Tuple[Optional[str], List[Dict]]:
    """(content, OpenAI tool calls) of a finished answer; no calls: the text is the content."""
    p = read(text, tp)
    if not p.calls:
        return text, []
    return _content(p, tp), [_openai(c, c.id or _new_id()) for c in p.calls]


def message(text: str, finish: Optional[str], tp: Optional[ToolPlan]) -> Tuple[Dict, Optional[str]]:
    """(assistant message, finish reason) of a finished answer: tool calls parsed out when tools are in play."""
    if tp is None:
        return {"role": "assistant", "content": text}, finish
    p = _final(text, tp, finish)
    plain = not p.calls and not tp.family.channels
    msg: Dict = {"role": "assistant", "content": text if plain else _content(p, tp)}
    if p.reasoning:
        msg["reasoning_content"] = p.reasoning
    if not p.calls:
        return msg, finish
    msg["tool_calls"] = [_openai(c, c.id or _new_id()) for c in p.calls]
    return msg, _finish(finish)


def _final(text: str, tp: ToolPlan, finish: Optional[str]) -> Parsed:
    """The final parse: cut by max_tokens, llama-server's lenient one (common_chat_peg_parse, always
    COMMON_PEG_PARSE_FLAG_LENIENT), which keeps a call whose name is complete with its arguments so
    far; a call cut before its name leaves the answer's text as its content."""
    if finish == "length":
        p = read(text, tp, partial=True)
        # no bare-JSON reading of a cut text; markup families: what their parse made of it, unless nothing
        return p if p.calls or (tp.family.channels and (p.content or p.reasoning)) else Parsed(text)
    return read(text, tp)


def _finish(finish: Optional[str]) -> Optional[str]:
    """The finish reason beside calls: "tool_calls", or "length" where max_tokens cut the answer (llama-server's)."""
    return finish if finish == "length" else "tool_calls"


def _diff(old: str, new: str) -> str:
    return new[len(old):] if new.startswith(old) else new


class DeltaStream:
    """Streamed chat deltas: feed() each piece of text, finish() at the end; each returns the
    deltas to send ({"content"}, {"reasoning_content"}, {"tool_calls": [...]})."""

    def __init__(self, tp: Optional[ToolPlan]):
        self.tp = tp
        self.text = ""
        self.last = Parsed("")
        self.ids: List[str] = []

    def _deltas(self, new: Parsed) -> List[Dict]:
        old, out = self.last, []
        if new.reasoning != old.reasoning:
            out.append({"reasoning_content": _diff(old.reasoning, new.reasoning)})
        if new.content != old.content:
            out.append({"content": _diff(old.content, new.content)})
        if len(new.calls) < len(old.calls):   # a final parse that drops a cut call: nothing to take back
            new.calls = new.calls + old.calls[len(new.calls):]
        if old.calls:
            i = len(old.calls) - 1
            a, b = old.calls[i], new.calls[i]
            args = _diff(a.arguments, b.arguments)
            if args or a.name != b.name:
                fn: Dict = {}
                if a.name != b.name:
                    fn["name"] = b.name
                if args:
                    fn["arguments"] = args
                out.append({"tool_calls": [{"index": i, "function": fn}]})
        for i in range(len(old.calls), len(new.calls)):
            c = new.calls[i]
            self.ids.append(c.id or _new_id())
            fn = {"name": c.name}
            if c.arguments:
                fn["arguments"] = c.arguments
            out.append({"tool_calls": [{"index": i, "id": self.ids[i], "type": "function", "function": fn}]})
        self.last = new
        return out

    def feed(self, text: str) -> List[Dict]:
        if self.tp is None or not text:
            return [{"content": text}] if text else []
        self.text += text
        new = read(self.text, self.tp, partial=True)
        if not new.calls and self.tp.family.holds(self.text):   # a bare JSON call may be coming: held whole
            new = Parsed("", reasoning=new.reasoning)
        return self._deltas(new)

    def finish(self, finish: Optional[str]) -> Tuple[List[Dict], Optional[str]]:
        """The last deltas (what the final parse adds), and the finish reason to send."""
        if self.tp is None:
            return [], finish
        if finish == "length":   # llama-server's lenient final parse: what the stream has shown so far, and
            new = read(self.text, self.tp, partial=True)   # a cut call's arguments; no raw text after
            return self._deltas(new), (_finish(finish) if new.calls else finish)
        new = read(self.text, self.tp)
        if not new.calls:
            if self.last.calls:   # calls streamed, then cut short by the end: they stay as sent
                return [], finish
            return self._deltas(new), finish
        return self._deltas(new), _finish(finish)


# -- grammars ---------------------------------------------------------------------------------
def call_grammar(tp: ToolPlan, force: bool = True) -> Optional[str]:
    """GBNF of tool calls in the family's syntax: those tool_choice required or named forces
    (None for auto), or with force=False a call to any tool (auto's lazy grammar)."""
    if tp.choice == "auto" and force:
        return None
    tools = [t for t in tp.tools if tp.choice in ("required", "auto") or t["function"]["name"] == tp.choice]
    conv = llama_space(SchemaConverter())   # strings as JSON has them, whitespace as llama.cpp's
    if force and tp.choice == "required":   # llama.cpp's: content may come before the calls
        conv.add_rule("root", tp.family.required_root(conv, tools, tp.parallel))
    else:
        conv.add_rule("root", tp.family.root(conv, tools, tp.parallel, force))
    return conv.format_grammar()


def auto_grammar(tp: ToolPlan) -> Optional[LazyGrammar]:
    """tool_choice auto: the grammar of a call to any of the tools, applied from the call's opening
    on; None where nothing opens a call (llama.cpp's: no trigger, no grammar)."""
    if not tp.family.words and not tp.family.patterns:
        return None
    return LazyGrammar(call_grammar(tp, force=False), words=tuple(tp.family.words), patterns=tuple(tp.family.patterns))


def may_start_call(text: str) -> int:
    """Where in streamed text a tool call may begin (Hermes' markers, a bare JSON call), or -1."""
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") or stripped.startswith(("<|python_tag|>", "`")):
        return 0
    for marker in ("<tool_call>", "[TOOL_CALLS]"):
        i = text.find(marker)
        if i >= 0:
            return i
        for k in range(len(marker) - 1, 0, -1):
            if text.endswith(marker[:k]):
                return len(text) - k
    return -1
