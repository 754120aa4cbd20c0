"""Request bodies of /v1/completions and /v1/chat/completions: every field's type checked, the
OpenAI-shaped error for what is wrong. Defaults are pyriver.Llama's, so a request gives the text
Llama.create_completion gives for the same arguments."""
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from pyriver.engine.sampling import SamplingParams
from pyriver.server import sampling_fields as SF


class APIError(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, type_: str = "invalid_request_error",
                 code: Optional[str] = None, **extra):
        super().__init__(message)
        self.status, self.message, self.param, self.type, self.code = status, message, param, type_, code
        self.extra = extra   # fields llama-server adds (n_prompt_tokens, n_ctx)

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code,
                          **self.extra}}


def end_error(reason: str) -> APIError:
    """A request the scheduler ended with "error: ...": llama-server's 500 server_error (its send_error)."""
    return APIError(500, reason[len("error: "):] if reason.startswith("error: ") else reason, type_="server_error")


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _prompt(v):   # a JSON prompt {prompt_string, multimodal_data} too, as llama-server's /v1/completions
    return isinstance(v, (str, dict)) or (isinstance(v, list) and len(v) > 0 and all(_int(t) for t in v)) or \
        (isinstance(v, list) and len(v) == 1 and isinstance(v[0], (str, dict)))


def _messages(v):   # content (text, text parts, null with tool_calls) is checked by pyriver.text.toolcall;
    # an empty list renders the generation prompt alone, as llama-server answers it (200)
    return isinstance(v, list) and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in v)


# The fields of one route beside the generation fields both APIs share (server/sampling_fields.py):
# name: (check, what it must be, default). Fields the API has that change nothing here (user ...) pass.
# These stay per route: pyriver's /completion reads none of them here (model, response_format and
# river_tokens are the OpenAI routes' own; n, grammar and json_schema it does not take, where
# llama-server's one schema reads n as n_cmpl and grammar as json_schema's alias; lora, /completion
# hands to server/lora.py unchecked), and each is an object or a predicate of its own, so the one
# table would hold them only as per-field predicates, no longer a declarative table.
_COMMON = {
    "model": (lambda v: v is None or isinstance(v, str), "a string", None),
    "stream_options": (lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("include_usage", False), bool)),
                       "an object {include_usage: boolean}", None),
    "n": (lambda v: v is None or (_int(v) and 1 <= v <= 16), "an integer in [1, 16]", 1),
    # structured output (pyriver.text.structured): OpenAI's response_format, llama.cpp server's grammar and json_schema
    "response_format": (lambda v: isinstance(v, dict), "an object {type: text | json_object | json_schema}", None),
    "grammar": (lambda v: isinstance(v, str), "a string (GBNF)", None),
    "json_schema": (lambda v: isinstance(v, (dict, bool)), "a JSON schema (an object)", None),
    "river_tokens": (lambda v: isinstance(v, bool), "a boolean", False),   # pyriver: exits per token (river_tokens.py)
    "lora": (lambda v: isinstance(v, list), "an array of {id, scale} objects", None),   # llama-server's (server/lora.py)
}
COMPLETION = dict(_COMMON, prompt=(_prompt, "a string, a list of token ids or a JSON prompt", None),
                  logprobs=(lambda v: v is None or (_int(v) and v >= 0), "an integer >= 0", None),
                  echo=(lambda v: v is False, "false (echo is not supported)", False))
CHAT = dict(_COMMON, messages=(_messages, "a list of {role, content} objects", None),
            logprobs=(lambda v: v is None or isinstance(v, bool), "a boolean", False),
            top_logprobs=(lambda v: v is None or (_int(v) and 0 <= v <= 20), "an integer in [0, 20]", None),
            tools=(lambda v: isinstance(v, list), "a list of tools", None),
            tool_choice=(lambda v: isinstance(v, (str, dict)), "'none', 'auto', 'required' or a named function", None),
            parallel_tool_calls=(lambda v: isinstance(v, bool), "a boolean", None),
            add_generation_prompt=(lambda v: isinstance(v, bool), "a boolean", True),
            continue_final_message=(lambda v: True, "", None),   # llama.cpp: true, "content", "reasoning_content"
            # llama-server's reasoning fields (pyriver.text.reasoning; the format and budget checked in openai_api)
            chat_template_kwargs=(lambda v: isinstance(v, dict), "an object of template variables", None),
            reasoning_effort=(lambda v: isinstance(v, str), "a string", None),
            reasoning_format=(lambda v: True, "", None),
            reasoning_budget_tokens=(_int, "an integer", None),
            reasoning_budget_message=(lambda v: isinstance(v, str), "a string", None),
            thinking_budget_tokens=(_int, "an integer", None))
_LOGIT_BIAS = (lambda v: isinstance(v, (dict, list)), "an object {token: bias}", None)   # checked in llamacpp_api
COMPLETION["logit_bias"] = CHAT["logit_bias"] = _LOGIT_BIAS


