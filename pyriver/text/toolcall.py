"""Tool calling: OpenAI's tools / tool_choice / tool_calls over a GGUF's chat template. One
implementation for pyriver.Llama and the server.

- The syntax a model calls tools in is read off its template: Hermes / Qwen 2.5
  (`<tool_call>{"name", "arguments"}</tool_call>`), Llama 3.x (a JSON `{"name", "parameters"}`),
  Mistral (`[TOOL_CALLS][{"name", "arguments"}, ...]`). A template that knows no tools gets the
  tools in a system message and is asked for the Hermes syntax; a bare JSON call is also taken.
- Tools go into the template as `tools` (as Hugging Face's apply_chat_template passes them).
- tool_choice "required" or a named function is enforced by a grammar built from the tools'
  parameter schemas with llama-cpp-python's JSON-schema converter; "auto" gets the same grammar
  lazily (llama.cpp's lazy grammar, as its server does): the model answers freely until it opens
  a call (`<tool_call>`, `[TOOL_CALLS]`, a Llama 3 JSON call), and from there the call is
  constrained; "none" neither renders tools nor parses.
- Messages: content as a list of text parts is joined; image parts are refused; an assistant
  message with tool_calls (content null) and `tool` messages render on the next turn (as text
  for templates that know no tools)."""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from pyriver.text.grammar import GrammarError, LazyGrammar
from pyriver.text.schema_gbnf import SchemaConverter

HERMES, LLAMA3, MISTRAL, GENERIC = "hermes", "llama3", "mistral", "generic"


class ToolError(ValueError):
    """A malformed tools / tool_choice / message."""


def syntax_of(template_source: str) -> str:
    """The tool-call syntax a chat template teaches its model."""
    src = template_source or ""
    if "<tool_call>" in src:
        return HERMES
    if "[TOOL_CALLS]" in src:
        return MISTRAL
    if "<|start_header_id|>" in src and ("tools" in src or "ipython" in src):
        return LLAMA3
    return GENERIC


def knows_tools(template_source: str) -> bool:
    return syntax_of(template_source) != GENERIC


# -- messages ---------------------------------------------------------------------------------
def _text_of(content: Any, where: str) -> Optional[str]:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise ToolError(f"{where}: each content part must be an object with a 'type'")
            if part["type"] != "text":
                raise ToolError(f"{where}: content parts of type {part['type']!r} are not supported "
                                f"(this model reads text only)")
            if not isinstance(part.get("text"), str):
                raise ToolError(f"{where}: a text part needs 'text' (a string)")
            out.append(part["text"])
        return "".join(out)
    raise ToolError(f"{where}: content must be a string, a list of text parts or null")


def _calls_text(calls: List[Dict]) -> str:
    return "\n".join("<tool_call>\n" + json.dumps({"name": c["function"]["name"],
                                                   "arguments": _args_obj(c["function"].get("arguments"))})
                     + "\n</tool_call>" for c in calls)


def _args_obj(args: Any) -> Any:
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args if args is not None else {}


def normalize_messages(messages: List[Dict], template_knows_tools: bool) -> List[Dict]:
    """Messages ready for the template: text parts joined, tool calls' arguments as objects (as
    HF templates iterate them); for a template that knows no tools, calls and results as text."""
    if not isinstance(messages, list):   # empty: the generation prompt alone (llama-server answers it)
        raise ToolError("messages must be a list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ToolError(f"messages[{i}] needs a 'role' (a string)")
        m = dict(m)
        m["content"] = _text_of(m.get("content"), f"messages[{i}]")
        calls = m.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("function"), dict)
                                                      and isinstance(c["function"].get("name"), str) for c in calls):
                raise ToolError(f"messages[{i}].tool_calls must be a list of {{function: {{name, arguments}}}}")
            calls = [dict(c, function=dict(c["function"], arguments=_args_obj(c["function"].get("arguments"))))
                     for c in calls]
            m["tool_calls"] = calls
        if not template_knows_tools:
            if calls:
                m["content"] = ((m["content"] or "") + "\n" + _calls_text(calls)).strip()
                del m["tool_calls"]
            if m["role"] == "tool":
                m = {"role": "user", "content": f"<tool_response>\n{m['content'] or ''}\n</tool_response>"}
        if m["content"] is None:
            m["content"] = ""
        out.append(m)
    return out


