"""Qwen3-Coder's XML calls, also Qwen3.5, Nemotron Nano 3 and StepFun-3.5-Flash (llama.cpp's
common/parsers/qwen3-coder.cpp; test-chat.cpp's Qwen3-Coder cases):
`<tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`.
Arguments are built as llama.cpp's mapper builds them: `{"P":` then the value, a JSON string of the
text for a string parameter, the text itself (JSON) otherwise; the object closed with the function.
Qwen3-Coder (no <think>) may leave out the first call's <tool_call>."""
from __future__ import annotations

import json
from typing import Dict, List, Tuple

from pyriver.text.toolcalls import jsontext as J
from pyriver.text.toolcalls.family import (Call, Family, Parsed, alts, args_rules, is_string_value, lit, names_of,
                                           param_types, permute)
from pyriver.text.toolcalls.until import excluding, including

OPEN, CLOSE = "<tool_call>", "</tool_call>"
ARG_CLOSE = "\n</parameter>\n"


class Qwen3Coder(Family):
    name = "qwen3-coder"
    strip_content = False

    def __init__(self, thinking: bool):
        self.thinking = thinking

    @property
    def words(self):
        return (OPEN,)

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = names_of(tools)
        props = {t["function"]["name"]: ((t["function"].get("parameters") or {}).get("properties") or {}) for t in tools}
        starts = (OPEN,) + (() if self.thinking else tuple(f"<function={n}>" for n in names))
        k, marker = J.find_any(text, starts, 0, partial)
        if k < 0 or not marker:
            return Parsed(text if k < 0 or not partial else text[:k])
        content, calls, complete = text[:k], [], True
        while True:
            k = J.skip_ws(text, k)
            if text.startswith(OPEN, k):
                k = J.skip_ws(text, k + len(OPEN))
            elif calls or self.thinking:
                if partial and k < len(text) and OPEN.startswith(text[k:]):
                    break
                complete = k >= len(text) and partial
                break
            got = self._call(text, k, partial, names, props)
            if got is None:
                complete = partial
                break
            call, k, done = got
            if call is not None:
                calls.append(call)
            if not done:
                break
            k = J.skip_ws(text, k)
            if text.startswith(CLOSE, k):
                k = J.skip_ws(text, k + len(CLOSE))
            elif partial and CLOSE.startswith(text[k:]):
                break
            if k >= len(text) or not text.startswith(OPEN, k):
                content += text[k:]
                break
        if not partial and (not calls or not complete):
            done = [c for c in calls if c.arguments.endswith("}")]
            return Parsed(content, done, complete=False) if done else Parsed(text, complete=False)
        return Parsed(content, calls)

    def _call(self, text, k, partial, names, props):
        """(call or None, end, closed) of `<function=NAME>...</function>` at text[k:]; None: not a call."""
        head = "<function="
        if not text.startswith(head, k):
            return (None, len(text), False) if partial and head.startswith(text[k:]) else None
        j = k + len(head)
        e = text.find(">", j)
        if e < 0:
            return (None, len(text), False) if partial and any(n.startswith(text[j:]) for n in names) else None
        name = text[j:e]
        if name not in names:
            return None
        call, j, n_args = Call(name, "{"), J.skip_ws(text, e + 1), 0
        while True:
            if text.startswith("</function>", j):
                call.arguments += "}"
                return call, j + len("</function>"), True
            if j >= len(text) or (partial and ("<parameter=".startswith(text[j:]) or "</function>".startswith(text[j:]))):
                return (call, len(text), False) if partial else None
            if not text.startswith("<parameter=", j):
                return None
            e = text.find(">", j)
            if e < 0:
                return (call, len(text), False) if partial else None
            pname = text[j + len("<parameter="):e].strip()
            v0 = e + 1 + (text[e + 1:e + 2] == "\n")
            stop = text.find(ARG_CLOSE, v0)
            key = ("," if n_args else "") + json.dumps(pname, ensure_ascii=False) + ":"
            n_args += 1
            if stop < 0:
                if not partial:
                    return None
                value = text[v0:len(text) - J.held(text[v0:], ARG_CLOSE)]
                schema = props[name].get(pname)
                if e + 1 >= len(text):
                    pass   # the opening tag's newline still to come: llama.cpp's arg open is incomplete
                elif is_string_value(schema, value) and param_types(schema or {}) == {"string"}:
                    call.arguments += key + '"' + json.dumps(value, ensure_ascii=False)[1:-1]
                elif value:
                    call.arguments += key + value
                else:
                    call.arguments += key
                return call, len(text), False
            value = text[v0:stop]
            if is_string_value(props[name].get(pname), value):
                call.arguments += key + json.dumps(value, ensure_ascii=False)
            else:
                call.arguments += key + value
            j = J.skip_ws(text, stop + len(ARG_CLOSE))

    def _starts(self, tools: List[Dict]) -> Tuple[str, ...]:
        """What opens a call (llama.cpp's tool_call_starts): Qwen3-Coder may leave out <tool_call>."""
        return (OPEN,) + (() if self.thinking else tuple(f"<function={n}>" for n in names_of(tools)))

    def content_before(self, tools):
        return self._starts(tools)

    def root(self, conv, tools: List[Dict], parallel: bool, force: bool) -> str:
        """llama.cpp's grammar (common/parsers/qwen3-coder.cpp): each call's required parameters in
        any order (a permutation, up to COMMON_CHAT_MAX_PERMUTE of them; more in schema order), then
        optional ones in any order and number; a string value any text up to and including the
        first "\n</parameter>\n"."""
        string = conv.add_rule("xml-arg-string", including(conv, [ARG_CLOSE], "xml-arg-text"))
        fns = []
        for (name, _, schema), t in zip(args_rules(conv, tools), tools):
            props = schema.get("properties") or {}
            req = [p for p in props if p in (schema.get("required") or [])]
            rules = {}
            for p, ps in props.items():
                types = param_types(ps)
                if "string" in types:
                    val = string   # any text: the grammar keeps the raw string rule (as llama.cpp's)
                else:
                    val = f"{conv.visit(ps, f'{name}-{p}-value')} {lit(conv, ARG_CLOSE)}"
                rules[p] = conv.add_rule(f"tool-{name}-arg-{p}", f"{lit(conv, f'<parameter={p}>' + chr(10))} {val}")
            body = permute(conv, f"tool-{name}-args", [rules[p] for p in req])
            opt = [rules[p] for p in props if p not in req]
            if opt:
                body += f" ( {alts(opt)} )*"
            fns.append(f"{lit(conv, f'<function={name}>' + chr(10))} {body} {lit(conv, '</function>' + chr(10))}")
        body = f"( {alts(fns)} ) {lit(conv, CLOSE)} space"
        call = conv.add_rule("tool-call", f"{lit(conv, OPEN + chr(10))} {body}")
        first = call if self.thinking else conv.add_rule("tool-call-first", f"{lit(conv, OPEN + chr(10))}? {body}")
        return first + (f" {call}*" if parallel else "")

    def required_root(self, conv, tools: List[Dict], parallel: bool) -> str:
        """reasoning (Qwen3.5's <think>), content up to a call's opening, the calls: llama.cpp's
        `reasoning << content << tool_calls`."""
        calls = self.root(conv, tools, parallel, True)
        content = excluding(conv, self._starts(tools), "content")
        lead = ""
        if self.thinking:
            think = excluding(conv, ("</think>", OPEN), "reasoning")
            lead = f'( "<think>" space {think} ( "</think>" | ) )? '
        return f"{lead}space {content} space {calls}"
