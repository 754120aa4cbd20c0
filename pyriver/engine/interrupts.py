"""Ctrl-C during a native call that calls back into Python.

Python runs a signal's handler in the main thread at its next bytecode. During a native call that
is inside whatever Python callback the call makes (llama.cpp's log callback runs for every line of a
model's load, shown or not; a load's progress), and a KeyboardInterrupt raised there is lost: ctypes
prints "Exception ignored on calling ctypes callback function" and the load goes on
(llama-cpp-python loses it so, silently with verbose=False). Around such calls `held()` takes SIGINT
itself: the signal is noted, and when the block ends the handler that was in place is called with
it, in the caller's frame. Where that handler is Python's default one (it raises KeyboardInterrupt,
so nothing looks at what the call returns), `caught()` turns true at once and the call's callback
stops it: a load's progress callback, the abort callback of a prompt longer than n_batch (native.py,
a prompt that would otherwise run to its end before Python sees the signal); another handler (an
application's own) gets the signal once the call has run to its end, as it would with no callback in
the call."""
from __future__ import annotations

import ctypes
import signal
import threading
from contextlib import contextmanager

import llama_cpp

from pyriver.engine.logs import log_cont

_noted = []   # the frames SIGINT was noted in, while a held() block runs
_cancels = [False]   # the handler held() stands in for raises KeyboardInterrupt


def _note(signum, frame) -> None:
    _noted.append(frame)


def caught() -> bool:
    """A SIGINT came during the held() block that runs now, and it will raise KeyboardInterrupt
    when the block ends: the call in it may stop short."""
    return bool(_noted) and _cancels[0]


@contextmanager
def held():
    """SIGINT noted during the block, handed to the handler in place at its end (see the module).
    Yields whether a call in the block may stop short on it (caught() can turn true)."""
    prev = signal.getsignal(signal.SIGINT)
    # Handlers run in the main thread only; SIG_IGN, SIG_DFL or a C handler (None) run no Python;
    # an outer held() block hands the signal on itself.
    if threading.current_thread() is not threading.main_thread() or not callable(prev) or prev is _note:
        yield prev is _note and _cancels[0]
        return
    signal.signal(signal.SIGINT, _note)
    _cancels[0] = prev is signal.default_int_handler
    try:
        yield _cancels[0]
    finally:
        signal.signal(signal.SIGINT, prev)
        _cancels[0] = False
        if _noted:
            frame = _noted[-1]
            _noted.clear()
            prev(signal.SIGINT, frame)


def _go_on(progress: float, user) -> bool:
    # Standing in for llama.cpp's own progress callback (llama_model_load_from_file's, when none is
    # given), this prints its dots as it does: one as the load passes a new whole percent, a newline
    # at 100, as continued log lines (shown with verbose=True, as llama_cpp.Llama's loads show them).
    last = ctypes.cast(user, ctypes.POINTER(ctypes.c_uint)).contents
    pct = int(100 * progress)
    if pct > last.value:
        last.value = pct
        log_cont(b".")
        if pct >= 100:
            log_cont(b"\n")
    return not caught()


# llama_model_params.progress_callback: false cancels llama.cpp's load (it returns no model). One for
# the process: llama.cpp keeps only the pointer, and ctypes frees a callback with its object.
llama_progress = llama_cpp.llama_progress_callback(_go_on)


@contextmanager
def loading(params):
    """A llama.cpp model load with params (llama_model_params) in the block: Ctrl-C cancels it at the
    next tensor (held()), and its progress dots are llama.cpp's (the whole percent shown last, the
    callback's user data, as llama.cpp's own)."""
    last = ctypes.c_uint(0)
    params.progress_callback = llama_progress
    params.progress_callback_user_data = ctypes.cast(ctypes.pointer(last), ctypes.c_void_p)
    with held():
        yield
