"""A seeded request fuzzer for `pyriver serve` over loopback: every endpoint's valid request, one
field at a time given another type, an out-of-range or huge value, dropped, or joined by an unknown
field, and whole bodies broken (not JSON, broken UTF-8, not an object, empty, deep nesting).

Each case must be answered, within the time bound, by a 2xx or an OpenAI-shaped 4xx/501
(`{"error": {...}}`): a 5xx is a failure, no answer in time a hang. At the end no slot may stay
busy (`pyriver_slots_busy` of /metrics, after the streams drained) and the RSS after the run is
compared with the RSS after a warm-up round of the valid requests.

    python -m pyriver_dev.server_fuzz --cases 600 --seed 0 --json fuzz.json
"""
from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

from pyriver.tools.results import write_json

MSGS = [{"role": "user", "content": "Hi"}]
# (path, a valid body): generation bounded by the server's -n
ENDPOINTS: List[Tuple[str, Dict]] = [
    ("/v1/completions", {"prompt": "Rivers are", "max_tokens": 4, "temperature": 0.5, "stop": ["\n"], "logprobs": 2}),
    ("/v1/completions", {"prompt": "Rivers are", "max_tokens": 4, "stream": True}),
    ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 4, "top_p": 0.9, "logprobs": True, "top_logprobs": 2}),
    ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 4, "stream": True, "n": 1}),
    ("/completion", {"prompt": "Rivers are", "n_predict": 4, "n_probs": 2, "logit_bias": [[1, -1.0]]}),
    ("/completion", {"prompt": "Rivers are", "n_predict": 4, "stream": True}),
    ("/tokenize", {"content": "Rivers are", "add_special": True, "with_pieces": True}),
    ("/detokenize", {"tokens": [1, 2, 3]}),
    ("/apply-template", {"messages": MSGS, "add_generation_prompt": True}),
    ("/infill", {"input_prefix": "def f(", "input_suffix": "):", "n_predict": 4}),
    ("/v1/embeddings", {"input": ["Rivers", "are"], "encoding_format": "float"}),
    ("/embeddings", {"content": "Rivers"}),
    ("/rerank", {"query": "river", "documents": ["a river", "a road"], "top_n": 1}),
    ("/v1/responses", {"input": "Rivers are", "max_output_tokens": 4, "instructions": "Be brief."}),
    ("/v1/responses", {"input": [{"role": "user", "content": "Hi"}], "max_output_tokens": 4, "stream": True}),
]
HUGE = "ab " * 200_000
VALUES = [None, True, False, -1, 0, 1, -(2 ** 63), 2 ** 64, 1e308, -1e-308, 0.5, "", "x", HUGE, "\udcff",
          [], [None], [-1], [2 ** 31], list(range(5000)), ["a"] * 1000, {}, {"a": None}, [[[[[]]]]], [{"role": 1}]]


def _value(rng: random.Random):
    v = rng.choice(VALUES)
    return json.loads(json.dumps(v)) if v != "\udcff" else v


