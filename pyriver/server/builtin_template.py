"""`--chat-template NAME`: llama.cpp's built-in chat templates (chatml, llama3, command-r ...)
rendered by llama.cpp itself (llama_chat_apply_template, through pyriver.engine.chat_template), as
llama-server renders them; any other value is a jinja template's source."""
from __future__ import annotations

from typing import Dict, List

from pyriver.engine import chat_template as engine_templates


def names() -> List[str]:
    return engine_templates.builtin_names()


class BuiltinTemplate:
    """The render() of pyriver.text.chat_template.ChatTemplate over a built-in template: roles and text content
    only (what llama.cpp's built-in templates read)."""

    def __init__(self, name: str, bos_token: str, eos_token: str):
        self.name, self.bos_token, self.eos_token = name, bos_token, eos_token
        self.source = ""   # no jinja source: tool calls take the generic syntax (pyriver.text.toolcall)

    def render(self, messages: List[Dict], add_generation_prompt: bool = True, **_extra) -> str:
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise ValueError(f"each message needs a 'role': {m!r}")
            if not isinstance(m.get("content", ""), str):
                raise ValueError("a built-in template takes text content only")
        keep = [(m["role"].encode("utf-8"), (m.get("content") or "").encode("utf-8")) for m in messages]
        return engine_templates.apply_builtin(self.name, keep, add_generation_prompt)


def from_settings(settings: Dict, base):
    """The template the server renders chats with: --chat-template-file's, --chat-template's (a
    built-in name, else jinja source), or `base` (the GGUF's), keeping base's BOS and EOS text."""
    from pyriver.text.chat_template import ChatTemplate
    if settings.get("chat_template_file"):
        with open(settings["chat_template_file"], encoding="utf-8") as fh:
            return ChatTemplate(fh.read(), base.bos_token, base.eos_token)
    name = settings.get("chat_template")
    if not name:
        return base
    if name in names():
        return BuiltinTemplate(name, base.bos_token, base.eos_token)
    return ChatTemplate(name, base.bos_token, base.eos_token)
