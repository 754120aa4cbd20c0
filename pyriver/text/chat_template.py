"""Chat: the template stored in the GGUF (rendered by template_render.py as llama.cpp's engine
renders it), and chat-completion results and chunks shaped like llama-cpp-python's."""
from __future__ import annotations

from typing import Iterator, List, Optional

from llama_cpp.llama_chat_format import _convert_text_completion_logprobs_to_chat

from pyriver.text import toolcall
from pyriver.text.template_render import ChatTemplate, MinjaUndefined, extra_context  # noqa: F401 (this module's names)


# Used when a GGUF carries no template: ChatML, which SmolLM2 and many small models use.
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def template_for(llama) -> ChatTemplate:
    src = llama.metadata.get("tokenizer.chat_template") or CHATML
    bos = llama.vocab.token_text(llama.token_bos()) if llama.token_bos() >= 0 else ""
    eos = llama.vocab.token_text(llama.token_eos()) if llama.token_eos() >= 0 else ""
    return ChatTemplate(src, bos, eos)


def chat_dict(cid: str, created: int, model: str, text: str, finish: Optional[str], usage: dict,
              tools: Optional[toolcall.ToolPlan] = None) -> dict:
    msg, finish = toolcall.message(text, finish, tools)
    return {
        "id": cid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }


def chunk_dict(cid: str, created: int, model: str, delta: dict, finish: Optional[str]) -> dict:
    return {
        "id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def chat_stream(cid: str, created: int, model: str, completion_chunks: Iterator[dict],
                tools: Optional[toolcall.ToolPlan] = None) -> Iterator[dict]:
    yield role_chunk(cid, created, model)
    ds = toolcall.DeltaStream(tools)
    for ch in completion_chunks:
        c = ch["choices"][0]
        chunks = tool_delta_chunks(ds, cid, created, model, c["text"], c["finish_reason"])
        if c.get("logprobs") and chunks:   # llama_cpp's chat shape of the chunk's token logprobs
            chunks[0]["choices"][0]["logprobs"] = _convert_text_completion_logprobs_to_chat(c["logprobs"])
        yield from chunks


def tool_delta_chunks(ds: toolcall.DeltaStream, cid: str, created: int, model: str, text: str,
                      finish: Optional[str]) -> List[dict]:
    """delta_chunks when tool calls may come: content until a call may begin, the calls at the end."""
    deltas = ds.feed(text)
    if finish:
        more, finish = ds.finish(finish)
        deltas += more
    out = [chunk_dict(cid, created, model, d, None) for d in deltas]
    if finish:
        out.append(chunk_dict(cid, created, model, {}, finish))
    return out


def role_chunk(cid: str, created: int, model: str) -> dict:
    """The first chunk of a streamed chat completion."""
    return chunk_dict(cid, created, model, {"role": "assistant"}, None)


def delta_chunks(cid: str, created: int, model: str, text: str, finish: Optional[str]) -> List[dict]:
    """The chat chunks of a piece of text and of the finish reason that may come with it."""
    out = []
    if text:
        out.append(chunk_dict(cid, created, model, {"content": text}, None))
    if finish:
        out.append(chunk_dict(cid, created, model, {}, finish))
    return out
