"""What several test files share: the synthetic model specs, parity prompts, decoding helpers over
pyriver.tools.engine, the `pyriver` command as a subprocess, and the GPU placement check."""
from __future__ import annotations

import itertools
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pyriver.speculative.draftlen import DraftCost
from pyriver.text.grammar import Grammar

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


# What a text cut off at a token boundary may lack at its end before it can close: part of a
# literal, number or escape, then the rest of a key or value.
_JSON_PARTS = ("", "n", "0", "00", "000", "0000", "ull", "ll", "l", "rue", "ue", "e", "alse", "lse", "se")
_JSON_RESTS = ("", '"', '":0', ":0", '"k":0', "0")


def _json_closers(s: str):
    """The brackets that close s's open objects and arrays, or None where s ends inside a string."""
    stack, in_string, escaped = [], False, False
    for c in s:
        if in_string:
            escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_string = True
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]" and stack:
            stack.pop()
    return None if in_string else "".join(reversed(stack))


def assert_json_object(text: str, finish: str) -> None:
    """text is what a JSON-object grammar let through: a whole object where the model stopped, an
    object cut short where it ran out of tokens (an unbounded grammar lets a sampled text nest on;
    how long it goes depends on the last bits of the logits, so on the CPU's kernels)."""
    if finish != "length":
        assert isinstance(json.loads(text), dict), (finish, text)
        return
    assert text.lstrip().startswith("{"), text
    for part, rest in itertools.product(_JSON_PARTS, _JSON_RESTS):
        closers = _json_closers(text + part + rest)
        if closers is not None:
            try:
                json.loads(text + part + rest + closers)
                return
            except ValueError:
                pass
    raise AssertionError(f"not the start of a JSON object: {text!r}")


def x86_cpu_has(*flags: str) -> bool:
    """Whether this is an x86-64 CPU whose /proc/cpuinfo lists every one of flags (False elsewhere)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            return set(flags) <= set(f.read().split())
    except OSError:
        return False

# Synthetic llama shapes for parity: multi-head, grouped-query with a separate head, and a
# deeper narrow one with linear RoPE scaling.
def default_sigint():
    """preexec_fn for a child that a test interrupts: SIGINT at its default, as in a terminal.
    A shell starts a background job with SIGINT ignored and children inherit that, so under such
    a job a child would never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


SYNTH_SPECS = {
    "mha": dict(n_layer=4, n_embd=128, n_head=4, n_head_kv=4, n_ff=352, tied_output=True, seed=1),
    "gqa_untied": dict(n_layer=3, n_embd=256, n_head=8, n_head_kv=2, n_ff=512, tied_output=False, seed=2,
                       rope_freq_base=500000.0),
    "deep_rope_linear": dict(n_layer=8, n_embd=96, n_head=3, n_head_kv=1, n_ff=256, tied_output=True, seed=3,
                             rope_scaling={"type": "linear", "factor": 2.0}),
    # RoPE scaling as files in the wild carry it: YaRN, and a factor without a type (linear).
    "rope_yarn": dict(n_layer=3, n_embd=128, n_head=4, n_head_kv=2, n_ff=352, tied_output=True, seed=4,
                      rope_scaling={"type": "yarn", "factor": 4.0, "original_context_length": 64}),
    "rope_factor_only": dict(n_layer=3, n_embd=128, n_head=4, n_head_kv=2, n_ff=352, tied_output=True, seed=5,
                             rope_scaling={"type": None, "factor": 3.0}),
}

