"""Grammar-constrained generation in pyriver.Llama (llama.cpp's grammar engine through
llama-cpp-python): the answer is in the grammar's language for every sampler setting, streamed or
not, with River and in lossless mode; greedy equals the argmax over the tokens the grammar allows;
JSON formats and forced tool calls in create_chat_completion; bad grammars fail fast and clearly."""
from __future__ import annotations

import json
import re
import time

import jsonschema
import numpy as np
import pytest

from pyriver_dev import toolcall_check as TC
from llama_cpp import LlamaGrammar

from helpers import assert_json_object
from pyriver import Llama
from pyriver.text.grammar import Grammar, GrammarError

YES_NO = 'root ::= ("yes" | "no") "."'
LIST3 = 'root ::= "[" [0-9] ("," [0-9]) ("," [0-9]) "]"'
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer"},   # llama-cpp-python 0.3.36's converter does not enforce minimum/maximum
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    "home": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}},
    "required": ["name", "age", "home"], "additionalProperties": False}
SETTINGS = [dict(temperature=0.0), dict(temperature=0.8, seed=1), dict(temperature=1.5, seed=2, top_k=0, top_p=1.0,
            min_p=0.0), dict(temperature=0.7, seed=3, typical_p=0.5, repeat_penalty=1.3, presence_penalty=0.5)]


def _text(out, stream):
    return "".join(c["choices"][0]["text"] for c in out) if stream else out["choices"][0]["text"]


def test_llama_cpp_python_real_llama_case(llm):
    # llama-cpp-python's tests/test_llama.py::test_real_llama, grammar part
    out = llm.create_completion("The capital of france is paris, 'true' or 'false'?:\n", max_tokens=4, top_k=50,
                                top_p=0.9, temperature=0.8, seed=1337,
                                grammar=LlamaGrammar.from_string('\nroot ::= "true" | "false"\n'))
    assert out["choices"][0]["text"] in ("true", "false")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kw", SETTINGS, ids=["greedy", "t0.8", "t1.5-wide", "typical-penalties"])
def test_answer_in_language(llm, kw, stream):
    for grammar, pattern in ((YES_NO, r"(yes|no)\."), (LIST3, r"\[\d,\d,\d\]")):
        out = llm.create_completion("Q: Is water wet?\nA:", grammar=grammar, max_tokens=24, stream=stream, **kw)
        text = _text(out, stream)
        assert re.fullmatch(pattern, text), (grammar, text)


def test_greedy_is_argmax_of_allowed_tokens(llm):
    """The fast path (check the sampled token alone, mask all only when it is refused) gives what
    masking every step gives: the argmax over allowed tokens, step by step."""
    gbnf = 'root ::= "The answer is " [0-9]+ " because " [a-z ]+ "."'
    prompt = "Question: what is 6 times 7?\n"
    got = llm.create_completion(prompt, grammar=gbnf, temperature=0.0, max_tokens=20)["choices"][0]["text"]
    toks = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    g = Grammar(llm.vocab, gbnf)
    llm.reset()
    logits = llm.decode_logits(toks)[-1]
    want = []
    for _ in range(20):
        t = int(np.argmax(g.mask(logits)))
        if llm.vocab.is_eog(t):
            break
        g.accept(t)
        want.append(t)
        logits = llm.decode_logits([t])[-1]
    assert got == llm.detokenize(want).decode()
    assert re.fullmatch(r"The answer is \d+( because [a-z ]*\.?)?", got) or got.startswith("The answer is")
    plain = llm.create_completion(prompt, temperature=0.0, max_tokens=20)["choices"][0]["text"]
    assert plain != got   # the grammar changed the answer


def test_best_is_argmax_of_mask(llm):
    """Grammar.best (the top candidates first) equals the argmax over the whole masked vocabulary:
    random scores, the allowed tokens far down the order, and a tie at the cut."""
    from pyriver.text.grammar import _TOP
    rng = np.random.default_rng(0)
    g = Grammar(llm.vocab, 'root ::= [0-9]+ "x"')
    n = llm.vocab.n_vocab
    digits = [t for t in range(n) if g.allows(t)]
    cases = [rng.standard_normal(n).astype(np.float32) for _ in range(5)]
    for c in cases:   # allowed tokens among the top candidates, not the first of them
        c[digits] += 2.5
    low = rng.standard_normal(n).astype(np.float32)
    low[digits] -= 100.0   # every allowed token below the top candidates: the whole-vocabulary path
    tie = np.zeros(n, dtype=np.float32)   # all equal: the lowest allowed id wins, as np.argmax's
    cases += [low, tie]
    for scores in cases:
        assert g.best(scores) == int(np.argmax(g.mask(scores)))
    top = np.argsort(-cases[0], kind="stable")[:_TOP]
    assert any(t in digits for t in top)   # the first cases do take the fast path