def generic_system(tools: List[Dict]) -> str:
    """The system text that offers tools to a model whose template knows none (Hermes' wording)."""
    return ("You may call one or more functions to assist with the user query. The functions are:\n<tools>\n"
            + "\n".join(json.dumps(t) for t in tools) + "\n</tools>\nFor each function call, return a JSON object "
            "with the function name and arguments within <tool_call></tool_call> tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


# -- requests ---------------------------------------------------------------------------------
@dataclass
class ToolPlan:
    tools: List[Dict]
    choice: Any           # "auto", "required", or the named function's name
    parallel: bool
    syntax: str

    @property
    def parse(self) -> bool:
        return True


def plan(tools: Any, tool_choice: Any, parallel_tool_calls: Any, template_source: str) -> Optional[ToolPlan]:
    """What a request's tool fields ask for; None when no tools are in play (none, or tool_choice "none")."""
    if tools is None or tools == []:
        if tool_choice not in (None, "none", "auto"):
            raise ToolError("tool_choice needs tools")
        return None
    if not isinstance(tools, list) or not all(
            isinstance(t, dict) and t.get("type", "function") == "function" and isinstance(t.get("function"), dict)
            and isinstance(t["function"].get("name"), str) and t["function"]["name"] for t in tools):
        raise ToolError("tools must be a list of {type: 'function', function: {name, description, parameters}}")
    names = [t["function"]["name"] for t in tools]
    choice = "auto" if tool_choice is None else tool_choice
    if choice == "none":
        return None
    if isinstance(choice, dict):
        fn = choice.get("function") if choice.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ToolError("tool_choice must be 'none', 'auto', 'required' or {type: 'function', function: {name}}")
        if fn["name"] not in names:
            raise ToolError(f"tool_choice names the function {fn['name']!r}, which is not in tools ({', '.join(names)})")
        choice = fn["name"]
    elif choice not in ("auto", "required"):
        raise ToolError("tool_choice must be 'none', 'auto', 'required' or {type: 'function', function: {name}}")
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise ToolError("parallel_tool_calls must be a boolean")
    parallel = parallel_tool_calls is not False and not (choice not in ("auto", "required"))
    return ToolPlan([dict(t, type="function") for t in tools], choice, parallel, syntax_of(template_source))


def render_messages(messages: List[Dict], tp: Optional[ToolPlan], template_source: str) -> Tuple[List[Dict], Dict]:
    """(messages, extra template variables) to render a request with."""
    msgs = normalize_messages(messages, knows_tools(template_source))
    if tp is None:
        return msgs, {}
    if tp.syntax == GENERIC:
        sys_text = generic_system(tp.tools)
        if msgs and msgs[0]["role"] == "system":
            msgs[0] = dict(msgs[0], content=msgs[0]["content"] + "\n\n" + sys_text)
        else:
            msgs.insert(0, {"role": "system", "content": sys_text})
    return msgs, {"tools": tp.tools}


# What opens a call in each syntax (tool_choice auto): words (a single-token word triggers as that
# token), and patterns whose first capture group starts the call (ECMAScript and Python regex alike).
_TRIGGERS = {HERMES: (("<tool_call>",), ()), GENERIC: (("<tool_call>",), ()),
             MISTRAL: (("[TOOL_CALLS]",), ()), LLAMA3: ((), (r"^\s*(\{)[\s\S]*$",))}


def auto_grammar(tp: ToolPlan) -> LazyGrammar:
    """tool_choice auto: the grammar of a call to any of the tools, applied from the call's opening on."""
    words, patterns = _TRIGGERS[tp.syntax]
    return LazyGrammar(call_grammar(tp, force=False), words=words, patterns=patterns)


def call_grammar(tp: ToolPlan, force: bool = True) -> Optional[str]:
    """GBNF of tool calls in the template's syntax: those tool_choice required or named forces
    (None for auto), or with force=False a call to any tool (auto's lazy grammar)."""
    if tp.choice == "auto" and force:
        return None
    tools = [t for t in tp.tools if tp.choice in ("required", "auto") or t["function"]["name"] == tp.choice]
    conv = SchemaConverter()   # pyriver.text.schema_gbnf: strings as JSON has them (no raw control characters)
    alts = []
    key = "parameters" if tp.syntax == LLAMA3 else "arguments"
    for i, t in enumerate(tools):
        fn = t["function"]
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        try:   # on a copy: resolve_refs rewrites $refs in place (the tools also go into the template)
            schema = conv.resolve_refs(json.loads(json.dumps(params)), f"tool{i}")
            args = conv.visit(schema, f"tool{i}-args")
        except Exception as e:
            raise GrammarError(f"the parameters of tool {fn['name']!r} cannot be turned into a grammar: "
                               f"{type(e).__name__}: {e}") from None
        head = conv.format_literal('{"name": ' + json.dumps(fn["name"]) + f', "{key}": ')
        alts.append(f"{head} {args} \"}}\"")
    call = conv.add_rule("tool-call", " | ".join(f"( {a} )" for a in alts))
    if tp.syntax == MISTRAL:
        root = f'"[TOOL_CALLS][" {call} ' + (f'(", " {call})* ' if tp.parallel else "") + '"]"'
    elif tp.syntax == LLAMA3:
        root = call + (f' ("\\n" {call})*' if tp.parallel else "")
    else:
        one = f'"<tool_call>\\n" {call} "\\n</tool_call>"'
        root = one + (f' ("\\n" {one})*' if tp.parallel else "")
    conv.add_rule("root", root)
    return conv.format_grammar()


# -- parsing model output ---------------------------------------------------------------------
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_FENCE_RE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def _call(obj: Any, names: List[str]) -> Optional[Dict]:
    """An OpenAI tool call from a parsed {"name", "arguments"|"parameters"} object, or None."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or (names and name not in names):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def _json_values(text: str) -> Optional[List[Any]]:
    """The JSON values text is made of (separated by whitespace, ';' or ','), or None."""
    dec, i, out = json.JSONDecoder(), 0, []
    text = text.strip()
    while i < len(text):
        try:
            v, i = dec.raw_decode(text, i)
        except ValueError:
            return None
        out.append(v)
        while i < len(text) and text[i] in " \t\r\n;,":
            i += 1
    return out or None


def _hermes_blocks(text: str):
    """Each `<tool_call>` block of text: (start, end, its JSON values or None). The JSON is read
    with a JSON decoder from the opening on, as llama.cpp's parser reads it, so a string argument
    that holds `</tool_call>` does not end the block; a block whose JSON does not parse (a call cut
    short by max_tokens among them) ends at the next `</tool_call>`, or the end of the text."""
    dec, i = json.JSONDecoder(), 0
    while (start := text.find(_OPEN, i)) >= 0:
        k, vals = start + len(_OPEN), []
        while True:
            while k < len(text) and text[k] in " \t\r\n;,":
                k += 1
            if text.startswith(_CLOSE, k) or k == len(text):
                end = min(len(text), k + len(_CLOSE))
                break
            try:
                v, k = dec.raw_decode(text, k)
            except ValueError:
                close = text.find(_CLOSE, start + len(_OPEN))
                end, vals = (len(text) if close < 0 else close + len(_CLOSE)), None
                break
            vals.append(v)
        yield start, end, vals
        i = end


def parse(text: str, tp: ToolPlan) -> Tuple[Optional[str], List[Dict]]:
    """(content, tool calls) of a model's answer; no calls found: the text is the content (a call
    cut short by max_tokens is not a call: alone, the answer is content, as llama-server returns it)."""
    names = [t["function"]["name"] for t in tp.tools]
    calls: List[Dict] = []
    content = text
    if _OPEN in text:
        kept, at = [], 0
        for start, end, vals in _hermes_blocks(text):
            for v in vals or []:
                c = _call(v, names)
                if c:
                    calls.append(c)
            kept.append(text[at:start])
            at = end
        content = "".join(kept) + text[at:]
    elif "[TOOL_CALLS]" in text:
        head, _, rest = text.partition("[TOOL_CALLS]")
        for v in _json_values(rest) or []:
            for item in v if isinstance(v, list) else [v]:
                c = _call(item, names)
                if c:
                    calls.append(c)
        content = head
    else:   # Llama 3.x and the generic fallback: the answer is JSON call(s) alone (in a code fence, as
        # Qwen2.5-Coder writes them; llama.cpp's Hermes parser takes those too)
        body = _FENCE_RE.sub(r"\1", text.replace("<|python_tag|>", "").strip())
        vals = _json_values(body)
        if vals:
            items = [x for v in vals for x in (v if isinstance(v, list) else [v])]
            found = [_call(x, names) for x in items]
            if found and all(found):
                calls, content = found, ""
    if not calls:
        return text, []
    if not tp.parallel:
        calls = calls[:1]
    content = content.strip()
    return (content or None), calls


def may_start_call(text: str) -> int:
    """Where in streamed text a tool call may begin (text from there is held back), or -1."""
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") or stripped.startswith(("<|python_tag|>", "`")):
        return 0
    for marker in ("<tool_call>", "[TOOL_CALLS]"):
        i = text.find(marker)
        if i >= 0:
            return i
        for k in range(len(marker) - 1, 0, -1):   # a marker's beginning at the very end
            if text.endswith(marker[:k]):
                return len(text) - k
    return -1


# -- results ----------------------------------------------------------------------------------
def message(text: str, finish: Optional[str], tp: Optional[ToolPlan]) -> Tuple[Dict, Optional[str]]:
    """(assistant message, finish reason) of a finished answer: tool calls parsed out when tools are in play."""
    if tp is None:
        return {"role": "assistant", "content": text}, finish
    content, calls = parse(text, tp)
    if not calls:
        return {"role": "assistant", "content": text}, finish
    return {"role": "assistant", "content": content, "tool_calls": calls}, "tool_calls"


class DeltaStream:
    """Streamed chat deltas with tool calls: content is passed on until a tool call may begin;
    from there the text is held and, at the end, parsed into tool_calls deltas (one per call,
    with its index, id, name and arguments) and finish_reason "tool_calls"."""

    def __init__(self, tp: Optional[ToolPlan]):
        self.tp = tp
        self.held = ""
        self.holding = False

    def feed(self, text: str) -> List[Dict]:
        if self.tp is None or not text:
            return [{"content": text}] if text else []
        if self.holding:
            self.held += text
            return []
        buf = self.held + text
        i = may_start_call(buf)
        if i < 0:
            self.held = ""
            return [{"content": buf}]
        whole = buf[i:]
        self.holding = any(whole.lstrip().startswith(m) for m in ("<tool_call>", "[TOOL_CALLS]", "{", "[",
                                                                  "<|python_tag|>", "`"))
        self.held = whole
        return [{"content": buf[:i]}] if i > 0 else []

    def finish(self, finish: Optional[str]) -> Tuple[List[Dict], Optional[str]]:
        """The deltas of what was held, and the finish reason to send."""
        held, self.held = self.held, ""
        if self.tp is None or not held:
            return ([{"content": held}] if held else []), finish
        content, calls = parse(held, self.tp)
        if not calls:
            return [{"content": held}], finish
        out = [{"content": content}] if content else []
        for k, c in enumerate(calls):
            out.append({"tool_calls": [dict(c, index=k)]})
        return out, "tool_calls"