# One synthetic model per further architecture (issue 6): short sliding windows so that the parity
# prompts (64 generated tokens) run past them. "mistral_swa" is a llama file carrying
# llama.attention.sliding_window, which llama.cpp ignores for llama (and so do we).
ARCH_SPECS = {
    "qwen2": dict(arch="qwen2", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_ff=320, tied_output=False,
                  seed=11, rope_freq_base=1000000.0),
    "qwen3": dict(arch="qwen3", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_embd_head=64, n_ff=320,
                  tied_output=True, seed=12, rope_freq_base=1000000.0),
    "gemma3": dict(arch="gemma3", n_layer=6, n_embd=128, n_head=4, n_head_kv=2, n_embd_head=48, n_ff=384,
                   tied_output=False, seed=13, rope_freq_base=1000000.0, rms_eps=1e-6, sliding_window=16,
                   swa_pattern=3, rope_freq_base_swa=10000.0, final_logit_softcapping=6.0),
    "llama_biases": dict(arch="llama", n_layer=3, n_embd=128, n_head=4, n_head_kv=2, n_ff=352, tied_output=True,
                         seed=15, biases=True),
    "mistral_swa": dict(arch="llama", n_layer=4, n_embd=128, n_head=4, n_head_kv=1, n_ff=352, tied_output=False,
                        seed=14, sliding_window=16),
    # Issue 16. Ministral 3's keys at a small scale: YaRN from an original context of 32 with its
    # beta and log-multiplier keys, and temperature tuning (Q grows every 32 positions).
    "mistral3": dict(arch="mistral3", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_embd_head=48, n_ff=352,
                     tied_output=False, seed=16, rope_freq_base=1000000.0, attn_temperature_scale=0.1,
                     rope_scaling={"type": "yarn", "factor": 4.0, "original_context_length": 32,
                                   "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0, "yarn_log_multiplier": 0.5}),
    # Soft-capped attention logits (small caps, so that they bite), alternating windows of 16.
    "gemma2": dict(arch="gemma2", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_embd_head=48, n_ff=384,
                   seed=17, rms_eps=1e-6, sliding_window=16, attn_logit_softcapping=5.0, final_logit_softcapping=6.0),
    # Layers 3 and 7 without RoPE.
    "smollm3": dict(arch="smollm3", n_layer=8, n_embd=128, n_head=4, n_head_kv=1, n_embd_head=64, n_ff=320,
                    tied_output=True, seed=18),
    # OLMo 3 style: windows of 16 on 3 layers of 4 (rotated without the YaRN scaling of the others).
    "olmo2": dict(arch="olmo2", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_ff=320, seed=19, sliding_window=16,
                  rope_scaling={"type": "yarn", "factor": 2.0, "original_context_length": 64}),
    # Partial rotary (16 of 32), LongRoPE: long factors at n_ctx 512 (> 256), short ones at 256.
    "phi3": dict(arch="phi3", n_layer=3, n_embd=128, n_head=4, n_head_kv=2, n_ff=256, n_rot=16, tied_output=False,
                 seed=20, rope_scaling={"type": None, "original_context_length": 256, "attn_factor": 1.1}),
    # A mixture of 8 experts of 96, 2 used per token; head size 48 (not n_embd / n_head), GQA.
    "qwen3moe": dict(arch="qwen3moe", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_embd_head=48, n_ff=192,
                     n_expert=8, n_expert_used=2, n_ff_exp=96, tied_output=False, seed=21, rope_freq_base=1000000.0),
}

# Parity prompts (test_parity, test_rpc).
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
    "Q: What is 17 + 25?\nA:",
    "The three primary colors are",
    "Water boils at a temperature of",
    "import numpy as np\n\ndef softmax(x):",
    "My favourite season is autumn because",
]

# The River invariants' prompt (test_river, test_rpc).
RIVER_PROMPT = b"The history of the river begins in the mountains, where"


def model_path(request, name):
    """A test model by name: "smol" (SmolLM2), "gemma3_270m", a synthetic llama (SYNTH_SPECS) or
    architecture file (ARCH_SPECS), through the fixtures that fetch or write them."""
    if name == "smol":
        return request.getfixturevalue("smol_path")
    if name == "gemma3_270m":
        return request.getfixturevalue("gemma_path")
    if name in SYNTH_SPECS:
        return request.getfixturevalue("synth_paths")[name]
    return request.getfixturevalue("arch_paths")[name]


def generate_logits(llm, n=24, schedule=None):
    """Greedy decode from RIVER_PROMPT; schedule(llm, i) may change the exit rule before step i.
    Returns the stacked logits of the prompt and every step, and the exit layers seen."""
    from pyriver.tools.engine import greedy
    before = None if schedule is None else (lambda i, _: schedule(llm, i))
    run = greedy(llm, llm.tokenize(RIVER_PROMPT), n, keep_logits=True, before_step=before)
    return np.stack(run.logits), run.exits


def check_forced_exits(llm, ref, blocks) -> None:
    """Forced exits at the given blocks, changing from token to token, give the logits ref, and
    every one of those blocks was an exit."""
    got, exits = generate_logits(llm, schedule=lambda m, i: m.set_exit(2.0, 1, blocks[i % len(blocks)]))
    assert np.array_equal(ref, got)
    assert set(exits) == set(blocks)


def river_copy(smol_path, tmp_dir, n: int):
    """A copy of SmolLM2 in tmp_dir (its sidecars go beside it) and its full-depth greedy run:
    (path, prompt, n greedy tokens, stacked logits, n_layer)."""
    import shutil
    from pyriver import Llama
    from pyriver.tools.engine import greedy
    p = tmp_dir / "m.gguf"
    shutil.copy(smol_path, p)
    with Llama(str(p), n_ctx=256, n_threads=2, verbose=False) as full:
        prompt = full.tokenize(RIVER_PROMPT)
        run = greedy(full, prompt, n, keep_logits=True)
        L = full.info["n_layer"]
    return str(p), prompt, run.tokens, np.stack(run.logits), L


def rewrite_sidecar(src, dst, *, drop=(), meta=None, tensors=None):
    """A copy of the river sidecar src at dst without the tensors in drop, with metadata keys set (a value of
    None removes the key) and tensors taken from `tensors` (name -> ReaderTensor) where named."""
    meta, tensors = dict(meta or {}), dict(tensors or {})
    import gguf
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), arch="pyriver-river")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name in meta:
            continue
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_array(f.name, f.contents())
        else:
            w.add_key_value(f.name, f.contents(), f.types[0])
    for k, v in meta.items():
        if v is not None:
            w.add_string(k, v)
    for t in r.tensors:
        if t.name in drop:
            continue
        t = tensors.get(t.name, t)
        w.add_tensor(t.name, t.data, raw_shape=tuple(t.data.shape), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(dst)


def forced_logits(llm, prompt, tokens, blocks):
    """Teacher-forced logits (same tokens, so the same cache) with forced exits changing per step,
    and the exits seen."""
    from pyriver.tools.engine import feed
    run = feed(llm, prompt, tokens, keep_logits=True,
               before_step=lambda i, _: llm.set_exit(2.0, 1, blocks[i % len(blocks)]))
    return np.stack(run.logits), run.exits


def on_gpu(llm, gpu_layers: int) -> None:
    """With --gpu-layers -1 every block and the head are on one non-CPU device."""
    if gpu_layers == -1:
        devs = llm.devices()
        assert "CPU" not in devs, devs


def child_env() -> dict:
    """The environment of a child Python that must import this checkout's pyriver."""
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def pyriver_cli(*args, timeout=300, **kw):
    """`pyriver ARGS...` as a user runs it (a subprocess), output captured."""
    return pyriver_module("pyriver.cli", *args, timeout=timeout, **kw)


def pyriver_module(module: str, *args, timeout=300, **kw):
    """`python -m MODULE ARGS...` (a subprocess), output captured."""
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def hub_error(ref: str):
    """The ModelFetchError a hub reference gives, and how long it took."""
    import pytest

    from pyriver import models
    pytest.importorskip("huggingface_hub")
    t0 = time.monotonic()
    with pytest.raises(models.ModelFetchError) as ei:
        models.resolve(ref)
    return str(ei.value), time.monotonic() - t0


def code_lines(fn):
    """The line numbers of fn's body."""
    code = fn.__code__
    return sorted({ln for _, _, ln in code.co_lines() if ln and ln > code.co_firstlineno})


class LineInterrupt:
    """Raises KeyboardInterrupt the first time `line` of `code` runs: exactly what a SIGINT does
    when Python's handler runs at that line, but placed deterministically."""

    def __init__(self, code, line):
        self.code, self.line, self.fired = code, line, False

    def __call__(self, frame, event, arg):
        if frame.f_code is not self.code:
            return None
        return self._local

    def _local(self, frame, event, arg):
        if event == "line" and frame.f_lineno == self.line and not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return self._local


def interrupted_at(fn, line, call) -> bool:
    """Runs call() with a KeyboardInterrupt due when `line` of fn runs; True when it fired."""
    tracer = LineInterrupt(fn.__code__, line)
    sys.settrace(tracer)
    try:
        call()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    return tracer.fired


class RecordingCost(DraftCost):
    """A verify cost table that notes the contexts it is read at (seen)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.seen = []

    def at(self, context):
        self.seen.append(context)
        return super().at(context)


def takes(llm, gbnf: str, text: str) -> bool:
    """Whether the grammar takes the whole of text (its tokens one by one) and may end there."""
    g = Grammar(llm.vocab, gbnf)
    for t in llm.tokenize(text.encode(), add_bos=False, special=False):
        if not g.allows(t):
            return False
        g.accept(t)
    return g.allows(llm.token_eos())


def asked_for_by_name(config, marker: str) -> bool:
    """Whether the run's -m expression selects `marker` itself (`-m long`, `-m "long and slow"`),
    not merely lets it through (the default run, `-m "not gpu"`)."""
    words = re.findall(r"[\w-]+", config.getoption("markexpr") or "")
    return any(w == marker and (i == 0 or words[i - 1] != "not") for i, w in enumerate(words))