def test_json_schema_grammar_validates(llm):
    g = LlamaGrammar.from_json_schema(json.dumps(PERSON), verbose=False)
    for prompt in ("A person as JSON:\n", "Describe Ada Lovelace as a JSON object.\n"):
        for kw in SETTINGS[:2]:
            text = llm.create_completion(prompt, grammar=g, max_tokens=200, **kw)["choices"][0]["text"]
            jsonschema.validate(json.loads(text), PERSON)


def test_river_on_keeps_grammar(smol_path):
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.9) as fast:
        for kw in SETTINGS[:2]:
            for stream in (False, True):
                text = _text(fast.create_completion("Q: Is water wet?\nA:", grammar=LIST3, max_tokens=24,
                                                    stream=stream, **kw), stream)
                assert re.fullmatch(r"\[\d,\d,\d\]", text), text


def test_lossless_under_grammar_is_constrained_backbone(smol_path):
    """Drafts are verified under the grammar: greedy output equals full depth's constrained output."""
    g = LlamaGrammar.from_json_schema(json.dumps(PERSON), verbose=False)
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river=None) as full:
        want = full.create_completion("A person as JSON:\n", grammar=g, temperature=0.0, max_tokens=80)
    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.9,
               lossless=True) as ll:
        got = ll.create_completion("A person as JSON:\n", grammar=g, temperature=0.0, max_tokens=80)
        assert got["choices"][0]["text"] == want["choices"][0]["text"]
        assert got["river"]["lossless"]["drafted"] > 0
        sampled = ll.create_completion("Q: Is water wet?\nA:", grammar=LIST3, temperature=0.8, seed=5, max_tokens=24)
        assert re.fullmatch(r"\[\d,\d,\d\]", sampled["choices"][0]["text"])


@pytest.mark.parametrize("bad", ['root ::= "abc', "root ::= x\nx ::= x \"a\"", 'root ::= undefined_rule',
                                 "start ::= \"a\"", "", 'root ::= "\\x00"'])
def test_bad_grammar_is_a_clear_error(llm, bad):
    t0 = time.perf_counter()
    with pytest.raises(GrammarError):
        llm.create_completion("Hi", grammar=bad, max_tokens=4)
    assert time.perf_counter() - t0 < 10


@pytest.mark.parametrize("gbnf", ['root ::= ((("a"*)*)*)*', 'root ::= ("a"? "a"? "a"? "a"?)* "b"',
                                  'root ::= x+\nx ::= ("a" | "a" "a" | "a" "a" "a")+ "b"?',
                                  'root ::= ("a" | "aa" | "aaa" | [a-c]* )* "."'])
def test_pathological_grammars_end(llm, gbnf):
    """Nested and ambiguous repetition: llama.cpp's engine keeps its stacks deduplicated; each of
    these ends (or reaches max_tokens) and the answer stays in the language."""
    t0 = time.perf_counter()
    out = llm.create_completion("aaaa", grammar=gbnf, temperature=0.0, max_tokens=40, repeat_penalty=1.0)
    assert set(out["choices"][0]["text"]) <= set("abc.")
    assert time.perf_counter() - t0 < 60


def test_dead_end_raises_and_llama_stays_usable(llm):
    before = llm.create_completion("The sky is", temperature=0.0, max_tokens=8)["choices"][0]["text"]
    with pytest.raises(GrammarError, match="allows no token"):
        llm.create_completion("Say a:", grammar='root ::= "a" "\\x00"', temperature=0.0, max_tokens=8)
    with pytest.raises(GrammarError):
        list(llm.create_completion("Say a:", grammar='root ::= "a" "\\x00"', max_tokens=8, stream=True))
    assert llm.create_completion("The sky is", temperature=0.0, max_tokens=8)["choices"][0]["text"] == before


