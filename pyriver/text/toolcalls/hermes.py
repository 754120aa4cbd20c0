"""Hermes 2 Pro / Qwen 2.5 / Qwen3 / Granite 4: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`,
one block a call (test-chat.cpp's NousResearch-Hermes-2-Pro and ibm-granite-granite-4.0 cases).
Also the generic family: a template that knows no tools is taught this syntax in a system message.
A bare JSON call or one in a code fence (as Qwen2.5-Coder writes them) is taken as well."""
from __future__ import annotations

import re
from typing import Dict, List, Sequence

from pyriver.text.toolcalls import jsontext as J
from pyriver.text.toolcalls.family import names_of, Call, Family, Parsed, alts, args_rules, lit

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_FENCE_RE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def bare_calls(text: str, names: Sequence[str], name_key="name", args_keys=("arguments", "parameters")):
    """The calls of an answer made only of JSON call(s) (in a code fence or after <|python_tag|>), or None."""
    body = _FENCE_RE.sub(r"\1", text.replace("<|python_tag|>", "").strip())
    i, calls = 0, []
    while i < len(body):
        if body[i] == "[":   # a list of calls
            i = J.skip_ws(body, i + 1)
            continue
        status, name, args, cid, end = J.read_call(body, i, False, names, name_key, args_keys)
        if status != "done":
            return None
        calls.append(Call(name, args, cid or ""))
        i = end
        while i < len(body) and body[i] in " \t\r\n;,]":
            i += 1
    return calls or None


class Hermes(Family):
    name = "hermes"
    words = (OPEN,)

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = names_of(tools)
        k, marker = J.find_any(text, (OPEN,), 0, partial)
        if k < 0:
            if not partial:
                calls = bare_calls(text, names)
                if calls:
                    return Parsed("", calls)
            return Parsed(text)
        content, calls, complete = [text[:k]], [], True
        while k >= 0:
            if not marker:   # a marker beginning at the end
                break
            i = J.skip_ws(text, k + len(OPEN))
            status, name, args, cid, end = J.read_call(text, i, partial, names)
            if status == "partial":
                if name is not None:
                    calls.append(Call(name, args))
                break
            if status == "fail":   # not a call: through the next </tool_call> (or the end) is dropped
                close = text.find(CLOSE, i)
                complete = complete and close >= 0
                k2 = len(text) if close < 0 else close + len(CLOSE)
            else:
                calls.append(Call(name, args))
                j = J.skip_ws(text, end)
                while text.startswith(",", j):   # parallel calls in one tag, comma-separated (llama.cpp's)
                    status, name, args, cid, end = J.read_call(text, J.skip_ws(text, j + 1), partial, names)
                    if status == "fail":
                        break
                    if name is None:   # the next call's name still coming
                        j = len(text)
                        break
                    calls.append(Call(name, args))
                    j = len(text) if status == "partial" else J.skip_ws(text, end)
                if text.startswith(CLOSE, j):
                    k2 = j + len(CLOSE)
                elif CLOSE.startswith(text[j:]) and (partial or j < len(text)):
                    if partial:
                        break
                    k2 = len(text)   # the closing tag cut by max_tokens: not content
                else:
                    k2 = j
            k, marker = J.find_any(text, (OPEN,), k2, partial)
            between = text[k2:k] if k >= 0 else text[k2:]
            if between.strip():   # whitespace between and after calls is not content (llama.cpp's space())
                content.append(between)
        if not partial and not calls:
            return Parsed(text, complete=complete)
        return Parsed("".join(content), calls, complete=complete)

    def holds(self, text: str) -> bool:
        s = text.lstrip()
        return s[:1] in ("{", "[") or s.startswith(("<|python_tag|>", "`"))

    def content_before(self, tools):
        return (OPEN + "\n",)   # llama.cpp's autoparser: the per-call marker its template renders

    def root(self, conv, tools: List[Dict], parallel: bool, force: bool) -> str:
        """llama.cpp's autoparser grammar of JSON calls in per-call tags (chat-auto-parser-generator.cpp,
        build_tool_parser_json_native; chat-peg-parser.cpp, standard_json_tools): whitespace where
        llama.cpp's space() goes; with parallel calls several tags, and several comma-separated calls
        in one tag."""
        tool = alts([f'"{{" space {lit(conv, chr(34) + "name" + chr(34))} space ":" space {lit(conv, _q(n))} space '
                     f'"," space {lit(conv, chr(34) + "arguments" + chr(34))} space ":" space {r} space "}}"'
                     for n, r, _ in args_rules(conv, tools)])
        tool = conv.add_rule("tool", tool)
        many = f' ( space "," space {tool} )*' if parallel else ""
        call = conv.add_rule("tool-call", f'"<tool_call>\\n" space {tool}{many} space "</tool_call>"')
        # llama.cpp repeats tags even without parallel calls; here one tag then (SmolLM2 under the
        # generic offer, tool_choice named or required: a second call, and a third, to max_tokens)
        return f"( {call} space )+" if parallel else f"{call} space"


def _q(name: str) -> str:
    import json
    return json.dumps(name)


class Generic(Hermes):
    """A template that knows no tools: the tools and the Hermes syntax in a system message."""
    name = "generic"
    knows_tools = False

    def content_before(self, tools):
        return ()   # pyriver's own offer of tools: the answer is the call
