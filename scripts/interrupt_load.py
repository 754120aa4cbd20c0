"""Ctrl-C while a model loads (docs/reliability.md, "Loads").

    python scripts/interrupt_load.py once pr|lcp DELAY MODEL   a real SIGINT DELAY s into Llama(MODEL):
                                                               did the load go on, or KeyboardInterrupt?
                                                               (pr: pyriver.Llama, lcp: llama_cpp.Llama)
    python scripts/interrupt_load.py cycles N MODEL [--plain]  N loads, each with a SIGINT at a seeded
                                                               random moment of it (--plain: none), and
                                                               open fds, threads and RSS before and after
"""
import gc
import os
import random
import signal
import sys
import threading
import time


def once(which: str, delay: float, path: str) -> None:
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


def _process():
    rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task")), rss


def cycles(n: int, path: str, plain: bool) -> None:
    import pyriver
    t0 = time.perf_counter()
    pyriver.Llama(path, n_ctx=256, verbose=False).close()
    span = time.perf_counter() - t0
    gc.collect()
    before, rng, hits = _process(), random.Random(1), 0
    for _ in range(n):
        timer = None if plain else threading.Timer(rng.uniform(0.02, 0.95) * span, os.kill, (os.getpid(), signal.SIGINT))
        loaded = False
        try:
            if timer:
                timer.start()
            llm = pyriver.Llama(path, n_ctx=256, verbose=False)
            loaded = True
            llm.close()
            if timer:
                timer.join()
                time.sleep(0.05)   # a signal after the load lands here
        except KeyboardInterrupt:
            hits += not loaded
        if timer:
            timer.cancel()
            timer.join()
        gc.collect()
    after = _process()
    print(f"load {span:.2f}s; {hits}/{n} interrupted inside Llama(); open fds {before[0]} -> {after[0]}, "
          f"threads {before[1]} -> {after[1]}, RSS {before[2]:.0f} -> {after[2]:.0f} MiB")


if __name__ == "__main__":
    if sys.argv[1] == "once":
        once(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    else:
        cycles(int(sys.argv[2]), sys.argv[3], "--plain" in sys.argv[4:])
