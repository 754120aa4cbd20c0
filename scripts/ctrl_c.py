"""Ctrl-C while a model loads or a long prompt runs (docs/reliability.md, "Loads", "Long prompts").

    python scripts/ctrl_c.py load pr|lcp DELAY MODEL     a real SIGINT DELAY s into Llama(MODEL): did the
                                                         load go on, or KeyboardInterrupt? (pr:
                                                         pyriver.Llama, lcp: llama_cpp.Llama)
    python scripts/ctrl_c.py cycles N MODEL [--plain]    N loads, each with a SIGINT at a seeded random
                                                         moment of it (--plain: none), and open fds,
                                                         threads and RSS before and after
    python scripts/ctrl_c.py prompt pr|lcp N MODEL       a SIGINT 1.0 and 2.5 s into create_completion of
                                                         an N-token prompt (n_batch 512): when it lands
    python scripts/ctrl_c.py quantize DELAY MODEL FTYPE  pyriver's quantize of MODEL to FTYPE, a SIGINT DELAY
                                                         s in (0: none): when it ends, and the output's size
"""
import gc
import os
import random
import signal
import sys
import threading
import time


def _llama(which: str, path: str, **kw):
    if which == "lcp":
        import llama_cpp
        return llama_cpp.Llama(path, verbose=False, **kw)
    import pyriver
    return pyriver.Llama(path, verbose=False, **kw)


def load(which: str, delay: float, path: str) -> None:
    make = lambda: _llama(which, path, n_ctx=256)   # noqa: E731
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


def prompt(which: str, n: int, path: str) -> None:
    llm = _llama(which, path, n_ctx=n + 64, n_batch=512)
    toks = llm.tokenize(("Rivers carry water to the sea. " * (n // 6)).encode())[:n]
    for delay in (1.0, 2.5):
        t0 = time.perf_counter()
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            llm.create_completion(toks, max_tokens=1)
            print(f"{which}: {n} tokens ran to the end, {time.perf_counter() - t0:.1f}s", flush=True)
        except KeyboardInterrupt:
            print(f"{which}: SIGINT at {delay}s -> KeyboardInterrupt at {time.perf_counter() - t0:.1f}s", flush=True)
        llm.reset()


def quantize(delay: float, path: str, ftype: str) -> None:
    import tempfile

    from pyriver.engine.quantize import quantize as q
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.gguf")
        t0 = time.perf_counter()
        if delay > 0:
            threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            q(path, out, ftype)
            how = "ran to the end"
        except KeyboardInterrupt:
            how = f"SIGINT at {delay}s -> KeyboardInterrupt"
        print(f"quantize {ftype}: {how} at {time.perf_counter() - t0:.2f}s, {os.path.getsize(out)} bytes written",
              flush=True)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "load":
        load(args[0], float(args[1]), args[2])
    elif cmd == "cycles":
        cycles(int(args[0]), args[1], "--plain" in args[2:])
    elif cmd == "quantize":
        quantize(float(args[0]), args[1], args[2])
    else:
        prompt(args[0], int(args[1]), args[2])