def cases(seed: int, n: int) -> List[Tuple[str, bytes, str]]:
    """(path, body bytes, what) of n cases, the same for the same seed."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        path, base = ENDPOINTS[i % len(ENDPOINTS)]
        body = json.loads(json.dumps(base))
        k = rng.random()
        if k < 0.08:
            raw, what = rng.choice([(b"", "empty"), (b"{", "not JSON"), (b"[1, 2]", "a list"), (b"null", "null"),
                                    (b'{"prompt": "\xff\xfe\xc3"}', "broken UTF-8"), (b"[" * 100_000, "deep"),
                                    (b'{"messages": "' + b"\xc3" * 1000 + b'"}', "broken UTF-8 run")])
            out.append((path, raw, what))
            continue
        key = rng.choice(list(body))
        if k < 0.2:
            del body[key]
            what = f"without {key}"
        elif k < 0.3:
            body["unknown_" + str(rng.randrange(100))] = _value(rng)
            what = "an unknown field"
        else:
            body[key] = _value(rng)
            what = f"{key}={json.dumps(body[key], ensure_ascii=True)[:40]}"
        try:
            raw = json.dumps(body).encode("utf-8", "surrogatepass")
        except UnicodeEncodeError:
            raw = json.dumps(body, ensure_ascii=True).encode()
        out.append((path, raw, what))
    return out


def send(port: int, path: str, raw: bytes, timeout: float) -> Tuple[Optional[int], bytes]:
    """(status, body) of one POST; status None when no full answer came in time (a hang)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, raw, {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    except (socket.timeout, TimeoutError):
        return None, b""
    except (ConnectionError, http.client.HTTPException) as e:
        return -1, str(e).encode()
    finally:
        conn.close()


def _allowed_5xx(status: int, body: bytes) -> bool:
    """501 (not built), and 503 queue_full: back-pressure when a request's prompts outnumber the
    free slots and queue (a list of hundreds of prompts), as llama-server answers 503 when busy."""
    if status == 501:
        return True
    try:
        return status == 503 and json.loads(body)["error"]["code"] == "queue_full"
    except (ValueError, KeyError, TypeError):
        return False


def _shaped(status: int, body: bytes) -> bool:
    if 200 <= status < 300:
        return True
    try:
        return isinstance(json.loads(body).get("error"), dict)
    except (ValueError, AttributeError):
        return False


def _get(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def run(model: Optional[str], n: int, seed: int, timeout: float) -> Dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "pyriver.server", *([model] if model else []), "--port", str(port), "-np", "2",
           "-c", "1024", "-n", "8", "-t", "2", "--reranking", "--queue", "8", "--metrics"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.time() + 180
        while time.time() < end:
            try:
                if '"ok"' in _get(port, "/health"):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        for _ in range(2):   # warm-up: every valid request twice, then the RSS to compare with
            for path, body in ENDPOINTS:
                send(port, path, json.dumps(body).encode(), timeout)
        rss0 = _rss_kb(proc.pid)
        counts: Dict[str, int] = {}
        bad: List[Dict] = []
        t0 = time.time()
        trace = []   # the RSS after each tenth of the cases: flat, or still growing at the end
        for i, (path, raw, what) in enumerate(cases(seed, n)):
            if i and i % max(1, n // 10) == 0:
                trace.append(_rss_kb(proc.pid))
            status, body = send(port, path, raw, timeout)
            key = "hang" if status is None else "no answer" if status < 0 else f"{status // 100}xx"
            counts[key] = counts.get(key, 0) + 1
            if status is None or status < 0 or status >= 500 and not _allowed_5xx(status, body) or not _shaped(status, body):
                bad.append({"path": path, "case": what, "status": status, "body": body[:300].decode("utf-8", "replace")})
            if proc.poll() is not None:
                bad.append({"path": path, "case": what, "status": "the server exited"})
                break
        time.sleep(1.0)   # cancelled streams free their slots at the next step
        busy = re.search(r"^pyriver_slots_busy (\d+)", _get(port, "/metrics"), re.M)
        rss1 = _rss_kb(proc.pid)
        n5xx = sum(1 for b in bad if isinstance(b["status"], int) and b["status"] >= 500)
        return {"cases": n, "seed": seed, "seconds": round(time.time() - t0, 1), "counts": counts,
                "5xx": n5xx, "5xx allowed (501, 503 queue_full)": counts.get("5xx", 0) - n5xx,
                "hangs": counts.get("hang", 0), "slots_busy_after": int(busy.group(1)) if busy else None,
                "rss_kb_after_warmup": rss0, "rss_kb_trace": trace, "rss_kb_after": rss1, "failures": bad[:50]}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pyriver_dev.server_fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", default=None, help="GGUF path or registry name (default SmolLM2)")
    p.add_argument("--cases", type=int, default=600)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one request may take before it is a hang")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    res = run(a.model, a.cases, a.seed, a.timeout)
    print(json.dumps({k: v for k, v in res.items() if k != "failures"}, indent=1))
    for f in res["failures"]:
        print("FAIL", f)
    if a.json:
        write_json(a.json, res)
    ok = not res["failures"] and res["slots_busy_after"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
