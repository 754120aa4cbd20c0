"""Chat templates rendered as llama-cpp-python renders them, and chat result shapes, without a
model file."""
from __future__ import annotations

import jinja2
import pytest

from pyriver.text import chat_template as chat

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_chatml_rendering():
    t = chat.ChatTemplate(chat.CHATML, "<s>", "</s>")
    assert t.render(MSGS) == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                              "<|im_start|>assistant\n")
    assert not t.render(MSGS, add_generation_prompt=False).endswith("assistant\n")


def test_template_sees_bos_eos_and_can_raise():
    src = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tools') }}"
           "{% endif %}[{{ m['role'] }}] {{ m['content'] }}{{ eos_token }}{% endfor %}")
    t = chat.ChatTemplate(src, "<s>", "</s>")
    assert t.render(MSGS) == "<s>[system] Be brief.</s>[user] Hi</s>"
    with pytest.raises(jinja2.exceptions.TemplateError, match="no tools"):
        t.render([{"role": "tool", "content": "x"}])


def test_undefined_plus_a_string_is_the_string_as_llama_cpps():
    """llama.cpp's minja takes an undefined value in `+` with a string as '' (firefunction-v2's
    `suffix + "\n" + functions`); any other use of it raises as jinja2's."""
    t = chat.ChatTemplate('{{ "a" + functions + "b" }}|{{ functions }}|{% if functions %}x{% endif %}', "", "")
    assert t.render([]) == "ab||"
    for src in ("{{ functions + 1 }}", "{{ functions.name }}", "{{ 1 + functions }}"):
        with pytest.raises(jinja2.exceptions.UndefinedError):
            chat.ChatTemplate(src, "", "").render([])


def test_template_is_sandboxed():
    t = chat.ChatTemplate("{{ messages.__class__.__mro__ }}", "", "")
    with pytest.raises(jinja2.exceptions.SecurityError):
        t.render(MSGS)


def test_template_lists_are_mutable_and_the_callers_messages_kept():
    """As llama.cpp's engine: a template appends to and pops a list of its own (Kimi K2's tool-call
    ids); what it is handed are copies, so a template that pops the messages leaves the caller's."""
    t = chat.ChatTemplate("{% set q = namespace(ids=[]) %}{% for m in messages %}{% set _ = q.ids.append(m.role) %}"
                          "{% endfor %}{{ q.ids.pop(0) }}{{ q.ids | length }}{% set _ = messages.pop() %}"
                          "{% set _ = tools[0].update({'x': 1}) %}", "", "")
    msgs, tools = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], [{"name": "f"}]
    assert t.render(msgs, tools=tools) == "user1"
    assert len(msgs) == 2 and tools == [{"name": "f"}]


def test_message_without_role_is_a_value_error():
    with pytest.raises(ValueError, match="role"):
        chat.ChatTemplate(chat.CHATML, "", "").render([{"content": "x"}])


class _Vocab:
    def token_text(self, tok):
        return {1: "<s>", 2: "</s>"}[tok]


class _Model:
    """What template_for reads of a Llama."""
    vocab = _Vocab()

    def __init__(self, template):
        self.metadata = {} if template is None else {"tokenizer.chat_template": template}

    def token_bos(self):
        return 1

    def token_eos(self):
        return 2


def test_template_for_uses_the_gguf_template_else_chatml():
    own = chat.template_for(_Model("{{ bos_token }}{{ messages[0]['content'] }}"))
    assert own.render(MSGS) == "<s>Be brief." and own.eos_token == "</s>"
    assert chat.template_for(_Model(None)).render(MSGS).startswith("<|im_start|>system")


def test_chat_stream_chunks():
    completion = [{"choices": [{"text": "Hel", "finish_reason": None}]},
                  {"choices": [{"text": "lo", "finish_reason": None}]},
                  {"choices": [{"text": "", "finish_reason": "stop"}]}]
    chunks = list(chat.chat_stream("c1", 3, "m", iter(completion)))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas == [{"role": "assistant"}, {"content": "Hel"}, {"content": "lo"}, {}]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "stop"]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    d = chat.chat_dict("c1", 3, "m", "Hello", "stop", {"total_tokens": 2})
    assert d["choices"][0]["message"] == {"role": "assistant", "content": "Hello"}


def test_safe_and_tojson_of_a_map_as_llama_cpps():
    """llama.cpp's engine has no HTML escaping: `"..."|safe + x|tojson` is plain text (functionary
    v3.1's template; jinja2's Markup escaped the JSON's quotes), and tojson takes map()'s sequence
    (llama-cpp-deepseek-r1's `tools | map(...) | tojson`; jinja2's map is a generator)."""
    t = chat.ChatTemplate('{{ "Use "|safe + x | tojson() }} {{ xs | map(attribute="n") | tojson }}', "", "")
    assert t.render([], x={"k": "v"}, xs=[{"n": 1}, {"n": 2}]) == 'Use {"k": "v"} [1, 2]'


