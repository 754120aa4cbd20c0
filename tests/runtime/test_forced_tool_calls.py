"""Forced tool calls (tool_choice naming a function, or "required") on SmolLM2: the whole answer is
a call whose arguments validate against the tool's schema, in Llama.create_chat_completion and in
`pyriver serve`, streamed or not (issue 39). The prompts, tools and verdicts are
pyriver_dev.toolcall_check's (its full run, 50 prompts on the three shipped models, is in
docs/api.md#forced-tool-calls-on-the-shipped-models); here a subset."""
from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from pyriver import Llama
from pyriver.text import toolcall
from pyriver.text.grammar import Grammar
from pyriver_dev import toolcall_check as TC


@pytest.fixture(scope="module")
def llm2k(smol_path):
    """The eight tools take about 1000 tokens of prompt: a 2048-token context."""
    m = Llama(smol_path, n_ctx=2048, n_threads=2, verbose=False, river=None)
    yield m
    m.close()


def test_forced_string_refuses_raw_newline(llm2k):
    """Inside a string argument of a forced call the grammar refuses every token holding a raw
    control character (JSON forbids them) and takes the escaped form. Before the fix
    (llama-cpp-python's converter) a raw newline was allowed there, and the answer did not parse."""
    llm2k.chat_stops(None)   # compiles the template
    tp = toolcall.plan(TC.TOOLS, {"type": "function", "function": {"name": "send_email"}}, None,
                       llm2k.chats.template.source)
    g = Grammar(llm2k.vocab, toolcall.call_grammar(tp))
    for t in llm2k.tokenize(b'<tool_call>\n{"name": "send_email", "arguments": {"to": "bob', add_bos=False,
                            special=True):
        g.accept(t)
    vocab = llm2k.vocab
    raw = [t for t in range(vocab.n_vocab) if any(b < 0x20 or b == 0x7F for b in vocab.piece(t))
           and not vocab.is_eog(t)]
    assert raw and not any(g.allows(t) for t in raw)
    escaped = llm2k.tokenize(b"\\n", add_bos=False)
    assert g.allows(escaped[0])
    allowed = np.isfinite(g.mask(np.zeros(vocab.n_vocab, dtype=np.float32)))
    assert not allowed[raw].any()


def test_issue39_case_comes_back_as_a_call(llm2k):
    """The answer that came back as content before the fix (finish "stop", a raw newline before the
    closing quote of "body"): send_email named, t 0.2, seed 31. Now one call, valid arguments."""
    case = [c for c in TC.cases() if c["i"] == 31 and c["choice"] == "named"][0]
    assert case["prompt"].startswith("Tell my boss I quit.") and case["seed"] == 31
    for stream in (True, False):
        (r,) = TC.run_llama(llm2k, [dict(case, stream=stream)], 200)
        assert r["verdict"] == "ok" and r["finish"] == "tool_calls", r
        args = json.loads(r["calls"][0]["function"]["arguments"])
        jsonschema.validate(args, TC.SCHEMAS["send_email"])
        assert "\n" not in json.dumps(args)   # (as a JSON text, escaped)


def test_forced_calls_through_llama(llm2k):
    """Five prompts, each named and "required", greedy and sampled, streamed and not: every answer
    one valid call (none of these runs into max_tokens)."""
    res = TC.run_llama(llm2k, TC.cases(5), 200)
    bad = [r for r in res if r["verdict"] != "ok"]
    assert not bad, bad
    assert {r["choice"] for r in res} == {"named", "required"} and {r["stream"] for r in res} == {True, False}


def test_forced_calls_through_the_server(smol_path):
    """Three prompts through /v1/chat/completions, named and "required", streamed and not."""
    with TC.Server(smol_path, 2, 2048) as srv:
        res = TC.run_server(srv.url, TC.cases(3), 200)
    bad = [r for r in res if r["verdict"] != "ok"]
    assert not bad, bad
    assert {r["stream"] for r in res} == {True, False}
