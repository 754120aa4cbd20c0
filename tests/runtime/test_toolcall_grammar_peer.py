"""tool_choice required's grammar against llama-server's own (the referee) on the same template:
llama-server's grammar read back from its answer (--verbose: __verbose.generation_settings), both
walked token by token on SmolLM2's vocabulary (llama.cpp's grammar sampler) over the family's texts:
a call, content then a call, reasoning then a call, a call llama.cpp's spacing allows, content
alone. Each text is taken by both grammars or by neither. llama-server's grammar starts at the
generation prompt, whose tokens its sampler is fed first (common/sampling.cpp's prefill): it walks
the generation prompt, then the text."""
from __future__ import annotations

import json

import pytest

from pyriver import Llama
from helpers import takes
from pyriver.text import toolcalls as T
from pyriver.tools import llama_server as ls
from server_proc import http, llama_server

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not ls.binary().is_file(), reason="llama-server is not built into the cache")]

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}
ARGS = '{"city": "Paris"}'
NEMO = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}]'
MINISTRAL = '[TOOL_CALLS]get_weather[ARGS]' + ARGS
KIMI = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>" + ARGS
        + "<|tool_call_end|><|tool_calls_section_end|>")
R1 = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" + ARGS
      + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
V31 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" + ARGS + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
GPT_OSS = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + ARGS
F31 = "<function=get_weather>" + ARGS + "</function>"
F32 = "get_weather\n" + ARGS
L3 = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
G4 = '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'
GLM46 = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
GLM47 = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
SEED = "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>"
MINIMAX = ('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n'
           "</minimax:tool_call>")
SAY = "Let me look that up.\n"

# template: texts (the model's, after the generation prompt)
TEXTS = {
    "mistralai-Mistral-Nemo-Instruct-2407": [
        NEMO, SAY + NEMO, NEMO.replace(', "id": "abc123def"', ""), NEMO.replace('"abc123def"', "123"),
        NEMO.replace(", ", " ,\n "), "It is sunny.", SAY + NEMO + "\n" + SAY],
    "mistralai-Ministral-3-14B-Reasoning-2512": [
        MINISTRAL, SAY + MINISTRAL, "[THINK]hm[/THINK]" + MINISTRAL, "[THINK]hm[/THINK]" + SAY + MINISTRAL,
        MINISTRAL + MINISTRAL, "It is sunny.", MINISTRAL.replace('{"', '{ "')],
    "moonshotai-Kimi-K2": [
        KIMI, SAY + KIMI, "<think>hm</think>" + SAY + KIMI, "<think>hm" + KIMI,
        KIMI.replace("<|tool_calls_section_begin|>", "").replace("<|tool_call_end|>", ""),
        KIMI.replace(":0", ":12"), KIMI.replace(":0", ""), "It is sunny."],
    "llama-cpp-deepseek-r1": [
        "hm</think>" + R1, "hm</think>" + SAY + R1, "hm</think>\n\n" + R1, R1, SAY + R1, "hm</think>It is sunny.",
        R1.replace("\n```<", "```<")],
    "deepseek-ai-DeepSeek-V3.1": [
        "hm</think>" + V31, "hm</think>" + SAY + V31, V31, "hm</think>" + V31.replace("｜>{", "｜> {"), "hm</think>Sunny."],
    "openai-gpt-oss-120b": [
        GPT_OSS, "<|channel|>analysis<|message|>hm<|end|><|start|>assistant" + GPT_OSS,
        "<|channel|>commentary<|message|>Looking.<|end|><|start|>assistant" + GPT_OSS,
        " to=functions.get_weather<|channel|>commentary json<|message|>" + ARGS,
        "<|channel|>analysis to=functions.get_weather<|message|>" + ARGS,
        "<|channel|>final<|message|>It is sunny.", SAY + GPT_OSS],
    "meetkai-functionary-medium-v3.1": [
        F31, SAY + F31, "<function=get_weather> " + ARGS + "</function>", F31 + "\n" + F31, "It is sunny."],
    "meetkai-functionary-medium-v3.2": [
        F32, "all\nhm" + F32, "all\nhm>>>" + F32, F32 + F32, F32 + ">>>" + F32, "all\nIt is sunny."],
    "google-gemma-4-31B-it": [   # no content before the call: a thought block may come first
        G4, "<|channel>thought\nhm<channel|>" + G4, SAY + G4, G4 + G4, "<|channel><|channel>thought\nhm<channel|>" + G4,
        G4.replace("{city:", "{ city: ").replace("|>}", "|> }"),
        '<|tool_call>call:get_weather{city:-1.5e3,n:[1, true,null],o:{a:<|"|>b<|"|>}}<tool_call|>',
        G4.replace("city", "a{b"), "It is sunny."],
    "GLM-4.6": [GLM46, SAY + GLM46, "<think>hm</think>\n" + SAY + GLM46, GLM46.replace("Paris", "Pa\nris <b>"),
                GLM46.replace("</arg_value>\n</tool_call>", "</arg_value> </tool_call>"), GLM46 + "\n" + GLM46,
                "It is sunny.", GLM46.replace("get_weather\n", "get_weather")],
    "GLM-4.7-Flash": [GLM47, "hm</think>" + GLM47, "hm</think>" + SAY + GLM47, GLM47.replace("get_weather", "get_weather\n"),
                      GLM47.replace("<arg_value>", " <arg_value>"), GLM47 + GLM47, "hm</think>It is sunny."],
    "ByteDance-Seed-OSS": [SEED, SAY + SEED, "<seed:think>hm</seed:think>\n" + SEED, SEED.replace("Paris", "Pa\nris"),
                           SEED.replace(">\n<parameter", "><parameter"), SEED + SEED, "It is sunny.",
                           SEED.replace("</parameter>\n</function>", "</parameter></function>")],
    "MiniMax-M2": [MINIMAX, SAY + MINIMAX, "<think>\nhm\n</think>\n\n" + SAY + MINIMAX, MINIMAX.replace("Paris", "Pa\nris"),
                   MINIMAX.replace("</invoke>\n", '</invoke>\n, <invoke name="get_weather">\n<parameter name="city">X'
                                   '</parameter>\n</invoke>\n'), MINIMAX + MINIMAX, "It is sunny.",
                   MINIMAX.replace('">\n<parameter', '"><parameter')],
    "poolside-Laguna-XS.2": [GLM46, "hm</think>\n" + GLM46, "hm</think>\n" + SAY + GLM46, GLM46 + "\n" + GLM46],
    "meta-llama-Llama-3.1-8B-Instruct": [
        L3, SAY + L3, L3.replace("{\"name", "{\"type\": \"function\", \"name"), L3.replace(", ", " ,\n"),
        L3.replace("parameters", "arguments"), "It is sunny."],
}


