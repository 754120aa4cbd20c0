"""Where the time of issue 71's workloads goes in `pyriver serve` (its default n-gram drafts and
draft store): the server in this process (served through HTTP by uvicorn, as scripts/serve_steps.py),
the bench's batch jobs and agent sessions sent one after another (pyriver.tools.spec_serve's own
requests), every scheduler step and every drafting choice logged.

    python scripts/workload_trace.py MODEL --batch 12 --agents 2 --turns 2 [--flags ...] [--json out.json]

Per request: prompt tokens, the ones the slot's cache held (cache_n), prefill and decode seconds;
the steps, their drafts, kept drafts and the verify sizes chosen; the raw proposals (their length,
their match length and source: the request's own text or the store) against what was drafted of
them; the engine's share of the decode time (the rest is Python: proposals, choices, sampling, the
HTTP path). An oracle reads each answer against the text before it (the prompt, the answer so far
and, for the store, the earlier requests' texts): the share of answer tokens whose 4-gram ending at
them occurs earlier (the copyable share), and what a drafter that knew the answer would keep per
step if it drafted every copy run to its end (the verify steps it needs)."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Dict, List

import uvicorn

from pyriver import models
from pyriver.server import parser, settings
from pyriver.server import app as A
from pyriver.server import drafting as D
from pyriver.server import scheduler as S
from pyriver.tools.serve_bench import _get, _port
from pyriver.tools.spec_serve import _one
from pyriver.tools.workloads import agent_sessions, agent_turn_messages, batch_prompts

STEPS: List[Dict] = []      # per scheduler step: rows, drafts, engine seconds, wall seconds
CHOICES: List[Dict] = []    # per drafting choice: proposal length, match, source, drafted, kept
DONE: List[Dict] = []       # per finished request: n_prompt, tokens
_run_step, _propose_raw = S.Scheduler._run_step, D.proposal
_step, _decide, _finish = S.Scheduler._step, D.LlamaDrafter.decide, D.LlamaDrafter.finish
_lprop = D.LlamaDrafter.propose
LAST: Dict = {}


def _logged_run(self, feeds):
    t = time.perf_counter()
    res = _run_step(self, feeds)
    STEPS[-1]["engine"] += time.perf_counter() - t
    STEPS[-1]["rows"] += sum(len(f.tokens) for f in feeds)
    STEPS[-1]["prompt_rows"] += sum(len(f.tokens) for f in feeds if f.prompt and not f.all_logits)
    return res


def _logged_step(self):
    STEPS.append({"engine": 0.0, "rows": 0, "prompt_rows": 0, "t0": time.perf_counter()})
    _step(self)
    STEPS[-1]["wall"] = time.perf_counter() - STEPS[-1]["t0"]


def _logged_proposal(model, tokens):
    out = _propose_raw(model, tokens)
    LAST.update(n=len(out), prop=list(out), match=getattr(model, "match_size", 0), store=bool(getattr(model, "from_store", False)),
                end=getattr(model, "match_end", -1), ctx=len(tokens))
    return out


def _logged_propose(self, want):
    LAST.clear()
    out = _lprop(self, want)
    for seq, d in out.items():
        CHOICES.append({"seq": seq, "prop": LAST.get("n", 0), "match": LAST.get("match", 0),
                        "store": LAST.get("store", False), "ctx": LAST.get("ctx", 0),
                        "key": self.keys.get(seq) if LAST else None, "drafted": len(d),
                        "kept": None if d else 0,   # decide() counts a drafting step's; a step without drafts kept none
                        "limit": want[seq][1], "looked": bool(LAST), "tokens": LAST.get("prop", [])})
    return out


def _logged_decide(self, seq, rows, drafts, hist, sampler, is_eog):
    out = _decide(self, seq, rows, drafts, hist, sampler, is_eog)
    for c in reversed(CHOICES):
        if c["seq"] == seq:
            c["kept"] = len(out) - 1
            break
    return out


def _logged_finish(self, seq, tokens):
    DONE.append({"n_prompt": self.n_prompt.get(seq), "tokens": list(tokens)})
    return _finish(self, seq, tokens)


S.Scheduler._run_step, S.Scheduler._step = _logged_run, _logged_step
D.proposal, D.LlamaDrafter.propose, D.LlamaDrafter.decide = _logged_proposal, _logged_propose, _logged_decide
D.LlamaDrafter.finish = _logged_finish


def serve(model: str, flags, threads: int):
    a = parser().parse_args([model, "--threads", str(threads), "--ctx", "2048", "--parallel", "1"] + flags)
    srv = A.Server(settings(a))
    u = uvicorn.Server(uvicorn.Config(A.build_app(srv), host="127.0.0.1", port=_port(), log_level="warning"))
    u.install_signal_handlers = lambda: None
    th = threading.Thread(target=u.run, daemon=True)
    th.start()
    while not u.started or srv.llm is None:
        if srv.error:
            raise RuntimeError(srv.error)
        time.sleep(0.05)
    return f"http://127.0.0.1:{u.config.port}", u, th, srv


def request(url: str, messages, n: int) -> Dict:
    """One chat request through the bench's own call, with its timings and the steps it ran."""
    s0, c0, d0 = len(STEPS), len(CHOICES), len(DONE)
    t = time.perf_counter()
    status, text = _get(url + "/v1/chat/completions", {"messages": messages, "max_tokens": n, "temperature": 0.0})
    wall = time.perf_counter() - t
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {text[:300]}")
    body = json.loads(text)
    tm = body.get("timings") or {}
    time.sleep(0.05)   # the slot's finish runs after the response is sent
    steps, choices = STEPS[s0:], CHOICES[c0:]
    done = DONE[d0] if len(DONE) > d0 else {"n_prompt": None, "tokens": []}
    return {"wall": wall, "completion_tokens": body["usage"]["completion_tokens"], "drafted": tm.get("draft_n", 0),
            "accepted": tm.get("draft_n_accepted", 0), "steps": steps, "choices": choices, "n_prompt": done["n_prompt"],
            "history": done["tokens"], "timings": tm, "text": body["choices"][0]["message"]["content"]}


