"""JSON schema -> GBNF: the one converter pyriver uses (response_format json_schema / json_object
with a schema, llama.cpp server's json_schema field, and forced tool calls).

It is llama-cpp-python 0.3.36's SchemaConverter (a copy of llama.cpp's json_schema_to_grammar.py)
with one rule replaced: a JSON string's character. llama-cpp-python's is `[^"\\\\] | escape`, which
lets a raw newline, tab or other control character into a string; JSON forbids them (RFC 8259:
U+0000 to U+001F must be escaped), so an answer the grammar allowed did not parse (issue 39: a
forced tool call came back as content). llama.cpp's converter (json-schema-to-grammar.cpp and
its Python twin) has `[^"\\\\\\x7F\\x00-\\x1F] | escape`, taken here: every string the grammar
allows is a JSON string. The escapes stay llama-cpp-python's (`\\/` included: valid JSON)."""
from __future__ import annotations

import json
from typing import Any

from llama_cpp import llama_grammar

from pyriver.text.grammar import GrammarError

# llama.cpp's JSON string character: anything but '"', '\\', DEL and the C0 controls, or an escape.
JSON_CHAR = (r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])')


class SchemaConverter(llama_grammar.SchemaConverter):
    """llama-cpp-python's converter with llama.cpp's JSON string character (every primitive that
    holds a string, `string`, strings with minLength/maxLength, free-form objects' keys and values,
    reaches `char` through _add_primitive)."""

    def __init__(self, prop_order=None):
        super().__init__(prop_order=prop_order or {}, allow_fetch=False, dotall=False, raw_pattern=False)

    def _add_primitive(self, name: str, rule):
        if name == "char":
            rule = llama_grammar.BuiltinRule(JSON_CHAR, [])
        return super()._add_primitive(name, rule)

    def add_rule(self, name: str, rule: str) -> str:
        """Add GBNF rule name (renamed when taken by another rule); the name it got."""
        return self._add_rule(name, rule)

    def set_rule(self, name: str, rule: str) -> None:
        """Rule name's body, replaced (a rule added under a name taken first, or llama.cpp's space)."""
        self._rules[name] = rule

    def format_literal(self, literal: str) -> str:
        """literal as a GBNF string literal."""
        return self._format_literal(literal)


def schema_to_gbnf(schema: Any) -> str:
    """GBNF of a JSON schema (a dict, a bool, or its JSON text); GrammarError when it cannot be converted."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
    if not isinstance(schema, (dict, bool)):
        raise GrammarError(f"a JSON schema must be an object, got {type(schema).__name__}")
    conv = SchemaConverter()
    try:   # json_schema_to_gbnf's steps on a copy (resolve_refs rewrites $refs in place)
        conv.visit(conv.resolve_refs(json.loads(json.dumps(schema)), "stdin"), "")
        return conv.format_grammar()
    except Exception as e:   # the converter raises what it meets (ValueError, KeyError, RecursionError ...)
        raise GrammarError(f"the JSON schema cannot be turned into a grammar: {type(e).__name__}: {e}") from None