def test_extra_context_is_todays_date():
    """llama.cpp gives every template today's date (common_chat_extra_context): Llama 3.x's
    `Today Date: {{ date_string }}`."""
    from datetime import datetime
    ctx = chat.extra_context()
    assert ctx["date_string"] == datetime.now().strftime("%d %b %Y") and ctx["datetime"] == datetime.now().strftime("%b %d %Y")


def test_generation_tags_render_their_text():
    """transformers' {% generation %} markers (LFM2.5, Laguna) are no-ops, as in llama.cpp's engine:
    a template with them loads and renders the text between them."""
    src = ("{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}"
           "{% endgeneration %}{% else %}[{{ m['content'] }}]{% endif %}{% endfor %}")
    t = chat.ChatTemplate(src, "", "")
    assert t.render([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]) == "[Hi]Hello"


def test_system_merged_where_the_template_has_no_system_role():
    """llama-server's workaround (system_message_not_supported): a leading system message joins the
    next one after a newline where the template refuses or drops it, and is left where it renders."""
    from pyriver.text.template_render import system_merged
    refuses = chat.ChatTemplate("{% for m in messages %}{% if m['role'] == 'system' %}"
                                "{{ raise_exception('System role not supported') }}{% endif %}"
                                "<{{ m['role'] }}>{{ m['content'] }}{% endfor %}", "", "")
    assert system_merged(refuses, MSGS) == [{"role": "user", "content": "Be brief.\nHi"}]
    assert system_merged(refuses, MSGS[:1]) == []
    assert refuses.render(system_merged(refuses, MSGS)) == "<user>Be brief.\nHi"
    drops = chat.ChatTemplate("{% for m in messages %}{% if m['role'] != 'system' %}<{{ m['role'] }}>"
                              "{{ m['content'] }}{% endif %}{% endfor %}", "", "")   # renders, system text unused
    assert system_merged(drops, MSGS) == [{"role": "user", "content": "Be brief.\nHi"}]
    chatml = chat.ChatTemplate(chat.CHATML, "", "")
    assert system_merged(chatml, MSGS) is MSGS


QWEN3_LIKE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' and "
              "m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}{{ m['content'] }}"
              "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
              "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
              "{% endif %}")


def test_a_prefill_continues_after_the_templates_reasoning_block():
    """llama.cpp's continuation of a final assistant message on a thinking template: the
    generation prompt, the reasoning start as the template writes it, the message's reasoning, and
    to continue the content the reasoning end and the content (llama-server's prompts on Qwen3's
    template are held in tests/runtime/test_server_apply_template.py)."""
    from pyriver.text.continuation import continued, reasoning_marks
    t = chat.ChatTemplate(QWEN3_LIKE, "", "")
    assert reasoning_marks(t) == ("<think>\n", "\n</think>\n\n")
    user = {"role": "user", "content": "Hi"}
    head = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert continued(t, [user, {"role": "assistant", "content": "Sure"}], True) \
        == head + "<think>\n\n</think>\n\nSure"
    both = {"role": "assistant", "content": "Sure", "reasoning_content": "Let me"}
    assert continued(t, [user, both], True) == head + "<think>\nLet me\n</think>\n\nSure"
    assert continued(t, [user, both], "reasoning_content") == head + "<think>\nLet me"
    assert continued(t, [user, dict(both, content="")], True) == head + "<think>\nLet me"
    assert continued(t, [user, {"role": "assistant", "content": "Sure"}], True, enable_thinking=False) \
        == head + "<think>\n\n</think>\n\nSure"
    plain = chat.ChatTemplate(chat.CHATML, "", "")   # no reasoning: the generation prompt, then the text
    assert reasoning_marks(plain) is None
    assert continued(plain, [user, both], True) == head + "Sure"


def test_model_turn_opened_after_a_result_on_llama_server_s_rule_only():
    """Gemma 4's template leaves the model's turn closed after a tool result: llama-server (server_bos,
    its rules) opens it as llama.cpp's handler does; pyriver.Llama keeps llama-cpp-python's prompt,
    the template's render alone."""
    import types
    from pyriver.api.chat import Chat
    c = Chat(types.SimpleNamespace(vocab=types.SimpleNamespace(add_bos=False)))
    c.template = chat.ChatTemplate("{{- '<|tool_call>call:' if false -}}{% for m in messages %}{{ m.content }}<turn|>\n"
                                   "{% endfor %}", "", "")
    msgs = [{"role": "user", "content": "Hi"}]
    assert c.chat_prompt(msgs) == ("Hi<turn|>\n", False)
    assert c.chat_prompt(msgs, server_bos=True) == ("Hi<turn|>\n<|turn>model\n", False)
    assert c.chat_prompt(msgs, add_generation_prompt=False, server_bos=True) == ("Hi<turn|>\n", False)
