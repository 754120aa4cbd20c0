"""pyriver.Llama with llama-cpp-python's multimodal chat handler (MTMDChatHandler over libmtmd), on
the local tinygemma3 (pyriver_dev.synth_mmproj): the greedy answers of llama_cpp.Llama with the same
handler on the same files, on the llama.cpp engine (chosen for the handler; the native engine refuses
it). A projector is checked before libmtmd loads it: one that does not fit the model, or a misshapen
one, is a ModelLoadError, never an abort."""
from __future__ import annotations

import base64
from pathlib import Path

import gguf
import llama_cpp
import pytest
from llama_cpp.llama_chat_format import MTMDChatHandler

from pyriver import Llama
from pyriver.errors import ModelLoadError
from pyriver.tools.gguf_io import plan_from_file, reshape_prefix, write_plan
from pyriver_dev.synth_mmproj import png_bytes, write_mmproj

N = 12


def _ask(llm, image: bytes, question: str = "What is this?"):
    url = "data:image/png;base64," + base64.b64encode(image).decode()
    r = llm.create_chat_completion([{"role": "user", "content": [{"type": "text", "text": question},
                                                                {"type": "image_url", "image_url": {"url": url}}]}],
                                   max_tokens=N, temperature=0)
    return r["choices"][0]["message"]["content"], r["usage"]


def _answers(cls, tinygemma3):
    text, proj = tinygemma3
    llm = cls(text, chat_handler=MTMDChatHandler(clip_model_path=proj, verbose=False), n_ctx=512, n_threads=2,
              verbose=False)
    try:
        out = [_ask(llm, png_bytes(24, 20, 0)), _ask(llm, png_bytes(40, 30, 1)),
               _ask(llm, png_bytes(24, 20, 0), "Describe it.")]
        # after the handler's prompt, the Llama goes on as any: a plain completion from its cache
        out.append(llm("The sky is", max_tokens=4, temperature=0)["choices"][0]["text"])
        return out, getattr(llm, "engine", None)
    finally:
        llm.close()


def test_mtmd_chat_handler_answers_as_llama_cpp(tinygemma3):
    ours, engine = _answers(Llama, tinygemma3)
    theirs, _ = _answers(llama_cpp.Llama, tinygemma3)
    assert engine == "llama.cpp"
    assert ours == theirs
    assert ours[0][0] != ours[1][0]   # the image reaches the model


def test_input_ids_hold_media_positions(tinygemma3):
    text, proj = tinygemma3
    llm = Llama(text, chat_handler=MTMDChatHandler(clip_model_path=proj, verbose=False), n_ctx=512, n_threads=2,
                verbose=False)
    try:
        _ask(llm, png_bytes(24, 20, 0))
        ids = llm.input_ids[:llm.n_tokens].tolist()
        assert ids.count(-1) == 16   # the image's embeddings: llama-server's LLAMA_TOKEN_NULL
        with pytest.raises(ValueError, match="media position"):   # a prompt naming media positions not cached
            llm.create_completion([ids[0], -1, 5], max_tokens=1)
        with pytest.raises(ValueError, match="does not match"):   # n_tokens past what the cache holds
            llm.n_tokens = llm.n_tokens + 3
    finally:
        llm.close()


def test_the_native_engine_refuses_a_multimodal_handler(tinygemma3):
    text, proj = tinygemma3
    with pytest.raises(ValueError, match="llama.cpp engine"):
        Llama(text, chat_handler=MTMDChatHandler(clip_model_path=proj, verbose=False), engine="native", verbose=False)
    llm = Llama(text, n_ctx=256, verbose=False)   # gemma3: pyriver's own graphs
    try:
        assert llm.engine == "native"
        with pytest.raises(ValueError, match="llama.cpp engine"):
            llm.load_projector(proj)
    finally:
        llm.close()


def test_projectors_that_do_not_fit_are_load_errors(tinygemma3, tmp_path):
    text, proj = tinygemma3
    wide = write_mmproj(tmp_path / "wide.gguf", text_n_embd=64, projection_dim=96)
    r = gguf.GGUFReader(proj)
    plan = plan_from_file(r)
    reshape_prefix(plan, r, "v.blk.1.attn_q.weight", (32, 16))
    bent = write_plan(tmp_path / "bent.gguf", plan)
    short = tmp_path / "short.gguf"
    short.write_bytes(Path(proj).read_bytes()[:20000])   # cut inside its tensors
    llm = Llama(text, engine="llama.cpp", n_ctx=256, verbose=False)
    try:
        for path, words in [(wide, "width 96"), (bent, "v.blk.1.attn_q.weight"), (short, "truncated"), (text, "not a multimodal")]:
            with pytest.raises(ModelLoadError, match=words):
                llm.load_projector(str(path))
        assert llm.projector is None
        p = llm.load_projector(proj, marker="<img>")
        assert (p.vision, p.audio, p.kind) == (True, False, "gemma3")
        prompt = p.tokenize("A <img> B", [png_bytes(8, 8, 3)])
        assert prompt.tokens.count(-1) == 16 and list(prompt.media) == [prompt.tokens.index(-1)]
        with pytest.raises(ValueError, match="markers"):
            p.tokenize("no marker", [png_bytes(8, 8, 3)])
        with pytest.raises(ValueError, match="image or audio"):
            p.tokenize("A <img>", [b"GIF89a broken"])
    finally:
        llm.close()
