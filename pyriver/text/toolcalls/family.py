"""What every tool-call family provides (one file each beside this one): the syntax a template
teaches its model, read back from the model's text (parse), the grammar that holds a call to it
(forced: tool_choice required or named; lazy: auto, from the call's opening on), and the calls
found so far while a stream is still coming (parse with partial=True), as llama-server's parser
reports them: a call appears once its name is complete, its arguments the model's own JSON text so
far (llama.cpp's common/chat-peg-parser.cpp mapper: "{" until the arguments begin)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from pyriver.text.grammar import GrammarError
from pyriver.text.schema_gbnf import SchemaConverter
from pyriver.text.toolcalls.until import excluding


@dataclass
class Call:
    name: str
    arguments: str        # the model's JSON text of the arguments (a prefix of it while streaming)
    id: str = ""          # the call's id where the syntax carries one (Mistral Nemo, Kimi K2)


@dataclass
class Parsed:
    content: str
    calls: List[Call] = field(default_factory=list)
    reasoning: str = ""
    complete: bool = True   # False: a call the text cuts short (llama.cpp's final parse fails there)


class Family:
    """One syntax. Subclasses set name, triggers (words, patterns) and implement parse and root."""
    name = "?"
    words: Tuple[str, ...] = ()      # what opens a call (tool_choice auto's lazy grammar)
    patterns: Tuple[str, ...] = ()   # patterns whose first group opens a call
    knows_tools = True               # False: the template has no tools; they go in a system message
    channels = False                 # True: even without calls the text is markup (gpt-oss), content parsed out
    strip_content = True             # False: content before the calls kept as written (llama.cpp's qwen3-coder)
    # tool_choice required: the text llama.cpp's grammar lets come before the calls, up to the
    # first of these (its until()); () where the calls begin the answer
    content_until: Tuple[str, ...] = ()
    # llama.cpp's handler of the family continues a final assistant message (has_continuation) after
    # the generation prompt as: START, the message's reasoning, then for its content END and the
    # content; None: llama.cpp's autoparser, what the template writes (pyriver.text.continuation)
    continue_marks: Optional[Tuple[str, str]] = None
    # llama.cpp's parser has space() between the generation prompt (and reasoning) and the content
    # (its `<<`): whitespace the answer begins with is not content; False where it reads them with `+`
    lead_space = True

    def content_before(self, tools: List[Dict]) -> Tuple[str, ...]:
        return self.content_until

    def required_root(self, conv: SchemaConverter, tools: List[Dict], parallel: bool) -> str:
        """tool_choice required's grammar: llama.cpp's lets content come first, up to the call's opening."""
        calls = self.root(conv, tools, parallel, True)
        before = self.content_before(tools)
        return f"space {excluding(conv, before, 'content')}? ( {calls} )" if before else calls

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = names_of(tools)
        raise NotImplementedError

    def root(self, conv: SchemaConverter, tools: List[Dict], parallel: bool, force: bool) -> str:
        """The GBNF of the calls (rules added to conv): forced, the whole answer; else one call's span."""
        raise NotImplementedError

    def holds(self, text: str) -> bool:
        """Whether a stream holds text back whole until the end (a bare JSON call may be coming)."""
        return False

    def prepare(self, messages: List[Dict], source: str) -> List[Dict]:
        """The messages as llama.cpp hands them to this family's template (its workarounds)."""
        return messages

    def complete_prompt(self, prompt: str) -> str:
        """A prompt rendered with the generation prompt, as llama.cpp's handler finishes it."""
        return prompt


def args_rules(conv: SchemaConverter, tools: List[Dict]) -> List[Tuple[str, str, Dict]]:
    """(name, rule of its JSON arguments, parameters schema) of each tool."""
    out = []
    for i, t in enumerate(tools):
        fn = t["function"]
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        try:   # on a copy: resolve_refs rewrites $refs in place (the tools also go into the template)
            schema = conv.resolve_refs(json.loads(json.dumps(params)), f"tool{i}")
            rule = conv.visit(schema, f"tool{i}-args")
        except Exception as e:
            raise GrammarError(f"the parameters of tool {fn['name']!r} cannot be turned into a grammar: "
                               f"{type(e).__name__}: {e}") from None
        out.append((fn["name"], rule, schema))
    return out


def lit(conv: SchemaConverter, s: str) -> str:
    return conv.format_literal(s)


def alts(xs: List[str]) -> str:
    return " | ".join(f"( {x} )" for x in xs)


def repeat(one: str, sep: str, parallel: bool) -> str:
    """One call, or with parallel calls one or more (sep between them)."""
    return one + (f" ( {sep} {one} )*" if parallel else "")


def names_of(tools: List[Dict]) -> List[str]:
    return [t["function"]["name"] for t in tools]


def until(conv: SchemaConverter, delim: str, name: str) -> str:
    """A rule for any text that does not contain delim (llama.cpp's until() in a grammar)."""
    return excluding(conv, [delim], name)


# llama.cpp's whitespace between JSON tokens (json-schema-to-grammar.cpp's SPACE_RULE, also the PEG
# builder's space()); llama-cpp-python's converter has `" "?`
SPACE = '| " " | "\\n"{1,2} [ \\t]{0,20}'


def llama_space(conv: SchemaConverter) -> SchemaConverter:
    """conv with llama.cpp's space rule: a tool call's grammar allows the whitespace llama-server's does."""
    conv.set_rule("space", SPACE)
    return conv


# A parameter's value written as text (the XML-like families: Qwen3-Coder's, keyvalue's)
def param_types(schema: Dict) -> set:
    """The JSON types a parameter's schema allows (one without a type or values: a string)."""
    t = schema.get("type")
    if isinstance(t, list):
        return set(t)
    if isinstance(t, str):
        return {t}
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return set().union(*(param_types(s) for s in schema[key] if isinstance(s, dict)))
    return {"string"} if "enum" not in schema and "const" not in schema else set()


def is_string_value(schema: Optional[Dict], value: str) -> bool:
    """Whether a parameter's value is taken as a string (quoted): its schema's types, and for a
    mix, whether the text is JSON of one of the other types (llama.cpp tries those first)."""
    types = param_types(schema or {})
    if "string" not in types:
        return False
    if types == {"string"}:
        return True
    try:
        v = json.loads(value)
    except ValueError:
        return True
    kind = {dict: "object", list: "array", bool: "boolean", type(None): "null", int: "integer", float: "number"}[type(v)]
    return not (kind in types or (kind == "integer" and "number" in types))


MAX_PERMUTE = 6   # llama.cpp's COMMON_CHAT_MAX_PERMUTE


def permute(conv, prefix: str, rules: List[str]) -> str:
    """The rules in any order (llama.cpp's common_chat_peg_builder::permute): one rule per set of
    rules still to come; one rule, or more than MAX_PERMUTE, in the order given."""
    if not rules:
        return ""
    if len(rules) == 1 or len(rules) > MAX_PERMUTE:
        return " ".join(rules)
    names: Dict[int, str] = {}

    def remaining(mask: int) -> str:
        if mask == 0:
            return ""
        if mask not in names:
            parts = [f"{r} {remaining(mask & ~(1 << i))}".strip() for i, r in enumerate(rules) if mask & (1 << i)]
            names[mask] = conv.add_rule(f"{prefix}-{mask}", " | ".join(f"( {p} )" for p in parts))
        return names[mask]
    return remaining((1 << len(rules)) - 1)
