"""ggml RPC servers for tests: `pyriver rpc-server` subprocesses on free loopback ports, started
with a deadline and killed when the test ends."""
from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time

from helpers import REPO, child_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, threads: int = 1, timeout: float = 30.0):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "pyriver.cli", "rpc-server", "--port", str(self.port),
                                      "--threads", str(threads)], env=child_env(), cwd=str(REPO),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rpc-server exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise TimeoutError(f"rpc-server on port {self.port} did not listen within {timeout} s")
                time.sleep(0.05)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@contextlib.contextmanager
def servers(n: int, threads: int = 1):
    started = []
    try:
        for _ in range(n):
            started.append(Server(threads))
        yield started
    finally:
        for s in started:
            s.kill()


def llama_cpp_greedy(model: str, servers: str, prompts, n: int, timeout: float = 300.0, **model_kw):
    """llama.cpp's greedy continuations with the same RPC servers, in a fresh process: llama.cpp
    takes every RPC device registered in its process, and a registration cannot be undone."""
    cfg = dict(model=model, servers=servers, prompts=list(prompts), n=n, kw=model_kw)
    out = subprocess.run([sys.executable, __file__, json.dumps(cfg)], env=child_env(), cwd=str(REPO), capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"llama.cpp reference failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _reference_main(cfg) -> None:
    from pyriver.engine import rpc
    from pyriver.tools.engine import LlamaCppEngine, greedy
    rpc.register_for_llama_cpp(cfg["servers"])
    ref = LlamaCppEngine(cfg["model"], 512, 1, n_batch=512, **cfg["kw"])
    res = [greedy(ref, ref.tokenize(p.encode(), add_bos=True, special=True), cfg["n"]).tokens for p in cfg["prompts"]]
    ref.close()
    print(json.dumps(res))


if __name__ == "__main__":
    _reference_main(json.loads(sys.argv[1]))
