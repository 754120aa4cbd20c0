"""`Llama.create_chat_completion` (a mixin): the chat template of the GGUF and chat-shaped results."""
from __future__ import annotations

from typing import Dict, List, Optional, Union

from . import chat
from . import completion as C
from .structured import ChatPlan


class ChatMixin:
    # -- chat -------------------------------------------------------------------------------
    def chat_tokens(self, messages: List[Dict], **extra) -> List[int]:
        """The prompt of a chat, rendered by the GGUF's template (compiled once per Llama) with
        the generation prompt; special tokens are parsed and BOS comes from the template itself.
        extra: more template variables (tools)."""
        if self._template is None:
            self._template = chat.template_for(self)
        prompt = self._template.render(messages, add_generation_prompt=True, **extra)
        return self.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)

    def chat_stops(self, stop: Optional[Union[str, List[str]]]) -> List[str]:
        """A chat's stop strings: the caller's and the template's EOS text (templates that spell EOS as text)."""
        if self._template is None:
            self._template = chat.template_for(self)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if self._template.eos_token and self._template.eos_token not in stops:
            stops.append(self._template.eos_token)
        return stops

    def create_chat_completion(self, messages: List[Dict], *, stream: bool = False,
                               stop: Optional[Union[str, List[str]]] = None, max_tokens: Optional[int] = None,
                               response_format: Optional[Dict] = None, grammar=None, tools: Optional[List] = None,
                               tool_choice=None, parallel_tool_calls: Optional[bool] = None, **kwargs):
        if self._template is None:
            self._template = chat.template_for(self)
        # response_format / grammar / tools: pyriver.structured and pyriver.toolcall
        plan = ChatPlan(self._template.source, messages, response_format, grammar, None, tools, tool_choice,
                        parallel_tool_calls)
        tokens = self.chat_tokens(plan.messages, **plan.extra)
        stops = self.chat_stops(stop)
        cid, created = C.new_id("chatcmpl"), C.now()
        res = self.create_completion(tokens, stop=stops, max_tokens=max_tokens, stream=stream, grammar=plan.grammar,
                                     **kwargs)
        if stream:
            return chat.chat_stream(cid, created, self.model_path, res, plan.tools)
        c = res["choices"][0]
        return chat.chat_dict(cid, created, self.model_path, c["text"], c["finish_reason"], res["usage"], plan.tools)

