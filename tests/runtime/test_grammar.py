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
from llama_cpp import LlamaGrammar

from pyriver import Llama
from pyriver.grammar import Grammar, GrammarError

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
        assert isinstance(json.loads(c["choices"][0]["message"]["content"]), dict)
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
            calls = [tc for ch in chunks for tc in ch["choices"][0]["delta"].get("tool_calls", [])]
            finish = chunks[-1]["choices"][0]["finish_reason"]
            assert [tc["index"] for tc in calls] == list(range(len(calls)))
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
        streamed = [tc for ch in chunks for tc in ch["choices"][0]["delta"].get("tool_calls", [])]
        assert [c["function"] for c in streamed] == [c["function"] for c in calls]
        turn = msgs + [{"role": "assistant", "content": None, "tool_calls": calls},
                       {"role": "tool", "tool_call_id": calls[0]["id"], "content": "23 C and sunny"}]
        a = q.create_chat_completion(turn, tools=[CITY_WEATHER], tool_choice="none", temperature=0.0, max_tokens=40)
        assert a["choices"][0]["finish_reason"] == "stop" and "23" in a["choices"][0]["message"]["content"]
