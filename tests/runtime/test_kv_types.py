"""KV cache types (type_k/type_v, -ctk/-ctv): llama.cpp's types on both engines, the peer the
referee (llama_cpp.Llama with the same types and flash attention gives the expected text); River,
lossless drafts, batching and saved states on a quantized cache; llama.cpp's errors for bad input."""
from __future__ import annotations

import llama_cpp
import pytest

from helpers import PROMPTS, model_path
from pyriver import Llama
from pyriver.api.batch import BatchDecoder
from pyriver.engine.sampling import Sampler, SamplingParams
from pyriver.server.scheduler import Request, Scheduler

PROMPT = "The capital of France is a city that"
N = 32
F16, Q8_0, Q4_0 = llama_cpp.GGML_TYPE_F16, llama_cpp.GGML_TYPE_Q8_0, llama_cpp.GGML_TYPE_Q4_0
TYPES = [(Q8_0, Q8_0), (Q4_0, Q4_0), (F16, Q8_0)]


def _text(llm) -> str:
    return llm(PROMPT, max_tokens=N, temperature=0)["choices"][0]["text"]


@pytest.fixture(scope="module")
def peer_texts(smol_path):
    """llama-cpp-python's greedy text per (type_k, type_v), flash attention on."""
    out = {}
    for tk, tv in TYPES + [(F16, F16)]:
        ref = llama_cpp.Llama(smol_path, n_ctx=256, n_threads=2, flash_attn=True, type_k=tk, type_v=tv, verbose=False)
        out[tk, tv] = _text(ref)
        ref.close()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["native", "llama.cpp"])
@pytest.mark.parametrize("tk, tv", TYPES)
def test_greedy_text_equals_llama_cpp_python_with_the_same_types(smol_path, peer_texts, engine, tk, tv):
    with Llama(smol_path, n_ctx=256, n_threads=2, flash_attn=True, type_k=tk, type_v=tv, engine=engine, river=None,
               verbose=False) as llm:
        assert llm.context_params.type_k == tk and llm.context_params.type_v == tv
        assert _text(llm) == peer_texts[tk, tv]


@pytest.mark.slow
@pytest.mark.parametrize("tk, tv", [(Q8_0, Q8_0), (Q4_0, Q4_0)])
def test_a_head_of_256_rotates_as_llama_cpp_does(request, tk, tv):
    """Gemma 3 270M: heads of 256 (K rotated by a 256-matrix, V by 64s), the sliding-window layers,
    Q pre-scaled: the native engine's greedy text is llama-cpp-python's on the same types."""
    path = model_path(request, "gemma3_270m")
    ref = llama_cpp.Llama(path, n_ctx=256, n_threads=2, flash_attn=True, type_k=tk, type_v=tv, verbose=False)
    want = _text(ref)
    ref.close()
    with Llama(path, n_ctx=256, n_threads=2, flash_attn=True, type_k=tk, type_v=tv, engine="native", river=None,
               verbose=False) as llm:
        assert _text(llm) == want


def _logits(llm, prompt):
    llm.reset()
    return llm.decode_logits(llm.tokenize(prompt.encode()))


@pytest.mark.slow
def test_quantized_cache_changes_the_logits_as_llama_cpp_does(smol_path):
    """Beyond the greedy text: the native engine's last-token logits on a q8_0 and a q4_0 cache lie
    as close to llama.cpp's on the same types as its f16 ones do, and each type moves them (so the
    type is in effect; a quantized cache read as f16, or not rotated, is farther off)."""
    import numpy as np
    from pyriver.tools.engine import LlamaCppEngine
    errs, moved = {}, {}
    base = None
    for t in (F16, Q8_0, Q4_0):
        ref = LlamaCppEngine(smol_path, 256, 2, flash_attn=True, type_k=t, type_v=t)
        want = ref.decode_logits(ref.tokenize(PROMPTS[0].encode()))[-1]
        with Llama(smol_path, n_ctx=256, n_threads=2, flash_attn=True, type_k=t, type_v=t, engine="native", river=None,
                   verbose=False) as llm:
            got = _logits(llm, PROMPTS[0])[-1]
        errs[t] = float(np.max(np.abs(got - want)))
        base = want if base is None else base
        moved[t] = float(np.max(np.abs(want - base)))
    assert moved[Q8_0] > 0 and moved[Q4_0] > moved[Q8_0]
    for t in (Q8_0, Q4_0):
        assert errs[t] < 0.1 * moved[t] + 1e-3, (errs, moved)


