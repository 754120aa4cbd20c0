"""The shape most families share: content, then calls each set off by markers around the
function's name and its JSON arguments, optionally inside a section:
`SECTION_OPEN (CALL_OPEN BEFORE name AFTER {json} ARGS_AFTER CALL_CLOSE)+ SECTION_CLOSE`. A family
file names its markers (or overrides head() where the name comes with more, such as an id)."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from pyriver.text.toolcalls import jsontext as J
from pyriver.text.toolcalls.family import names_of, Call, Family, Parsed, alts, args_rules, lit


class Marked(Family):
    section_open = ""
    section_close = ""
    call_open = ""
    before_name = ""
    after_name = ""
    args_after = ""
    call_close = ""
    ws_before_args = False   # space() before the arguments and between calls (llama.cpp's autoparser families)
    close_optional = False   # the call's close may be left out (Kimi K2's)

    @property
    def starts(self) -> Tuple[str, ...]:
        return tuple(m for m in (self.section_open, self.call_open) if m)

    @property
    def words(self):   # the lazy grammar's trigger: what its root begins with
        return (self.section_open or self.call_open,)

    def head(self, text: str, k: int, partial: bool, names: Sequence[str]):
        """(status, name, id, start of the JSON) of a call's head at text[k:] (after CALL_OPEN)."""
        rest = text[k:]
        if not rest.startswith(self.before_name):
            return ("partial" if partial and self.before_name.startswith(rest) else "fail"), None, "", k
        j = k + len(self.before_name)
        for name in sorted(names, key=len, reverse=True):
            if text.startswith(name + self.after_name, j):
                return "done", name, "", j + len(name) + len(self.after_name)
        if partial and any((n + self.after_name).startswith(text[j:]) for n in names):
            return "partial", None, "", len(text)
        return "fail", None, "", k

    def _lit(self, text: str, k: int, s: str, partial: bool):
        """Past the literal s at text[k:] (s may be empty): (k', cut) or (-1, False) where it is not there."""
        if not s or text.startswith(s, k):
            return k + len(s), False
        if partial and s.startswith(text[k:]):
            return len(text), True
        return -1, False

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = names_of(tools)
        k, marker = J.find_any(text, self.starts, 0, partial)
        if k < 0 or not marker:
            return Parsed(text if k < 0 else text[:k]) if partial or k < 0 else Parsed(text)
        content, calls = text[:k], []
        k, cut = self._lit(text, k, self.section_open if marker == self.section_open else "", partial)
        while not cut:
            k = J.skip_ws(text, k)
            k, cut = self._lit(text, k, self.call_open, partial)
            if k < 0 or cut or k >= len(text) and partial:
                break
            status, name, cid, j = self.head(text, k, partial, names)
            if status != "done":
                if status == "fail":
                    k = -1
                break
            if self.ws_before_args:
                j = J.skip_ws(text, j)
            v, end, raw = J.read(text, j, partial)
            if raw is None or (v is not None and not isinstance(v, dict)):
                if partial and j >= len(text):
                    calls.append(Call(name, "{", cid))
                    break
                k = -1
                break
            calls.append(Call(name, raw or "{", cid))
            if v is None:   # cut arguments
                break
            k = J.skip_ws(text, end)
            for s in (self.args_after, self.call_close):
                if k >= 0 and not cut:
                    k0 = k
                    k, cut = self._lit(text, k, s, partial)
                    if k < 0 and s == self.call_close and self.close_optional:
                        k = k0
                    k = J.skip_ws(text, k) if k >= 0 else k
            if k < 0 or cut:
                break
            if not text.startswith(self.call_open, k) or not self.call_open:
                nk, cut = self._lit(text, k, self.section_close, partial)
                k = nk if nk >= 0 else k
                if partial and not cut and k < len(text) and self.call_open.startswith(text[k:]):
                    break   # the next call's opening still coming
                if not cut and not text.startswith(self.call_open, k):
                    content += text[k:]   # text after the calls: content (llama.cpp's parser fails there)
                    k = len(text)
                    break
        if not partial and (k < 0 or cut or not calls):
            done = [c for c in calls if _closed(c)]
            if not done:
                return Parsed(text, complete=False)
            return Parsed(content, done, complete=False)
        if k < 0 and not calls:
            return Parsed(text)
        return Parsed(content, calls)

    def root(self, conv, tools: List[Dict], parallel: bool, force: bool) -> str:
        """llama.cpp's TAG_WITH_JSON grammar (chat-auto-parser-generator.cpp, build_tool_parser_tag_json):
        with ws_before_args, space() before the arguments, before what follows them, between calls
        and inside the section."""
        sp = " space " if self.ws_before_args else " "
        after = f"{sp}{lit(conv, self.args_after)}" if self.args_after else ""
        one = alts([f"{lit(conv, self.call_open + self.before_name + n + self.after_name)}{sp}{r}{after} "
                    f"{lit(conv, self.call_close)}" for n, r, _ in args_rules(conv, tools)])
        call = conv.add_rule("tool-call", one)
        calls = call + (f" ({sp}{call} )*" if parallel else "")
        if not self.section_open:
            return calls
        return f"{lit(conv, self.section_open)}{sp}{calls}{sp}{lit(conv, self.section_close)}"


def _closed(c: Call) -> bool:
    import json
    try:
        return isinstance(json.loads(c.arguments), dict)
    except ValueError:
        return False
