"""`pyriver bench --serve`: OpenAI-compatible servers under 1, 2, 4 and 8 concurrent streams, same
model and threads: pyriver's server (River off, and River on under each batch rule when --river is
given) against, with --competitor, llama-cpp-python's server (`python -m llama_cpp.server`, which
answers one request at a time), llama-cpp-python's batched example server (`examples/server/server.py`
of its sdist, over the low-level bindings, configured by a JSON file: batched_config) and llama.cpp's
`llama-server --parallel N` (continuous batching; built once into the cache: llama_server.py). Every server runs in its own process on a loopback
port; within each repeat the servers rotate, so machine noise falls on all. Reported per server
and stream count, medians over repeats: aggregate decode tok/s (all streams' tokens over the wall
time from the first request to the last token), time to first token and inter-token latency p50
and p95 (over every stream's gaps). With --json-schema every server also runs the same requests
under a JSON schema (the `json_schema` field both servers take), interleaved with the plain ones:
the cost of the grammar, and pyriver's constrained throughput against llama-server's.

With --chat the requests are chat completions (/v1/chat/completions, streamed, greedy, up to
--gen-tokens each) of the built-in code-edit and chat prompts (tools/prompts.py), as a client
sends them: each stream sends --requests-per-stream requests one after the other, alternating a
code-edit and a chat prompt, and tok/s is end to end: every request's completion tokens (the
server's own usage.completion_tokens) over the wall time from the first request sent to the last
answer read, prompt processing, template rendering and HTTP included. Each user message opens with
a tag of its repeat, level and request, so that no prompt is found in a slot's cache from an
earlier request (the system prompt the template adds still is, on both servers alike)."""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import http.client
import urllib.error
import urllib.request

# Plain-completion openings (the chat prompts of tools/prompts.py end at once without a template).
PROMPTS = ["The history of the river begins in the mountains, where", "def quicksort(items):",
           "Once upon a time, in a small village by the sea,", "The three laws of motion state that",
           "Dear hiring manager, I am writing to apply for", "import json\n\ndef load_config(path):",
           "The recipe for a simple bread needs flour, water,", "In the year 1850, the town of"]


# The built-in schema of --json-schema builtin: nested objects, an array, an enum, required fields.
SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string"}, "year": {"type": "integer"},
    "kind": {"enum": ["story", "letter", "code", "science", "history"]},
    "people": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "role": {"type": "string"}}, "required": ["name", "role"]}},
    "summary": {"type": "string"}}, "required": ["title", "year", "kind", "people", "summary"]}


def load_schema(arg):
    """The schema of --json-schema: builtin, or a JSON file."""
    if arg in (None, "builtin"):
        return None if arg is None else SCHEMA
    with open(arg) as f:
        return json.load(f)


def _get(url: str, body=None, timeout=600):
    """(status, text) of a GET, or of a POST with a JSON body."""
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _lines(url: str, body: dict, path: str = "/v1/completions"):
    """The lines of a streamed POST as they arrive."""
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        for line in iter(r.readline, b""):
            yield line.decode().strip()
    finally:
        conn.close()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    def __init__(self, name: str, argv: List[str], port: int, tmpdir: Optional[str] = None):
        self.name, self.port, self.tmpdir = name, port, tmpdir   # tmpdir: removed on close (a config file)
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.time() + 300
        while time.time() < end:
            try:
                if _get(self.url + "/v1/models", timeout=2)[0] == 200:
                    return
            except (OSError, urllib.error.URLError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name}: the server exited ({self.proc.returncode})")
            time.sleep(0.2)
        raise TimeoutError(f"{name}: not ready after 300 s")

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


BATCHED = "llama-cpp-python batched server"


def batched_script() -> Path:
    """llama-cpp-python's batched example server, in the unpacked sdist of the installed version."""
    from pyriver.tools.llama_server import sdist_root
    return sdist_root() / "examples" / "server" / "server.py"


def gpu_flags(a) -> Dict[str, List[str]]:
    """Each server's flags for `--n-gpu-layers` (every server gets the bench's placement: llama-server's
    own default is 'auto', which offloads on a GPU machine even when pyriver's server does not)."""
    n = getattr(a, "n_gpu_layers", 0) or 0
    return {"pyriver": ["--n-gpu-layers", str(n)] if n else [],
            "llama-server": ["-ngl", "all" if n < 0 else str(n)],
            "llama_cpp.server": ["--n_gpu_layers", str(n)] if n else []}


