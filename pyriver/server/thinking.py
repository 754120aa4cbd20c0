"""A chat request's reasoning as llama-server takes it (its oaicompat_chat_params_parse): the
template variables (enable_thinking: on where the template thinks unless --reasoning off, the
request's chat_template_kwargs over it, reasoning_effort "none" turning it off, another effort
handed to the template), the reasoning format (--reasoning-format, the request's reasoning_format)
and budget (--reasoning-budget, the request's reasoning_budget_tokens or thinking_budget_tokens);
the split itself is pyriver.text.reasoning's.

A budget N >= 0 is llama.cpp's budget sampler's (pyriver.text.reasoning_budget): after the start
tag (the template's, in the generation prompt, or the model's own) N tokens of thinking, then the
reasoning_budget_message and the end tag forced; llama-server arms it where the template has
thinking tags, and so does pyriver."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from pyriver.server.schema import APIError
from pyriver.text import reasoning as R
from pyriver.text.template_render import extra_context

BUDGET_MAX = 2147483647


class Thinking:
    """How a request's answer splits: tags (None: the template does not think), format, prefix
    (the generation prompt's opened tail the answer is parsed after)."""

    def __init__(self, tags: Optional[R.Tags], fmt: str, budget: int, template: Optional[str] = None):
        self.tags, self.fmt, self.budget, self.prefix, self.template = tags, fmt, budget, "", template

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
    return Thinking(R.template_tags(template_source), fmt, budget, template_source)


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
    return {**extra_context(), **kw, "enable_thinking": on}   # kwargs win over llama.cpp's date


def after_prompt(srv, think: Thinking, prompt: str, toks: List[int], f: Dict[str, Any]) -> List[int]:
    """The prompt's tokens; think.prefix set from the rendered prompt, and f["reasoning_budget"]
    (what srv.sampler arms the budget sampler with) where the budget is N >= 0 and the template thinks."""
    think.prefix = R.opened(prompt, think.tags)
    if think.tags is None or think.budget < 0:
        return toks
    msg = f.get("reasoning_budget_message")
    msg = srv.settings.get("reasoning_budget_message", "") if msg is None else msg

    def tok(text: str) -> List[int]:
        return srv.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True) if text else []
    ends = R.budget_end_tags(think.template, think.tags)
    # llama-server's: the tags, message and generation prompt's tail tokenized alone (the tail's
    # tokens after the opening tag count against the budget)
    with srv.sched.vocab_lock:
        start, prefill, forced = tok(think.tags.start), tok(think.prefix), tok(msg)
        ends = [tok(e) for e in ends]
    f["reasoning_budget"] = dict(start=start, ends=ends, forced=forced + ends[0], budget=think.budget, prefill=prefill)
    return toks
