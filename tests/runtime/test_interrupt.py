"""Ctrl-C at seeded random moments of prefill, decode, streaming and river building: a real
SIGINT from a timer thread, Python's KeyboardInterrupt where it lands. Afterwards the object must
give exactly what a fresh object gives (text and the exit block of every token)."""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from helpers import code_lines, interrupted_at
from pyriver import Llama
from pyriver.api.generation import Context   # Llama.context: the cache bookkeeping and decode loop

pytestmark = pytest.mark.slow

RIVER = dict(river="q4_0", exit_threshold=0.975, min_exit_layer=4, batch_invariant=True)   # results equal, bit for bit
LONG = "Rivers carry water from mountains to the sea. " * 30 + "Tell me about rivers."
CHECK = "Rivers carry water from mountains to the sea. " * 10 + "Name three rivers."
MSGS = [{"role": "user", "content": "Write a short poem about a river."}]


class Interrupter:
    """Sends SIGINT to this process after `delay` seconds, while armed. The handler raises
    KeyboardInterrupt (as Python's default does) only while armed, so a late signal cannot hit
    the test's own bookkeeping."""

    def __init__(self):
        self.armed = False
        self.prev = signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum, frame):
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt

    def run(self, fn, delay: float) -> bool:
        """Runs fn with a SIGINT due after delay; True when it was interrupted. The duration of
        uninterrupted runs goes to self.elapsed."""
        timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
        self.armed = True
        timer.start()
        t0 = time.perf_counter()
        try:
            fn()
            self.armed = False
            self.elapsed = time.perf_counter() - t0
            return False
        except KeyboardInterrupt:
            return True
        finally:
            self.armed = False
            timer.cancel()
            timer.join()

    def close(self):
        signal.signal(signal.SIGINT, self.prev)


def _check(llm):
    out = llm.create_completion(CHECK, max_tokens=24, temperature=0)
    return out["choices"][0]["text"], llm.river_stats()["exit_layers"]


OPS = {
    "prefill": lambda llm: llm.create_completion(LONG, max_tokens=1, temperature=0),
    "decode": lambda llm: llm.create_completion("The river", max_tokens=48, temperature=0),
    "stream": lambda llm: [c for c in llm.create_chat_completion(MSGS, stream=True, max_tokens=48, temperature=0)],
}


def _duration(fn, llm) -> float:
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        fn(llm)
        times.append(time.perf_counter() - t0)
    return min(times)


@pytest.fixture(scope="module")
def fresh_result(smol_path):
    with Llama(smol_path, n_ctx=1024, n_threads=2, verbose=False, **RIVER) as fresh:
        return _check(fresh)


@pytest.mark.parametrize("kind", list(OPS))
def test_interrupt_then_same_as_fresh(smol_path, fresh_result, kind):
    rng = random.Random(f"interrupt-{kind}")
    llm = Llama(smol_path, n_ctx=1024, n_threads=2, verbose=False, **RIVER)
    op = OPS[kind]
    span = _duration(op, llm)
    intr = Interrupter()
    try:
        hits = 0
        for attempt in range(15):   # 5 runs; more only while none was interrupted (a faster machine)
            if attempt >= 5 and hits:
                break
            if intr.run(lambda: op(llm), rng.uniform(0.05, 0.9) * span):
                hits += 1
            else:   # it finished first: the machine got faster; aim inside the shorter run
                span = min(span, intr.elapsed)
            assert _check(llm) == fresh_result
        assert hits >= 1, f"no {kind} run was interrupted (span {span:.3f} s)"
    finally:
        intr.close()
        llm.close()


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_interrupted_river_build_leaves_no_partial_sidecar(smol_path, tmp_path):
    """Ctrl-C while the sidecar is built (or while the model loads around it): no half-written
    sidecar is left, and the next load builds one identical to an uninterrupted build."""
    ref_dir, work = tmp_path / "ref", tmp_path / "work"
    ref_dir.mkdir(), work.mkdir()
    model = work / "m.gguf"
    shutil.copy(smol_path, model)
    shutil.copy(smol_path, ref_dir / "m.gguf")
    t0 = time.perf_counter()
    Llama(str(ref_dir / "m.gguf"), n_ctx=64, verbose=False, river="q4_0").close()
    span = time.perf_counter() - t0
    ref_sha = _sha(ref_dir / "m.river-q4_0.gguf")

    rng = random.Random("interrupt-river")
    intr = Interrupter()
    hits = 0
    try:
        for attempt in range(15):   # 5 runs; more only while none was interrupted (a faster machine)
            if attempt >= 5 and hits:
                break
            if intr.run(lambda: Llama(str(model), n_ctx=64, verbose=False, river="q4_0",
                                      river_rebuild=True).close(), rng.uniform(0.05, 0.9) * span):
                hits += 1
            else:
                span = min(span, intr.elapsed)
            leftovers = [p.name for p in work.iterdir() if p.name not in ("m.gguf", "m.river-q4_0.gguf")
                         and not p.name.startswith(".")]
            assert not leftovers, leftovers
    finally:
        intr.close()
    assert hits >= 1
    with Llama(str(model), n_ctx=64, verbose=False, river="q4_0") as llm:
        assert llm("The river", max_tokens=4, temperature=0)["choices"][0]["text"]
    assert _sha(work / "m.river-q4_0.gguf") == ref_sha


FIRST = "The river flows down to the sea"


def _first(llm):
    return llm.create_completion(FIRST, max_tokens=3, temperature=0)["choices"][0]["text"]


@pytest.mark.parametrize("fn", ["decode_logits", "sync_prefix", "truncate", "generate_tokens"])
def test_interrupt_at_every_line_of_the_decode_path(smol_path, fresh_result, fn):
    """Between the interrupted call and the check, FIRST runs again: it shares a longer prefix
    with the cache than the interrupted prompt did, so stale bookkeeping would show."""
    with Llama(smol_path, n_ctx=1024, n_threads=2, verbose=False, **RIVER) as fresh:
        first_ref = _first(fresh)
    with Llama(smol_path, n_ctx=1024, n_threads=2, verbose=False, **RIVER) as llm:
        fired = 0
        for line in code_lines(getattr(Context, fn)):
            _first(llm)   # a cache to reuse and cut
            # "A river is" cuts the cache to BOS
            fired += interrupted_at(getattr(Context, fn), line,
                                    lambda: llm.create_completion("A river is", max_tokens=6, temperature=0))
            assert _first(llm) == first_ref, f"after an interrupt at {fn} line {line}"
            assert _check(llm) == fresh_result, f"after an interrupt at {fn} line {line}"
        assert fired >= 2