def attn_flags(a) -> Dict[str, List[str]]:
    """Each server's flags for the bench's attention (--flash-attn, else off), named for every server
    whatever its own default (pyriver serve's and llama-server's is flash attention)."""
    on = bool(getattr(a, "flash_attn", False))
    return {"pyriver": ["-fa", "on" if on else "off"], "llama-server": ["-fa", "on" if on else "off"],
            "llama_cpp.server": ["--flash_attn", str(on)]}


def batched_config(path: str, threads: int, slots: int, port: int, n_gpu_layers: int = 0,
                   flash_attn: bool = False) -> Dict:
    """server.py's -C config for the bench: the local GGUF (model.path, not from_pretrained: no hub), the
    same slots, positions, threads and attention (flash_attn: the bench's --flash-attn) as the
    others, and one 1024-position cache per sequence (kv_unified off), as llama-server's explicit
    --parallel N lays out -c 1024*N (server.py's default is one cache shared by all sequences)."""
    return {"server": {"host": "127.0.0.1", "port": port},
            "model": {"path": path, "alias": os.path.basename(path), "n_ctx": 1024 * slots, "n_seq_max": slots,
                      "threads": threads, "threads_batch": threads, "flash_attn": flash_attn, "kv_unified": False,
                      **({"n_gpu_layers": n_gpu_layers} if n_gpu_layers else {})}}


def script_dependencies(text: str) -> List[str]:
    """The distribution names in a script's inline metadata (`# /// script` ... `# ///`, PEP 723)."""
    m = re.search(r"^# /// script\s*$(.*?)^# ///\s*$", text, re.S | re.M)
    if not m:
        return []
    body = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in m.group(1).splitlines())
    dm = re.search(r"^dependencies\s*=\s*\[", body, re.M)
    if not dm:
        return []
    items, pos = [], dm.end()   # the quoted strings up to the list's "]" (a requirement may hold brackets)
    item = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)')\s*,?""")
    while (t := item.match(body, pos)):
        items.append(t.group(1) if t.group(1) is not None else t.group(2))
        pos = t.end()
    return [re.split(r"[\s\[<>=!~;]", d.strip(), maxsplit=1)[0] for d in items]


def missing_distributions(names: List[str]) -> List[str]:
    out = []
    for n in names:
        try:
            importlib.metadata.distribution(n)
        except importlib.metadata.PackageNotFoundError:
            out.append(n)
    return out


# server.py imports these lazily, for features the bench does not use (the hub, MTMD's embedding cache,
# the websocket transport of /v1/responses): not needed to serve /v1/completions from a local file
BATCHED_OPTIONAL = {"safetensors", "websockets", "huggingface-hub"}


