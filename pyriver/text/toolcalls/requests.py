"""A request's tool fields (tools, tool_choice, parallel_tool_calls) and messages, checked and
made ready for the chat template: tools go into the template as `tools` (as Hugging Face's
apply_chat_template passes them); a template that knows no tools gets them in a system message
(Hermes' wording) and calls and results as text."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Dict, List, Optional, Tuple

from pyriver.text.template_render import ChatTemplate
from pyriver.text.toolcalls import detect


class ToolError(ValueError):
    """A malformed tools / tool_choice / message."""


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


def normalize_messages(messages: List[Dict], template_knows_tools: bool, object_args: bool = True) -> List[Dict]:
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
            if object_args:   # else as given (llama.cpp: a template that cannot take objects gets the text)
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
    syntax: str           # the family's name (pyriver.text.toolcalls.detect)
    family: Any = None    # its Family (parse, grammar)


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
    fam = detect.family_of(template_source)
    # unset: as llama-server, parallel calls where the template renders them (one that knows no tools does not)
    wanted = fam.knows_tools and renders_parallel(template_source) if parallel_tool_calls is None else parallel_tool_calls
    parallel = wanted and choice in ("auto", "required")
    return ToolPlan([dict(t, type="function") for t in tools], choice, parallel, fam.name, fam)


@lru_cache(maxsize=64)
def _caps(template_source: str) -> Tuple[bool, bool]:
    """(object arguments, parallel calls) of a template, as llama.cpp's caps checks find them
    (common/jinja/caps.cpp): an assistant message with two calls rendered, arguments as objects,
    else as JSON text (a template that adds them to a string: functionary v3.2's); parallel where
    the second call is rendered. A template that raises there itself (Llama 3.x: "only supports
    single tool-calls") has no parallel calls; one that renders no call (a marker alone, as tests
    write them) is not told otherwise."""
    import jinja2
    tool = {"type": "function", "function": {"name": "tool1", "description": "Tool description", "parameters": {
        "type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}},
        "required": ["arg"]}}}
    refused = False
    for as_text in (False, True):
        calls = [{"id": f"call0000{i}", "type": "function", "function": {
            "name": "tool1", "arguments": json.dumps({"arg": v}) if as_text else {"arg": v}}}
            for i, v in ((1, "value"), (2, "second_value"))]
        msgs = [{"role": "user", "content": "User message"}, {"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
                {"role": "assistant", "content": "The tool response was 'tool response'"},
                {"role": "user", "content": "User message"}]
        try:
            out = ChatTemplate(template_source, "", "").render(msgs, add_generation_prompt=False, tools=[tool])
        except Exception as e:   # the template's own raise_exception refuses; other errors tell nothing
            refused = refused or type(e) is jinja2.exceptions.TemplateError
            continue
        return not as_text, "second_value" in out or '"value"' not in out
    return True, not refused


def renders_parallel(template_source: str) -> bool:
    """Whether the template renders parallel calls (llama-server's supports_parallel_tool_calls)."""
    return _caps(template_source)[1]


def render_messages(messages: List[Dict], tp: Optional[ToolPlan], template_source: str) -> Tuple[List[Dict], Dict]:
    """(messages, extra template variables) to render a request with."""
    fam = detect.family_of(template_source)
    msgs = fam.prepare(normalize_messages(messages, fam.knows_tools, _caps(template_source)[0]), template_source)
    if tp is None:
        return msgs, {}
    if not fam.knows_tools:
        sys_text = generic_system(tp.tools)
        if msgs and msgs[0]["role"] == "system":
            msgs[0] = dict(msgs[0], content=msgs[0]["content"] + "\n\n" + sys_text)
        else:
            msgs.insert(0, {"role": "system", "content": sys_text})
    return msgs, {"tools": tp.tools}