def oracle(history: List[int], n_prompt: int, earlier: List[List[int]], n: int = 4) -> Dict:
    """The answer's copyable share: tokens whose n-gram ending at them occurs in the text before them
    (own: the prompt and the answer so far; store: also the earlier requests' texts); and the verify
    steps a drafter that drafts each copy run to its end would need (a run: tokens each copyable,
    the whole run one step plus the token after it)."""
    seen_own, seen_all = set(), set()
    for t in earlier:
        for i in range(n - 1, len(t)):
            seen_all.add(tuple(t[i - n + 1:i + 1]))
    for i in range(n - 1, n_prompt):
        g = tuple(history[i - n + 1:i + 1])
        seen_own.add(g)
        seen_all.add(g)
    own = allc = 0
    flags = []
    for i in range(n_prompt, len(history)):
        g = tuple(history[i - n + 1:i + 1])
        o, a = g in seen_own, g in seen_all
        own += o
        allc += a
        flags.append(a)
        seen_own.add(g)
        seen_all.add(g)
    steps, i = 0, 0
    while i < len(flags):   # each step: a run of copyable tokens drafted and kept, then one token of the model's
        while i < len(flags) and flags[i]:
            i += 1
        steps += 1
        i += 1
    m = len(history) - n_prompt
    return {"answer": m, "own": own / m if m else 0.0, "with_store": allc / m if m else 0.0,
            "oracle_steps": steps}


