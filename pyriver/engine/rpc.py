"""ggml RPC servers: serve this machine's devices (`pyriver rpc-server`), and make servers known to
llama.cpp in this process (its --rpc), for comparisons with the same rpc_servers."""
from __future__ import annotations

import sys

from pyriver.engine.binding import check, lib


def start_server(host: str = "127.0.0.1", port: int = 50052, threads: int = 2, cache_dir: str = "") -> None:
    """Serve the GPUs of this machine (the CPU without one) at host:port. Blocks until the process
    ends; raises when it cannot listen or when this ggml has no RPC backend."""
    if not 0 < int(port) < 65536:
        raise ValueError(f"port must be in [1, 65535], got {port}")
    print(f"pyriver: RPC server on {host}:{port} ({threads} threads); anyone who can reach it can run code "
          "on its devices: keep it on loopback or a trusted network", file=sys.stderr, flush=True)
    check(lib.pr_rpc_start_server(f"{host}:{port}".encode(), int(threads), (cache_dir or "").encode()))


def register_for_llama_cpp(servers: str, timeout: float = 30.0) -> None:
    """Add the servers' devices to ggml's device list, as llama.cpp's --rpc does, so that
    llama_cpp.Llama(n_gpu_layers=...) in this process offloads to them (llama-cpp-python 0.3.36
    has no rpc_servers argument)."""
    check(lib.pr_rpc_register(servers.encode(), int(timeout * 1000)))
