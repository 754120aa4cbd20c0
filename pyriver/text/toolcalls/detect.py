"""Which tool-call family a chat template teaches, read off its source as llama.cpp's
common/chat.cpp chooses: first its specialized templates (common_chat_try_specialized_template,
in its order and with its tests), then, for the families its differential autoparser derives from
renders, the marker each family's template writes."""
from __future__ import annotations

from functools import lru_cache

from pyriver.text.toolcalls import (deepseek, functionary, gemma4, harmony, hermes, keyvalue, kimi, llama3, mistral,
                                    qwen3_coder)
from pyriver.text.toolcalls.family import Family


def _has(src: str, *needles: str) -> bool:
    return all(n in src for n in needles)


@lru_cache(maxsize=64)
def family_of(template_source: str) -> Family:
    src = template_source or ""
    # llama.cpp's specialized templates, in its order
    if _has(src, "[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]") and "[CALL_ID]" not in src:
        return mistral.MistralArgs(ministral3=True)   # Ministral / Magistral 3
    if "<|channel|>" in src:
        return harmony.Harmony()       # gpt-oss
    if _has(src, ">>>all", ">>>${recipient}"):
        return functionary.FunctionaryV32()
    if _has(src, "<|tool_calls_section_begin|>", "<|tool_call_begin|>"):
        return kimi.KimiK2()
    if gemma4.is_gemma4(src):
        return gemma4.Gemma4()
    if (_has(src, "<tool_call>", "<function=", "<parameter=")
            and "'<tool_call><function=' ~ tool_call.name ~ '>'" not in src):
        return qwen3_coder.Qwen3Coder(thinking="<think>" in src)
    # the autoparser's families: the markers their templates render calls with
    if "<｜tool▁calls▁begin｜>" in src:
        return deepseek.DeepSeek(fenced="```json" in src)   # R1 (fenced JSON) or V3.1
    if keyvalue.is_glm(src):
        return keyvalue.KeyValue("glm", keyvalue.glm_tags(src))   # GLM 4.x, Laguna
    if keyvalue.is_seed(src):
        return keyvalue.KeyValue("seed-oss", keyvalue.SEED)
    if keyvalue.is_minimax(src):
        return keyvalue.KeyValue("minimax-m2", keyvalue.MINIMAX)
    if "<tool_call>" in src:
        return hermes.Hermes()         # Hermes 2 Pro, Qwen 2.5 / 3, Granite 4
    if "[TOOL_CALLS]" in src:
        if "[ARGS]" in src:
            return mistral.MistralArgs()   # Mistral Small 3.2, Devstral
        return mistral.MistralNemo()
    if "<|tool_call|>" in src:
        return mistral.Granite3()
    if "<function=" in src and "<parameter=" not in src:   # not Seed-OSS's XML parameters
        return functionary.FunctionaryV31()
    if "<|start_header_id|>" in src and ("tools" in src or "ipython" in src):
        return llama3.Llama3()
    return hermes.Generic()
