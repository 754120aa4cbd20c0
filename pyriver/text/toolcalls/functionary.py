"""Functionary. v3.2 (llama.cpp's common/parsers/functionary-v3-2.cpp): the generation prompt ends
with `>>>`, each message starts with its recipient: `all\\n` content, or `NAME\\n{...}` a call, the
next one after another `>>>`. v3.1 (autoparser; test-chat.cpp's meetkai-functionary-medium-v3.1
case): `<function=NAME>{...}</function>`."""
from __future__ import annotations

from typing import Dict, List, Sequence

from pyriver.text.toolcalls import jsontext as J
from pyriver.text.toolcalls.family import names_of, Call, Family, Parsed, alts, args_rules, lit
from pyriver.text.toolcalls.marked import Marked
from pyriver.text.toolcalls.until import excluding


class FunctionaryV31(Marked):
    name = "functionary-v3.1"
    call_open, after_name, call_close = "<function=", ">", "</function>"
    ws_before_args = True
    content_until = ("<function=",)   # required: content first (llama.cpp's autoparser until(per_call_start))


class FunctionaryV32(Family):
    name = "functionary-v3.2"
    channels = True   # `all\n` before content is markup
    lead_space = False   # llama.cpp's parser: generation prompt + content, no space() between
    patterns = (r">>>((?!all)[\s\S])",)   # the group: where the call's name begins

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = names_of(tools)
        content, calls, k = "", [], 0
        if text.startswith("all\n"):
            end = text.find(">>>", 4)
            if end < 0:
                n = J.held(text, ">>>") if partial else 0
                return Parsed(text[4:len(text) - n])
            content, k = text[4:end], end + 3
        elif partial and "all\n".startswith(text):
            return Parsed("")
        while k < len(text) or (partial and not calls):
            status, name, raw, end = J.read_named(text, k, partial, names, "", "\n")
            if status == "fail":
                return Parsed(content, calls, complete=False) if calls else Parsed(text, complete=False)
            if name is not None:
                calls.append(Call(name, raw))
            if status == "partial":
                break
            k = J.skip_ws(text, end)
            if text.startswith(">>>", k):
                k += 3
            elif k < len(text) and partial and ">>>".startswith(text[k:]):
                break   # else the next call follows with nothing between (llama.cpp's grammar)
        if not partial and not calls:
            return Parsed(text)
        return Parsed(content, calls)

    def root(self, conv, tools: List[Dict], parallel: bool, force: bool) -> str:
        """llama.cpp's (common/parsers/functionary-v3-2.cpp): `NAME\n{...}` a call; several follow one
        another with nothing between (its grammar has no ">>>" there)."""
        call = conv.add_rule("tool-call", alts([f"{lit(conv, n + chr(10))} {r}" for n, r, _ in args_rules(conv, tools)]))
        return f"( {call} )+" if parallel else call

    def required_root(self, conv, tools: List[Dict], parallel: bool) -> str:
        """llama.cpp's required: `all\n` and content up to ">>>" then the call(s), or the calls
        alone (one or more)."""
        content = excluding(conv, (">>>",), "content")
        calls = self.root(conv, tools, parallel, True)
        return f'( "all\\n" {content} {calls} ) | ( {calls} )+'