# -- chat: response formats and tools ----------------------------------------------------------
def test_chat_json_object_and_schema(llm):
    # any JSON object: unbounded, so a question this model answers briefly
    short = [{"role": "user", "content": 'Return a JSON object with one key "answer" giving the capital of France.'}]
    msgs = [{"role": "user", "content": "Give me a JSON object describing a cat."}]
    for kw in SETTINGS[:2]:
        c = llm.create_chat_completion(short, response_format={"type": "json_object"}, max_tokens=300, **kw)
        assert_json_object(c["choices"][0]["message"]["content"], c["choices"][0]["finish_reason"])
        rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
        c = llm.create_chat_completion(msgs, response_format=rf, max_tokens=200, **kw)
        jsonschema.validate(json.loads(c["choices"][0]["message"]["content"]), PERSON)
        c = llm.create_chat_completion(msgs, response_format={"type": "json_object", "schema": PERSON},
                                       max_tokens=200, **kw)
        jsonschema.validate(json.loads(c["choices"][0]["message"]["content"]), PERSON)


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                           "unit": {"enum": ["celsius", "fahrenheit"]}},
                          "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Local time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"]}}}


def _check_calls(calls):
    assert calls
    for c in calls:
        assert c["type"] == "function" and c["id"].startswith("call_")
        tool = {"get_weather": WEATHER, "get_time": TIME}[c["function"]["name"]]
        jsonschema.validate(json.loads(c["function"]["arguments"]), tool["function"]["parameters"])


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_calls_and_loop(llm, stream):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        res = llm.create_chat_completion(msgs, tools=[WEATHER, TIME], tool_choice=choice, temperature=0.0,
                                         max_tokens=80, stream=stream)
        if stream:
            chunks = list(res)
            _, calls, finish = TC._gather(ch["choices"][0] for ch in chunks)   # arguments come as deltas
            assert finish == chunks[-1]["choices"][0]["finish_reason"]
        else:
            msg = res["choices"][0]["message"]
            calls, finish = msg["tool_calls"], res["choices"][0]["finish_reason"]
        assert finish == "tool_calls"
        _check_calls(calls)
        if isinstance(choice, dict):
            assert {c["function"]["name"] for c in calls} == {"get_time"} and len(calls) == 1
    # the loop: the calls and their results go back through the template; the model answers
    turn = msgs + [{"role": "assistant", "content": None, "tool_calls": [{k: v for k, v in c.items() if k != "index"}
                                                                        for c in calls]}]
    turn += [{"role": "tool", "tool_call_id": c["id"], "content": "12:00"} for c in calls]
    ans = llm.create_chat_completion(turn, tools=[WEATHER, TIME], tool_choice="none", temperature=0.0, max_tokens=24)
    assert isinstance(ans["choices"][0]["message"]["content"], str) and ans["choices"][0]["message"]["content"]
    assert "tool_calls" not in ans["choices"][0]["message"]


