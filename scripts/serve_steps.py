"""The server's steps against the verify cost table the drafts are chosen by: `pyriver serve` plain
(--no-lossless) and default, in this process one at a time (each loaded, served through HTTP by
uvicorn, closed), alternated, the same prompts sent as concurrent requests; every scheduler step
logged (its rows, decoding slots, drafts, prompt rows, engine time).

    python scripts/serve_steps.py MODEL [--kind edit|chat|batch|agent] [--streams 4] [--repeats 2] [--prompts 4]

Prints each run's wall time, tokens and steps, then, for the decode steps (no prompt rows), the
median ms by the step's rows beside what the default's table (`draft_cost="auto"`, measured at its
load) says such a step costs: where a size's measured/1-row ratio stands above the table's, the
draft length rule (pyriver.speculative.draftlen) buys drafts at a price the server does not pay. It is what
`scripts/draft_sim.py run` (the rule replayed on the table) cannot see (docs/lossless-xeon.md, the Zen 3's
4-stream code edits)."""
from __future__ import annotations

import argparse
import statistics
import threading
import time

import uvicorn

from pyriver import models
from pyriver.server import parser, settings
from pyriver.server import app as A
from pyriver.server import scheduler as S
from pyriver.tools.prompts import PROMPTS, SERVE_EDIT_PROMPTS
from pyriver.tools.serve_bench import _port
from pyriver.tools.workloads import agent_sessions, batch_prompts
from pyriver.tools.spec_serve import run_group   # the bench's own groups, so the two measure alike

LOG = []   # (config, rows, slots, drafts, prompt rows, seconds, context: the longest decoding slot's cache)
RUN = {"name": None}
_run_step = S.Scheduler._run_step


def _logged(self, feeds):
    dec = [f for f in feeds if f.all_logits or not f.prompt]
    context = max((self.dec.pos(f.seq) for f in dec), default=0)
    t = time.perf_counter()
    res = _run_step(self, feeds)
    dt = time.perf_counter() - t
    LOG.append((RUN["name"], sum(len(f.tokens) for f in feeds), len(dec),
                sum(len(f.tokens) - 1 for f in dec if f.all_logits),
                sum(len(f.tokens) for f in feeds if f.prompt and not f.all_logits), dt, context))
    return res


S.Scheduler._run_step = _logged


def serve(model: str, flags, streams: int, threads: int):
    """A loaded server behind uvicorn on a free port: (url, uvicorn server, its thread, Server)."""
    a = parser().parse_args([model, "--threads", str(threads), "--ctx", "4096", "--parallel", str(streams)] + flags)
    srv = A.Server(settings(a))
    app = A.build_app(srv)
    u = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=_port(), log_level="warning"))
    u.install_signal_handlers = lambda: None
    th = threading.Thread(target=u.run, daemon=True)
    th.start()
    while not u.started or srv.llm is None:   # the model loads in the lifespan's thread
        if srv.error:
            raise RuntimeError(srv.error)
        time.sleep(0.05)
    return f"http://127.0.0.1:{u.config.port}", u, th, srv


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--kind", choices=("edit", "chat", "batch", "agent"), default="edit")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--gen-tokens", type=int, default=256)
    p.add_argument("--flash-attn", choices=("on", "off"), default="on")
    a = p.parse_args()
    model = str(models.resolve(a.model))
    if a.kind == "batch":   # the bench's batch jobs and agent sessions (pyriver.tools.workloads)
        prompts = batch_prompts(a.prompts)
    elif a.kind == "agent":
        prompts = agent_sessions(a.prompts, 2)
    else:
        pool = [q for _, q in SERVE_EDIT_PROMPTS] if a.kind == "edit" else [q for k, q in PROMPTS if k == "chat"]
        prompts = pool[:a.prompts]
    configs = {"plain": ["--no-lossless", "-fa", a.flash_attn], "default": ["-fa", a.flash_attn]}
    table = None
    for r in range(a.repeats):
        for name in (list(configs) if r % 2 == 0 else list(configs)[::-1]):
            url, u, th, srv = serve(model, configs[name], a.streams, a.threads)
            try:
                if name == "default" and srv.sched.drafter is not None and srv.sched.drafter.cost is not None:
                    table = srv.sched.drafter.cost
                RUN["name"] = None
                run_group(url, ["Hi"], 4)   # warm-up, not logged
                RUN["name"] = f"{name}:{r}"
                g = run_group(url, prompts, a.gen_tokens)
            finally:
                u.should_exit = True
                th.join()   # the app's lifespan stops the scheduler and closes the model
            steps = [x for x in LOG if x[0] == RUN["name"]]
            toks = sum(g["tokens"])
            print(f"repeat {r} {name:8s} wall {toks / g['tok_s']:7.2f} s  {toks} tokens  {g['tok_s']:6.2f} tok/s  {len(steps)} steps  "
                  f"engine {sum(x[5] for x in steps):7.2f} s", flush=True)
    print(f"\ndecode steps by rows (no prompt rows): median ms, over the 1-row median; the default's table "
          f"at each step's context (median){'' if table is None else ' ' + repr(table)}")
    for name in configs:
        by, tabs, ctxs = {}, {}, {}
        for x in LOG:
            if x[0] is not None and x[0].startswith(name + ":") and x[4] == 0:
                key = (x[1], x[2])   # rows, decoding slots
                by.setdefault(key, []).append(x[5] * 1e3)
                ctxs.setdefault(key, []).append(x[6])
                if table is not None:
                    tabs.setdefault(key, []).append(table.at(x[6]).interp(x[1]))   # in single steps at that context
        one = statistics.median(by[(1, 1)]) if (1, 1) in by else None
        print(name)
        for key in sorted(by):
            ms = statistics.median(by[key])
            rel = f"{ms / one:5.2f}" if one else "    -"
            tab = "-" if table is None else f"{statistics.median(tabs[key]):5.2f}"
            print(f"  {key[0]:3d} rows  {key[1]} slots  {len(by[key]):4d} steps  {ms:8.1f} ms  context "
                  f"{statistics.median(ctxs[key]):6.0f}  measured {rel}  table {tab}")


if __name__ == "__main__":
    main()