def batched_server(a, path: str) -> _Server:
    script = batched_script()
    missing = [d for d in missing_distributions(script_dependencies(script.read_text())) if d not in BATCHED_OPTIONAL]
    if missing:
        raise RuntimeError(f"{BATCHED}: {script} needs {', '.join(missing)} (pip install {' '.join(missing)})")
    tmp = tempfile.mkdtemp(prefix="pyriver-batched-")
    cfg = Path(tmp) / "config.json"
    cfg.write_text(json.dumps(batched_config(path, a.threads, max(a.streams), p := _port(),
                                                    getattr(a, "n_gpu_layers", 0) or 0,
                                                    bool(getattr(a, "flash_attn", False))), indent=1))
    try:
        return _Server(BATCHED, [sys.executable, str(script), "-C", str(cfg)], p, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def server_name(batch_rule: str, exit_rule: str = "checked") -> str:
    """A River server's name: its batch rule, then its exit rule unless checked."""
    return f"pyriver river {batch_rule}" + ("" if exit_rule == "checked" else f" {exit_rule}")


def to_checked(res: Dict[str, Dict[int, List[Dict]]], a) -> Dict[str, Dict[int, Dict[str, float]]]:
    """Each forecast-rule River server against the checked one of its batch rule: medians of the
    ratios within each repeat (tok/s, ITL p95)."""
    out = {}
    for rule in a.batch_rules if a.river else []:
        for er in getattr(a, "exit_rules", None) or []:
            n, ref = server_name(rule, er), server_name(rule)
            if er != "checked" and n in res and ref in res:
                out[n] = {k: {m: paired_ratio(runs, res[ref][k], m) for m in ("tok_s", "itl_p95")}
                          for k, runs in res[n].items()}
    return out


def servers(a, path: str) -> List[_Server]:
    out: List[_Server] = []
    try:
        _start(a, path, out)
    except BaseException:   # one that cannot start: stop those already up
        for s in out:
            s.close()
        raise
    return out


def _start(a, path: str, out: List[_Server]) -> None:
    # plain decoding, as llama-server runs without --spec-type (drafting: `pyriver bench --spec-serve`);
    # the bench's attention (--flash-attn, else off), as every server of this bench
    gpu, attn = gpu_flags(a), attn_flags(a)
    base = [sys.executable, "-m", "pyriver.server", path, "--threads", str(a.threads), "--ctx", "1024",
            "--parallel", str(max(a.streams)), "--no-lossless", *attn["pyriver"], "--engine", getattr(a, "engine", "auto"), *gpu["pyriver"],
            "--metrics"]   # the river servers' exits are read from /metrics
    out.append(_Server("pyriver", base + ["--port", str(p := _port())], p))
    if a.not_batch_invariant:
        out.append(_Server("pyriver not batch-invariant", base + ["--not-batch-invariant", "--port", str(p := _port())], p))
    if getattr(a, "batch_invariant", False):
        out.append(_Server("pyriver batch-invariant", base + ["--batch-invariant", "-fa", "off",   # its attention
                                                                 "--port", str(p := _port())], p))
    if a.river:
        for rule in a.batch_rules:
            for er in getattr(a, "exit_rules", None) or ["checked"]:   # checked servers keep their names
                argv = base + ["--river", a.river, "--batch-rule", rule, "--exit-rule", er, "--port", str(p := _port())]
                if a.tau:
                    argv += ["--tau", str(a.tau[0])]
                out.append(_Server(server_name(rule, er), argv, p))
    # llama-cpp-python's server takes no json_schema field; under --chat's long answers its one request at a
    # time would take most of the run, and the anchor is llama-server
    if a.competitor and not a.json_schema and not getattr(a, "chat", False):
        argv = [sys.executable, "-m", "llama_cpp.server", "--model", path, "--n_threads", str(a.threads),
                "--n_threads_batch", str(a.threads), "--n_ctx", "1024", "--interrupt_requests", "False",
                *gpu["llama_cpp.server"], *attn["llama_cpp.server"], "--port", str(p := _port())]
        out.append(_Server("llama-cpp-python server", argv, p))
    # the batched example server takes no json_schema field either (it ignores it: unconstrained answers), and
    # its chat streams carry no usage (no stream_options.include_usage), which --chat's tok/s counts
    if a.competitor and not a.json_schema and not getattr(a, "chat", False):
        out.append(batched_server(a, path))
    if a.competitor:
        # llama.cpp's own batching server, as pyriver's: --parallel slots of 1024 positions each
        # (-c is shared among slots), the same threads and attention as the others.
        from pyriver.tools.llama_server import ensure
        n = max(a.streams)
        argv = [str(ensure(a.threads)), "-m", path, "-t", str(a.threads), "-tb", str(a.threads), "-c", str(1024 * n),
                "--parallel", str(n), *attn["llama-server"], *gpu["llama-server"], "--host", "127.0.0.1", "--port", str(p := _port())]
        out.append(_Server("llama-server", argv, p))


def _stream(url: str, prompt: str, n: int, t0: float, rec: Dict, schema=None) -> None:
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0.0, "stream": True}
    if schema is not None:
        body["json_schema"] = schema
    times = []
    for line in _lines(url, body):
        if line.startswith("data: ") and line != "data: [DONE]":
            ch = json.loads(line[6:])
            if ch.get("choices") and ch["choices"][0].get("text"):
                times.append(time.perf_counter())
    rec["ttft"] = times[0] - t0 if times else float("nan")
    rec["gaps"] = [b - a for a, b in zip(times, times[1:])]
    rec["tokens"] = len(times)
    rec["end"] = times[-1] if times else t0


