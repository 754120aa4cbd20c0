"""Where the server's long inter-token gaps come from: `pyriver serve` in a process of its own with
every scheduler step, every hand-over to the event loop and every token the loop takes traced (by
wrapping them from outside: nothing in pyriver changes), the bench's streamed chat requests sent
to it (`serve_bench.chat_messages`, greedy), and each gap a client saw at or over the p95 laid
against the trace: whether the step that made the later token carried prompt rows, whether the
step itself ran long, or whether the stream's token missed a step (bunched: the loop or the client
late, or a token with no text).

    python scripts/serve_gaps.py MODEL [--streams 4 16] [--requests-per-stream 2] [--gen-tokens 128]
        [--repeats 2] [--json out.json] [--check] [-- SERVER FLAGS]

(--check, or SERVE_GAPS_CHECK=1 in the environment: the arguments and the server's flags checked, nothing run.
SERVE_GAPS_NICE=N: the server's scheduler thread, and the compute threads it starts, at nice N.)

Server flags default to the serve bench's (`--no-lossless --ctx 1024 --threads 2`; `--parallel`
is the level's streams). perf_counter is CLOCK_MONOTONIC on Linux: the two processes' times compare
directly. Also printed: each server thread's CPU a token over the requests (from /proc)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from typing import Dict, List

STEP_LONG = 2.0   # a step "ran long" at this many times the median engine step of its kind


def serve(trace: str, argv: List[str]) -> None:
    """The server with its steps traced; the trace rewritten every half second (a signal ends it)."""
    from pyriver.engine import debug
    from pyriver.server import inbox as I
    from pyriver.server import scheduler as S
    events: List[tuple] = []

    def dump():
        while True:
            time.sleep(0.5)
            with open(trace + ".tmp", "w") as f:
                json.dump(list(events), f)
            os.replace(trace + ".tmp", trace)
    threading.Thread(target=dump, daemon=True).start()

    step, run_step, deliver, get = S.Scheduler._step, S.Scheduler._run_step, I.Inbox._deliver, I.Out.get

    def _step(self):
        t = time.perf_counter()
        step(self)
        events.append(("step", t, time.perf_counter()))

    counted = set()

    def changes(sched):
        """The decoder's graphs, graph changes and captures by ggml-cuda's rule so far (native counters; None
        where the engine has none: the llama.cpp engine)."""
        try:
            c = debug.counters(sched.dec)
            return c["graphs"], c["graph_changes"], c["graph_captures"]
        except Exception:
            return None

    def _run_step(self, feeds):
        if id(self) not in counted:   # the first reset starts comparing graphs
            counted.add(id(self))
            try:
                debug.reset_counters(self.dec)
            except Exception:
                pass
        c0 = changes(self)
        t = time.perf_counter()
        res = run_step(self, feeds)
        t1 = time.perf_counter()
        c1 = changes(self)
        events.append(("run", t, t1, sum(len(f.tokens) for f in feeds),
                       sum(len(f.tokens) for f in feeds if f.prompt and not f.all_logits),
                       None if c0 is None or c1 is None else [b - a for a, b in zip(c0, c1)]))
        return res

    def _deliver(self):
        t = time.perf_counter()
        deliver(self)
        events.append(("deliver", t))

    async def _get(self):
        item = await get(self)
        if item[0] == "token":
            events.append(("get", time.perf_counter(), id(self)))
        return item

    S.Scheduler._step, S.Scheduler._run_step = _step, _run_step
    if os.environ.get("SERVE_GAPS_NICE"):   # the scheduler thread (and the compute threads it starts) at this nice
        run = S.Scheduler._run

        def _run(self):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), int(os.environ["SERVE_GAPS_NICE"]))
            run(self)
        S.Scheduler._run = _run
    I.Inbox._deliver, I.Out.get = _deliver, _get
    from pyriver.server import main
    sys.argv = ["pyriver.server"] + argv
    main()


def thread_cpu(pid: int) -> Dict[str, float]:
    """Each thread's CPU seconds so far (user and system), by "tid:name"."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            st = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        except OSError:
            continue
        out[f"{tid}:{name}"] = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    return out


