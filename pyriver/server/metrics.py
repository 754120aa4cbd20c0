"""Counters of the server in Prometheus' text format (no client library: a handful of lines)."""
from __future__ import annotations

import threading
import time


class Metrics:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0            # accepted requests
        self.finished = 0
        self.tokens = 0              # generated tokens
        self.decode_steps = 0
        self.decode_tokens = 0       # decode-step tokens (one per sequence and step)
        self.decode_s = 0.0
        self.exit_sum = 0            # exit blocks of the decode-step tokens, summed
        self.exit_n = 0
        self.river_blocks = 0        # blocks those tokens ran on the river
        self.all_blocks = 0
        self.n_slots = 0
        self.sched = None
        self.started = time.time()

    def step(self, n_decode: int, seconds: float) -> None:
        with self.lock:
            if n_decode:
                self.decode_steps += 1
                self.decode_tokens += n_decode
                self.decode_s += seconds

    def request_done(self, req, n_layer: int) -> None:
        with self.lock:
            self.finished += 1
            self.tokens += req.n_generated
            self.exit_sum += sum(req.exits)
            self.exit_n += len(req.exits)
            self.river_blocks += sum(n_layer - 1 - e for e in req.exits)
            self.all_blocks += n_layer * len(req.exits)

    def render(self) -> str:
        with self.lock:
            rows = [
                ("pyriver_requests_total", "counter", "requests accepted", self.requests),
                ("pyriver_requests_finished_total", "counter", "requests finished (any way)", self.finished),
                ("pyriver_tokens_generated_total", "counter", "tokens generated", self.tokens),
                ("pyriver_decode_steps_total", "counter", "batched decode steps", self.decode_steps),
                ("pyriver_decode_tokens_per_second", "gauge", "decode-step tokens over decode time, since start",
                 self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0),
                ("pyriver_queue_length", "gauge", "requests waiting for a slot",
                 self.sched.queue_length() if self.sched else 0),
                ("pyriver_slots_busy", "gauge", "slots decoding or reading a prompt",
                 self.sched.busy_slots() if self.sched else 0),
                ("pyriver_slots_total", "gauge", "slots (--parallel)", self.n_slots),
                ("pyriver_mean_exit_block", "gauge", "mean exit block of decode steps (n_layer-1: full depth)",
                 self.exit_sum / self.exit_n if self.exit_n else 0.0),
                ("pyriver_river_work_share", "gauge", "share of block work done on the river",
                 self.river_blocks / self.all_blocks if self.all_blocks else 0.0),
            ]
        out = []
        for name, kind, help_text, value in rows:
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(out) + "\n"