@pytest.fixture(scope="module")
def vocab(smol_path):
    m = Llama(smol_path, n_ctx=256, n_threads=1, verbose=False, river=None)
    yield m
    m.close()


def _templates():
    d = ls.cache_dir() / "llama-server"
    found = sorted(d.glob("*/llama_cpp_python-*/vendor/llama.cpp/models/templates")) if d.is_dir() else []
    if not found:
        pytest.skip("llama-cpp-python's sdist is not unpacked")
    return found[0]


@pytest.fixture(scope="module")
def theirs(smol_path):
    """{template: (llama-server's grammar for tool_choice required, its generation prompt)}."""
    out = {}
    for name in TEXTS:
        s = llama_server("-m", smol_path, "-c", "1024", "-np", "1", "-t", "2", "--jinja", "--verbose",
                         "--chat-template-file", str(_templates() / f"{name}.jinja"))
        try:
            code, got = http("POST", s.url + "/v1/chat/completions", {
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": [TOOL],
                "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 1, "temperature": 0})
            assert code == 200, got
            g = got["__verbose"]["generation_settings"]
            out[name] = (g["grammar"], g["generation_prompt"])
        finally:
            s.close()
    return out


@pytest.mark.parametrize("name", list(TEXTS))
def test_required_grammar_as_llama_server(vocab, theirs, name):
    src = (_templates() / f"{name}.jinja").read_text()
    ours = T.call_grammar(T.plan([TOOL], "required", False, src))
    gbnf, prompt = theirs[name]
    got = {text: takes(vocab, ours, text) for text in TEXTS[name]}
    want = {text: takes(vocab, gbnf, prompt + text) for text in TEXTS[name]}
    assert got == want
    assert want[TEXTS[name][0]] and want[TEXTS[name][1]], "llama-server's grammar takes the call, content first"
