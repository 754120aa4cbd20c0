"""JSON read off model text as llama.cpp's PEG parser reads it: a value's raw text (tool-call
arguments are the model's own JSON text, not a re-serialization), and, while a stream is still
coming, the longest prefix that can still become JSON (partial arguments)."""
from __future__ import annotations

import json
from typing import Any, Optional, Tuple

_DEC = json.JSONDecoder()
_WS = " \t\r\n"
# What may complete a cut value before its brackets close: a string, a key's colon, a literal, a number
_TAILS = ("", '"', "0", '":0', ":0", '"' + ":0", "e", "ue", "rue", "se", "lse", "alse", "l", "ll", "ull", "1", "01")


def skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _closers(s: str) -> Optional[str]:
    """The brackets s leaves open (innermost first), or None where s closes one it never opened."""
    stack, in_str, esc = [], False, False
    for ch in s:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
    return "".join(reversed(stack))


def is_prefix(s: str) -> bool:
    """Whether s is the beginning of some JSON value (a value cut short by the end of the text)."""
    s = s.rstrip(_WS)
    if not s:
        return True
    if s.endswith(","):
        s = s[:-1]
    for tail in _TAILS:
        closers = _closers(s + tail)
        if closers is None:
            continue
        try:
            json.loads(s + tail + closers)
            return True
        except ValueError:
            pass
        if s.endswith("\\"):   # a cut escape
            try:
                json.loads(s + "n" + tail + (_closers(s + "n" + tail) or ""))
                return True
            except ValueError:
                pass
    return False


def read(text: str, i: int, partial: bool) -> Tuple[Optional[Any], int, Optional[str]]:
    """(value, end, raw text) of the JSON value at text[i:]. A value cut by the end of a partial
    text: (None, len(text), its raw text so far, trailing whitespace trimmed). Not JSON: (None, i, None)."""
    try:
        v, end = _DEC.raw_decode(text, i)
        return v, end, text[i:end]
    except ValueError:
        pass
    if partial and is_prefix(text[i:]):
        return None, len(text), text[i:].rstrip(_WS)
    return None, i, None


def held(text: str, marker: str) -> int:
    """How many characters at text's end begin marker (a marker that may still be coming)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def find_any(text: str, markers, start: int = 0, partial: bool = False) -> Tuple[int, str]:
    """The first of markers in text from start: (index, marker); none: (-1, ""), or, in a partial
    text, where one may be beginning at its end (index, "")."""
    best = (-1, "")
    for m in markers:
        k = text.find(m, start)
        if k >= 0 and (best[0] < 0 or k < best[0]):
            best = (k, m)
    if best[0] < 0 and partial:
        n = max((held(text, m) for m in markers), default=0)
        if n:
            return len(text) - n, ""
    return best


def read_call(text: str, i: int, partial: bool, names, name_key: str = "name",
              args_keys=("arguments", "parameters"), id_key: Optional[str] = None):
    """A JSON call object {name_key: ..., args_key: {...}} at text[i:], read key by key so a stream's
    call shows as soon as its name is complete. Returns (status, name, raw arguments, id, end):
    status "done", "partial" (cut by the end of a partial text) or "fail" (not a call to one of names)."""
    fail = ("fail", None, None, None, i)
    if i >= len(text):
        return ("partial", None, None, None, i) if partial else fail
    if text[i] != "{":
        return fail
    k, name, args, cid = skip_ws(text, i + 1), None, None, None
    fields = 0
    while True:
        if k >= len(text):
            break
        if text[k] == "}" and fields:
            if name is None or name not in names:
                return fail
            return "done", name, args if args is not None else "{}", cid, k + 1
        key, k2, raw = read(text, k, partial)
        if raw is None or not isinstance(key, str):
            if raw is not None and k2 == len(text):   # the key itself is cut
                break
            return fail
        k = skip_ws(text, k2)
        if k >= len(text):
            break
        if text[k] != ":":
            return fail
        k = skip_ws(text, k + 1)
        if k >= len(text):
            break
        val, k2, raw = read(text, k, partial)
        if raw is None:
            return fail
        cut = k2 == len(text) and val is None
        if key == name_key:
            if cut:
                break
            if not isinstance(val, str) or (names and val not in names):
                return fail
            name = val
        elif key in args_keys:
            if not cut and isinstance(val, str):   # arguments as a JSON string: its JSON text
                try:
                    json.loads(val)
                    raw = val
                except ValueError:
                    return fail
            args = raw
        elif id_key and key == id_key and not cut:
            cid = val if isinstance(val, str) else json.dumps(val)
        if cut:
            break
        fields += 1
        k = skip_ws(text, k2)
        if k < len(text) and text[k] == ",":
            k = skip_ws(text, k + 1)
        elif k < len(text) and text[k] != "}":
            return fail
    if not partial:
        return fail
    if name is not None and args is None:
        args = "{"
    return "partial", name, args, cid, len(text)


def read_named(text: str, i: int, partial: bool, names, before: str, after: str, ws: bool = False):
    """`before NAME after {json}` at text[i:] (NAME one of names): (status, name, raw arguments, end),
    status as read_call's. ws: whitespace may come before the JSON."""
    rest = text[i:]
    if not rest.startswith(before):
        return ("partial", None, None, len(text)) if partial and before.startswith(rest) else ("fail", None, None, i)
    k = i + len(before)
    for name in sorted(names, key=len, reverse=True):
        head = name + after
        if text.startswith(head, k):
            j = k + len(head)
            if ws:
                j = skip_ws(text, j)
            v, end, raw = read(text, j, partial)
            if raw is None:
                if partial and j >= len(text):
                    return "partial", name, "{", len(text)
                return "fail", None, None, i
            if v is None:
                return "partial", name, raw or "{", len(text)
            if not isinstance(v, dict):
                return "fail", None, None, i
            return "done", name, raw, end
    if partial and any(n.startswith(text[k:]) or (n + after).startswith(text[k:]) for n in names):
        return "partial", None, None, len(text)
    return "fail", None, None, i