def summarize(name: str, r: Dict, earlier: List[List[int]]) -> Dict:
    steps = [s for s in r["steps"] if s["rows"]]
    dec = [s for s in steps if not s["prompt_rows"]]
    pre = [s for s in steps if s["prompt_rows"]]
    ch = [c for c in r["choices"] if c["kept"] is not None]
    drafting = [c for c in ch if c["drafted"]]
    o = oracle(r["history"], r["n_prompt"] or 0, earlier) if r["n_prompt"] else {}
    t = r["timings"] or {}
    hist = r["history"]
    for c in ch:   # what the whole proposal would have kept: its agreement with the answer
        want = hist[c["ctx"]:c["ctx"] + len(c["tokens"])]
        c["would"] = next((j for j, (x, y) in enumerate(zip(c["tokens"], want)) if x != y), len(want))
    denied = [c for c in ch if c["looked"] and c["prop"] and not c["drafted"]]
    capped = [c for c in drafting if c["drafted"] == c["kept"] and c["prop"] > c["drafted"]]
    out = {
        "name": name, "wall": r["wall"], "tokens": r["completion_tokens"], "prompt": r["n_prompt"],
        "cache_n": t.get("cache_n"), "prompt_n": t.get("prompt_n"), "prompt_s": (t.get("prompt_ms") or 0) / 1e3,
        "prefill_engine_s": sum(s["engine"] for s in pre), "decode_engine_s": sum(s["engine"] for s in dec),
        "decode_wall_s": sum(s["wall"] for s in dec), "decode_steps": len(dec),
        "drafted": r["drafted"], "accepted": r["accepted"], "drafting_steps": len(drafting),
        "mean_kept_when_drafting": statistics.mean(c["kept"] for c in drafting) if drafting else 0.0,
        "verify_sizes": sorted(c["drafted"] + 1 for c in drafting),
        "store_steps": sum(c["store"] for c in drafting), "store_kept": sum(c["kept"] for c in drafting if c["store"]),
        "denied": len(denied), "denied_by_match": _hist(c["match"] for c in denied),
        "denied_would_keep": _hist(c["would"] for c in denied),
        "denied_would_keep_sum": sum(c["would"] for c in denied),
        "all_kept_but_cut": len(capped), "cut_lost": sum(c["would"] - c["kept"] for c in capped),
        "keys_drafted": _hist(c["key"] for c in drafting), **{f"oracle_{k}": v for k, v in o.items()},
        # the raw record, for replays (scripts/draft_sim.py's answers: prompt, answer) and step costs
        "n_prompt": r["n_prompt"], "history": r["history"],
        "step_log": [[s["rows"], s["prompt_rows"], round(s["engine"], 5)] for s in steps],
        "choice_log": [[c["prop"], c["match"], c["store"], c["key"], c["drafted"], c["kept"], c["would"]] for c in ch],
    }
    return out


def _short(r: Dict) -> Dict:
    return {k: v for k, v in r.items() if k not in ("history", "step_log", "choice_log")}


def _hist(xs) -> Dict:
    h: Dict = {}
    for x in xs:
        h[str(x)] = h.get(str(x), 0) + 1
    return dict(sorted(h.items()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--agents", type=int, default=2)
    p.add_argument("--turns", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--gen-tokens", type=int, default=256)
    p.add_argument("--flags", nargs="*", default=[], help="pyriver serve's flags (default: none, its defaults)")
    p.add_argument("--json")
    a = p.parse_args()
    url, u, th, srv = serve(str(models.resolve(a.model)), a.flags, a.threads)
    results, earlier = [], []
    try:
        _one(url, [{"role": "user", "content": "Hi"}], 4, {})   # warm-up
        time.sleep(0.05)
        earlier = [d["tokens"] for d in DONE]
        for i, prompt in enumerate(batch_prompts(a.batch)):
            r = request(url, [{"role": "user", "content": prompt}], a.gen_tokens)
            results.append(summarize(f"batch{i}", r, earlier))
            earlier.append(r["history"])
            print(json.dumps(_short(results[-1])), flush=True)
        for si, (first, steps) in enumerate(agent_sessions(a.agents, a.turns)):
            answers: List[str] = []
            for turn in range(len(steps) + 1):
                msgs = agent_turn_messages(first, steps[:turn], answers)
                r = request(url, msgs, a.gen_tokens)
                results.append(summarize(f"agent{si}.{turn}", r, earlier))
                earlier.append(r["history"])
                print(json.dumps(_short(results[-1])), flush=True)
                answers.append(r["text"])   # fed back as the bench does
    finally:
        u.should_exit = True
        th.join()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
