"""Gemma 4: `<|tool_call>call:NAME{key:value,...}<tool_call|>`, the arguments in Gemma's own
notation (bare keys; strings between `<|"|>` marks; numbers, true, false, null; [...] and {...}),
read back as compact JSON (llama.cpp's common/parsers/gemma4.cpp and gemma4_to_json in
common/chat-peg-parser.cpp). Its thinking (`<|channel>thought`...`<channel|>`) is
pyriver.text.reasoning's. llama.cpp also mends the prompt: an older template (without its
"OpenAI Chat Completions" forward scan of tool messages) gets the results as `tool_responses` on
the calling assistant message, and a prompt the template ends after a tool response gets the
model's turn opened."""
from __future__ import annotations

import json
import re
from typing import Dict, List, Optional, Tuple

from pyriver.text.toolcalls import jsontext as J
from pyriver.text.toolcalls.family import Call, Family, Parsed, lit, names_of, repeat
from pyriver.text.toolcalls.until import excluding

OPEN, CLOSE, CALL = "<|tool_call>", "<tool_call|>", "call:"
QUOTE = '<|"|>'
THOUGHT, THOUGHT_END = "<|channel>thought", "<channel|>"   # its thinking (pyriver.text.reasoning splits it)
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def is_gemma4(source: str) -> bool:
    """llama.cpp's test for its Gemma 4 handler (common_chat_try_specialized_template)."""
    return "'<|tool_call>call:'" in (source or "")


class _Cut(Exception):
    """The text ends inside a value (partial: what was read so far stands)."""


class _Bad(Exception):
    """Text that is not Gemma's notation."""


class _Reader:
    """gemma4_to_json: a value's JSON text; a value the text cuts short is closed no further."""

    def __init__(self, s: str, partial: bool):
        self.s, self.partial, self.out = s, partial, []

    def need(self, k: int) -> None:
        """Text at k, or the value is cut short (partial) or not Gemma's notation."""
        if k >= len(self.s):
            raise _Cut if self.partial else _Bad

    def value(self, k: int) -> int:
        s = self.s
        self.need(k)
        if s.startswith(QUOTE, k) or (self.partial and QUOTE.startswith(s[k:])):
            self.out.append('"')
            if not s.startswith(QUOTE, k):
                raise _Cut
            e = s.find(QUOTE, k + len(QUOTE))
            body = s[k + len(QUOTE):] if e < 0 else s[k + len(QUOTE):e]
            if e < 0:
                body = body[:len(body) - J.held(body, QUOTE)]
            self.out.append(json.dumps(body, ensure_ascii=False)[1:-1])
            if e < 0:
                raise _Cut if self.partial else _Bad
            self.out.append('"')
            return e + len(QUOTE)
        if s[k] == "{":
            return self.dict(k)
        if s[k] == "[":
            return self.array(k)
        m = _NUMBER.match(s, k)
        for word in ("true", "false", "null"):
            if s.startswith(word, k):
                self.out.append(word)
                return k + len(word)
            if self.partial and word.startswith(s[k:]):
                self.out.append(s[k:])
                raise _Cut
        if m and m.end() > k:
            self.out.append(m.group())
            if m.end() == len(s) and self.partial:
                raise _Cut
            return m.end()
        raise _Bad

    def items(self, k: int, close: str, item) -> int:
        """`OPEN ws (close | item ("," ws item)* ws close)`, the JSON's commas between items."""
        self.out.append(self.s[k])
        k = J.skip_ws(self.s, k + 1)
        self.need(k)
        if self.s[k] == close:
            self.out.append(close)
            return k + 1
        first = True
        while True:
            if not first:
                self.out.append(",")
            first = False
            k = item(k)
            j = J.skip_ws(self.s, k)
            self.need(j)
            if self.s[j] == ",":
                k = J.skip_ws(self.s, j + 1)
                continue
            if self.s[j] == close:
                self.out.append(close)
                return j + 1
            raise _Bad

    def dict(self, k: int) -> int:
        return self.items(k, "}", self.pair)

    def array(self, k: int) -> int:
        return self.items(k, "]", self.value)

    def pair(self, k: int) -> int:
        s = self.s
        j = k
        while j < len(s) and s[j] not in ":}":
            j += 1
        if j == k:
            self.need(j)
            raise _Bad
        self.out.append('"' + json.dumps(s[k:j], ensure_ascii=False)[1:-1])
        self.need(j)
        if s[j] != ":":
            raise _Bad
        self.out.append('":')
        return self.value(J.skip_ws(s, j + 1))


def to_json(s: str, k: int, partial: bool) -> Tuple[Optional[str], int]:
    """(JSON text of the dict at s[k:], its end); (None, k) where it is not Gemma's notation; cut
    short (partial): the JSON so far and len(s)."""
    r = _Reader(s, partial)
    try:
        end = r.dict(k)
    except _Cut:
        return "".join(r.out), len(s)
    except (_Bad, IndexError):
        return None, k
    return "".join(r.out), end