def test_chat_content_parts(llm):
    plain = llm.create_chat_completion([{"role": "user", "content": "Name a river."}], temperature=0.0, max_tokens=8)
    parts = llm.create_chat_completion([{"role": "user", "content": [{"type": "text", "text": "Name a "},
                                                                     {"type": "text", "text": "river."}]}],
                                       temperature=0.0, max_tokens=8)
    assert parts["choices"][0]["message"] == plain["choices"][0]["message"]
    with pytest.raises(ValueError, match="image_url"):
        llm.create_chat_completion([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    with pytest.raises(ValueError, match="not in tools"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], tools=[WEATHER],
                                   tool_choice={"type": "function", "function": {"name": "nope"}})


# -- tool_choice auto: the call grammar applies lazily, from the call's opening on ------------------
def _scripted(llm, script: str):
    """A logits processor that makes the model write script first, then lets it go on."""
    toks = llm.tokenize(script.encode(), add_bos=False, special=False)
    state = {"i": 0}

    def proc(ids, logits):
        if state["i"] < len(toks):
            logits[:] = -1e9
            logits[toks[state["i"]]] = 0.0
            state["i"] += 1
        return logits
    return proc


def test_auto_tool_grammar_is_lazy(llm):
    """Free text until the model opens a call; the call is then in the grammar (parses, validates);
    a token that would open a call the grammar refuses is never accepted (llama.cpp aborts the
    process on such a trigger) but refused, so the model picks another."""
    from llama_cpp import LogitsProcessorList
    from pyriver.text import toolcall
    from pyriver.text.grammar import LazyGrammar
    tp = toolcall.plan([WEATHER, TIME], "auto", None, "")   # a template without tools: Hermes syntax
    lazy = toolcall.auto_grammar(tp)
    assert isinstance(lazy, LazyGrammar) and lazy.words == ("<tool_call>",)
    g = Grammar(llm.vocab, lazy)
    free = llm.tokenize(b"Sure, I can do that.", add_bos=False)
    assert all(g.allows(t) for t in free) and g.awaiting
    assert np.array_equal(g.mask(np.arange(llm.vocab.n_vocab, dtype=np.float32)),
                          np.arange(llm.vocab.n_vocab, dtype=np.float32))   # nothing masked before the trigger
    for t in free + llm.tokenize(b" <tool_call", add_bos=False):
        g.accept(t)
    bad = [t for t in range(llm.vocab.n_vocab) if llm.vocab.piece(t).startswith(b">") and len(llm.vocab.piece(t)) > 1
           and llm.vocab.piece(t)[1:2] not in b"\n"]
    assert bad and not any(g.allows(t) for t in bad[:20])   # ">x": a call opened wrongly
    with pytest.raises(GrammarError):
        g.accept(bad[0])
    gt = llm.tokenize(b">", add_bos=False)
    assert g.allows(gt[0])
    g.accept(gt[0])
    assert not g.awaiting and not g.allows(llm.tokenize(b"hello", add_bos=False)[0])   # now constrained
    # a whole answer: the model is made to open a call; what follows is a valid call of a tool
    for kw in SETTINGS[:2]:
        out = llm.create_completion("Q: the weather in Paris?\nA:", grammar=lazy, max_tokens=80,
                                    logits_processor=LogitsProcessorList([_scripted(llm, " Let me look. <tool_call>")]),
                                    **kw)["choices"][0]["text"]
        content, calls = toolcall.parse(out, tp)
        assert content == "Let me look." and len(calls) >= 1, out
        _check_calls(calls)


def test_auto_tools_in_chat_answer_freely(llm):
    """tool_choice auto through create_chat_completion: the lazy grammar lets plain answers through."""
    msgs = [{"role": "user", "content": "Say hello."}]
    plain = llm.create_chat_completion(msgs, temperature=0.0, max_tokens=16)
    auto = llm.create_chat_completion(msgs, tools=[WEATHER], tool_choice="auto", temperature=0.0, max_tokens=16)
    assert auto["choices"][0]["message"].get("tool_calls") is None
    assert auto["choices"][0]["message"]["content"] and "<tool_call>" not in auto["choices"][0]["message"]["content"]
    assert plain["choices"][0]["message"]["content"]


def test_bad_tool_inputs_are_clear_errors(llm):
    """A tool whose schema the converter cannot handle (auto's lazy grammar and forced calls alike),
    a malformed tool, a schema the converter cannot handle: clear errors; a call the model writes
    that does not parse (forced here by a grammar) is content; the Llama stays usable."""
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    before = llm.create_chat_completion(msgs, temperature=0.0, max_tokens=6)["choices"][0]["message"]
    bad_tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}}
    for choice in ("auto", "required"):
        with pytest.raises(GrammarError, match="tool 'f'"):
            llm.create_chat_completion(msgs, tools=[bad_tool], tool_choice=choice, max_tokens=4)
    with pytest.raises(ValueError, match="tools must be"):
        llm.create_chat_completion(msgs, tools=[{"type": "function", "function": {"description": "no name"}}])
    with pytest.raises(GrammarError, match="cannot be turned into a grammar"):
        llm.create_chat_completion(msgs, response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}})
    r = llm.create_chat_completion(msgs, tools=[WEATHER], temperature=0.0, max_tokens=30,
                                   grammar='root ::= "<tool_call>\\nnot json\\n</tool_call>"')
    assert r["choices"][0]["finish_reason"] == "stop" and "tool_calls" not in r["choices"][0]["message"]
    assert r["choices"][0]["message"]["content"] == "<tool_call>\nnot json\n</tool_call>"
    assert llm.create_chat_completion(msgs, temperature=0.0, max_tokens=6)["choices"][0]["message"] == before


