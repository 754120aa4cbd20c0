"""Llama 3.x: the answer is the call, a JSON `{"name": ..., "parameters": {...}}` (the template's
own rendering of a call; "arguments" taken too), several separated by `;` or newlines; its builtin
tools after `<|python_tag|>`: `brave_search.call(query="...")` (wolfram_alpha, brave_search,
code_interpreter as `<|python_tag|>` then the code), as Meta's prompt format writes them."""
from __future__ import annotations

import ast
import json
import re
from typing import Dict, List, Sequence

from pyriver.text.toolcalls import jsontext as J
from pyriver.text.toolcalls.family import names_of, Call, Family, Parsed, alts, args_rules, lit
from pyriver.text.toolcalls.hermes import bare_calls

TAG = "<|python_tag|>"
BUILTIN = ("wolfram_alpha", "brave_search", "code_interpreter")
_BUILTIN_RE = re.compile(r"^\s*(\w+)\s*\.\s*call\s*\(([\s\S]*)\)\s*$")


def _builtin(body: str, names: Sequence[str]):
    """A builtin tool's call in Python syntax, or code for code_interpreter / python."""
    m = _BUILTIN_RE.match(body)
    if m and m.group(1) in names:
        try:
            node = ast.parse(f"f({m.group(2)})", mode="eval").body
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
        except (SyntaxError, ValueError):
            return None
        return [Call(m.group(1), json.dumps(args, ensure_ascii=False))]
    for name in ("code_interpreter", "python"):
        if name in names and body.strip() and not body.lstrip().startswith("{"):
            return [Call(name, json.dumps({"code": body.strip()}, ensure_ascii=False))]
    return None


class Llama3(Family):
    """llama.cpp's autoparser finds JSON calls without markers here: content up to the first "{",
    then the call; tool_choice auto gets no grammar (no marker to trigger one), required
    `space until("{")? call`."""
    name = "llama3"
    content_until = ("{",)

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = names_of(tools)
        s = text.lstrip()
        if partial:
            if s.startswith(TAG) or (s and TAG.startswith(s)):
                return Parsed("")   # held to the end
            k = text.find("{")
            if k >= 0:
                status, name, args, _, _ = J.read_call(text, k, True, names, args_keys=("parameters", "arguments"))
                if status != "fail":
                    return Parsed(text[:k], [Call(name, args)] if name else [])
            return Parsed(text)
        if s.startswith(TAG):
            calls = _builtin(s[len(TAG):], names)
            if calls:
                return Parsed("", calls)
        calls = bare_calls(text, names, args_keys=("parameters", "arguments"))   # the answer is the call(s)
        if calls:
            return Parsed("", calls)
        k = text.find("{")   # content, then the call (llama.cpp's until("{"))
        calls = bare_calls(text[k:], names, args_keys=("parameters", "arguments")) if k > 0 else None
        return Parsed(text[:k], calls) if calls else Parsed(text)

    def holds(self, text: str) -> bool:
        s = text.lstrip()
        return s.startswith(("`", "[")) or s.startswith(TAG)

    def root(self, conv, tools: List[Dict], parallel: bool, force: bool) -> str:
        """llama.cpp's standard_json_tools, flat keys: `{"type": "function",`? then name and
        parameters, space() between JSON tokens; parallel calls comma-separated."""
        q = lambda k: lit(conv, json.dumps(k))
        typ = f'( {q("type")} space ":" space {q("function")} space "," space )?'
        call = conv.add_rule("tool-call", alts([f'"{{" space {typ} {q("name")} space ":" space {q(n)} space "," space '
                                                f'{q("parameters")} space ":" space {r} space "}}"'
                                                for n, r, _ in args_rules(conv, tools)]))
        calls = call + (f' ( space "," space {call} )*' if parallel else "")
        return f"space {calls} space"
