"""A chat's prompt against llama-server's on the same file and template, read where llama-server
shows it: /apply-template and /chat/completions/input_tokens, which it answers with its chat route's
prompt (oaicompat_chat_params_parse: "same with handle_chat_completions, but without inference
part"); pyriver's are its chat route's too. Asked: tool calls in the history (arguments as JSON
text, which Qwen3.5's template iterates as a mapping; content null beside them), a prefilled
assistant turn, continued as content or as reasoning (a thinking template's reasoning start, the
message's reasoning, its end, then the content: pyriver.text.continuation), the prefill rules'
refusals, a system message under a template without a system role (Gemma 2: joined to the first
user message), templates with transformers' {% generation %} tags (LFM2.5, Laguna), Gemma 4's
(thinking on by default, its own tool syntax, tool results folded into the calling turn for the
older template, the model's turn opened after a result its template leaves it closed on), Kimi K2's
(its template appends to a list of its own), prefills on the templates llama.cpp has a handler of
its own for (Gemma 4, Kimi K2, gpt-oss, Ministral 3: their reasoning block), and a template file whose generation prompt opens <think> under --reasoning off (llama.cpp 0.3.36 closes nothing).

Per template only what pyriver renders as llama-server does: where it differs on purpose (a
template that knows no tools gets them in a system message: docs/api.md, the generic family) or
not yet (llama.cpp's autoparser finds some templates' reasoning tags that pyriver does not: their
prefills), the case is left out (docs/server.md)."""
from __future__ import annotations

import json

import pytest

from pyriver.tools import llama_server as ls
from server_proc import ServerProcess, http, llama_server

pytestmark = [pytest.mark.slow, pytest.mark.peer,
              pytest.mark.skipif(not ls.binary().is_file(), reason="llama-server is not built into the cache")]

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}
U = {"role": "user", "content": "Hi"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call0abcd", "type": "function",
     "function": {"name": "get_weather", "arguments": json.dumps({"city": "Rome"})}}]}
HISTORY = [U, CALL, {"role": "tool", "tool_call_id": "call0abcd", "content": "sunny"},
           {"role": "assistant", "content": "It is sunny."}, {"role": "user", "content": "And in Paris?"}]
BOTH = {"role": "assistant", "content": "Sure", "reasoning_content": "Let me"}
REQUESTS = {
    "user": {"messages": [U]},
    "system-user": {"messages": [{"role": "system", "content": "Be brief."}, U]},
    "no-thinking": {"messages": [U], "chat_template_kwargs": {"enable_thinking": False}},
    "tools": {"messages": [U], "tools": [TOOL]},
    "tool-history": {"messages": HISTORY, "tools": [TOOL]},
    "history": {"messages": HISTORY},
    "ends-at-tool": {"messages": HISTORY[:3]},
    "said-then-called": {"messages": [U, dict(CALL, content="Let me look."), HISTORY[2]]},
    "prefill": {"messages": [U, {"role": "assistant", "content": "Sure, here"}]},
    "prefill-reasoning": {"messages": [U, {"role": "assistant", "content": "", "reasoning_content": "Let me"}]},
    "prefill-both": {"messages": [U, BOTH]},
    "prefill-as-reasoning": {"messages": [U, BOTH], "continue_final_message": "reasoning_content",
                             "add_generation_prompt": False},
    "prefill-no-thinking": {"messages": [U, {"role": "assistant", "content": "Sure, here"}],
                            "chat_template_kwargs": {"enable_thinking": False}},
    "no-generation-prompt": {"messages": [U], "add_generation_prompt": False},
    "continues-a-call": {"messages": HISTORY[:2]},   # refused
    "two-assistants": {"messages": [U, BOTH, BOTH]},   # refused
    "two-users": {"messages": [U, {"role": "user", "content": "never"}]},
}
PREFILLS = ["prefill", "prefill-reasoning", "prefill-both", "prefill-as-reasoning", "prefill-no-thinking"]
FILE = ("[{{ date_string }}]{% for m in messages %}{{ m.content }}{% break %}{% endfor %}"
        "{% if add_generation_prompt %}<A><think>\n{% endif %}")

