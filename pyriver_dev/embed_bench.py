"""`python -m pyriver_dev.embed_bench MODEL`: /v1/embeddings throughput of `pyriver serve
--embedding` against llama.cpp's `llama-server --embedding` on the same file, pooling and threads
(llama-server built once into the cache: llama_server.py). Each repeat sends both servers the same
requests (C concurrent clients, each posting batches of B texts) in turn, the order rotating between
repeats; reported: embedded prompt tokens per second (tokens from the server's own `usage`), the
median over repeats and the ratio pyriver / llama-server taken within each repeat, and how close the
two servers' vectors are (cosine, the worst over the texts, each text in a request of its own) and
whether each server gives a text in a batch the vector it gives it alone."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Dict, List, Optional

import numpy as np

from pyriver.tools.results import write_json
from pyriver.tools.serve_bench import PROMPTS, _Server, _get, _port

# Texts of several lengths: the openings, each run on to about 20 to 90 tokens.
TEXTS = [(p + " ") * r for r in (1, 2, 4) for p in PROMPTS]


def start(model: str, threads: int, pooling: str, clients: int) -> List[_Server]:
    from pyriver.tools.llama_server import ensure
    out = [_Server("pyriver", [sys.executable, "-m", "pyriver.server", model, "--embedding", "--pooling", pooling,
                               "--threads", str(threads), "--ctx", "2048", "--parallel", str(clients), "-fa", "off",
                               "--port", str(p := _port())], p)]
    out.append(_Server("llama-server", [str(ensure(threads)), "-m", model, "--embedding", "--pooling", pooling,
                                        "-t", str(threads), "-tb", str(threads), "-c", str(2048 * clients),
                                        "-b", "2048", "-ub", "2048", "--parallel", str(clients), "-fa", "off",
                                        "--host", "127.0.0.1", "--port", str(p := _port())], p))
    return out


def vectors(srv: _Server, texts: List[str]) -> np.ndarray:
    st, body = _get(srv.url + "/v1/embeddings", {"input": texts, "model": "m"})
    if st != 200:
        raise RuntimeError(f"{srv.name}: /v1/embeddings answered {st}: {body[:200]}")
    return np.array([d["embedding"] for d in json.loads(body)["data"]], dtype=np.float64)


def _worst_cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.min(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def run_once(srv: _Server, clients: int, batch: int, rounds: int) -> float:
    """Embedded prompt tokens per second: `clients` threads, each posting `rounds` batches."""
    toks, errors = [0] * clients, []

    def client(i: int) -> None:
        for r in range(rounds):
            texts = [TEXTS[((i * rounds + r) * batch + j) % len(TEXTS)] for j in range(batch)]
            st, body = _get(srv.url + "/v1/embeddings", {"input": texts, "model": "m"})
            if st != 200:
                errors.append(f"{srv.name}: {st} {body[:200]}")
                return
            toks[i] += json.loads(body)["usage"]["prompt_tokens"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    return sum(toks) / (time.perf_counter() - t0)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pooling", default="mean", choices=["mean", "cls", "last"])
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--batch", type=int, default=8, help="texts per request")
    p.add_argument("--rounds", type=int, default=4, help="requests per client per repeat")
    p.add_argument("-r", "--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    srvs = start(a.model, a.threads, a.pooling, a.clients)
    try:
        alone = {s.name: np.vstack([vectors(s, [t]) for t in TEXTS]) for s in srvs}
        cos = _worst_cos(alone["pyriver"], alone["llama-server"])
        batch_vs_alone = {s.name: _worst_cos(vectors(s, TEXTS), alone[s.name]) for s in srvs}
        for s in srvs:   # warm-up
            run_once(s, a.clients, a.batch, 1)
        runs: Dict[str, List[float]] = {s.name: [] for s in srvs}
        ratios = []
        for r in range(a.repeats):
            order = srvs if r % 2 == 0 else srvs[::-1]
            got = {s.name: run_once(s, a.clients, a.batch, a.rounds) for s in order}
            for k, v in got.items():
                runs[k].append(v)
            ratios.append(got["pyriver"] / got["llama-server"])
            print(f"repeat {r + 1}: " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in got.items())
                  + f", ratio {ratios[-1]:.3f}", flush=True)
    finally:
        for s in srvs:
            s.close()
    out = {"model": a.model, "pooling": a.pooling, "clients": a.clients, "batch": a.batch, "rounds": a.rounds,
           "threads": a.threads, "tok_s": {k: statistics.median(v) for k, v in runs.items()},
           "runs": runs, "ratio_median": statistics.median(ratios), "ratios": ratios, "min_cosine": cos,
           "min_cosine_batch_vs_alone": batch_vs_alone}
    print(f"median: pyriver {out['tok_s']['pyriver']:.1f}, llama-server {out['tok_s']['llama-server']:.1f} tok/s; "
          f"ratio within each repeat {out['ratio_median']:.3f} ({min(ratios):.3f}..{max(ratios):.3f}); "
          f"vectors (each text alone): worst cosine {cos:.6f}; a batch against alone, worst cosine: "
          + ", ".join(f"{k} {v:.6f}" for k, v in batch_vs_alone.items()))
    if a.json:
        write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