def q(xs: List[float], p: float) -> float:
    """The bench's percentile (serve_bench.run_chat_level's): the sorted value at int(p * n)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def level(a, k: int, flags: List[str]) -> Dict:
    """One server at k streams: its requests' gaps and its trace, analysed."""
    from pyriver.tools.serve_bench import _Server, _chat, _port, chat_messages
    trace = os.path.abspath(f"{a.trace}.{k}")
    if os.path.exists(trace):
        os.remove(trace)
    port = _port()
    srv = _Server("pyriver", [sys.executable, os.path.abspath(__file__), "--serve", trace, "--", a.model,
                              "--parallel", str(k), "--port", str(port)] + flags, port)
    recs: List[Dict] = []
    try:
        cpu0 = thread_cpu(srv.proc.pid)
        for rep in range(a.repeats):
            rs = [[dict() for _ in range(a.requests_per_stream)] for _ in range(k)]

            def stream(i):
                for j in range(a.requests_per_stream):
                    _chat(srv.url, chat_messages(rep, k, i, j), a.gen_tokens, rs[i][j])
            ths = [threading.Thread(target=stream, args=(i,)) for i in range(k)]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
            recs += [r for x in rs for r in x]
        cpu = {n: v - cpu0.get(n, 0.0) for n, v in thread_cpu(srv.proc.pid).items()}
        main_thread = f"{srv.proc.pid}:"
        time.sleep(1.5)   # the trace's last rewrite
    finally:
        srv.close()
    res = analyse(recs, json.load(open(trace)))
    n = max(1, res["tokens_traced"])
    res["cpu_ms_per_token"] = {name: round(v * 1e3 / n, 4) for name, v in sorted(cpu.items(), key=lambda x: -x[1])[:6]}
    res["event_loop_cpu_ms_per_token"] = round(next(v for n_, v in cpu.items() if n_.startswith(main_thread)) * 1e3 / n, 4)
    return res