@pytest.mark.parametrize("engine", ["native", "llama.cpp"])
def test_kv_bytes_by_type(smol_path, engine):
    """q8_0 holds 34 bytes a 32 elements, q4_0 18, f16 64: the reported bytes follow, the same on both
    engines (256 cells, the native cache's padding and llama.cpp's)."""
    got = {}
    for tk, tv in ((F16, F16), (Q8_0, Q8_0), (Q4_0, F16)):
        with Llama(smol_path, n_ctx=256, n_threads=2, flash_attn=True, type_k=tk, type_v=tv, engine=engine,
                   river=None, verbose=False) as llm:
            got[tk, tv] = llm.kv_cache()
    f16 = got[F16, F16]
    assert f16["type_k"] == f16["type_v"] == "f16" and f16["k_bytes"] == f16["v_bytes"] > 0
    assert f16["k_bytes"] == 30 * 256 * 192 * 2   # SmolLM2: 30 blocks, 3 KV heads of 64
    q8 = got[Q8_0, Q8_0]
    assert (q8["type_k"], q8["type_v"]) == ("q8_0", "q8_0")
    assert q8["k_bytes"] * 64 == f16["k_bytes"] * 34 and q8["bytes"] == 2 * q8["k_bytes"]
    q4 = got[Q4_0, F16]
    assert q4["k_bytes"] * 64 == f16["k_bytes"] * 18 and q4["v_bytes"] == f16["v_bytes"]


def test_verbose_prints_the_kv_line(smol_path, capfd):
    with Llama(smol_path, n_ctx=256, n_threads=2, flash_attn=True, type_k="q8_0", type_v="q4_0", engine="native",
               river=None, verbose=True):
        pass
    err = capfd.readouterr().err
    assert "K (q8_0): 1.49 MiB, V (q4_0): 0.79 MiB" in err, err[-2000:]


@pytest.mark.parametrize("engine", ["native", "llama.cpp"])
def test_bad_cache_types_get_llama_cpp_s_errors(smol_path, engine):
    kw = dict(n_ctx=64, n_threads=2, engine=engine, river=None, verbose=False)
    with pytest.raises(ValueError, match="Unsupported cache type: q9_0"):
        Llama(smol_path, type_k="q9_0", **kw)
    with pytest.raises(ValueError, match="Unsupported cache type: 12"):   # Q4_K: not a cache type
        Llama(smol_path, type_v=12, flash_attn=True, **kw)
    with pytest.raises(ValueError, match="quantized V cache requires flash_attn to be enabled"):
        Llama(smol_path, type_v=Q8_0, **kw)
    # a quantized K without flash attention is llama.cpp's too: it runs
    with Llama(smol_path, type_k=Q8_0, **kw) as llm:
        assert llm(PROMPT, max_tokens=4, temperature=0)["choices"][0]["text"]


def test_the_native_library_refuses_what_python_would(smol_path):
    """The C API's own checks (pr_context_new), for a caller that passes Python's by."""
    from pyriver.engine.binding import ffi, lib
    with Llama(smol_path, n_ctx=64, n_threads=2, engine="native", river=None, verbose=False) as llm:
        model = llm.backend.model
        for tk, tv, fa, msg in ((12, F16, 1, "Unsupported cache type 12 for K"),
                                (F16, Q8_0, 0, "quantized V cache requires flash_attn to be enabled"),
                                (F16, Q8_0, 1, None)):
            cp = ffi.new("pr_context_params *", lib.pr_context_default_params())
            cp.n_ctx, cp.flash_attn, cp.type_k, cp.type_v = 64, fa, tk, tv
            out = ffi.new("pr_context **")
            st = lib.pr_context_new(model, cp, out)
            if msg is None:
                assert st == 0
                lib.pr_context_free(out[0])
            else:
                assert st != 0 and msg in ffi.string(lib.pr_last_error()).decode()


def test_saved_state_of_a_quantized_cache_comes_back(smol_path):
    """save_state/load_state write and read a q8_0/q4_0 cache's bytes: the continuation after a load
    is the one before; a state of another type is refused."""
    kw = dict(n_ctx=256, n_threads=2, flash_attn=True, river=None, verbose=False, engine="native")
    with Llama(smol_path, type_k=Q8_0, type_v=Q4_0, **kw) as llm:
        toks = llm.tokenize(PROMPT.encode())
        llm.reset()
        llm.eval(toks[:-1])
        st = llm.save_state()
        llm.eval(toks[-1:])
        a = _text_after(llm)
        llm.load_state(st)
        llm.eval(toks[-1:])
        assert _text_after(llm) == a
        with Llama(smol_path, type_k=Q8_0, type_v=Q8_0, **kw) as other:
            with pytest.raises(Exception, match="layout"):
                other.load_state(st)


def _text_after(llm) -> str:
    out = []
    for _ in range(8):
        t = llm.sample(temp=0.0)
        out.append(t)
        llm.eval([t])
    return llm.detokenize(out).decode("utf-8", "replace")


def test_river_runs_on_a_q8_0_cache(smol_path):
    """River blocks write the same rows in the same types: exits at a forced block run, the cache
    holds on (a second request reuses its prefix)."""
    with Llama(smol_path, n_ctx=256, n_threads=2, flash_attn=True, type_k=Q8_0, type_v=Q8_0, river="q4_0",
               river_force=True, force_exit_layer=20, verbose=False) as llm:
        a = _text(llm)
        assert a and _text(llm) == a
        assert any(e < llm.info["n_layer"] - 1 for e in llm.last_exits)