def run_level(srv: _Server, k: int, n: int, schema=None) -> Dict:
    recs = [dict() for _ in range(k)]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=_stream, args=(srv.url, PROMPTS[i % len(PROMPTS)], n, t0, recs[i], schema))
               for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gaps = sorted(g for r in recs for g in r["gaps"])
    pct = lambda q: gaps[min(len(gaps) - 1, int(q * len(gaps)))] if gaps else float("nan")   # noqa: E731
    return {"tok_s": sum(r["tokens"] for r in recs) / (max(r["end"] for r in recs) - t0),
            "ttft_p50": statistics.median(r["ttft"] for r in recs), "ttft_p95": max(r["ttft"] for r in recs),
            "itl_p50": pct(0.5), "itl_p95": pct(0.95)}


def chat_messages(rep: int, k: int, stream: int, j: int) -> List[Dict]:
    """The messages of request j of a stream at level k in repeat rep: code-edit and chat prompts in
    turn, each user message opening with a tag of its own (no earlier prompt shares it)."""
    from pyriver.tools.prompts import CODE_EDIT_PROMPTS, PROMPTS
    i = stream * 97 + j   # spread over the prompts
    text = CODE_EDIT_PROMPTS[i // 2 % len(CODE_EDIT_PROMPTS)][1] if j % 2 == 0 else PROMPTS[i // 2 % len(PROMPTS)][1]
    return [{"role": "user", "content": f"[{rep}.{k}.{stream}.{j}] {text}"}]


def _chat(url: str, messages: List[Dict], n: int, rec: Dict) -> None:
    """One streamed greedy chat completion; rec gets its send and token times, tokens and text."""
    body = {"messages": messages, "max_tokens": n, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}
    rec["t_send"] = time.perf_counter()
    times, parts, usage = [], [], None
    for line in _lines(url, body, "/v1/chat/completions"):
        if line.startswith("data: ") and line != "data: [DONE]":
            ch = json.loads(line[6:])
            if ch.get("usage"):
                usage = ch["usage"]
            if ch.get("choices") and ch["choices"][0].get("delta", {}).get("content"):
                times.append(time.perf_counter())
                parts.append(ch["choices"][0]["delta"]["content"])
    rec["end"] = time.perf_counter()
    rec["ttft"] = times[0] - rec["t_send"] if times else float("nan")
    rec["gaps"] = [b - a for a, b in zip(times, times[1:])]
    rec["tokens"] = usage["completion_tokens"] if usage else len(times)
    rec["prompt_tokens"] = usage["prompt_tokens"] if usage else 0
    rec["text"] = "".join(parts)


def run_chat_level(srv: _Server, k: int, n: int, per_stream: int, rep: int) -> Dict:
    """k streams of per_stream chat requests each, one after the other within a stream: end-to-end tok/s."""
    recs = [[dict() for _ in range(per_stream)] for _ in range(k)]

    def stream(i):
        for j in range(per_stream):
            _chat(srv.url, chat_messages(rep, k, i, j), n, recs[i][j])
    t0 = time.perf_counter()
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [r for rs in recs for r in rs]
    gaps = sorted(g for r in flat for g in r["gaps"])
    pct = lambda q: gaps[min(len(gaps) - 1, int(q * len(gaps)))] if gaps else float("nan")   # noqa: E731
    return {"tok_s": sum(r["tokens"] for r in flat) / (max(r["end"] for r in flat) - t0),
            "ttft_p50": statistics.median(r["ttft"] for r in flat), "ttft_p95": max(r["ttft"] for r in flat),
            "itl_p50": pct(0.5), "itl_p95": pct(0.95), "tokens": sum(r["tokens"] for r in flat),
            "prompt_tokens": sum(r["prompt_tokens"] for r in flat), "texts": [r["text"] for r in flat]}


def paired_ratio(runs: List[Dict], ref: List[Dict], key: str) -> float:
    """The median over repeats of runs[i][key] / ref[i][key]: each ratio from one repeat, where the
    two servers ran seconds apart, so the shared machine's slow and fast spells fall on both."""
    return statistics.median(a[key] / b[key] for a, b in zip(runs, ref))


def _texts(srv: _Server, n: int) -> List[str]:
    """Greedy texts of the first 8 prompts, requested together."""
    out = [""] * 8

    def one(i):
        _, text = _get(srv.url + "/v1/completions", {"prompt": PROMPTS[i], "max_tokens": n, "temperature": 0.0})
        out[i] = json.loads(text)["choices"][0]["text"]
    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _metric(srv: _Server, name: str) -> float:
    for line in _get(srv.url + "/metrics", timeout=10)[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def fidelity(srvs: List[_Server], n: int) -> Dict[str, Dict]:
    """River servers against pyriver's River off on the same 8 greedy requests: texts equal, the
    mean share of the full-depth text each keeps before it first differs, the exits (/metrics)."""
    ref = _texts(srvs[0], n)
    out = {}
    for s in srvs[1:]:
        if not s.name.startswith("pyriver river"):
            continue
        got = _texts(s, n)
        prefix = [len(os.path.commonprefix([a, b])) / max(1, len(a)) for a, b in zip(ref, got)]
        out[s.name] = {"texts_equal": sum(a == b for a, b in zip(ref, got)) / len(ref),
                       "prefix_share": statistics.mean(prefix),
                       "mean_exit_block": _metric(s, "pyriver_mean_exit_block"),
                       "river_work_share": _metric(s, "pyriver_river_work_share")}
    return out


SCHEMA_TAG = " +json-schema"


def main(a) -> int:
    from pyriver import models
    path = str(models.resolve(a.model))
    schema = load_schema(getattr(a, "json_schema", None))
    chat = getattr(a, "chat", False)
    if chat and schema is not None:
        raise ValueError("--chat and --json-schema: one or the other")
    a.json_schema = schema
    srvs = servers(a, path)
    # each (server, schema or None) is one entry: the constrained runs sit beside the plain ones
    entries = [(s, None) for s in srvs] + ([(s, schema) for s in srvs] if schema is not None else [])
    name = lambda e: e[0].name + (SCHEMA_TAG if e[1] is not None else "")   # noqa: E731
    res: Dict[str, Dict[int, List[Dict]]] = {name(e): {k: [] for k in a.streams} for e in entries}
    try:
        for s, sc in entries:   # warm-up
            run_chat_level(s, 1, 8, 1, -1) if chat else run_level(s, 1, 8, sc)
        for rep in range(a.repeats):
            order = entries[rep % len(entries):] + entries[:rep % len(entries)]
            for k in a.streams:
                for e in order:
                    res[name(e)][k].append(run_chat_level(e[0], k, a.gen_tokens, a.requests_per_stream, rep) if chat
                                           else run_level(e[0], k, a.gen_tokens, e[1]))
        fid = {} if chat else fidelity(srvs, a.gen_tokens)
    finally:
        for s in srvs:
            s.close()
    texts = {}   # with --chat: of each repeat's answers, how many are llama-server's text (greedy: the same work)
    if "llama-server" in res:
        texts = {n: {k: [sum(x == y for x, y in zip(r.get("texts", []), ref.get("texts", [])))
                         for r, ref in zip(runs, res["llama-server"][k])] for k, runs in lv.items()}
                 for n, lv in res.items() if n != "llama-server" and chat}
    for lv in res.values():
        for runs in lv.values():
            for r in runs:
                r.pop("texts", None)
    med = {n: {k: {m: statistics.median(r[m] for r in runs) for m in runs[0]} for k, runs in lv.items()}
           for n, lv in res.items()}
    print(f"{'server':<40}{'streams':>8}{'tok/s':>9}{'TTFT p50':>10}{'p95':>8}{'ITL p50 ms':>12}{'p95':>8}")
    for n, lv in med.items():
        for k, m in lv.items():
            print(f"{n:<40}{k:>8}{m['tok_s']:>9.1f}{m['ttft_p50']:>10.3f}{m['ttft_p95']:>8.3f}"
                  f"{1000 * m['itl_p50']:>12.1f}{1000 * m['itl_p95']:>8.1f}")
    if chat:
        print(f"medians over {a.repeats} repeats; chat completions, {a.requests_per_stream} requests a stream (code edit, "
              f"chat, ...), up to {a.gen_tokens} tokens each, greedy; end-to-end tok/s; {a.threads} threads")
        for n, lv in texts.items():
            print(f"  {n}: answers equal to llama-server's, per repeat: "
                  + "  ".join(f"{k}: {v}" for k, v in lv.items()))
    else:
        print(f"medians over {a.repeats} repeats; {a.gen_tokens} tokens a stream, greedy; {a.threads} threads")
    ratios = {}
    if "llama-server" in res:   # each entry against llama-server under the same schema (or none)
        ref = lambda n: res["llama-server" + (SCHEMA_TAG if n.endswith(SCHEMA_TAG) else "")]   # noqa: E731
        ratios = {n: {k: {m: paired_ratio(runs, ref(n)[k], m) for m in ("tok_s", "itl_p95")} for k, runs in lv.items()}
                  for n, lv in res.items() if n not in ("llama-server", "llama-server" + SCHEMA_TAG)}
        print("against llama-server (under the same schema), medians of the ratios within each repeat (tok/s, ITL p95):")
        for n, lv in ratios.items():
            print(f"  {n:<38}" + "  ".join(f"{k}: {r['tok_s']:.3f}x {r['itl_p95']:.3f}x" for k, r in lv.items()))
    # each entry against pyriver's server (River off) under the same schema (or none), within each repeat
    base = lambda n: res["pyriver" + (SCHEMA_TAG if n.endswith(SCHEMA_TAG) else "")]   # noqa: E731
    to_pyriver = {n: {k: {m: paired_ratio(runs, base(n)[k], m) for m in ("tok_s", "itl_p95")} for k, runs in lv.items()}
                  for n, lv in res.items() if n not in ("pyriver", "pyriver" + SCHEMA_TAG)}
    if to_pyriver:
        print("against pyriver (under the same schema), medians of the ratios within each repeat (tok/s, ITL p95):")
        for n, lv in to_pyriver.items():
            print(f"  {n:<38}" + "  ".join(f"{k}: {r['tok_s']:.3f}x {r['itl_p95']:.3f}x" for k, r in lv.items()))
    checked = to_checked(res, a)
    if checked:
        print("against the checked exit rule of the same batch rule, medians of the ratios within each repeat "
              "(tok/s, ITL p95):")
        for n, lv in checked.items():
            print(f"  {n:<38}" + "  ".join(f"{k}: {r['tok_s']:.3f}x {r['itl_p95']:.3f}x" for k, r in lv.items()))
    cost = {}
    if schema is not None:   # each server against itself without the schema
        cost = {s.name: {k: paired_ratio(res[s.name + SCHEMA_TAG][k], res[s.name][k], "tok_s") for k in a.streams}
                for s in srvs}
        print("json-schema tok/s against the same server without it, medians of the ratios within each repeat:")
        for n, lv in cost.items():
            print(f"  {n:<38}" + "  ".join(f"{k}: {r:.3f}x" for k, r in lv.items()))
    for n, f in fid.items():
        print(f"{n}: texts equal to River off {f['texts_equal']:.2f}, text kept before the first difference "
              f"{f['prefix_share']:.2f}, mean exit block {f['mean_exit_block']:.1f}, river work {f['river_work_share']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"medians": med, "ratios_to_llama_server": ratios, "ratios_to_pyriver": to_pyriver,
                       "ratios_to_checked": checked, "schema_cost": cost, "runs": res,
                       "fidelity": fid, "schema": schema, "texts_equal_to_llama_server": texts,
                       "conditions": {"model": path, "threads": a.threads, "streams": a.streams, "repeats": a.repeats,
                                      "river": a.river, "tau": a.tau, "batch_rules": a.batch_rules,
                                      "exit_rules": getattr(a, "exit_rules", None) or ["checked"],
                                      "gen_tokens": a.gen_tokens, "chat": chat, "pyriver_engine": getattr(a, "engine", "auto"),
                                      "requests_per_stream": a.requests_per_stream if chat else None}}, f, indent=1)
    return 0