# (id, template file in llama.cpp's models/templates, "" the GGUF's own, or FILE's text; arguments; requests)
CONFIGS = [
    ("qwen3.5", "Qwen3.5-4B.jinja", (), ["user", "system-user", "no-thinking", "tools", "tool-history", "history",
                                         "ends-at-tool", "continues-a-call", *PREFILLS]),
    ("qwen3", "Qwen-Qwen3-0.6B.jinja", (), ["user", "tool-history", *PREFILLS]),
    ("deepseek-r1", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", (), ["user", "no-thinking", *PREFILLS]),
    ("gemma2", "google-gemma-2-2b-it.jinja", (), ["user", "system-user", "prefill"]),
    ("gemma4", "google-gemma-4-31B-it.jinja", (), ["user", "system-user", "no-thinking", "tools", "tool-history",
                                                   "said-then-called", *PREFILLS]),
    # Kimi K2's template keeps tool-call ids in a list it appends to and pops (llama.cpp's engine lets it)
    ("kimi-k2", "Kimi-K2-Thinking.jinja", (), ["user", "tools", "tool-history", "history", "ends-at-tool", *PREFILLS]),
    # llama.cpp's own handlers continue a message in their reasoning block (gpt-oss's analysis channel)
    ("gpt-oss", "openai-gpt-oss-120b.jinja", (), ["user", *PREFILLS]),
    ("ministral3", "mistralai-Ministral-3-14B-Reasoning-2512.jinja", (), ["user", *PREFILLS]),
    ("gemma4-interleaved", "google-gemma-4-31B-it-interleaved.jinja", (), ["history", "ends-at-tool",
                                                                           "said-then-called"]),
    ("lfm2.5", "LFM2.5-8B-A1B.jinja", (), ["user", "system-user", "no-thinking"]),
    ("laguna", "poolside-Laguna-XS.2.jinja", (), ["user", "tool-history", *PREFILLS]),
    ("gguf", "", (), ["user", "system-user", "prefill", "no-generation-prompt", "two-assistants"]),
    ("file-reasoning-off", FILE, ("--reasoning", "off"), ["two-users", "prefill", "no-generation-prompt"]),
]


def _answers(url, names):
    """{request: ((status, prompt or error message) of /apply-template, (status, count) of
    /chat/completions/input_tokens)}."""
    out = {}
    for name in names:
        body = REQUESTS[name]
        code, got = http("POST", url + "/apply-template", body)
        code2, got2 = http("POST", url + "/chat/completions/input_tokens", body)
        out[name] = ((code, got["prompt"] if code == 200 else got["error"]["message"]),
                     (code2, got2["input_tokens"] if code2 == 200 else None))
    return out


@pytest.fixture(scope="module", params=CONFIGS, ids=[c[0] for c in CONFIGS])
def both(request, smol_path, tmp_path_factory):
    _, tmpl, extra, names = request.param
    if tmpl == FILE:
        path = tmp_path_factory.mktemp("tmpl") / "t.jinja"
        path.write_text(FILE)
        tmpl = str(path)
    elif tmpl:
        tmpl = str(ls.sdist_root() / "vendor" / "llama.cpp" / "models" / "templates" / tmpl)
    args = ("-m", smol_path, "-c", "2048", "-np", "1", "-t", "2", "--jinja", *extra) \
        + (("--chat-template-file", tmpl) if tmpl else ())
    out = {}
    for name, start, more in (("llama-server", llama_server, ()), ("pyriver", ServerProcess, ("--no-lossless",))):
        s = start(*args, *more)
        try:
            out[name] = _answers(s.url, names)
        finally:
            s.close()
    return out


def test_prompts_and_counts_are_llama_server_s(both):
    assert both["pyriver"] == both["llama-server"]   # prompts, counts, refusals in llama-server's words


def test_the_cases_ask_something(both, request):
    """What the comparison stands on: the refusals are refusals, a prefill's text is in its prompt."""
    want = both["llama-server"]
    for name in ("continues-a-call", "two-assistants"):
        if name in want:
            assert want[name][0][0] == 400 and want[name][1][0] == 400
    if "prefill" in want:
        assert want["prefill"][0][1].endswith("Sure, here")
    if request.node.callspec.id == "gemma4":   # the model's turn opened after the result (llama.cpp's handler)
        assert want["said-then-called"][0][1].endswith("Let me look.<turn|>\n<|turn>model\n")
