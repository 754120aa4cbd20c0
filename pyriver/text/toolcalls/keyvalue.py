"""Calls whose arguments are tagged one by one, each a key and its value as written (llama.cpp's
autoparser, common/chat-diff-analyzer.cpp, derives them from the template's render of a call):

- GLM 4.x (also Laguna, Spark 2.5): `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`,
  GLM-4.6 with a newline after the name, the key and the value, GLM-4.7 with none: read off the
  template's render of a call, as the analyzer does;
- Seed-OSS: `<seed:tool_call>\\n<function=NAME>\\n<parameter=K>V</parameter>\\n</function>\\n</seed:tool_call>`;
- MiniMax-M2: `<minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="K">V</parameter>\\n</invoke>\\n</minimax:tool_call>`,
  several calls in one section (llama.cpp's grammar joins them with ", ").

test-chat.cpp's GLM-4.6 and GLM-4.7-Flash cases. Arguments are built as llama.cpp's mapper builds
them (as Qwen3-Coder's): `{"K":` as the key's tag ends, then the value, a JSON string of the text for
a string parameter (its quote as the value opens), the text itself (JSON) otherwise."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Tuple

from pyriver.text.template_render import ChatTemplate
from pyriver.text.toolcalls import jsontext as J
from pyriver.text.toolcalls.family import (Call, Family, Parsed, alts, args_rules, is_string_value, lit, names_of,
                                           param_types, permute)
from pyriver.text.toolcalls.until import excluding, including

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_END, VALUE, VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"


@dataclass(frozen=True)
class Tags:
    """A family's literals as llama.cpp's grammar writes them (whitespace included; the parse takes
    any whitespace where they have some)."""
    open: str          # a section of calls
    name_pre: str
    name_post: str
    key_pre: str
    key_post: str      # the key's end, then the value's opening
    value_post: str
    call_post: str
    close: str
    joined: bool = False   # several calls in one section (", " between), else a section each


SEED = Tags("<seed:tool_call>\n", "<function=", ">\n", "<parameter=", ">", "</parameter>\n", "</function>\n",
            "</seed:tool_call>")
MINIMAX = Tags("<minimax:tool_call>\n", '<invoke name="', '">\n', '<parameter name="', '">', "</parameter>\n",
               "</invoke>\n", "</minimax:tool_call>", joined=True)


def is_glm(src: str) -> bool:
    """A template that renders calls with GLM's key and value tags (not Ling 3.0's, a llama.cpp handler of its own)."""
    return OPEN in src and KEY in src and VALUE in src and "<role>ASSISTANT</role>" not in src


def is_seed(src: str) -> bool:
    return "<seed:tool_call>" in src and "<function=" in src and "<parameter=" in src


def is_minimax(src: str) -> bool:
    return "<minimax:tool_call>" in src and "<invoke name=" in src and "]<]minimax[>[" not in src


@lru_cache(maxsize=64)
def separators(source: str) -> Tuple[str, str, str]:
    """GLM's (after the name, after a key's tag, after a value's tag) as the template renders a call
    (the analyzer's probe); GLM-4.7's (none) where the render does not show them. (llama.cpp's analysis
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


def glm_tags(source: str) -> Tags:
    name_sep, key_sep, value_sep = separators(source)
    return Tags(OPEN, "", name_sep, KEY, KEY_END + key_sep + VALUE, VALUE_END + value_sep, "", CLOSE)


class KeyValue(Family):
    def __init__(self, name: str, tags: Tags):
        self.name, self.t = name, tags
        # what the parse matches: the literals without their whitespace; the key's end apart from the value's opening
        self.open, self.close = tags.open.strip(), tags.close.strip()
        self.name_pre, self.name_post = tags.name_pre.strip(), tags.name_post.strip()
        self.key_pre, self.value_end, self.call_end = tags.key_pre.strip(), tags.value_post.strip(), tags.call_post.strip()
        end = tags.key_post.find(">") + 1 or len(tags.key_post)
        self.key_end, self.value_open = tags.key_post[:end].strip(), tags.key_post[end:].strip()

    @property
    def words(self):   # llama.cpp's lazy trigger: the section's opening as its grammar writes it
        return (self.t.open,)

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = sorted(names_of(tools), key=len, reverse=True)
        props = {t["function"]["name"]: ((t["function"].get("parameters") or {}).get("properties") or {}) for t in tools}
        k, marker = J.find_any(text, (self.open,), 0, partial)
        if k < 0 or not marker:
            return Parsed(text if k < 0 or not partial else text[:k])
        out = Parsed(text[:k])
        while True:   # sections
            k = J.skip_ws(text, k)
            if not text.startswith(self.open, k):
                if not (partial and self.open.startswith(text[k:])) and k < len(text):
                    out.complete = False
                break
            k = J.skip_ws(text, k + len(self.open))
            closed = False
            while True:   # calls in the section
                got = self._call(text, k, partial, names, props)
                if got is None:
                    out.complete = partial
                    break
                call, k, done = got
                if call is not None:
                    out.calls.append(call)
                if not done:
                    out.complete = partial
                    break
                k = J.skip_ws(text, k)
                if text.startswith(self.close, k):
                    k, closed = k + len(self.close), True
                    break
                if partial and self.close.startswith(text[k:]):
                    break
                if self.t.joined and text.startswith(",", k):
                    k = J.skip_ws(text, k + 1)
                    continue
                if not (self.t.joined and text.startswith(self.name_pre, k)):
                    out.complete = partial and k >= len(text)
                    break
            if not closed:
                break
        if not partial and not out.complete:
            return Parsed(text, complete=False) if not out.calls else out
        return out

    def _call(self, text: str, k: int, partial: bool, names, props):
        """(call or None, end, closed) of one call at text[k:] (its name's tag on); None: not a call."""
        if self.name_pre and not text.startswith(self.name_pre, k):
            return (None, len(text), False) if partial and self.name_pre.startswith(text[k:]) else None
        k += len(self.name_pre)
        name = next((n for n in names if text.startswith(n, k) and self._after_name(text, k + len(n), partial)), None)
        if name is None:
            coming = any((n + self.t.name_post).startswith(text[k:]) for n in names)
            return (None, len(text), False) if partial and coming else None
        call, j, n_args = Call(name, "{"), J.skip_ws(text, k + len(name) + len(self.name_post)), 0
        end = self.call_end or self.close   # GLM's call ends with its section
        while True:
            j = J.skip_ws(text, j)
            if text.startswith(end, j):
                call.arguments += "}"
                return call, j + (len(end) if self.call_end else 0), True
            if j >= len(text) or (partial and (self.key_pre.startswith(text[j:]) or end.startswith(text[j:]))):
                return (call, len(text), False) if partial else None
            if not text.startswith(self.key_pre, j):
                return None
            e = text.find(self.key_end, j + len(self.key_pre))
            if e < 0:
                return (call, len(text), False) if partial else None
            pname = text[j + len(self.key_pre):e]
            call.arguments += ("," if n_args else "") + json.dumps(pname, ensure_ascii=False) + ":"   # as the key ends
            n_args += 1
            v = J.skip_ws(text, e + len(self.key_end))
            if not text.startswith(self.value_open, v):
                return (call, len(text), False) if partial and self.value_open.startswith(text[v:]) else None
            # the value as written after its opening (no opening tag: the key's end opens it)
            v0 = v + len(self.value_open) if self.value_open else e + len(self.key_end)
            stop = text.find(self.value_end, v0)
            schema = props[name].get(pname)
            if stop < 0:
                if not partial:
                    return None
                value = text[v0:len(text) - J.held(text[v0:], self.value_end)]
                if param_types(schema or {}) == {"string"}:   # the quote as the value opens
                    call.arguments += '"' + json.dumps(value, ensure_ascii=False)[1:-1]
                else:
                    call.arguments += value
                return call, len(text), False
            value = text[v0:stop]
            call.arguments += json.dumps(value, ensure_ascii=False) if is_string_value(schema, value) else value
            j = stop + len(self.value_end)

    def _after_name(self, text: str, i: int, partial: bool) -> bool:
        """Whether the name is complete at i, as llama.cpp's literal of it: its tag's end there (Seed's
        `>`, MiniMax's `">`), or where the tag is whitespace or nothing (GLM's), what follows it: the
        whitespace, or an argument or the call's end beginning."""
        if self.name_post:
            return text.startswith(self.name_post, i)
        if self.t.name_post:   # whitespace (GLM-4.6's newline)
            return i < len(text) and text[i] in " \t\n\r"
        rest = text[i:]
        ends = (self.key_pre, self.call_end or self.close)
        return bool(rest) and (rest.startswith(ends) or (partial and any(m.startswith(rest) for m in ends)))

    def root(self, conv, tools: List[Dict], parallel: bool, force: bool) -> str:
        """llama.cpp's autoparser grammar: the name's tags, the required arguments in any order,
        then optional ones; a string value any text up to and including the value's end, another a
        JSON value and the end."""
        t = self.t
        string = conv.add_rule("kv-arg-string", including(conv, [t.value_post], "kv-arg-text"))
        fns = []
        for name, _, schema in args_rules(conv, tools):
            props = schema.get("properties") or {}
            req = [p for p in props if p in (schema.get("required") or [])]
            rules = {}
            for p, ps in props.items():
                val = string if "string" in param_types(ps) else f"{conv.visit(ps, f'{name}-{p}-value')} {lit(conv, t.value_post)}"
                rules[p] = conv.add_rule(f"tool-{name}-arg-{p}", f"space {lit(conv, t.key_pre + p + t.key_post)} {val}")
            body = permute(conv, f"tool-{name}-args", [rules[p] for p in req])
            opt = [rules[p] for p in props if p not in req]
            if opt:
                body += f" ( {alts(opt)} )*"
            tail = f" space {lit(conv, t.call_post)}" if t.call_post else ""
            fns.append(f"{lit(conv, t.name_pre + name + t.name_post)} {body}{tail}")
        fn = conv.add_rule("tool-fn", alts(fns))
        if t.joined:   # one section, the calls joined (llama.cpp's ", ")
            inner = fn + (f' ( ", " {fn} )*' if parallel else "")
            return conv.add_rule("tool-call", f"{lit(conv, t.open)} space {inner} space {lit(conv, t.close)}") + " space"
        call = conv.add_rule("tool-call", f"{lit(conv, t.open)} space {fn} space {lit(conv, t.close)}")
        return call + (f" ( space {call} )*" if parallel else "") + " space"

    def required_root(self, conv, tools: List[Dict], parallel: bool) -> str:
        """llama.cpp's: a thinking block, content up to a call's opening, the calls."""
        calls = self.root(conv, tools, parallel, True)
        start, end = ("<seed:think>", "</seed:think>") if self.name == "seed-oss" else ("<think>", "</think>")
        think = excluding(conv, (end,), "reasoning")
        content = excluding(conv, (self.t.open,), "content")
        return f'( "{start}" "\\n"? {think} "{end}" "\\n"? "\\n"? )? {content}? {calls}'
