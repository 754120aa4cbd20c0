"""Ctrl-C during a quantization. llama.cpp's llama_model_quantize has no way to stop short (no
callback but its log lines, in which a KeyboardInterrupt is lost), so pyriver runs it in a child
process that Ctrl-C ends at once, as llama-quantize ends, killed by the signal."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from pyriver.engine.quantize import quantize


def _sigint_once_written(path, sent: list):
    """SIGINT to this process once the child has written part of its output."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            sent.append(os.path.getsize(path))
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.005)


def test_ctrl_c_ends_the_quantization_at_once(gemma_path, tmp_path, default_handler):
    whole = quantize(gemma_path, tmp_path / "whole.gguf", "q8_0")
    dst, sent = tmp_path / "cut.gguf", []
    t = threading.Thread(target=_sigint_once_written, args=(str(dst), sent))
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            quantize(gemma_path, dst, "q8_0")
    finally:
        t.join()
    assert sent, "the child wrote nothing"
    # stopped short (the child is gone when quantize raises): llama.cpp's call run in this process
    # to its end would have written the whole file before the KeyboardInterrupt
    assert os.path.getsize(dst) < os.path.getsize(whole)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_failed_quantization_says_so(tmp_path):
    with pytest.raises(RuntimeError, match="llama_model_quantize"):
        quantize(tmp_path / "missing.gguf", tmp_path / "out.gguf", "q8_0")
    with pytest.raises(ValueError, match="unknown ftype"):
        quantize(tmp_path / "missing.gguf", tmp_path / "out.gguf", "q9_9")
