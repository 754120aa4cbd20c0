"""Counters of the server in Prometheus' text format (no client library: a handful of lines):
llama-server's `llamacpp:*` series (its names, help and types, counted as its timings count a
request: prompt_n, cache_n, predicted_n) and pyriver's own `pyriver_*` ones."""
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
        # llama-server's (server_metrics): per finished request, per step
        self.prompt_n = 0            # prompt tokens computed (timings.prompt_n), cached ones apart
        self.prompt_cached = 0       # prompt tokens found in a cache (timings.cache_n)
        self.prompt_s = 0.0
        self.predicted_n = 0         # tokens sampled (timings.predicted_n)
        self.predicted_s = 0.0
        self.n_decode = 0            # steps run (prompt chunks included), llama_decode() calls
        self.busy_sum = 0            # busy slots summed over those steps
        self.n_tokens_max = 0        # the longest sequence (prompt and generation) a request reached
        self.draft_tokens = 0
        self.draft_accepted = 0
        self.draft_steps = 0
        # the throughput gauges' window: since the last scrape (llama-server's bucket, reset by /metrics)
        # prompt tokens, prompt seconds, decode steps (the first token comes with the prompt), generation seconds
        self.bucket = [0, 0.0, 0, 0.0]

    def step(self, n_decode: int, seconds: float, busy: int = 0) -> None:
        with self.lock:
            self.n_decode += 1
            self.busy_sum += busy
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
            t_end = time.perf_counter()
            t_first = req.t_first or t_end
            prompt_n, prompt_s = len(req.prompt) - req.n_cached, max(0.0, t_first - (req.t_start or req.t_submit))
            steps, predicted_s = max(0, req.n_decoded - 1), max(0.0, t_end - t_first)
            self.prompt_n += prompt_n
            self.prompt_cached += req.n_cached
            self.prompt_s += prompt_s
            self.predicted_n += req.n_decoded
            self.predicted_s += predicted_s
            b = self.bucket
            b[0], b[1], b[2], b[3] = b[0] + prompt_n, b[1] + prompt_s, b[2] + steps, b[3] + predicted_s
            self.n_tokens_max = max(self.n_tokens_max, len(req.prompt) + req.n_decoded)
            ls = req.lossless
            if ls is not None:
                self.draft_tokens += ls["drafted"]
                self.draft_accepted += ls["accepted"]
                self.draft_steps += ls["verify_steps"]

    def llamacpp_rows(self):
        """llama-server's /metrics series (server_task_result_metrics::to_metrics), under self.lock."""
        busy = self.sched.busy_slots() if self.sched else 0
        return [
            ("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens", self.prompt_n),
            ("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache", self.prompt_cached),
            ("prompt_seconds_total", "counter", "Total time spent processing prompts", self.prompt_s),
            ("tokens_predicted_total", "counter", "Number of generation tokens processed", self.predicted_n),
            ("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens", self.predicted_s),
            ("n_decode_total", "counter", "Total number of llama_decode() calls, excluding speculative decoding and "
             "multimodal decoding", self.n_decode),
            ("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)", self.n_tokens_max),
            ("spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated",
             self.draft_tokens),
            ("spec_decode_num_accepted_tokens_total", "counter", "Speculative: Total draft tokens accepted by the "
             "target model", self.draft_accepted),
            ("spec_decode_num_drafts_total", "counter", "Speculative: Total speculative decoding verification steps",
             self.draft_steps),
            ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s",
             self.bucket[0] / self.bucket[1] if self.bucket[1] > 0 else 0.0),
            ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s",
             self.bucket[2] / self.bucket[3] if self.bucket[3] > 0 else 0.0),
            ("requests_processing", "gauge", "Number of requests processing", busy),
            ("requests_deferred", "gauge", "Number of requests deferred", self.sched.queue_length() if self.sched else 0),
            ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call",
             self.busy_sum / max(self.n_decode, 1)),
        ]

    def render(self) -> str:
        with self.lock:
            rows = [("llamacpp:" + n, k, h, v) for n, k, h, v in self.llamacpp_rows()] + [
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
            self.bucket = [0, 0.0, 0, 0.0]   # a scrape closes the window, as llama-server's reset_bucket
        out = []
        for name, kind, help_text, value in rows:
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(out) + "\n"
