"""GLM 4.x's calls: a function's name, then each argument as a key and a value tag,
`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>` (GLM-4.6 with a newline
after the name, the key and the value; GLM-4.7 with none). llama.cpp reads them with its autoparser
(common/chat-diff-analyzer.cpp), which finds those separators in the template's own render of a call,
as done here; test-chat.cpp's GLM-4.6 and GLM-4.7-Flash cases. Arguments are built as llama.cpp's
mapper builds them (as Qwen3-Coder's): `{"K":` then the value, a JSON string of the text for a string
parameter, the text itself (JSON) otherwise."""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Dict, List, Tuple

from pyriver.text.template_render import ChatTemplate
from pyriver.text.toolcalls import jsontext as J
from pyriver.text.toolcalls.family import Call, Family, Parsed, alts, lit, names_of, args_rules
from pyriver.text.toolcalls.qwen3_coder import _is_string, _permute, _types
from pyriver.text.toolcalls.until import excluding, including

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_END, VALUE, VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"


def is_keyvalue(src: str) -> bool:
    """A template that renders calls with key and value tags (not Ling 3.0's, a llama.cpp handler of its own)."""
    return OPEN in src and KEY in src and VALUE in src and "<role>ASSISTANT</role>" not in src


@lru_cache(maxsize=64)
def separators(source: str) -> Tuple[str, str, str]:
    """(after the name, after a key's tag, after a value's tag) as the template renders a call (the
    analyzer's probe); GLM-4.7's (none) where the render does not show them. (llama.cpp's analysis
    leaves the newline after a value out of Laguna XS.2's grammar, whose render has it as GLM-4.6's
    does: here the grammar wants it there too.)"""
    tool = {"type": "function", "function": {"name": "tool1", "parameters": {
        "type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}
    call = {"id": "call00001", "type": "function", "function": {"name": "tool1", "arguments": {"arg": "value"}}}
    try:
        out = ChatTemplate(source, "", "").render(
            [{"role": "user", "content": "User message"}, {"role": "assistant", "content": "", "tool_calls": [call]}],
            add_generation_prompt=False, tools=[tool])
        inner = out[out.rindex(OPEN) + len(OPEN):out.rindex(CLOSE)].lstrip()
        head, rest = inner.split(KEY + "arg" + KEY_END, 1)
        key_sep, after = rest.split(VALUE + "value" + VALUE_END, 1)
        return head[len("tool1"):] if head.startswith("tool1") else "", key_sep, after
    except (Exception,):   # a template that does not render the probe: llama.cpp's analysis finds nothing either
        return "", "", ""


class KeyValue(Family):
    name = "glm"
    words = (OPEN,)

    def __init__(self, source: str):
        self.name_sep, self.key_sep, self.value_sep = separators(source)

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = sorted(names_of(tools), key=len, reverse=True)
        props = {t["function"]["name"]: ((t["function"].get("parameters") or {}).get("properties") or {}) for t in tools}
        k, marker = J.find_any(text, (OPEN,), 0, partial)
        if k < 0 or not marker:
            return Parsed(text if k < 0 or not partial else text[:k])
        out = Parsed(text[:k])
        while True:
            k = J.skip_ws(text, k)
            if not text.startswith(OPEN, k):
                if not (partial and OPEN.startswith(text[k:])) and k < len(text):
                    out.complete = False
                break
            got = self._call(text, J.skip_ws(text, k + len(OPEN)), partial, names, props)
            if got is None:
                out.complete = partial
                break
            call, k, closed = got
            if call is not None:
                out.calls.append(call)
            if not closed:
                out.complete = partial
                break
        if not partial and not out.complete:
            return Parsed(text, complete=False) if not out.calls else out
        return out

    def _call(self, text: str, k: int, partial: bool, names, props):
        """(call or None, end, closed) of `NAME args </tool_call>` at text[k:]; None: not a call."""
        name = next((n for n in names if text.startswith(n, k) and self._after_name(text, k + len(n), partial)), None)
        if name is None:
            return (None, len(text), False) if partial and any(n.startswith(text[k:]) for n in names) else None
        call, j, n_args = Call(name, "{"), J.skip_ws(text, k + len(name) + len(self.name_sep)), 0
        while True:
            j = J.skip_ws(text, j)
            if text.startswith(CLOSE, j):
                call.arguments += "}"
                return call, j + len(CLOSE), True
            if j >= len(text) or (partial and (KEY.startswith(text[j:]) or CLOSE.startswith(text[j:]))):
                return (call, len(text), False) if partial else None
            if not text.startswith(KEY, j):
                return None
            e = text.find(KEY_END, j)
            if e < 0:
                return (call, len(text), False) if partial else None
            pname = text[j + len(KEY):e]
            call.arguments += ("," if n_args else "") + json.dumps(pname, ensure_ascii=False) + ":"   # as the key ends
            n_args += 1
            v = J.skip_ws(text, e + len(KEY_END))
            if not text.startswith(VALUE, v):
                return (call, len(text), False) if partial and VALUE.startswith(text[v:]) else None
            v0 = v + len(VALUE)
            stop = text.find(VALUE_END, v0)
            schema = props[name].get(pname)
            if stop < 0:
                if not partial:
                    return None
                value = text[v0:len(text) - J.held(text[v0:], VALUE_END)]
                if _types(schema or {}) == {"string"}:   # the quote as the value opens
                    call.arguments += '"' + json.dumps(value, ensure_ascii=False)[1:-1]
                else:
                    call.arguments += value
                return call, len(text), False
            value = text[v0:stop]
            call.arguments += json.dumps(value, ensure_ascii=False) if _is_string(schema, value) else value
            j = stop + len(VALUE_END)

    def _after_name(self, text: str, i: int, partial: bool) -> bool:
        """Whether the name ends at i: its separator, then an argument, the call's end (or the text's)."""
        if self.name_sep and not text.startswith(self.name_sep, i):
            return partial and self.name_sep.startswith(text[i:])
        rest = text[J.skip_ws(text, i + len(self.name_sep)):]
        return rest.startswith((KEY, CLOSE)) or (partial and (KEY.startswith(rest) or CLOSE.startswith(rest)))

    def root(self, conv, tools: List[Dict], parallel: bool, force: bool) -> str:
        """llama.cpp's autoparser grammar: the name and its separator, the required arguments in
        any order, then optional ones; a string value any text up to and including the value's end
        tag and separator, another a JSON value and those."""
        end = VALUE_END + self.value_sep
        string = conv.add_rule("kv-arg-string", including(conv, [end], "kv-arg-text"))
        fns = []
        for name, _, schema in args_rules(conv, tools):
            props = schema.get("properties") or {}
            req = [p for p in props if p in (schema.get("required") or [])]
            rules = {}
            for p, ps in props.items():
                val = string if "string" in _types(ps) else f"{conv.visit(ps, f'{name}-{p}-value')} {lit(conv, end)}"
                rules[p] = conv.add_rule(f"tool-{name}-arg-{p}",
                                         f"space {lit(conv, KEY + p + KEY_END + self.key_sep + VALUE)} {val}")
            body = _permute(conv, f"tool-{name}-args", [rules[p] for p in req])
            opt = [rules[p] for p in props if p not in req]
            if opt:
                body += f" ( {alts(opt)} )*"
            fns.append(f"{lit(conv, name + self.name_sep)} {body}")
        call = conv.add_rule("tool-call", f"{lit(conv, OPEN)} space ( {alts(fns)} ) space {lit(conv, CLOSE)}")
        return call + (f" ( space {call} )*" if parallel else "") + " space"

    def required_root(self, conv, tools: List[Dict], parallel: bool) -> str:
        """llama.cpp's: a <think> block, content up to a call's opening, the calls."""
        calls = self.root(conv, tools, parallel, True)
        think = excluding(conv, ("</think>",), "reasoning")
        content = excluding(conv, (OPEN,), "content")
        return f'( "<think>" {think} "</think>" "\\n"? )? {content}? {calls}'
