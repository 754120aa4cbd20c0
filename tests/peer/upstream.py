"""llama-cpp-python's own tests, run against pyriver.Llama (issue 26's referee).

The tests come from the sdist of the pinned llama-cpp-python (pip, cached with the llama-server
build's copy: pyriver.tools.llama_server). Each upstream file is executed into a test module of
ours; every test it defines runs twice: first with llama-cpp-python's `Llama` (the reference),
then with `pyriver.Llama` in its place. Hub downloads become local files. Where a test asserts a
text that belongs to the model it would download, the literal is replaced by what the reference
produced on the local file in the same run (recorded by the first run, never typed in). A test
the reference itself fails on the local file is skipped with its error: only tests
llama-cpp-python passes this way count."""
from __future__ import annotations

import functools
import types
from pathlib import Path
from typing import Callable, Dict, List

import llama_cpp
import pytest

# Upstream literals that are the downloaded model's own texts (test_llama.py).
MODEL_TEXTS = ['" jumps over the lazy dog."', '"true"']

# Hub files of the upstream fixtures -> what stands in for them here (None: not run, with why).
SMOL = "smol"
HUB_FILES = {
    "Qwen3.5-0.8B-Q8_0.gguf": SMOL,                       # qwen3.5 is not a pyriver architecture
    "tinyllamas/stories15M-q4_0.gguf": SMOL,
    "bge-small-en-v1.5-q4_k_m.gguf": SMOL,                # bert (encoder) is not a pyriver architecture
    "mamba-130m-hf.Q2_K.gguf": "mamba is a recurrent model: pyriver runs transformer decoders only",
    "Falcon-H1-Tiny-90M-Instruct-Q2_K.gguf": "falcon-h1 is a hybrid (recurrent) model: pyriver runs "
                                             "transformer decoders only",
}

# Upstream tests that never build a `Llama` (they test llama_cpp's own internals, formatters or
# grammar converter, which pyriver uses as they are): running them here would prove nothing.
NOT_LLAMA = {
    "test_llama_cpp_version": "checks llama_cpp.__version__",
    "test_real_model": "drives llama_cpp._internals directly, no Llama",
    "test_mistral_instruct": "tests llama_cpp's chat formatter functions",
    "test_hf_tokenizer_config_str_to_chat_formatter": "tests llama_cpp's chat formatter functions",
    "test_grammar_from_string": "tests llama_cpp.LlamaGrammar, which pyriver uses as it is",
    "test_composed_pydantic_grammar": "tests llama_cpp's JSON-schema converter, which pyriver uses as it is",
    "test_grammar_anyof": "tests llama_cpp's JSON-schema converter, which pyriver uses as it is",
}


# Upstream tests that assert llama_cpp's private internals pyriver does not have: listed, never edited.
# None now: test_llama_cpp_tokenization's `llama._ctx.ctx` is a llama.cpp context on a vocab_only Llama.
INTERNALS: Dict[str, str] = {}


def sdist_root() -> Path:
    """llama_cpp_python-<version>/ of the pinned sdist, downloaded and unpacked once."""
    from pyriver.tools import llama_server
    return llama_server.sdist_root()


class _Expect:
    """A model text of the upstream test: recorded from the reference run, replayed after."""

    def __init__(self):
        self.recording = True
        self.values: List[str] = []
        self.i = 0

    def __call__(self, literal: str):
        if self.recording:
            return _Recorder(self.values)
        self.i += 1
        if self.i > len(self.values):
            raise AssertionError(f"the reference run recorded no text for {literal!r}")
        return self.values[self.i - 1]


class _Recorder:
    def __init__(self, values: List[str]):
        self.values = values

    def __eq__(self, other):   # `assert text == EXPECT(...)`: the reference's text is the expectation
        self.values.append(other)
        return True

    __hash__ = None


class _LlamaCpp(types.ModuleType):
    """llama_cpp as the upstream tests see it, with `Llama` switched between implementations."""

    def __init__(self):
        super().__init__("llama_cpp")
        self.Llama = llama_cpp.Llama

    def __getattr__(self, name):
        return getattr(llama_cpp, name)


def load(filename: str, ns: Dict, smol_path: Callable[[], str]) -> None:
    """Execute the upstream test file into the module namespace `ns` and wrap its tests."""
    import pyriver
    src_path = sdist_root() / "tests" / filename
    src = src_path.read_text()
    for lit in MODEL_TEXTS:
        src = src.replace(f"== {lit}", f"== EXPECT({lit})")
    exec(compile(src, str(src_path), "exec"), ns)

    def hub(repo_id, filename, **_):
        stand_in = HUB_FILES.get(filename)
        if stand_in is None:
            raise AssertionError(f"upstream fixture downloads {repo_id}/{filename}, unknown to tests/peer")
        if stand_in != SMOL:
            pytest.skip(stand_in)
        return smol_path()

    proxy = _LlamaCpp()
    ns["llama_cpp"] = proxy
    ns["hf_hub_download"] = hub
    if "MODEL" in ns:   # test_llama.py's vocab-only file, shipped in the sdist
        ns["MODEL"] = str(sdist_root() / ns["MODEL"])
    if "LlamaPromptLookupDecoding" in ns:
        ns["LlamaPromptLookupDecoding"] = pyriver.PromptLookupDecoding
    for name, fn in list(ns.items()):
        if name.startswith("test_") and callable(fn):
            ns[name] = _twice(fn, ns, proxy, pyriver.Llama)


def _twice(fn, ns, proxy, ours):
    if fn.__name__ in NOT_LLAMA or fn.__name__ in INTERNALS:
        why = (f"not a test of Llama: {NOT_LLAMA[fn.__name__]}" if fn.__name__ in NOT_LLAMA
               else f"llama_cpp internals: {INTERNALS[fn.__name__]}")

        @functools.wraps(fn)
        def skipped(*args, **kwargs):
            pytest.skip(why)
        return skipped

    @functools.wraps(fn)
    def run(*args, **kwargs):
        expect = ns["EXPECT"] = _Expect()
        proxy.Llama = llama_cpp.Llama
        try:
            fn(*args, **kwargs)
        except pytest.skip.Exception:
            raise
        except BaseException as e:   # noqa: BLE001 - any failure of the reference drops the test
            pytest.skip(f"llama-cpp-python itself fails this on the local file: {type(e).__name__}: {str(e)[:200]}")
        expect.recording = False
        proxy.Llama = ours
        try:
            fn(*args, **kwargs)
        finally:
            proxy.Llama = llama_cpp.Llama
    return run
