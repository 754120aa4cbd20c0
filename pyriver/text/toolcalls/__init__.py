"""Tool calling: OpenAI's tools / tool_choice / tool_calls over a GGUF's chat template, one
implementation for pyriver.Llama and the server (this package's door).

- The family a model calls tools in is read off its template as llama.cpp reads it (detect.py);
  one file per family: hermes (Hermes 2 Pro, Qwen 2.5/3, Granite 4, and the generic fallback),
  qwen3_coder (Qwen3-Coder, Qwen3.5 XML), harmony (gpt-oss), llama3 (Llama 3.x and its builtin
  tools), mistral (Nemo, Ministral/Magistral 3, Small 3.2, Granite 3), deepseek (R1, V3.1),
  functionary (v3.1, v3.2), kimi (K2), gemma4 (Gemma 4), keyvalue (arguments tagged one by one: GLM 4.x, Seed-OSS, MiniMax-M2).
- tool_choice "required" or a named function is enforced by a grammar of the family's syntax built
  from the tools' parameter schemas; "auto" gets the same grammar lazily (llama.cpp's lazy
  grammar): free text until a call opens, the call constrained from there; "none" neither
  renders tools nor parses.
- A stream's deltas are the differences between successive parses, as llama-server sends them:
  a call as soon as its name is complete, its arguments as they grow (results.py)."""
from pyriver.text.toolcalls.detect import family_of
from pyriver.text.toolcalls.requests import (ToolError, ToolPlan, generic_system, normalize_messages, plan,
                                             render_messages)
from pyriver.text.toolcalls.results import (DeltaStream, auto_grammar, call_grammar, may_start_call, message,
                                            parse, read)


def syntax_of(template_source: str) -> str:
    """The name of the tool-call family a chat template teaches its model."""
    return family_of(template_source).name


def knows_tools(template_source: str) -> bool:
    return family_of(template_source).knows_tools


HERMES, LLAMA3, MISTRAL, GENERIC = "hermes", "llama3", "mistral-nemo", "generic"

__all__ = ["DeltaStream", "ToolError", "ToolPlan", "auto_grammar", "call_grammar", "family_of", "generic_system",
           "knows_tools", "may_start_call", "message", "normalize_messages", "parse", "plan", "read",
           "render_messages", "syntax_of"]
