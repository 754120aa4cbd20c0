"""Memory of several processes (or several Llama objects) on one model file: weights read from
the file mapping are page-cache pages shared by every mapper, so the proportional set size (PSS:
each shared page divided among its mappers) of N processes should stay near one copy.

    python -m pyriver_dev.memshare --procs 3
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional

from pyriver import models

CHILD = r"""
import sys, pyriver
llms = [pyriver.Llama(sys.argv[1], n_ctx=256, n_threads=1, verbose=False) for _ in range(int(sys.argv[2]))]
outs = [l("The river", max_tokens=8, temperature=0)["choices"][0]["text"] for l in llms]
print(repr(outs[0]), len(set(outs)), flush=True)
sys.stdin.read()   # hold the memory until the parent has measured
"""


def smaps(pid: int, path: str) -> Dict[str, float]:
    """Rss and Pss (MiB) of the whole process and of its mappings of `path`."""
    tot = {"rss": 0, "pss": 0, "file_rss": 0, "file_pss": 0}
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts[0].endswith(":"):   # a mapping's header line: range perms offset dev inode [path]
                cur = parts[-1] if len(parts) >= 6 else None
                continue
            if parts[0] in ("Rss:", "Pss:"):
                kib = int(parts[1])
                key = parts[0][:-1].lower()
                tot[key] += kib
                if cur == path:
                    tot["file_" + key] += kib
    return {k: v / 1024 for k, v in tot.items()}


def measure(model: Optional[str] = None, procs: int = 3, per_proc: int = 1, timeout: float = 300) -> Dict:
    path = os.path.realpath(models.resolve(model))
    children: List[subprocess.Popen] = []
    try:
        outs = []
        for _ in range(procs):
            p = subprocess.Popen([sys.executable, "-c", CHILD, path, str(per_proc)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            children.append(p)
        deadline = time.time() + timeout
        for p in children:
            line = p.stdout.readline()
            if not line or time.time() > deadline:
                raise RuntimeError("a child process failed to load the model")
            outs.append(line.strip())
        rows = [smaps(p.pid, path) for p in children]
    finally:
        for p in children:
            try:
                p.stdin.close()
            except OSError:
                pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    return {"model": path, "procs": procs, "llamas_per_proc": per_proc, "outputs": outs, "per_process": rows,
            "sum_rss": sum(r["rss"] for r in rows), "sum_pss": sum(r["pss"] for r in rows),
            "sum_file_pss": sum(r["file_pss"] for r in rows), "file_rss_each": [r["file_rss"] for r in rows]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyriver_dev.memshare")
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--llamas", type=int, default=1, help="Llama objects per process")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    res = [measure(a.model, n, a.llamas) for n in a.procs]
    print(f"{'procs':>5} {'llamas':>6} {'sum RSS':>8} {'sum PSS':>8} {'file PSS':>8} {'file RSS each':>13}  (MiB)")
    for r in res:
        print(f"{r['procs']:>5} {r['llamas_per_proc']:>6} {r['sum_rss']:>8.1f} {r['sum_pss']:>8.1f} "
              f"{r['sum_file_pss']:>8.1f} {max(r['file_rss_each']):>13.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
