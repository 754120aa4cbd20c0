"""Ctrl-C while a model loads. llama.cpp's log callback runs Python for every line of a load (shown
or not): a KeyboardInterrupt raised there is swallowed by ctypes and the load goes on, as it does
under llama-cpp-python. pyriver's loads hold SIGINT (pyriver.engine.interrupts): with Python's
default handler the load stops at its next tensor and KeyboardInterrupt reaches the caller; an
application's own handler is called once, when the load has run to its end.

The signal is sent from inside a log line's callback, so it lands where it used to be lost."""
from __future__ import annotations

import ctypes
import os
import signal

import llama_cpp
import llama_cpp._logger as _lg
import pytest

from pyriver import Llama
from pyriver.engine import native


class LogTrap:
    """llama.cpp's log lines recorded; SIGINT sent to this process from inside the callback of the
    first line that starts with `at`, and Python made to run its handler there (a loop's backward
    jump checks for signals)."""

    def __init__(self, at: str):
        self.at, self.lines, self.sent_at = at, [], None
        self._cb = llama_cpp.llama_log_callback(self._line)

    def _line(self, level, text, user):
        self.lines.append(text.decode("utf-8", "replace"))
        if self.sent_at is None and self.lines[-1].startswith(self.at):
            self.sent_at = len(self.lines)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(3):
                pass

    def __enter__(self):
        llama_cpp.llama_log_set(self._cb, ctypes.c_void_p(0))
        return self

    def __exit__(self, *exc):
        llama_cpp.llama_log_set(_lg.llama_log_callback, ctypes.c_void_p(0))


class Statuses:
    """native.lib with pr_model_load's statuses recorded."""

    def __init__(self, lib):
        self._lib, self.load = lib, []

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def pr_model_load(self, *a):
        self.load.append(self._lib.pr_model_load(*a))
        return self.load[-1]


def _text(path, engine):
    with Llama(path, n_ctx=128, verbose=False, engine=engine) as llm:
        return llm("The river", max_tokens=6, temperature=0)["choices"][0]["text"]


def test_native_load_stops_at_ctrl_c(gemma_path, monkeypatch, default_handler):
    """Gemma 3 270M: the native load repacks its Q4_K matrices for this CPU, a log line each."""
    expected = _text(gemma_path, "native")
    statuses = Statuses(native.lib)
    monkeypatch.setattr(native, "lib", statuses)
    interrupted = False
    with LogTrap("repack") as trap:
        try:
            Llama(gemma_path, n_ctx=128, verbose=False, engine="native").close()
        except KeyboardInterrupt:
            interrupted = True
    if trap.sent_at is None:
        pytest.skip("this CPU's ggml repacks no matrix: the native load logs no line")
    assert interrupted
    assert statuses.load == [native.lib.PR_ERR_INVALID_ARG]   # cancelled, not run to its end
    assert "model load cancelled" in native.last_error()
    assert not [line for line in trap.lines[trap.sent_at:] if line.startswith("repack")]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.undo()
    assert _text(gemma_path, "native") == expected


def test_llamacpp_load_stops_at_ctrl_c(smol_path, default_handler):
    expected = _text(smol_path, "llama.cpp")
    with LogTrap("create_tensor") as trap, pytest.raises(KeyboardInterrupt):
        Llama(smol_path, n_ctx=128, verbose=False, engine="llama.cpp")
    assert trap.sent_at is not None
    assert any("cancelled model load" in line for line in trap.lines[trap.sent_at:])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert _text(smol_path, "llama.cpp") == expected


def test_an_applications_handler_runs_once_after_the_load(smol_path):
    calls = []
    prev = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(len(trap.lines)))
    try:
        with LogTrap("llama_model_loader") as trap:
            llm = Llama(smol_path, n_ctx=128, verbose=False)
        n_lines = len(trap.lines)
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, prev)
    assert trap.sent_at is not None
    # called once, with every line of the call it came in logged: after that call, not inside it
    assert len(calls) == 1 and trap.sent_at < calls[0] <= n_lines
    with llm:
        assert llm("The river", max_tokens=4, temperature=0)["choices"][0]["text"]


class Conts:
    """llama.cpp's continued log lines (GGML_LOG_LEVEL_CONT) recorded, all of them, shown or not."""

    def __init__(self):
        self.texts = []
        self._cb = llama_cpp.llama_log_callback(self._line)

    def _line(self, level, text, user):
        if level == 5:
            self.texts.append(text.decode("utf-8", "replace"))

    def __enter__(self):
        llama_cpp.llama_log_set(self._cb, ctypes.c_void_p(0))
        return self

    def __exit__(self, *exc):
        llama_cpp.llama_log_set(_lg.llama_log_callback, ctypes.c_void_p(0))


def test_llamacpp_load_prints_llamacpps_progress_dots(smol_path):
    """The load's progress callback, which lets Ctrl-C cancel it, stands in for llama.cpp's own, whose
    dots llama_cpp.Llama's loads print (verbose=True shows them): the same dots, a newline at 100%."""
    with Conts() as peer:
        llama_cpp.Llama(smol_path, n_ctx=128, verbose=False).close()
    with Conts() as ours:
        Llama(smol_path, n_ctx=128, verbose=False, engine="llama.cpp").close()
    dots = [t for t in peer.texts if t in (".", "\n")]
    assert dots.count(".") > 1 and dots[-1] == "\n"
    assert [t for t in ours.texts if t in (".", "\n")] == dots
