"""Ctrl-C while a model loads: a real SIGINT DELAY seconds into `Llama(MODEL)`, and whether the
load went on or KeyboardInterrupt came (docs/reliability.md, "Loads").

    python scripts/interrupt_load.py pr|lcp DELAY MODEL    (pr: pyriver.Llama, lcp: llama_cpp.Llama)
"""
import os
import signal
import sys
import threading
import time

which, delay, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
if which == "lcp":
    import llama_cpp
    make = lambda: llama_cpp.Llama(path, n_ctx=256, verbose=False)   # noqa: E731
else:
    import pyriver
    make = lambda: pyriver.Llama(path, n_ctx=256, verbose=False)   # noqa: E731
t0 = time.perf_counter()
threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    make()
    print(f"{which}: loaded, not interrupted, {time.perf_counter() - t0:.2f}s", flush=True)
except KeyboardInterrupt:
    print(f"{which}: KeyboardInterrupt at {time.perf_counter() - t0:.2f}s", flush=True)
