"""llama.cpp's built-in chat templates (chatml, llama3, command-r ...): their names
(llama_chat_builtin_templates) and a rendering of role/content messages by llama.cpp itself
(llama_chat_apply_template), through llama-cpp-python."""
from __future__ import annotations

import ctypes
from typing import List, Sequence, Tuple

import llama_cpp


def builtin_names() -> List[str]:
    """The names of llama.cpp's built-in chat templates."""
    n = llama_cpp.llama_chat_builtin_templates(None, 0)
    arr = (ctypes.c_char_p * n)()
    llama_cpp.llama_chat_builtin_templates(arr, n)
    return [x.decode() for x in arr]


def apply_builtin(name: str, messages: Sequence[Tuple[bytes, bytes]], add_generation_prompt: bool) -> str:
    """messages ((role, content) as UTF-8) rendered by llama.cpp's built-in template name;
    ValueError when the template cannot render them."""
    keep = list(messages)
    chat = (llama_cpp.llama_chat_message * len(keep))(*[llama_cpp.llama_chat_message(r, c) for r, c in keep])
    size = 2 * sum(len(r) + len(c) for r, c in keep) + 1024
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(name.encode(), chat, len(keep), add_generation_prompt, buf, size)
        if n < 0:
            raise ValueError(f"llama.cpp's '{name}' template cannot render these messages")
        if n <= size:
            return buf.raw[:n].decode("utf-8", "replace")
        size = n + 1
    raise ValueError("the rendered prompt did not fit")