def json_object(raw: bytes) -> Dict[str, Any]:
    """A request body that must be a JSON object; APIError 400 otherwise (every endpoint's rule)."""
    try:
        body = json.loads(raw)
        # json.loads lets lone surrogates through (bytes decoded with surrogatepass, or \udcff
        # escapes): text that cannot be UTF-8 again is refused here, before any tokenizer sees it
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError) as e:   # RecursionError: nesting too deep
        raise APIError(400, f"the request body is not valid JSON in UTF-8: {str(e)[:200]}") from None
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    return body


def parse(raw: bytes, fields: Dict, required: str, defaults: Optional[Dict] = None) -> Dict[str, Any]:
    """The request's fields with defaults filled in (`defaults`: the server's, from its command
    line, before the table's); APIError 400 for malformed JSON, a missing required field, a wrong
    type or a value out of range."""
    body = json_object(raw)
    if body.get(required) is None:
        raise APIError(400, f"'{required}' is required", param=required)
    out = {}
    for name, (ok, what, default) in fields.items():
        if name in body and body[name] is not None or name == required:
            if not ok(body[name]):
                raise APIError(400, f"'{name}' must be {what}, got {json.dumps(body[name])[:80]}", param=name)
            out[name] = body[name]
        else:
            out[name] = (defaults or {}).get(name, default)
    if body.get("n_predict") is None:   # OpenAI's limits ask for at least one token (n_predict: llama-server's rule)
        for name in ("max_completion_tokens", "max_tokens"):
            v = body.get(name)
            if _int(v) and v <= 0:
                raise APIError(400, f"'{name}' must be > 0, got {v}", param=name)
    gen, params = generation(body, defaults)
    out.update((k, v) for k, v in gen.items() if k != "_sent")
    if out["stream"] and out["n"] > 1:
        raise APIError(400, "'n' > 1 is not streamed: ask for n choices without stream", param="n")
    # llama-server reads n_predict, then max_completion_tokens, then max_tokens; -1: no limit
    out["max_tokens"] = None if gen["n_predict"] is None or gen["n_predict"] < 0 else gen["n_predict"]
    out["sampling"] = params
    out["stops"] = [out["stop"]] if isinstance(out["stop"], str) else list(out["stop"] or [])
    out["include_usage"] = bool((out["stream_options"] or {}).get("include_usage", False))
    if required == "messages":
        out["continue_final"] = continuation(out)
    return out


def generation(body: Dict[str, Any], defaults: Optional[Dict] = None) -> Tuple[Dict[str, Any], SamplingParams]:
    """(the generation fields both APIs share, read by server/sampling_fields.py's table; their
    SamplingParams); APIError 400 for a bad one."""
    try:
        gen = SF.read(body, defaults)
        return gen, SF.sampling_params(gen)
    except SF.FieldError as e:
        raise APIError(400, str(e), param=e.param) from None
    except ValueError as e:
        raise APIError(400, str(e)) from None


def continuation(f: Dict[str, Any]):
    """llama-server's prefill rules (oaicompat_chat_params_parse): a trailing assistant message is
    continued, not answered (the generation prompt is then off), unless two end the list; asking
    for a continuation with the generation prompt on, or of a message with tool calls, is refused.
    False, True (llama.cpp's auto) or what is continued ("content", "reasoning_content")."""
    msgs, agp = f["messages"], f["add_generation_prompt"]
    cont = f["continue_final_message"] is True or f["continue_final_message"] in ("content", "reasoning_content")
    if not msgs:
        if cont and agp:
            raise APIError(400, "Cannot set both add_generation_prompt and continue_final_message to true.",
                           param="continue_final_message")
        return False
    if not cont and msgs[-1]["role"] == "assistant":
        if len(msgs) >= 2 and msgs[-2]["role"] == "assistant":
            raise APIError(400, "Cannot have 2 or more assistant messages at the end of the list.", param="messages")
        cont, agp = True, False
    if cont and agp:
        raise APIError(400, "Cannot set both add_generation_prompt and continue_final_message to true.",
                       param="continue_final_message")
    if cont and msgs[-1]["role"] == "assistant" and msgs[-1].get("tool_calls"):
        raise APIError(400, "Cannot continue an assistant message that contains tool calls.", param="messages")
    f["add_generation_prompt"] = agp
    cont = cont and msgs[-1]["role"] == "assistant"
    if cont and _text_parts(msgs[-1].get("content")):   # common_chat_msg::render_content's delimiter
        msgs[-1] = dict(msgs[-1], content="\n\n".join(p["text"] for p in msgs[-1]["content"]))
    if not cont:
        return False
    return f["continue_final_message"] if f["continue_final_message"] in ("content", "reasoning_content") else True


def _text_parts(content) -> bool:
    """A list of text parts (anything else is pyriver.text.toolcall's to check)."""
    return isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                             and isinstance(p.get("text"), str) for p in content)
