"""`--chat-template NAME`: llama.cpp's built-in chat templates (chatml, llama3, command-r ...)
rendered by llama.cpp itself (llama_chat_apply_template, through llama-cpp-python), as
llama-server renders them; any other value is a jinja template's source."""
from __future__ import annotations

import ctypes
from typing import Dict, List

import llama_cpp


def names() -> List[str]:
    n = llama_cpp.llama_chat_builtin_templates(None, 0)
    arr = (ctypes.c_char_p * n)()
    llama_cpp.llama_chat_builtin_templates(arr, n)
    return [x.decode() for x in arr]


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
        chat = (llama_cpp.llama_chat_message * len(keep))(*[llama_cpp.llama_chat_message(r, c) for r, c in keep])
        size = 2 * sum(len(r) + len(c) for r, c in keep) + 1024
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_chat_apply_template(self.name.encode(), chat, len(keep), add_generation_prompt,
                                                    buf, size)
            if n < 0:
                raise ValueError(f"llama.cpp's '{self.name}' template cannot render these messages")
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n + 1
        raise ValueError("the rendered prompt did not fit")


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