CITY_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
QWEN = "/root/.cache/pyriver/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


@pytest.mark.slow
@pytest.mark.skipif(not __import__("os").path.exists(QWEN), reason="Qwen2.5-Coder-1.5B-Instruct not fetched")
def test_qwen_calls_tools_by_itself():
    """A model trained for tools (Hermes syntax in its template), tool_choice auto: it calls the
    tool, the call is parsed (streamed too), and it answers from the tool's result."""
    with Llama(QWEN, n_ctx=2048, n_threads=2, verbose=False, river=None) as q:
        msgs = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
        r = q.create_chat_completion(msgs, tools=[CITY_WEATHER], temperature=0.0, max_tokens=60)
        assert r["choices"][0]["finish_reason"] == "tool_calls"
        calls = r["choices"][0]["message"]["tool_calls"]
        jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), CITY_WEATHER["function"]["parameters"])
        assert json.loads(calls[0]["function"]["arguments"])["city"] == "Paris"
        chunks = list(q.create_chat_completion(msgs, tools=[CITY_WEATHER], temperature=0.0, max_tokens=60, stream=True))
        _, streamed, _ = TC._gather(ch["choices"][0] for ch in chunks)   # arguments come as deltas
        assert [c["function"] for c in streamed] == [c["function"] for c in calls]
        turn = msgs + [{"role": "assistant", "content": None, "tool_calls": calls},
                       {"role": "tool", "tool_call_id": calls[0]["id"], "content": "23 C and sunny"}]
        a = q.create_chat_completion(turn, tools=[CITY_WEATHER], tool_choice="none", temperature=0.0, max_tokens=40)
        assert a["choices"][0]["finish_reason"] == "stop" and "23" in a["choices"][0]["message"]["content"]
        # auto (a lazy grammar, triggered by Qwen's single <tool_call> token): a question without a
        # tool to call gets a text answer
        from pyriver.text import toolcall
        from pyriver.text.grammar import Grammar
        g = Grammar(q.vocab, toolcall.auto_grammar(toolcall.plan([CITY_WEATHER], "auto", None, q.chats.template.source)))
        assert len(g._trigger_toks) == 1
        t = q.create_chat_completion([{"role": "user", "content": "What is 2 + 2? One word."}], tools=[CITY_WEATHER],
                                     temperature=0.0, max_tokens=12)
        assert t["choices"][0]["finish_reason"] in ("stop", "length") and t["choices"][0]["message"]["content"]


def test_server_lossless_dead_end_ends_only_its_request(smol_path):
    """The server's scheduler in lossless mode: a grammar that reaches a dead end (here while the
    River drafts) ends its own request with a grammar error and frees its slot; the requests beside
    it give the tokens they give alone."""
    from pyriver.text.grammar import constrain
    from pyriver.engine.sampling import Sampler, SamplingParams
    from pyriver.server.scheduler import Request, Scheduler

    def run(sched, reqs):
        for r in reqs:
            sched.submit(r)
        out = []
        for r in reqs:
            toks = []
            while (item := r.out.get(timeout=300))[0] != "end":
                toks.append(item[1])
            out.append((toks, item[1]))
        return out

    with Llama(smol_path, n_ctx=512, n_threads=2, verbose=False, river="q4_0", exit_threshold=0.9,
               lossless=True) as ll:
        sched = Scheduler(ll, 3)
        try:
            prompts = [ll.tokenize(p.encode()) for p in ("Say a:", "The sky is", "Once upon a time")]
            greedy = lambda: Sampler(SamplingParams(temperature=0.0))   # noqa: E731
            alone = run(sched, [Request(prompt=p, sampler=greedy(), max_tokens=12) for p in prompts[1:]])
            dead = constrain(greedy(), ll.vocab, 'root ::= "a" "\\x00"', len(prompts[0]))
            got = run(sched, [Request(prompt=prompts[0], sampler=dead, max_tokens=12)]
                      + [Request(prompt=p, sampler=greedy(), max_tokens=12) for p in prompts[1:]])
            assert got[0][1].startswith("error: grammar: ") and "allows no token" in got[0][1]
            assert got[1:] == alone and all(reason == "length" for _, reason in alone)
            assert sched.busy_slots() == 0
        finally:
            sched.stop()