def analyse(recs: List[Dict], events: List[tuple]) -> Dict:
    runs = [e for e in events if e[0] == "run"]
    steps = [e for e in events if e[0] == "step"]
    delivers = [e[1] for e in events if e[0] == "deliver"]
    gets: Dict[int, List[float]] = {}
    for e in events:
        if e[0] == "get":
            gets.setdefault(e[2], []).append(e[1])
    gaps = []   # (gap, earlier token's arrival, later token's arrival) at the client
    for r in recs:
        times = [r["t_send"] + r["ttft"]]
        for g in r["gaps"]:
            times.append(times[-1] + g)
        gaps += [(b - a, a, b) for a, b in zip(times, times[1:])]
    ms = lambda x: round(x * 1e3, 3)   # noqa: E731
    decode = [e[2] - e[1] for e in runs if e[4] == 0]
    med_decode = statistics.median(decode) if decode else float("nan")
    p95 = q([g for g, _, _ in gaps], 0.95)
    causes = {"prompt rows": 0, "slow step": 0, "bunched": 0, "other": 0}
    for g, a, b in gaps:
        if g < p95:
            continue
        inside = [e for e in runs if a < e[2] <= b]
        if any(e[4] for e in inside):
            causes["prompt rows"] += 1
        elif len(inside) > 1:
            causes["bunched"] += 1
        elif inside and inside[0][2] - inside[0][1] >= STEP_LONG * med_decode:
            causes["slow step"] += 1
        else:
            causes["other"] += 1
    counted = [e for e in runs if len(e) > 5 and e[5] is not None]
    changed = [e for e in counted if e[5][1] > 0]
    long_changed = sum(1 for g, a, b in gaps if g >= p95 and any(a < e[2] <= b and (e[5][1] or e[5][2]) for e in counted))
    lag = []   # a step's end to the loop's next delivery
    j = 0
    for s in steps:
        while j < len(delivers) and delivers[j] < s[2]:
            j += 1
        if j < len(delivers):
            lag.append(delivers[j] - s[2])
    server_gaps = [b - a for ts in gets.values() for a, b in zip(ts, ts[1:])]
    python = []   # each step's time outside its engine call (a step that found nothing to run has none)
    j = 0
    for s in steps:
        while j < len(runs) and runs[j][1] < s[1]:
            j += 1
        if j < len(runs) and runs[j][2] <= s[2]:
            python.append(s[2] - s[1] - (runs[j][2] - runs[j][1]))
    between = [b[1] - a[2] for a, b in zip(steps, steps[1:])]
    return {"gaps": len(gaps), "itl_p50_ms": ms(q([g for g, _, _ in gaps], 0.5)), "itl_p95_ms": ms(p95),
            "itl_p99_ms": ms(q([g for g, _, _ in gaps], 0.99)),
            "loop_itl_p50_ms": ms(q(server_gaps, 0.5)), "loop_itl_p95_ms": ms(q(server_gaps, 0.95)),
            "steps": len(runs), "steps_with_prompt_rows": sum(1 for e in runs if e[4]),
            "decode_step_p50_ms": ms(med_decode), "decode_step_p95_ms": ms(q(decode, 0.95)),
            "prompt_step_p50_ms": ms(q([e[2] - e[1] for e in runs if e[4]], 0.5)),
            "python_in_step_p50_ms": ms(q(python, 0.5)), "python_in_step_p95_ms": ms(q(python, 0.95)),
            "between_steps_p50_ms": ms(q(between, 0.5)), "between_steps_p95_ms": ms(q(between, 0.95)),
            "step_to_delivery_p50_ms": ms(q(lag, 0.5)), "step_to_delivery_p95_ms": ms(q(lag, 0.95)),
            "deliveries": len(delivers), "tokens_traced": sum(len(v) for v in gets.values()),
            "gaps_at_or_over_p95": causes,
            # ggml-cuda's rule (native/counters.cpp): a step whose graph differs runs uncaptured, the next
            # unchanged one captures it again; the CPU computes the same graphs, so the count holds for a GPU
            "steps_counted": len(counted), "steps_changing_graph": len(changed),
            "steps_capturing_graph": sum(1 for e in counted if e[5][2] > 0),
            "decode_steps_changing_graph": sum(1 for e in changed if e[4] == 0),
            "graphs_per_step": round(sum(e[5][0] for e in counted) / max(1, len(counted)), 3),
            "gaps_at_or_over_p95_with_a_graph_change_or_capture": long_changed}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[sys.argv.index("--") + 1:])
        return
    argv = sys.argv[1:]
    flags = argv[argv.index("--") + 1:] if "--" in argv else ["--no-lossless", "--ctx", "1024", "--threads", "2"]
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--streams", type=int, nargs="+", default=[4])
    p.add_argument("--requests-per-stream", type=int, default=2)
    p.add_argument("--gen-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--trace", default="/tmp/serve_gaps.trace")
    p.add_argument("--json", default=None)
    p.add_argument("--check", action="store_true", help="check the arguments and the server's flags, run nothing")
    a = p.parse_args(argv)
    from pyriver.server import parser as server_parser
    server_parser().parse_args([a.model, "--parallel", str(max(a.streams))] + flags)   # bad flags fail here, before any server
    if a.check or os.environ.get("SERVE_GAPS_CHECK"):
        return
    from pyriver import models
    a.model = str(models.resolve(a.model))
    out = {"model": a.model, "flags": flags, "repeats": a.repeats, "requests_per_stream": a.requests_per_stream,
           "gen_tokens": a.gen_tokens, "levels": {}}
    for k in a.streams:
        r = out["levels"][k] = level(a, k, flags)
        print(f"{k} streams: ITL p50 {r['itl_p50_ms']} p95 {r['itl_p95_ms']} ms (on the loop {r['loop_itl_p50_ms']} / "
              f"{r['loop_itl_p95_ms']}); {r['steps']} steps, {r['steps_with_prompt_rows']} with prompt rows; decode step "
              f"p50 {r['decode_step_p50_ms']} p95 {r['decode_step_p95_ms']} ms, prompt step p50 {r['prompt_step_p50_ms']}; "
              f"Python in a step p50 {r['python_in_step_p50_ms']} p95 {r['python_in_step_p95_ms']}; step end -> loop "
              f"p50 {r['step_to_delivery_p50_ms']} p95 {r['step_to_delivery_p95_ms']}; event loop CPU "
              f"{r['event_loop_cpu_ms_per_token']} ms a token\n  gaps at or over the p95: {r['gaps_at_or_over_p95']}, "
              f"{r['gaps_at_or_over_p95_with_a_graph_change_or_capture']} over a graph change or capture; steps changing the graph "
              f"{r['steps_changing_graph']} of {r['steps_counted']} ({r['decode_steps_changing_graph']} without prompt rows), capturing it "
              f"{r['steps_capturing_graph']}, "
              f"{r['graphs_per_step']} graphs a step", flush=True)
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
