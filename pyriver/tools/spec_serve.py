"""`pyriver bench --spec-serve`: lossless drafting in the servers people run, end to end. pyriver
serve (plain, and each of its drafting settings) against llama-server plain and with its own
n-gram speculative decoding (--spec-type ngram-simple, ngram-mod, ngram-map-k), the same model,
threads and chat prompts (code edits whose answer rewrites the prompt's code, prompts.SERVE_EDIT_PROMPTS,
and short chat prompts), greedy, at most --gen-tokens tokens, through /v1/chat/completions.

Each round starts every server afresh for each stream count (all listening, one computing at a
time) and sends each prompt to each server in turn, the order rotated per prompt; with --streams 4
the prompts of each kind go in groups of four concurrent requests (a kind's last group may be
smaller). Reported per server, prompt kind and stream count: end-to-end tokens per second as a client sees them (completion tokens over the wall time of the request,
prompt processing included; for a group, all its tokens over the group's wall time), as the ratio
to plain llama-server on the same prompt (or group) and round, median (min..max) over prompts and
rounds; and how many texts equal plain llama-server's.

--batch-prompts and --agent-sessions add the workloads whose text repeats across requests
(pyriver.tools.workloads, issue 71): batch jobs (one instruction over many items, sent in order)
and agent loops (sessions of turns, each turn a request with the conversation so far: an agent
session is one item, its turns sent one after another, its tokens over its wall time). Per server
and kind the drafts' acceptance (accepted over drafted tokens) and the accepted tokens per request,
from each response's timings (draft_n, draft_n_accepted: llama-server's and pyriver's)."""
from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from typing import Dict, List, Tuple

from pyriver.tools.prompts import LONG_EDIT_PROMPTS, PROMPTS, SERVE_EDIT_PROMPTS
from pyriver.tools.workloads import agent_sessions, agent_turn_messages, batch_prompts
from pyriver.tools.serve_bench import _get, _port, _Server, attn_flags, gpu_flags

LLAMA_SPEC_TYPES = ("ngram-simple", "ngram-mod", "ngram-map-k")
# pyriver's settings: name -> the command-line flags after the model
PYRIVER_SETTINGS = {
    "pyriver plain": ["--no-lossless"],
    "pyriver default": [],   # its n-gram drafts learn across requests (the draft store, in memory)
    "pyriver no store": ["--no-draft-store"],
}


def configs(a, path: str) -> List[Tuple[str, List[str]]]:
    """(name, argv) of every server, each with one slot per stream and 2048 positions a slot."""
    from pyriver.tools.llama_server import ensure
    n = max(a.streams)
    exe = str(ensure(a.threads))
    gpu, attn = gpu_flags(a), attn_flags(a)
    ls = [exe, "-m", path, "-t", str(a.threads), "-tb", str(a.threads), "-c", str(2048 * n), "--parallel", str(n),
          *attn["llama-server"], *gpu["llama-server"], "--host", "127.0.0.1"]
    # "none" (llama-server's own name for no speculation) asks for plain llama-server only, as no types do
    types = LLAMA_SPEC_TYPES if a.llama_spec_types is None else [t for t in a.llama_spec_types if t != "none"]
    out = [("llama-server", ls)] + [(f"llama-server {t}", ls + ["--spec-type", t]) for t in types]
    out += [(f"llama-server {extra}", ls + extra.split()) for extra in getattr(a, "llama_server_setting", None) or []]
    py = [sys.executable, "-m", "pyriver.server", path, "--threads", str(a.threads), "--ctx", "2048",
          "--parallel", str(n), *attn["pyriver"], *gpu["pyriver"]]
    settings = dict(PYRIVER_SETTINGS)
    for extra in a.pyriver_setting or []:
        settings[f"pyriver {extra}"] = extra.split()
    out += [(name, py + flags) for name, flags in settings.items()]
    return out


def prompt_set(a) -> List[Tuple[str, object]]:
    edits = [p for _, p in SERVE_EDIT_PROMPTS][:a.edit_prompts]
    longs = [p for _, p in LONG_EDIT_PROMPTS][:getattr(a, "long_edit_prompts", 0)]
    chats = [p for kind, p in PROMPTS if kind == "chat"][:a.chat_prompts]
    batch = batch_prompts(getattr(a, "batch_prompts", 0))
    agents = agent_sessions(getattr(a, "agent_sessions", 0), getattr(a, "agent_turns", 4))
    return [("code-edit", p) for p in edits] + [("long-edit", p) for p in longs] + [("chat", p) for p in chats] \
        + [("batch", p) for p in batch] + [("agent", p) for p in agents]


KINDS = ("code-edit", "long-edit", "chat", "batch", "agent")


def _ask(url: str, prompt, n: int, rec: Dict) -> None:
    """One request (prompt: a user message's text, or an agent session: its turns in order)."""
    if isinstance(prompt, tuple):
        first, steps = prompt
        answers: List[str] = []
        for turn in range(len(steps) + 1):
            one: Dict = {}
            _one(url, agent_turn_messages(first, steps[:turn], answers), n, one)
            answers.append(one["text"])
            for k in ("tokens", "drafted", "accepted", "requests"):
                rec[k] = rec.get(k, 0) + one[k]
        rec["text"] = "\n\x00\n".join(answers)
        return
    _one(url, [{"role": "user", "content": prompt}], n, rec)


