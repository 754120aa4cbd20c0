"""Which grammar a request asks for: OpenAI's response_format (json_object, json_object with a
schema as llama-cpp-python takes it, json_schema), llama.cpp server's `grammar` (GBNF) and
`json_schema` fields. One rule for pyriver.Llama and the server; JSON schemas become GBNF through
pyriver.text.schema_gbnf (llama-cpp-python's converter, strings as llama.cpp's: no raw control characters)."""
from __future__ import annotations

from typing import Any, Optional

from llama_cpp import llama_grammar

from pyriver.text import toolcall
from pyriver.text.grammar import GrammarError
from pyriver.text.schema_gbnf import schema_to_gbnf


def schema_grammar(schema: Any) -> str:
    """GBNF of a JSON schema (a dict, or its JSON text); GrammarError when the converter refuses it
    (pyriver.text.schema_gbnf: llama-cpp-python's converter with llama.cpp's JSON string rule)."""
    return schema_to_gbnf(schema)


def response_format_grammar(response_format: Any) -> Optional[str]:
    """GBNF for OpenAI's response_format, None for {"type": "text"} or no format."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or not isinstance(response_format.get("type"), str):
        raise GrammarError("response_format must be an object with a 'type'")
    kind = response_format["type"]
    if kind == "text":
        return None
    if kind == "json_object":   # as llama-cpp-python: any JSON object, or its 'schema' when given
        if "schema" in response_format:
            return schema_grammar(response_format["schema"])
        return llama_grammar.JSON_GBNF
    if kind == "json_schema":   # OpenAI's shape: {"json_schema": {"name", "schema", "strict"}}
        js = response_format.get("json_schema")
        if not isinstance(js, dict):
            raise GrammarError("response_format json_schema needs 'json_schema': {name, schema, strict}")
        schema = js.get("schema", {})
        return schema_grammar(schema if schema is not None else {})
    raise GrammarError(f"response_format type must be text, json_object or json_schema, got {kind!r}")


def request_grammar(response_format: Any = None, grammar: Any = None, json_schema: Any = None):
    """The grammar of a request (a GBNF string, a llama_cpp.LlamaGrammar, or None): at most one of
    grammar, json_schema and a JSON response_format may be given."""
    rf = response_format_grammar(response_format)
    given = [name for name, v in (("grammar", grammar), ("json_schema", json_schema), ("response_format", rf))
             if v is not None]
    if len(given) > 1:
        raise GrammarError(f"give one of grammar, json_schema and a JSON response_format, not {' and '.join(given)}")
    if json_schema is not None:
        return schema_grammar(json_schema)
    if grammar is not None and not isinstance(grammar, str) and not hasattr(grammar, "_grammar"):
        raise GrammarError(f"grammar must be GBNF text or a llama_cpp.LlamaGrammar, got {type(grammar).__name__}")
    return grammar if grammar is not None else rf


class ChatPlan:
    """How a chat request renders and generates: the messages and template variables, the
    grammar (response format, grammar fields, or forced tool calls) and the tool plan whose
    calls are parsed from the answer (None: the answer is plain content)."""

    def __init__(self, template_source: str, messages, response_format=None, grammar=None, json_schema=None,
                 tools=None, tool_choice=None, parallel_tool_calls=None):
        self.tools = toolcall.plan(tools, tool_choice, parallel_tool_calls, template_source)
        self.messages, self.extra = toolcall.render_messages(messages, self.tools, template_source)
        forced = toolcall.call_grammar(self.tools) if self.tools is not None else None
        own = request_grammar(response_format, grammar, json_schema)
        if forced is not None and own is not None:
            raise GrammarError("a required or named tool_choice cannot be combined with a grammar or JSON format")
        self.grammar = forced if forced is not None else own
        if self.grammar is None and self.tools is not None:   # tool_choice auto: calls constrained once opened
            self.grammar = toolcall.auto_grammar(self.tools)
