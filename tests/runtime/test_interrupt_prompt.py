"""Ctrl-C during a prompt longer than n_batch. The native engine runs such a prompt in one call, a
graph per n_batch tokens; Ctrl-C stops the call after the graph in flight
(pr_context_set_abort_callback), as llama_cpp.Llama's eval stops between its batches, where it used
to wait for the whole prompt. The Llama gives a fresh object's text afterwards."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from pyriver import Llama

N_BATCH = 32
TEXT = "Rivers carry water from mountains to the sea, and the sea gives it back as rain. " * 40
SHORT = "The river"


def _after(llm):
    return llm(SHORT, max_tokens=6, temperature=0)["choices"][0]["text"]


def test_a_long_prompt_stops_between_its_graphs(smol_path, default_handler):
    with Llama(smol_path, n_ctx=2048, n_batch=N_BATCH, verbose=False) as fresh:
        expected = _after(fresh)
    with Llama(smol_path, n_ctx=2048, n_batch=N_BATCH, verbose=False) as llm:
        toks = llm.tokenize(TEXT.encode())
        assert len(toks) > 10 * N_BATCH
        engine = llm.context.engine

        def interrupt_once_running():   # the cache grows a graph at a time, inside the one call
            while engine.pos() == 0:
                time.sleep(0.0005)
            os.kill(os.getpid(), signal.SIGINT)

        sender = threading.Thread(target=interrupt_once_running)
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            llm.create_completion(toks, max_tokens=1, temperature=0)
        sender.join()
        ran = engine.pos()
        assert 0 < ran < len(toks) and ran % N_BATCH == 0, (ran, len(toks))   # stopped between graphs
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert _after(llm) == expected
