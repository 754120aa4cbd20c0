"""A chat request's reasoning as llama-server takes it (its oaicompat_chat_params_parse): the
template variables (enable_thinking: on where the template thinks unless --reasoning off, the
request's chat_template_kwargs over it, reasoning_effort "none" turning it off, another effort
handed to the template), the reasoning format (--reasoning-format, the request's reasoning_format)
and budget (--reasoning-budget, the request's reasoning_budget_tokens or thinking_budget_tokens);
the split itself is pyriver.text.reasoning's.

A budget of 0 on a template that opens thinking itself ends it at once: llama.cpp's budget sampler
forces the closing tag's tokens as the first generated ones; here they follow the prompt, which
leaves the model the same tokens to continue from. A positive budget, and 0 where the model opens
thinking itself, are accepted and not enforced (that needs a sampler that forces tokens mid-stream)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from pyriver.server.schema import APIError
from pyriver.text import reasoning as R

BUDGET_MAX = 2147483647


class Thinking:
    """How a request's answer splits: tags (None: the template does not think), format, prefix
    (the generation prompt's opened tail the answer is parsed after)."""

    def __init__(self, tags: Optional[R.Tags], fmt: str, budget: int):
        self.tags, self.fmt, self.budget, self.prefix = tags, fmt, budget, ""

    def split(self, text: str):
        return R.split(text, self.tags, self.fmt, self.prefix)

    def stream(self) -> R.Stream:
        return R.Stream(self.tags, self.fmt, self.prefix)


def check_budget(v: int, name: str) -> int:
    if not -1 <= v <= BUDGET_MAX:   # llama-server's field check, word for word
        raise APIError(400, f"Field '{name}': Value must be between -1 <= value <= {BUDGET_MAX}, but got {v}", param=name)
    return v


def plan(srv, f: Dict[str, Any], template_source: Optional[str]) -> Thinking:
    """The request's Thinking; APIError 400 for an unknown format or a budget below -1."""
    fmt = f.get("reasoning_format")
    try:
        fmt = R.check_format(srv.settings.get("reasoning_format", "auto") if fmt is None else fmt)
    except ValueError as e:   # llama-server answers 500 here; a request's mistake is a 400
        raise APIError(400, str(e), param="reasoning_format") from None
    budget = -1
    for name in ("reasoning_budget_tokens", "thinking_budget_tokens"):
        if f.get(name) is not None:
            budget = check_budget(f[name], name)
            break
    if budget == -1:
        budget = srv.settings.get("reasoning_budget", -1)
    return Thinking(R.template_tags(template_source), fmt, budget)


def template_extra(srv, f: Dict[str, Any], think: Thinking) -> Dict[str, Any]:
    """The template variables of the request's thinking (see the module's docstring)."""
    kw = dict(f.get("chat_template_kwargs") or {})
    if "messages" in kw or "add_generation_prompt" in kw:
        raise APIError(400, "'chat_template_kwargs' must be an object of template variables", param="chat_template_kwargs")
    on = think.tags is not None and srv.settings.get("reasoning", "auto") != "off"
    if "enable_thinking" in kw:
        if isinstance(kw["enable_thinking"], str):
            raise APIError(400, 'invalid type for "enable_thinking" (expected boolean, got string)',
                           param="chat_template_kwargs")
        on = kw["enable_thinking"] if isinstance(kw["enable_thinking"], bool) else on
    effort = f.get("reasoning_effort")
    if effort == "none":
        on = False
        kw.pop("reasoning_effort", None)
    elif effort:
        kw["reasoning_effort"] = effort
    return dict(kw, enable_thinking=on)


def after_prompt(srv, think: Thinking, prompt: str, toks: List[int], f: Dict[str, Any]) -> List[int]:
    """The prompt's tokens, with the closing tag forced after a template-opened <think> when the
    budget is 0; think.prefix set from the rendered prompt."""
    think.prefix = R.opened(prompt, think.tags)
    if think.budget != 0 or not think.prefix or think.prefix.rstrip().endswith(think.tags.end):
        return toks
    with srv.sched.vocab_lock:
        forced = srv.llm.tokenize(think.tags.end.encode("utf-8"), add_bos=False, special=True)
    think.prefix += think.tags.end
    if f.get("max_tokens") is not None:   # llama-server's forced tokens count among n_predict
        f["max_tokens"] = max(1, f["max_tokens"] - len(forced))
    return toks + forced