def _one(url: str, messages: List[Dict], n: int, rec: Dict) -> None:
    status, text = _get(url + "/v1/chat/completions", {"messages": messages, "max_tokens": n, "temperature": 0.0})
    body = json.loads(text)
    if status != 200:
        raise RuntimeError(f"{url}: HTTP {status}: {text[:300]}")
    rec["tokens"] = body["usage"]["completion_tokens"]
    rec["text"] = body["choices"][0]["message"]["content"]
    t = body.get("timings") or {}
    rec["drafted"], rec["accepted"], rec["requests"] = t.get("draft_n", 0), t.get("draft_n_accepted", 0), 1


def run_group(url: str, prompts: List, n: int) -> Dict:
    """The prompts as concurrent requests: their tokens over the group's wall time, and their texts."""
    recs = [dict() for _ in prompts]
    threads = [threading.Thread(target=_ask, args=(url, p, n, r)) for p, r in zip(prompts, recs)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if any("text" not in r for r in recs):
        raise RuntimeError(f"{url}: a request failed")
    return {"tok_s": sum(r["tokens"] for r in recs) / wall, "texts": [r["text"] for r in recs],
            "tokens": [r["tokens"] for r in recs], "drafted": sum(r["drafted"] for r in recs),
            "accepted": sum(r["accepted"] for r in recs), "requests": sum(r["requests"] for r in recs)}


def _spread(v: List[float]) -> Dict:
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)} if v else None


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def main(a) -> int:
    from pyriver import models
    path = str(models.resolve(a.model))
    cfgs = configs(a, path)
    pset = prompt_set(a)
    # rows[(server, streams)] -> list of (kind, tok/s, texts, tokens, (drafted, accepted, requests)) per group and round
    rows: Dict[Tuple[str, int], List[Tuple]] = {}
    for rnd, k in ((rnd, k) for rnd in range(a.repeats) for k in a.streams):
        # fresh servers for each stream count: what a server keeps across requests (prompt caches,
        # llama-server's ngram-mod table) never holds the answers the other stream count already gave
        srvs = []
        try:
            for name, argv in cfgs:
                srvs.append(_Server(name, argv + ["--port", str(p := _port())], p))
            for s in srvs:   # warm-up: the first request of a fresh server pays for page faults
                run_group(s.url, ["Hi"], 4)
            groups = [g[i:i + k] for g in ([p for p in pset if p[0] == kind] for kind in KINDS)
                      for i in range(0, len(g), k)]
            for gi, group in enumerate(groups):
                order = srvs[(gi + rnd) % len(srvs):] + srvs[:(gi + rnd) % len(srvs)]
                kind = group[0][0]
                for s in order:
                    r = run_group(s.url, [p for _, p in group], a.gen_tokens)
                    rows.setdefault((s.name, k), []).append((kind, r["tok_s"], r["texts"], r["tokens"],
                                                             (r["drafted"], r["accepted"], r["requests"])))
                    print(f"round {rnd} streams {k} group {gi} {kind:<9} {s.name:<32} {r['tok_s']:7.2f} tok/s",
                          file=sys.stderr, flush=True)
        finally:
            for s in srvs:
                s.close()
    report: Dict = {"model": path, "threads": a.threads, "gen_tokens": a.gen_tokens, "rounds": a.repeats,
                    "prompts": {kind: sum(1 for k, _ in pset if k == kind) for kind in KINDS}, "servers": {}}
    print(f"model {path}  threads {a.threads}  {a.repeats} rounds  at most {a.gen_tokens} tokens, greedy")
    print("end-to-end tok/s over plain llama-server's on the same prompt (group) and round: median (min..max); "
          "texts equal to plain llama-server's")
    for k in a.streams:
        ref = rows[("llama-server", k)]
        for name, _ in cfgs:
            runs = rows[(name, k)]
            out = {}
            for kind in KINDS:
                pairs = [(r, b) for r, b in zip(runs, ref) if r[0] == kind]
                if not pairs:
                    continue
                ratios = [r[1] / b[1] for r, b in pairs]
                same = sum(x == y for r, b in pairs for x, y in zip(r[2], b[2]))
                total = sum(len(r[2]) for r, _ in pairs)
                drafted, accepted, requests = (sum(r[4][i] for r, _ in pairs) for i in range(3))
                out[kind] = {"ratio": _spread(ratios), "tok_s": _spread([r[1] for r, _ in pairs]),
                             "texts_equal": [same, total], "tokens_equal": sum(r[3] == b[3] for r, b in pairs),
                             "drafted": drafted, "accepted": accepted, "requests": requests,
                             "acceptance": accepted / drafted if drafted else None,
                             "accepted_per_request": accepted / requests if requests else None}
            report["servers"].setdefault(name, {})[str(k)] = out
            print(f"{name:<34} streams {k}  " + "  ".join(
                f"{kind}: {v['ratio']['median']:.2f}x ({v['ratio']['min']:.2f}..{v['ratio']['max']:.2f}) "
                f"{v['texts_equal'][0]}/{v['texts_equal'][1]} acc {_pct(v['acceptance'])} "
                f"{v['accepted_per_request']:.1f}/req" for kind, v in out.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0