@pytest.mark.slow
@pytest.mark.parametrize("tk, tv, fa", [(Q8_0, Q8_0, True), (Q8_0, F16, False)])
def test_lossless_text_equals_plain_decode_on_the_same_types(smol_path, tk, tv, fa):
    """Drafts from the river verified at full depth on a quantized cache: plain decoding's text
    (batch-invariant where flash attention is off, as lossless mode's exact default)."""
    kw = dict(n_ctx=512, n_threads=2, flash_attn=fa, type_k=tk, type_v=tv, verbose=False,
              batch_invariant=not fa)
    with Llama(smol_path, river=None, **kw) as plain:
        want = [plain(p, max_tokens=N, temperature=0)["choices"][0]["text"] for p in PROMPTS[:3]]
    with Llama(smol_path, river="q4_0", exit_threshold=0.975, min_exit_layer=4, lossless=True, draft_max=4,
               river_force=True, **kw) as llm:
        got = [llm(p, max_tokens=N, temperature=0)["choices"][0]["text"] for p in PROMPTS[:3]]
        assert llm.river_stats()["lossless"]["verify_steps"] > 0
    assert got == want


def test_batched_sequences_on_a_q8_0_cache_give_their_texts_alone(smol_path):
    """Three slots decoded together (the server's scheduler, joined decode steps) on q8_0/q8_0 give
    each prompt's greedy tokens alone."""
    greedy = lambda: Sampler(SamplingParams(temperature=0.0))   # noqa: E731
    with Llama(smol_path, n_ctx=256, n_threads=2, flash_attn=True, type_k=Q8_0, type_v=Q8_0, river=None,
               verbose=False) as llm:
        prompts = [llm.tokenize(p.encode()) for p in PROMPTS[:3]]
        alone = [list(llm.context.generate_tokens(p, greedy(), 16)) for p in prompts]
        sched = Scheduler(llm, 3)
        try:
            assert sched.dec.kv_cache()["type_k"] == "q8_0"
            reqs = [Request(prompt=p, sampler=greedy(), max_tokens=16) for p in prompts]
            for r in reqs:
                sched.submit(r)
            together = []
            for r in reqs:
                toks = []
                while True:
                    item = r.out.get(timeout=300)
                    if item[0] == "end":
                        assert not item[1].startswith("error"), item[1]
                        break
                    toks.append(item[1])
                together.append(toks)
        finally:
            sched.stop()
    assert together == alone


def test_batch_decoder_reports_its_cache(smol_path):
    with Llama(smol_path, n_ctx=256, n_threads=2, flash_attn=True, type_k=Q4_0, type_v=Q8_0, river=None,
               verbose=False) as llm:
        dec = BatchDecoder(llm, 2)
        try:
            d = dec.kv_cache()
        finally:
            dec.close()
        one = llm.kv_cache()
    assert (d["type_k"], d["type_v"]) == ("q4_0", "q8_0")
    assert d["k_bytes"] == 2 * one["k_bytes"] and d["v_bytes"] == 2 * one["v_bytes"]


@pytest.mark.slow
def test_serve_reports_its_cache_in_props_and_verbose(smol_path):
    """pyriver serve -ctk q8_0 -ctv q4_0: /props's kv_cache (the slots' cache: 2 slots of 512 rows),
    and --verbose's llama.cpp-style line; -ctv q8_0 -fa off: llama.cpp's message, exit status 1."""
    from server_proc import ServerProcess, http
    srv = ServerProcess(smol_path, "--ctx", "512", "--threads", "2", "--no-lossless", "--parallel", "2",
                        "-ctk", "q8_0", "-ctv", "q4_0", "--verbose")
    try:
        status, p = http("GET", srv.url + "/props")
        assert status == 200
        kv = p["kv_cache"]
        assert (kv["type_k"], kv["type_v"]) == ("q8_0", "q4_0")
        cells = 2 * 30 * 512 * 192   # slots x blocks x rows x (3 KV heads of 64)
        assert kv["k_bytes"] == cells * 34 // 32 and kv["v_bytes"] == cells * 18 // 32
        status, r = http("POST", srv.url + "/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0})
        assert status == 200 and r["content"]
    finally:
        srv.proc.terminate()
        _, out = srv.exited(60)
    mib = 1024 * 1024
    assert f"K (q8_0): {cells * 34 / 32 / mib:.2f} MiB, V (q4_0): {cells * 18 / 32 / mib:.2f} MiB (2 slots x 512 tokens)" in out
    bad = ServerProcess(smol_path, "-ctv", "q8_0", "-fa", "off", wait=False)
    code, out = bad.exited()
    assert code != 0 and "quantized V cache requires flash_attn to be enabled" in out
