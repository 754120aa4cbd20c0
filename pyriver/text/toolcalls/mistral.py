"""Mistral. Nemo (test-chat.cpp's mistralai-Mistral-Nemo-Instruct-2407 case): `[TOOL_CALLS][{"name",
"arguments", "id"}, ...]`, the model's 9-character id the call's. Granite 3.x writes the same list
after `<|tool_call|>`. Ministral / Magistral 3 (llama.cpp's common/parsers/ministral3.cpp), Mistral
Small 3.2 and Devstral: `[TOOL_CALLS]NAME[ARGS]{...}` a call (Small 3.2: `[CALL_ID]id` before [ARGS])."""
from __future__ import annotations

import json
import re
from typing import Dict, List, Sequence

from pyriver.text.toolcalls import jsontext as J
from pyriver.text.toolcalls.family import names_of, Call, Family, Parsed, alts, args_rules, lit
from pyriver.text.toolcalls.marked import Marked


class JsonList(Family):
    """MARKER then a JSON list of {"name", "arguments"[, "id"]} calls."""
    marker = ""
    id_key = ""   # the call's id field where the template renders one

    @property
    def content_until(self):   # required: content up to the marker (llama.cpp's until(section_start))
        return (self.marker,)

    @property
    def words(self):
        return (self.marker,)

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = names_of(tools)
        k, marker = J.find_any(text, (self.marker,), 0, partial)
        if k < 0 or not marker:
            return Parsed(text[:k] if k >= 0 else text)
        content, calls = text[:k], []
        i = J.skip_ws(text, k + len(marker))
        if i >= len(text):
            return Parsed(content) if partial else Parsed(text, complete=False)
        if text[i] != "[":
            return Parsed(text, complete=False)
        i = J.skip_ws(text, i + 1)
        while True:
            status, name, args, cid, end = J.read_call(text, i, partial, names, id_key="id")
            if status == "fail":
                break
            if name is not None:
                calls.append(Call(name, args, cid or ""))
            if status == "partial":
                return Parsed(content, calls)
            i = J.skip_ws(text, end)
            if text.startswith(",", i):
                i = J.skip_ws(text, i + 1)
                continue
            if text.startswith("]", i):
                return Parsed(content + text[i + 1:], calls) if partial else Parsed(content + text[i + 1:].strip(), calls)
            break
        if partial and i >= len(text):
            return Parsed(content, calls)
        return Parsed(content, calls, complete=False) if calls else Parsed(text, complete=False)

    def root(self, conv, tools: List[Dict], parallel: bool, force: bool) -> str:
        """llama.cpp's autoparser grammar (chat-peg-parser.cpp, standard_json_tools with flat keys):
        `MARKER [ {"name": N, "arguments": {...}, "id": ...} ]`, space() between JSON tokens; the comma
        after the arguments is the grammar's whether or not an id follows (llama.cpp's sequence)."""
        q = lambda k: lit(conv, json.dumps(k))
        sid = '( "\\"" ( [^"\\\\] | "\\\\" ( ["\\\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\"" | json-number )'
        if self.id_key:
            conv.set_rule("json-number", '"-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? (("e" | "E") [+-]? [0-9]+)?')
        tail = (f' space "," space ( {q(self.id_key)} space ":" space {sid} )?' if self.id_key else "")
        tool = conv.add_rule("tool", alts([f'"{{" space {q("name")} space ":" space {q(n)} space "," space '
                                           f'{q("arguments")} space ":" space {r}{tail} space "}}"'
                                           for n, r, _ in args_rules(conv, tools)]))
        calls = tool + (f' ( space "," space {tool} )*' if parallel else "")
        return conv.add_rule("tool-call", f'{lit(conv, self.marker)} space "[" space {calls} space "]" space')


class MistralNemo(JsonList):
    name, marker, id_key = "mistral-nemo", "[TOOL_CALLS]", "id"


class Granite3(JsonList):
    """llama.cpp 0.3.36's autoparser finds no tool format in Granite 3.3's template: llama-server
    holds no call to a grammar there; pyriver keeps its own (the calls first)."""
    name, marker = "granite-3", "<|tool_call|>"
    content_until = ()


_CALL_ID = re.compile(r"\[CALL_ID\]([^\[]*)\[ARGS\]")


class MistralArgs(Marked):
    name = "mistral-args"
    call_open, after_name = "[TOOL_CALLS]", "[ARGS]"
    # required: content (Ministral's [THINK] block too) up to the first call (llama.cpp's
    # common/parsers/ministral3.cpp: reasoning << content(until("[TOOL_CALLS]")) << calls)
    content_until = ("[TOOL_CALLS]",)

    def __init__(self, ministral3: bool = False):
        # llama.cpp's Ministral / Magistral 3 handler (common/parsers/ministral3.cpp) continues a message
        # in a [THINK] block; Mistral Small 3.2 and Devstral go through its autoparser
        self.continue_marks = ("[THINK]", "[/THINK]") if ministral3 else None

    def head(self, text: str, k: int, partial: bool, names: Sequence[str]):
        for n in sorted(names, key=len, reverse=True):
            m = _CALL_ID.match(text, k + len(n)) if text.startswith(n, k) else None
            if m:
                return "done", n, m.group(1), m.end()
            rest = text[k + len(n):] if text.startswith(n, k) else None
            if partial and rest is not None and _coming(rest):
                return "partial", None, "", len(text)
        return super().head(text, k, partial, names)


def _coming(rest: str) -> bool:
    """Whether rest may still become `[CALL_ID]id[ARGS]`."""
    if "[CALL_ID]".startswith(rest):
        return True
    if not rest.startswith("[CALL_ID]"):
        return False
    tail = rest[len("[CALL_ID]"):]
    k = tail.find("[")
    return k < 0 or "[ARGS]".startswith(tail[k:])