class Gemma4(Family):
    name = "gemma4"
    words = (OPEN,)   # llama.cpp's lazy trigger
    lead_space = False   # llama.cpp's parser reads the content as written
    continue_marks = (THOUGHT + "\n", THOUGHT_END)

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = sorted(names_of(tools), key=len, reverse=True)
        k, marker = J.find_any(text, (OPEN,), 0, partial)
        if not marker:   # no call: the text, less a call's opening that may be coming
            return Parsed(text if k < 0 else text[:k])
        out, i = Parsed(text[:k]), k
        while text.startswith(OPEN, i) or (partial and i < len(text) and OPEN.startswith(text[i:])):
            head = i + len(OPEN)
            if not text.startswith(CALL, head):
                if not (partial and CALL.startswith(text[head:])):
                    out.complete = False
                break
            j = head + len(CALL)
            name = next((n for n in names if text.startswith(n + "{", j)), None)
            if name is None:   # a name still coming, or one the tools do not have
                if not (partial and any((n + "{").startswith(text[j:]) for n in names)):
                    out.complete = False
                break
            args, end = to_json(text, j + len(name), partial)
            if args is None:
                out.complete = False
                break
            out.calls.append(Call(name, args))
            if end >= len(text):
                out.complete = not partial and text.endswith(CLOSE)
                break
            if not text.startswith(CLOSE, end):
                if not (partial and CLOSE.startswith(text[end:])):
                    out.complete = False
                break
            i = end + len(CLOSE)
        return out

    def root(self, conv, tools: List[Dict], parallel: bool, force: bool) -> str:
        """llama.cpp's: `<|tool_call>call:` NAME dict `<tool_call|>`, the arguments any dict in
        Gemma's notation (its grammar does not hold them to the schema: its TODO)."""
        conv.add_rule("gemma4-string", f'{lit(conv, QUOTE)} {excluding(conv, [QUOTE], "gemma4-string-content")} '
                                       f'{lit(conv, QUOTE)}')
        conv.add_rule("gemma4-number", '"-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?')
        conv.add_rule("gemma4-value", 'gemma4-string | gemma4-dict | gemma4-array | gemma4-number '
                                      '| "true" | "false" | "null"')
        conv.add_rule("gemma4-dict-kv", '[^:}]+ ":" space gemma4-value')
        conv.add_rule("gemma4-dict", '"{" space ( "}" | gemma4-dict-kv ( "," space gemma4-dict-kv )* space "}" )')
        conv.add_rule("gemma4-array", '"[" space ( "]" | gemma4-value ( "," space gemma4-value )* space "]" )')
        one = " | ".join(f"{lit(conv, n)} gemma4-dict" for n in names_of(tools))
        call = conv.add_rule("tool-call", f'{lit(conv, OPEN + CALL)} ( {one} ) {lit(conv, CLOSE)}')
        return repeat(call, "", parallel)

    def required_root(self, conv, tools: List[Dict], parallel: bool) -> str:
        """tool_choice required: a thought block may come first, then the calls (llama.cpp's
        `start + thought + tool_call`)."""
        calls = self.root(conv, tools, parallel, True)
        thought = conv.add_rule("thought", f'"<|channel>thought" space {excluding(conv, ["<channel|>"], "thought-body")} '
                                           '"<channel|>"')
        return f"{thought}? {calls}"

    # -- the prompt --------------------------------------------------------------------------
    def prepare(self, messages: List[Dict], source: str) -> List[Dict]:
        """llama.cpp's workaround::convert_tool_responses_gemma4 for a template without the forward
        scan: an assistant message's calls, the tool results after it and a final answer after
        those, one assistant message with `tool_responses`."""
        if "{#- OpenAI Chat Completions:" in source:
            return messages
        out, i = [], 0
        while i < len(messages):
            m = messages[i]
            if m.get("role") != "assistant" or not m.get("tool_calls"):
                out.append(m)
                i += 1
                continue
            calls, responses = list(m["tool_calls"]), []
            i += 1
            while i < len(messages) and messages[i].get("role") == "tool":
                r = messages[i]
                name = ""
                if len(responses) < len(calls):
                    name = (calls[len(responses)].get("function") or {}).get("name", "")
                responses.append({"name": name or r.get("tool_call_id", ""), "response": _response(r.get("content"))})
                i += 1
            msg: Dict = {"role": "assistant", "tool_calls": calls}
            if responses:
                msg["tool_responses"] = responses
            if i < len(messages) and messages[i].get("role") == "assistant" and not messages[i].get("tool_calls") \
                    and messages[i].get("content"):
                msg["content"] = messages[i]["content"]
                i += 1
            if isinstance(m.get("reasoning_content"), str):
                msg["reasoning_content"] = m["reasoning_content"]
            out.append(msg)
        return out

    def complete_prompt(self, prompt: str) -> str:
        """The template leaves the model's turn unopened after a tool response (content and a call
        answered): llama.cpp opens it."""
        return prompt + "<|turn>model\n" if prompt.endswith("<turn|>\n") else prompt


def _response(content):
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content
