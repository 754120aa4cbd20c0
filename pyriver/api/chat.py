"""`Llama.create_chat_completion` (`Llama.chats`, a part of `pyriver.Llama`): the chat template of the GGUF and chat-shaped results."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

from llama_cpp.llama_chat_format import _convert_text_completion_logprobs_to_chat, get_chat_completion_handler

from pyriver.text import chat_template as chat
from pyriver.text import completion as C
from pyriver.text import continuation, toolcalls
from pyriver.text.structured import ChatPlan
from pyriver.api.low_level import extra_samplers


class Chat:
    """`Llama.chats` (a part of `pyriver.Llama`): the chat template and create_chat_completion.
    `template`: the GGUF's template (pyriver.text.chat_template), compiled when first used; the
    server's --chat-template replaces it."""

    def __init__(self, llm):
        self.llm = llm
        self.template = None

    # -- chat -------------------------------------------------------------------------------
    def chat_tokens(self, messages: List[Dict], add_generation_prompt: bool = True,
                    continue_final: Union[bool, str] = False, server_bos: bool = False, **extra) -> List[int]:
        """The prompt of a chat, rendered by the GGUF's template (compiled once per Llama) with
        the generation prompt; special tokens are parsed and BOS comes from the template itself
        (llama-cpp-python's rule). server_bos: llama-server's rule instead: a BOS the template
        wrote is dropped and the tokenizer adds the model's specials (one BOS where the model adds
        BOS, also when its template writes none). continue_final: the last (assistant) message is
        continued, as llama-server's prefill (True, or its continue_final_message "content" or
        "reasoning_content": pyriver.text.continuation). extra: more template variables (tools)."""
        L = self.llm
        text, add_bos = self.chat_prompt(messages, add_generation_prompt, continue_final, server_bos, **extra)
        return L.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def chat_prompt(self, messages: List[Dict], add_generation_prompt: bool = True,
                    continue_final: Union[bool, str] = False, server_bos: bool = False, **extra) -> Tuple[str, bool]:
        """chat_tokens' text, and whether the tokenizer adds the model's BOS to it (a multimodal
        prompt's text goes to libmtmd's tokenizer instead)."""
        L = self.llm
        if self.template is None:
            self.template = chat.template_for(self.llm)
        if continue_final:
            prompt = continuation.continued(self.template, messages, continue_final, **extra)
        else:
            prompt = self.template.render(messages, add_generation_prompt=add_generation_prompt, **extra)
            # llama-server's rule (server_bos): the prompt finished as llama.cpp's handler of the template's
            # family finishes it (Gemma 4); llama-cpp-python's is the template's render alone
            if add_generation_prompt and server_bos:
                prompt = toolcalls.family_of(self.template.source).complete_prompt(prompt)
        if server_bos and L.vocab.add_bos:   # common_chat_templates_apply, then add_special
            bos = self.template.bos_token
            return (prompt[len(bos):] if bos and prompt.startswith(bos) else prompt), True
        return prompt, False

    def chat_stops(self, stop: Optional[Union[str, List[str]]]) -> List[str]:
        """A chat's stop strings: the caller's and the template's EOS text (templates that spell EOS as text)."""
        if self.template is None:
            self.template = chat.template_for(self.llm)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if self.template.eos_token and self.template.eos_token not in stops:
            stops.append(self.template.eos_token)
        return stops

    def create_chat_completion(self, messages: List[Dict], functions=None, function_call=None, tools=None,
                               tool_choice=None, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
                               min_p: float = 0.05, typical_p: float = 1.0, stream: bool = False,
                               stop: Optional[Union[str, List[str]]] = None, seed: Optional[int] = None,
                               response_format=None, max_tokens: Optional[int] = None,
                               presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                               repeat_penalty: float = 1.0, tfs_z: float = 1.0, mirostat_mode: int = 0,
                               mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, model: Optional[str] = None,
                               logits_processor=None, grammar=None, logit_bias=None,
                               logprobs: Optional[bool] = None, top_logprobs: Optional[int] = None,
                               parallel_tool_calls: Optional[bool] = None, *,
                               dry_multiplier: Optional[float] = None, dry_base: Optional[float] = None,
                               dry_allowed_length: Optional[int] = None, dry_penalty_last_n: Optional[int] = None,
                               dry_sequence_breakers: Optional[List[str]] = None,
                               xtc_probability: Optional[float] = None, xtc_threshold: Optional[float] = None,
                               top_n_sigma: Optional[float] = None, dynatemp_range: Optional[float] = None,
                               dynatemp_exponent: Optional[float] = None):
        """llama-cpp-python's create_chat_completion (its arguments and defaults). The prompt is
        the GGUF's template (chat_format None or "gguf"), or llama_cpp's own formatter or handler
        for chat_format="chatml", "llama-3", ... or a chat_handler. The keyword-only extras are
        create_completion's (llama-server's samplers), on the GGUF's template."""
        L = self.llm
        args = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, typical_p=typical_p,
                    seed=seed, presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                    repeat_penalty=repeat_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                    mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, model=model,
                    logits_processor=logits_processor, grammar=grammar, logit_bias=logit_bias)
        extras = extra_samplers(dry_multiplier=dry_multiplier, dry_base=dry_base, dry_allowed_length=dry_allowed_length,
                                dry_penalty_last_n=dry_penalty_last_n, dry_sequence_breakers=dry_sequence_breakers,
                                xtc_probability=xtc_probability, xtc_threshold=xtc_threshold, top_n_sigma=top_n_sigma,
                                dynatemp_range=dynatemp_range, dynatemp_exponent=dynatemp_exponent)
        handler = self.handler()
        if handler is not None and extras:   # llama_cpp's handlers call create_completion with their own arguments
            raise ValueError(f"{sorted(extras)[0]}: llama-server's samplers run on the GGUF's chat template, not "
                             "through a chat_handler or chat_format (llama_cpp's handlers take llama_cpp's arguments)")
        args.update(extras)
        if handler is not None:   # llama_cpp's formatter or handler builds the prompt and the result
            return handler(llama=self.llm, messages=messages, functions=functions, function_call=function_call,
                           tools=tools, tool_choice=tool_choice, stream=stream, stop=stop,
                           response_format=response_format, max_tokens=max_tokens, logprobs=logprobs,
                           top_logprobs=top_logprobs, **args)
        if self.template is None:
            self.template = chat.template_for(self.llm)
        if functions is not None and tools is None:   # llama_cpp's legacy functions are tools
            tools = [{"type": "function", "function": f} for f in functions]
        if function_call is not None and tool_choice is None:
            tool_choice = (function_call if isinstance(function_call, str)
                           else {"type": "function", "function": {"name": function_call["name"]}})
        # response_format / grammar / tools: pyriver.text.structured and pyriver.text.toolcall
        plan = ChatPlan(self.template.source, messages, response_format, grammar, None, tools, tool_choice,
                        parallel_tool_calls)
        args["grammar"] = plan.grammar
        tokens = self.chat_tokens(plan.messages, **plan.extra)
        stops = self.chat_stops(stop)
        cid, created = C.new_id("chatcmpl"), C.now()
        res = L.create_completion(tokens, stop=stops, max_tokens=max_tokens, stream=stream,
                                     logprobs=(top_logprobs or 0) if logprobs else None, **args)
        name = model if model is not None else L.model_path
        if stream:
            return chat.chat_stream(cid, created, name, res, plan.tools)
        c = res["choices"][0]
        out = chat.chat_dict(cid, created, name, c["text"], c["finish_reason"], res["usage"], plan.tools)
        out["choices"][0]["logprobs"] = _convert_text_completion_logprobs_to_chat(c["logprobs"])
        return out

    def create_chat_completion_openai_v1(self, *args, **kwargs):
        """llama_cpp's: create_chat_completion's result as the openai package's ChatCompletion (or
        an iterator of ChatCompletionChunk with stream=True)."""
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError:
            raise ImportError("To use create_chat_completion_openai_v1, you must install the openai package. "
                              "You can install it with `pip install openai`.") from None
        if kwargs.get("stream", False):
            return (ChatCompletionChunk(**chunk) for chunk in self.create_chat_completion(*args, **kwargs))
        return ChatCompletion(**self.create_chat_completion(*args, **kwargs))

    def handler(self):
        """llama_cpp's handler for chat_handler / chat_format; None: the GGUF's template."""
        L = self.llm
        if L.chat_handler is not None:
            return L.chat_handler
        if L.chat_format in (None, "gguf", "chat_template.default"):
            return None
        return get_chat_completion_handler(L.chat_format)
