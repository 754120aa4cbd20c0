"""A chat template's Jinja source rendered as llama.cpp's template engine renders it (minja: no HTML
escaping, tojson as Hugging Face's, an undefined value added to a string as ''), with what
llama.cpp gives every template beside the messages. Apart from chat_template.py so that the tool-call
package can render a template (its caps checks) without importing the chat results."""
from __future__ import annotations

import copy
import json
from datetime import datetime
from functools import cached_property
from typing import Dict, List

import jinja2
import jinja2.ext
from jinja2.sandbox import SandboxedEnvironment


class MinjaUndefined(jinja2.Undefined):
    """An undefined value as llama.cpp's template engine (minja) takes it in `+` with a string: as
    '' (firefunction-v2's `suffix + "\n" + functions` with no tools). jinja2 raises there; every
    other use raises as before, so a template that rendered renders the same."""

    def __add__(self, other):
        return other if isinstance(other, str) else super().__add__(other)

    def __radd__(self, other):
        return other if isinstance(other, str) else super().__radd__(other)


def _raise(msg):
    raise jinja2.exceptions.TemplateError(msg)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """tojson as llama.cpp's templates (and Hugging Face's) write it: keys in their order, nothing
    HTML-escaped (jinja2's own sorts keys and writes < as \\u003c: another prompt than llama-server's);
    a filter's sequence (jinja2's map() is a generator) as the list it is in llama.cpp's engine."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys,
                      default=_listed)


def _listed(x):
    if hasattr(x, "__iter__") and not isinstance(x, (str, bytes, dict)):
        return list(x)
    raise TypeError(f"Object of type {type(x).__name__} is not JSON serializable")


def _safe(x):
    """|safe as llama.cpp's engine has it: the value itself (jinja2's Markup would HTML-escape every
    string added to it: functionary v3.1's `"..."|safe + tool|tojson`)."""
    return x


def extra_context() -> Dict[str, str]:
    """What llama.cpp gives every template beside the messages (common_chat_extra_context): today."""
    now = datetime.now()
    return {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y")}


class _Generation(jinja2.ext.Extension):
    """{% generation %} and {% endgeneration %}, transformers' assistant-mask markers (LFM2.5,
    Laguna), as llama.cpp's engine takes them: no-ops, the text between rendered as any other."""
    tags = {"generation", "endgeneration"}

    def parse(self, parser):
        return jinja2.nodes.Output([], lineno=next(parser.stream).lineno)


_SYSTEM_PROBE = "System message"


class ChatTemplate:
    def __init__(self, source: str, bos_token: str, eos_token: str):
        # sandboxed, lists and dicts mutable as in llama.cpp's engine (Kimi K2's template appends to
        # and pops a list of its own); render() hands the template copies of what it is given
        env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loader=jinja2.BaseLoader(),
                                   extensions=["jinja2.ext.loopcontrols",   # {% break %} (Cohere ...)
                                               _Generation],
                                   undefined=MinjaUndefined)
        env.filters["tojson"] = _tojson
        env.filters["safe"] = _safe
        self.template = env.from_string(source)
        self.source = source   # what pyriver.text.toolcall reads the tool-call syntax from
        self.bos_token, self.eos_token = bos_token, eos_token

    @cached_property
    def supports_system_role(self) -> bool:
        """Whether a system message reaches the prompt (llama.cpp's caps check: [system, user]
        rendered, the system text used); Gemma 2's template raises on one."""
        try:
            out = self.render([{"role": "system", "content": _SYSTEM_PROBE},
                               {"role": "user", "content": "User message"}], add_generation_prompt=False)
        except Exception:   # the template's own refusal (raise_exception) or any failure: not supported
            return False
        return _SYSTEM_PROBE in out

    def render(self, messages: List[Dict], add_generation_prompt: bool = True, **extra) -> str:
        for m in messages:
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError(f"each message needs a 'role': {m!r}")
        return self.template.render(messages=copy.deepcopy(messages), bos_token=self.bos_token,
                                    eos_token=self.eos_token, add_generation_prompt=add_generation_prompt,
                                    raise_exception=_raise, strftime_now=lambda f: datetime.now().strftime(f),
                                    **copy.deepcopy(extra))


def system_merged(template: ChatTemplate, messages: List[Dict]) -> List[Dict]:
    """llama-server's messages for a template without a system role (common/chat.cpp's
    system_message_not_supported): a leading system message joins the next one's text after a
    newline, or is dropped where it is alone. llama-cpp-python renders them as they are, and so
    does llama.cpp's built-in formatter (server/builtin_template.py)."""
    if not isinstance(template, ChatTemplate) or not messages or messages[0].get("role") != "system" \
            or template.supports_system_role:
        return messages
    if len(messages) == 1:
        return []
    first, second = messages[0], messages[1]
    return [dict(second, content=f"{first.get('content') or ''}\n{second.get('content') or ''}")] + messages[2:]
