"""Continuous batching over slots: one thread owns the BatchDecoder. Each step it admits waiting
requests into free slots, frees the slots of finished or abandoned requests, feeds every decoding
slot its last token and the prompts of new requests in chunks (so one long prompt does not stall
the other streams), then samples each slot's next token and hands it to the request's queue.

In lossless mode (a Llama made with lossless=True) each decoding slot drafts first: up to k decode
steps on the River path, every drafting slot in one step each; then its newest token and drafts
run at full depth in the step with the prompt chunks, and each slot keeps what pyriver.speculative.lossless's
rule keeps (its own drafts, its own draft length): the tokens of a stream are full depth's. With
a drafter instead (server.drafting: a draft model, n-gram lookup) the drafts come from it and
its rule decides; with context shift a full slot drops half of its tokens after n_keep and goes on.
A multimodal prompt's media chunk (--mmproj) runs in its slot's sequence as a feed of its own, decoded
before the step's batch (llama-server's order); a text chunk stops where the next media chunk starts."""
from __future__ import annotations

import collections
import concurrent.futures
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from pyriver.speculative import lossless
from pyriver.api.batch import BatchDecoder, Feed
from pyriver.speculative.draftlen import DraftLength
from pyriver.text.grammar import GrammarError
from pyriver.text.logprobs import entry as logprob_entry
from pyriver.engine.sampling import Sampler
from pyriver.server import context_shift, drafting
from pyriver.server.prompt_cache import DEFAULT_MIB, SLOT_SIMILARITY, PromptCache, common_prefix


# Prompt tokens per slot and step beside decoding slots, unless the scheduler is given a number: a
# long prompt then does not stall the streams that decode. With no slot decoding a prompt takes the
# whole batch, as llama-server feeds it: 120 prompt tokens in one step rather than 64 + 56 saves a
# pass over the weights (3% to 6% of such a prompt's time on Qwen2.5-Coder 1.5B, 2 cores).
PROMPT_CHUNK = 64


class QueueFull(Exception):
    """Every slot is busy and the waiting queue is full."""


@dataclass
class Request:
    prompt: List[int]
    sampler: Sampler
    max_tokens: int
    logprobs: Optional[int] = None
    # What the scheduler hands back: ("token", id, piece bytes, logprob entry or None), then one ("end", reason)
    # with reason "stop" (end of generation), "length" (max_tokens or the context) or "error: ..."; out is
    # anything with put(item): a queue.Queue, or on the server's event loop an inbox.Out
    out: "queue.Queue" = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    exits: List[int] = field(default_factory=list)   # exit block of each generated token after the first
    t_submit: float = field(default_factory=time.perf_counter)
    t_first: Optional[float] = None
    t_start: Optional[float] = None   # when a slot took it (its prompt starts)
    # tokens sampled, the end-of-generation token that ended the request included (llama-server's n_decoded)
    n_generated: int = 0
    n_read: Optional[int] = None   # a stop string ended it: the tokens read up to the one that completed it
    logprob_entries: list = field(default_factory=list)   # logprobs.entry of each generated token (logprobs)
    lossless: Optional[dict] = None   # draft statistics in lossless mode (pyriver.speculative.lossless.new_stats)
    n_cached: int = 0   # prompt tokens found in the slot's cache (not computed again)
    # llama-server's id_slot: the slot that must run it (id_slot % slots; -1 or below: any free one); a
    # busy slot makes it wait while later requests go ahead. slot: the one it ran on (-1 until it starts)
    id_slot: int = -1
    slot: int = -1
    probs: Optional[Callable] = None   # (logits, token, history) -> entry, instead of raw logprobs (post-sampling)
    lora: Optional[Tuple[float, ...]] = None   # its LoRA scales, one per adapter; None: the server's at its start
    # llama-server's return_progress (streams): ("progress", {total, cache, processed, time_ms}) items when its
    # slot starts and after each of its prompt chunks, before its first token
    progress: bool = False
    # a multimodal prompt's media chunks by their first position (engine.mtmd.Media); prompt holds
    # NULL_TOKEN there, one per position
    media: Dict[int, object] = field(default_factory=dict)
    # llama-server's cache_prompt: False computes the whole prompt again, none of the slot's cache reused
    # (a row computed alone may differ in its last bits from the same row in a prompt step)
    cache_prompt: bool = True
    # llama-server's n_keep / n_discard (context_shift.plan; None: the server's --keep, half) and
    # n_cache_reuse (None: the server's --cache-reuse)
    n_keep: Optional[int] = None
    n_discard: Optional[int] = None
    n_cache_reuse: Optional[int] = None

    def cancel(self) -> None:
        """The client is gone or has what it wants (a stop string): the slot frees at the next step."""
        self.cancelled.set()

    def stop_at(self, n_read: int) -> None:
        """A stop string was completed by the n_read-th token read: the request ends there."""
        self.n_read = n_read
        self.cancel()

    @property
    def n_decoded(self) -> int:
        """The request's tokens as llama-server counts them (usage.completion_tokens, timings.predicted_n,
        tokens_predicted: its slot's n_decoded): every token sampled, the end-of-generation token that
        ended the answer included, and after a stop string none past the token that completed it
        (the scheduler may have sampled one more before it saw the cancel)."""
        return self.n_generated if self.n_read is None else min(self.n_generated, self.n_read)


class Slot:
    def __init__(self, seq: int):
        self.seq = seq
        self.req: Optional[Request] = None
        self.cached: List[int] = []    # prompt tokens in this sequence's cache (reused by the next request)
        self.pending: List[int] = []   # prompt tokens still to feed
        self.history: List[int] = []   # prompt and generated tokens (penalties)
        self.next_tok: Optional[int] = None
        self.k = 0                     # lossless: the draft length of the next step
        self.dl: Optional[DraftLength] = None   # lossless by cost: the draft length rule (pyriver.speculative.draftlen)
        self.drafts: List[int] = []    # lossless: this step's drafts and the distributions they came from
        self.qs: list = []
        self.last_start = 0            # when it last took a request (the scheduler's count of starts)
        self.last_end = -1             # when its last request ended (the scheduler's count of ends; -1: never used)
        self.task: Optional[Request] = None   # the request it holds, else the last it held (/slots)
        self.lora: Tuple[float, ...] = ()     # the LoRA scales its cache was computed with
        self.media: Dict[int, object] = {}    # its request's media chunks by sequence position


class Scheduler:
    def __init__(self, llm, n_slots: int, batch_rule: str = "split", queue_max: int = 64,
                 prompt_chunk: Optional[int] = None,
                 metrics=None, drafter=None, ctx_shift: bool = False, handoff: Optional[Callable[[], None]] = None,
                 cache_ram_mib: int = DEFAULT_MIB, kv_pool: Optional[int] = None, cache_idle: bool = True,
                 slot_similarity: float = SLOT_SIMILARITY, log: Optional[Callable[[str], None]] = None,
                 n_keep: int = 0, cache_reuse: int = 0):
        self.llm = llm
        self.n_keep = n_keep   # llama-server's --keep: a request's n_keep when it gives none
        self.cache_reuse = cache_reuse   # llama-server's --cache-reuse (0: off): see _reuse_chunks
        self.log = log   # --verbose: llama-server's debug lines where pyriver does the same thing
        # llama-server's --kv-unified: the tokens all slots may hold together (each may grow to n_ctx); None: no pool
        self.kv_pool = kv_pool
        # llama-server's --cache-ram: a slot's prompt is kept in host memory when another request takes
        # the slot, and loaded back for a request that continues it (0: off; < 0: no limit)
        self.prompt_cache = None if cache_ram_mib == 0 else PromptCache(None if cache_ram_mib < 0 else cache_ram_mib << 20)
        # llama-server's --cache-idle-slots (needs the prompt cache): when a request starts, the idle slots'
        # prompts are saved to the prompt cache, and with --kv-unified their rows are cleared (room in the pool)
        self.cache_idle = cache_idle and self.prompt_cache is not None
        # llama-server's --slot-prompt-similarity: the part of a prompt a free slot's cache must share to be chosen
        self.slot_similarity = slot_similarity
        self.n_ends = 0   # requests ended so far: a slot's last_end orders the least recently used
        # handoff: called before each native step and before the thread waits for work, so that what the
        # requests were handed since reaches them (the server's Inbox.flush: one wake-up of the event loop)
        self.handoff = handoff
        self.spec = llm.speculator   # lossless mode, or None
        if self.spec is not None and drafter is not None:
            raise ValueError("one drafter per server: lossless mode drafts on the River path or with the model's "
                             "draft_model")
        if self.spec is not None and self.spec.draft_model is not None:
            if self.spec.river_fallback:
                raise ValueError("the server's batch step drafts each slot on the River path or from one draft model, "
                                 "not from both (n-grams, else the river): use the river or ngram drafter")
            # lossless mode with a draft model (n-grams): its drafts per slot, as another drafter's
            drafter, self.spec = drafting.LlamaDrafter(self.spec, llm.n_vocab()), None
        self.drafter = drafter   # server.drafting's, or None
        self.ctx_shift = ctx_shift
        self.dec = BatchDecoder(llm, n_slots, batch_rule)
        self.dec.before_step = handoff
        self.n_ctx = self.dec.n_ctx
        # A memory that cannot be cut part-way (a recurrent or hybrid model on the llama.cpp engine)
        # keeps a slot's every token: the next request reuses them whole or not at all (llama-server's rule).
        self.partial_cuts = self.dec.partial_cuts
        # exact drafters verify in a step of their own, batch-invariant, where the decoder can be
        self.split_verify = drafter is not None and drafter.exact and self.dec.can_batch_invariant
        # LoRA (llama-server's): the scales of a request that gives none (POST /lora-adapters sets them on
        # this thread); a step runs the slots of one configuration, the configurations by turns
        self.lora: Tuple[float, ...] = tuple(a.scale for a in getattr(llm, "lora_adapters", ()))
        self.group: Optional[Tuple[float, ...]] = None   # the configuration of this step's slots
        self.slots = [Slot(i) for i in range(n_slots)]
        for s in self.slots:
            s.lora = self.lora
        self.waiting: "collections.deque[Request]" = collections.deque()
        # calls run on this thread between steps (Scheduler.call): (slot or None, fn, future)
        self.calls: collections.deque = collections.deque()
        self.n_starts = 0
        self.queue_max = queue_max
        # prompt tokens per slot and step: a number, always; None, PROMPT_CHUNK while other slots decode
        # and the whole batch when none does (llama-server's: no step then waits on a smaller one)
        self.prompt_chunk = None if prompt_chunk is None else \
            max(1, min(prompt_chunk, self.dec.n_batch - n_slots)) if self.dec.n_batch > n_slots else 1
        self.metrics = metrics
        self.cond = threading.Condition()
        self.vocab_lock = threading.Lock()   # the Vocab's piece buffer is shared: one caller at a time
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="pyriver-scheduler", daemon=True)
        self.thread.start()

    # -- the HTTP side ----------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        with self.cond:
            # A free slot takes one waiting request when the scheduler thread next looks: count
            # them, so that a burst (a multi-prompt /completion) cannot queue past the bound.
            free = sum(1 for s in self.slots if s.req is None)
            if len(self.waiting) >= self.queue_max + free:
                raise QueueFull(f"{len(self.slots) - free} of {len(self.slots)} slots are busy and {len(self.waiting)} requests wait")
            self.waiting.append(req)
            self.cond.notify()

    def call(self, fn: Callable, seq: Optional[int] = None) -> "concurrent.futures.Future":
        """fn run on the scheduler thread between two steps, where it may read every slot and use the
        decoder (llama-server's slot tasks): fn() with seq None, else fn(slot) once slot seq holds no
        request (llama-server defers a slot action while its slot processes). The future has its
        result, or the exception it raised."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self.cond:
            if self._stop:
                fut.set_exception(RuntimeError("the server is shutting down"))
                return fut
            self.calls.append((seq, fn, fut))
            self.cond.notify()
        return fut

    def queue_length(self) -> int:
        return len(self.waiting)

    def busy_slots(self) -> int:
        return sum(1 for s in self.slots if s.req is not None)

    def stop(self) -> None:
        with self.cond:
            self._stop = True
            self.cond.notify()
        self.thread.join(timeout=30)
        self.dec.close()
        if self.drafter is not None:
            self.drafter.close()

    # -- the scheduler thread ----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self.cond:
                while not self._stop and not self.waiting and not self.calls and all(s.req is None for s in self.slots):
                    if self.handoff is not None:
                        self.handoff()
                    self.cond.wait()
                if self._stop:
                    break
                self._calls()
                self._admit()
            try:
                self._step()
            except Exception as e:   # a failed step ends the requests in it, never the thread
                for s in self.slots:
                    if s.req is not None:
                        self._finish(s, f"error: {e}")
                        self.dec.truncate(s.seq, 0)
                        s.cached = []
        for s in self.slots:
            if s.req is not None:
                self._finish(s, "error: the server is shutting down")
        for r in self.waiting:
            r.out.put(("end", "error: the server is shutting down"))
        with self.cond:
            for _seq, _fn, fut in self.calls:
                fut.set_exception(RuntimeError("the server is shutting down"))
            self.calls.clear()
        if self.handoff is not None:
            self.handoff()

    def _calls(self) -> None:
        """Runs the calls whose slot holds no request (in order); the others wait for theirs."""
        later: collections.deque = collections.deque()
        while self.calls:
            seq, fn, fut = self.calls.popleft()
            if seq is not None and self.slots[seq].req is not None:
                later.append((seq, fn, fut))
                continue
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn() if seq is None else fn(self.slots[seq]))
            except Exception as e:   # the caller's to report
                fut.set_exception(e)
        self.calls = later

    def _admit(self) -> None:
        for s in self.slots:
            if s.req is not None and s.req.cancelled.is_set():
                self._finish(s, "cancelled")
        held = []   # requests whose slot is busy: they keep their place in the queue
        while self.waiting:
            free = [s for s in self.slots if s.req is None]
            if not free:
                break
            r = self.waiting.popleft()
            if r.cancelled.is_set():
                r.out.put(("end", "cancelled"))
                continue
            if r.id_slot >= 0:
                want = self.slots[r.id_slot % len(self.slots)]
                if want.req is not None:
                    held.append(r)
                    continue
                free = [want]
            if r.lora is None:   # llama-server's: the adapters' scales when the request starts
                r.lora = self.lora
            self._start(*self._slot_for(r, free), r)
        self.waiting.extendleft(reversed(held))

    def _reusable(self, cached: List[int], prompt: List[int]) -> int:
        """Cached tokens a prompt can keep: their common prefix, short of the prompt's last token
        (which runs again for its logits). A memory that cannot be cut part-way keeps all or none."""
        n = common_prefix(cached, prompt[:-1])
        return n if self.partial_cuts or n == len(cached) else 0

    def _reuse_chunks(self, s: Slot, prompt: List[int], n: int, min_chunk: int) -> int:
        """llama-server's --cache-reuse (n_cache_reuse): after the common prefix, each run of at least
        min_chunk cached tokens that the prompt continues with moves down to its place in the prompt
        (Context.drop: the rows between go, the keys are rotated) instead of being computed again.
        Returns the prompt tokens now cached (short of the last, which runs for its logits)."""
        cached = s.cached
        head_c = head_p = n
        while head_c < len(cached) and head_p < len(prompt):
            m = 0
            while head_c + m < len(cached) and head_p + m < len(prompt) and cached[head_c + m] == prompt[head_p + m]:
                m += 1
            if m >= min_chunk:
                self.dec.drop(s.seq, head_p, head_c)   # what lay between goes; the chunk lands at head_p
                cached = cached[:head_p] + cached[head_c:]
                head_p += m
                head_c = head_p
                n = head_p
            else:
                head_c += 1
        s.cached = cached
        return min(n, len(prompt) - 1)

    def _slot_for(self, r: Request, free: List[Slot]) -> Tuple[Slot, bool]:
        """llama-server's choice (get_available_slot): the free slot whose cache shares the largest part
        of the prompt, where that part is over --slot-prompt-similarity, else the least recently used
        (of equals the last: a fresh server starts on its last slot); and whether the prompt cache is
        updated around it (the slot's prompt saved, a better one loaded): where the request keeps
        less than half of the similar slot's cache, or the slot is the least recently used. A prompt
        then keeps the cached prefix it keeps on llama-server, so its rows are computed in the same
        steps, with the same bits. A cache computed under other LoRA scales serves no prompt."""
        best, best_sim = None, 0.0
        for s in free:
            if s.cached and s.lora == r.lora and self.slot_similarity != 0.0:
                sim = common_prefix(s.cached, r.prompt) / max(1, len(r.prompt))
                if sim > best_sim and sim > self.slot_similarity:
                    best, best_sim = s, sim
        if best is not None:
            return best, best_sim * len(r.prompt) / len(best.cached) < 0.5
        lru = free[0]
        for s in free[1:]:
            if s.last_end <= lru.last_end:
                lru = s
        return lru, True

    def _swap_prompt(self, s: Slot, prompt: List[int], take: bool = True) -> None:
        """The prompt cache around a slot a request takes, where _slot_for says llama-server updates it:
        the slot's prompt is saved where the request would lose some of it, and (take) the saved
        prompt that serves the request better than the slot's own (PromptCache.take) is loaded in its place."""
        n = self._reusable(s.cached, prompt)
        if s.cached and n == len(s.cached) and take:
            return   # the request continues the slot's whole prompt
        if self.log:
            self.log("updating prompt cache")
        if s.cached and self.dec.pos(s.seq) == len(s.cached) and not self.prompt_cache.holds(s.cached, s.lora):
            self.prompt_cache.save(s.cached, self.dec.state_get(s.seq), s.lora)
        found = self.prompt_cache.take(prompt, s.cached, whole=not self.partial_cuts, tag=s.lora) if take else None
        if found is not None:
            tokens, state = found
            try:
                self.dec.state_set(s.seq, state)
                s.cached = tokens
            except ValueError:   # not expected (the same context made it): the slot starts empty
                self.dec.truncate(s.seq, 0)
                s.cached = []

    def _start(self, s: Slot, update_cache: bool, r: Request) -> None:
        if s.lora != r.lora:   # rows computed under other adapters serve no prompt of this request
            if s.cached and self.prompt_cache is not None and self.dec.pos(s.seq) == len(s.cached):
                self.prompt_cache.save(s.cached, self.dec.state_get(s.seq), s.lora)
            self.dec.truncate(s.seq, 0)
            s.cached, s.lora = [], r.lora
        if self.prompt_cache is not None and update_cache:
            self._swap_prompt(s, r.prompt, take=r.cache_prompt)
        n = self._reusable(s.cached, r.prompt) if r.cache_prompt else 0
        if not self.partial_cuts and n < self.dec.pos(s.seq):
            n = 0   # the cache holds more than s.cached says (a kept end token): it empties, no replay
        reuse = self.cache_reuse if r.n_cache_reuse is None else r.n_cache_reuse
        if reuse > 0 and r.cache_prompt and self.dec.can_shift and not r.media and \
                self.dec.pos(s.seq) == len(s.cached):
            n = self._reuse_chunks(s, r.prompt, n, reuse)
        self.dec.truncate(s.seq, n)
        s.cached = r.prompt[:n]
        s.pending = r.prompt[n:]
        s.media = r.media   # reuse stops before the first media chunk (common_prefix): all of them are pending
        s.history = list(r.prompt)
        s.next_tok = None
        s.req = s.task = r
        r.slot = s.seq
        r.n_cached = n
        r.t_start = time.perf_counter()
        self._progress(s)   # llama-server's first report: processed == cache
        self.n_starts += 1
        s.last_start = self.n_starts
        if self.spec is not None:
            s.k = self.spec.draft_max   # each request starts afresh, as Llama's lossless calls do
            s.dl = None if self.spec.cost is None else DraftLength(self.spec.cost, self.spec.draft_max)
            r.lossless = lossless.new_stats("river", lossless.length_rule(self.spec.cost))
            if getattr(r.sampler, "stateful", False):   # mirostat, adaptive-p: no distribution to verify river
                s.k, s.dl = 0, None                     # drafts against (a drafter's drafts are sampled as they come)
        if self.drafter is not None:
            r.lossless = lossless.new_stats(self.drafter.source, self.drafter.length)
            self.drafter.start(s.seq, r.sampler, len(r.prompt))
        if self.cache_idle:
            self._cache_idle()

    def _cache_idle(self) -> None:
        """llama-server's --cache-idle-slots, after a request took a slot: each idle slot's prompt is saved
        to the prompt cache (unless it holds it already), and with --kv-unified its rows are cleared."""
        for o in self.slots:
            if o.req is not None or not o.cached:
                continue
            if self.dec.pos(o.seq) == len(o.cached) and not self.prompt_cache.holds(o.cached, o.lora) \
                    and self.prompt_cache.save(o.cached, self.dec.state_get(o.seq), o.lora):
                if self.log:
                    self.log(f"slot {o.seq}: __TEST_TAG_CACHE_IDLE_SLOT__ (idle slot saved to the prompt cache)")
            if self.kv_pool is not None:
                self.dec.truncate(o.seq, 0)
                o.cached = []

    def _finish(self, s: Slot, reason: str) -> None:
        """Ends the slot's request; its prompt and answer stay cached for the next one, as in
        llama-server (a conversation's next turn continues both), unless the answer's rows were
        computed under an exit rule: those are not full depth's, and only the prompt stays. The slot
        is free and counted before the request hears it ended: a client that has its answer sees it
        so in /metrics."""
        r, s.req = s.req, None
        s.next_tok = None
        s.last_end = self.n_ends
        self.n_ends += 1
        try:
            if self.partial_cuts and self.dec.exiting:
                self.dec.truncate(s.seq, len(s.cached))
            else:   # full depth's rows (or a memory that cannot be cut): every token the cache holds is reusable
                s.cached = s.history[:self.dec.pos(s.seq)]
            if self.metrics:
                self.metrics.request_done(r, self.llm.info["n_layer"])
            if self.drafter is not None:
                self.drafter.finish(s.seq, s.history)
        finally:   # whatever fails here, the request ends
            r.out.put(("end", reason))

    def _draft(self) -> None:
        """Lossless: each decoding slot drafts up to its k tokens (no further than its max_tokens,
        the context, or its share of a step), all drafting slots in one decode step per token
        under the exit rule; their rows are cut again, the verify step rewrites them."""
        decoding = [s for s in self.slots if self._in_step(s) and s.next_tok is not None and not s.pending]
        share = max(1, self.dec.n_batch // len(self.slots)) - 1
        context = max((self.dec.pos(s.seq) for s in decoding), default=0)   # the step's longest
        limit = {}
        for s in decoding:
            s.drafts, s.qs = [], []
            room = min(s.req.max_tokens - s.req.n_generated, self.n_ctx - len(s.history))
            cap = min(room - 1, share)
            limit[s.seq] = min(s.k, cap) if s.dl is None else s.dl.choose("river", cap, len(decoding) - 1, context)
        active = [s for s in decoding if limit[s.seq] > 0]
        n0 = {s.seq: self.dec.pos(s.seq) for s in active}
        while active:
            res = self.dec.step([Feed(s.seq, [s.drafts[-1] if s.drafts else s.next_tok]) for s in active])
            going = []
            for s in active:
                logits, exits = res[s.seq]
                try:
                    d, q = lossless.draft_token(s.req.sampler, logits, s.history + s.drafts)
                except GrammarError as e:   # its grammar's dead end: this request alone ends
                    self.dec.truncate(s.seq, n0.pop(s.seq))
                    self._finish(s, f"error: grammar: {e}")
                    continue
                s.drafts.append(d)
                s.qs.append(q)
                s.req.lossless["draft_exits"].extend(exits)
                if len(s.drafts) < limit[s.seq] and not self.spec.draft_stops(self.llm.vocab, d, logits):
                    going.append(s)
            active = going
        for seq, n in n0.items():
            self.dec.truncate(seq, n)

    def _draft_other(self) -> None:
        """A drafter's drafts for each decoding slot, no further than its max_tokens, the context
        (one token short, for the next step's) or its share of a step."""
        share = max(1, self.dec.n_batch // len(self.slots)) - 1
        want = {}
        for s in self.slots:
            if self._in_step(s) and s.next_tok is not None and not s.pending:
                s.drafts, s.qs = [], []
                room = min(s.req.max_tokens - s.req.n_generated, self.n_ctx - len(s.history))
                want[s.seq] = (s.history, min(self.drafter.n_max, room - 1, share))
        for seq, drafts in self.drafter.propose(want).items():
            self.slots[seq].drafts = drafts

    def _verify(self, s: Slot, rows) -> int:
        """Lossless: emits what the verify step decides for slot s; returns the tokens emitted."""
        if not s.drafts and self.drafter is not None:   # no drafts (most of a chat's steps): a plain step's work
            tok = self._pick(s, rows[0])
            if tok is None:
                return 0
            lossless.count_step(s.req.lossless, 0, 0, self.drafter.kind)
            self._emit(s, tok, rows[0])
            return 1
        try:
            if self.drafter is not None:
                out = self.drafter.decide(s.seq, rows, s.drafts, s.history, s.req.sampler, self.llm.vocab.is_eog)
            else:
                out = lossless.decide(rows, s.drafts, s.qs, s.history, s.req.sampler, self.spec.rule)
        except GrammarError as e:   # its grammar's dead end: this request alone ends
            self._finish(s, f"error: grammar: {e}")
            return 0
        kept = len(out) - 1
        if kept < len(s.drafts):   # the rejected drafts' rows (each engine call costs a GIL hand-over)
            self.dec.truncate(s.seq, self.dec.pos(s.seq) - len(s.drafts) + kept)
        lossless.count_step(s.req.lossless, len(s.drafts), kept, "river" if self.drafter is None else self.drafter.step_source(s.seq))
        if s.dl is not None:
            s.dl.update("river", len(s.drafts), kept)
        elif self.spec is not None:
            s.k = lossless.next_draft_len(s.k, len(s.drafts), kept, self.spec.draft_max)
        n = 0
        for tok, logits in out:
            if s.req is None:
                break
            self._emit(s, tok, logits)
            n += 1
        return n

    def _feeds(self) -> List[Feed]:
        feeds, budget = [], self.dec.n_batch
        for s in self.slots:
            if self._in_step(s) and s.next_tok is not None and not s.pending:
                if self.spec is not None or self.drafter is not None:   # the newest token and the drafts, at full depth
                    feeds.append(Feed(s.seq, [s.next_tok] + s.drafts, prompt=True, all_logits=True))
                    budget -= 1 + len(s.drafts)
                else:
                    feeds.append(Feed(s.seq, [s.next_tok]))
                    budget -= 1
        cap = self.prompt_chunk
        if cap is None:
            cap = min(PROMPT_CHUNK, max(1, self.dec.n_batch - len(self.slots))) if feeds else budget
        for s in self.slots:
            if self._in_step(s) and s.pending and s.media:
                m = s.media.get(len(s.cached))
                if m is not None:   # a media chunk: its own decode this step (no share of the batch)
                    feeds.append(Feed(s.seq, s.pending[:m.n_pos], prompt=True, logits=False, media=m))
                    continue
            if self._in_step(s) and s.pending and budget > 0:
                k = min(len(s.pending), cap, budget, self._text_run(s))
                chunk = s.pending[:k]
                # after a context shift the kept tokens run again, then the slot decodes on
                feeds.append(Feed(s.seq, chunk, prompt=True, logits=k == len(s.pending) and s.next_tok is None))
                budget -= k
        return feeds

    def _text_run(self, s: Slot) -> int:
        """Pending prompt tokens of s up to its next media chunk (a text chunk stops there)."""
        at = len(s.cached)
        nxt = min((p for p in s.media if p >= at), default=None)
        return len(s.pending) if nxt is None else nxt - at

    def _in_step(self, s: Slot) -> bool:
        return s.req is not None and (self.group is None or s.lora == self.group)

    def _choose_group(self) -> None:
        """The LoRA configuration this step runs (llama-server batches no slots of different ones
        together): with one among the busy slots, it; with several, the next after the last step's, in
        slot order, so that each configuration gets its turn. The decoder applies it."""
        configs = list(dict.fromkeys(s.lora for s in self.slots if s.req is not None))
        if not configs or not self.lora:   # no adapters: one configuration, nothing to apply
            self.group = None
            return
        after = configs.index(self.group) + 1 if self.group in configs else 0
        self.group = configs[after % len(configs)] if len(configs) > 1 else configs[0]
        self.dec.set_lora(self.group)

    def _step(self) -> None:
        t0 = time.perf_counter()
        self._choose_group()
        if self.spec is not None:
            self._draft()
        elif self.drafter is not None:
            self._draft_other()
        feeds = self._feeds()
        if not feeds or not self._pool_fits(feeds):
            return
        res = self._run_step(feeds)
        dt = time.perf_counter() - t0
        n_decode = 0
        for f in feeds:
            s = self.slots[f.seq]
            logits, exits = res[f.seq]
            if f.all_logits:
                n_decode += self._verify(s, logits)
                continue
            if f.prompt:
                s.pending = s.pending[len(f.tokens):]
                s.cached.extend(f.tokens)
                self._progress(s)
            else:
                n_decode += 1
                s.req.exits.extend(exits)
            if logits is not None:
                self._sample(s, logits)
        if self.metrics:
            self.metrics.step(n_decode, dt, len({f.seq for f in feeds}))

    def _pool_fits(self, feeds: List[Feed]) -> bool:
        """--kv-unified: whether the step's tokens fit the pool with what the slots hold. Where they do
        not, idle slots' caches go, one by one (llama-server's try_clear_idle_slots); where they still
        do not, every busy slot's request ends and its cache goes (llama-server's decode failing at a
        batch of one), as llama-server aborts the pool as a whole."""
        if self.kv_pool is None:
            return True
        need = sum(len(f.tokens) for f in feeds)
        while sum(self.dec.pos(s.seq) for s in self.slots) + need > self.kv_pool:
            idle = next((s for s in self.slots if s.req is None and self.dec.pos(s.seq) > 0), None)
            if idle is None:
                for s in self.slots:
                    if s.req is not None:
                        self._finish(s, "error: Context size has been exceeded.")
                        self.dec.truncate(s.seq, 0)
                        s.cached = []
                return False
            self.dec.truncate(idle.seq, 0)
            idle.cached = []
        return True

    def _progress(self, s: Slot) -> None:
        """llama-server's prompt progress of the slot's request, while its prompt runs (after a context
        shift the kept tokens run again as a prompt: no report then)."""
        r = s.req
        if r.progress and r.n_generated == 0:
            now = time.perf_counter()
            # third: its prompt's time so far, ms (timings_per_token: the report's timings)
            r.out.put(("progress", {"total": len(r.prompt), "cache": r.n_cached, "processed": len(s.cached),
                                    "time_ms": int((now - r.t_submit) * 1e3)},
                       (now - r.t_start) * 1e3 if len(s.cached) > r.n_cached else 0.0))

    def _run_step(self, feeds: List[Feed]):
        """One step. Lossless mode's verify rows (the default n-gram drafts, river drafts) run with the
        prompt chunks and decode tokens, with llama.cpp's multi-token kernels: their logits may differ
        in the last bits from a single decode step's, so drafted text is full depth's as multi-token
        steps compute it (the guarantee of llama.cpp's speculative decoding), at the speed drafts need.
        The drafters of llama-server's flags (--model-draft, --spec-type: server.drafting) keep every
        token a decode step's bits on a context that is not batch-invariant, as llama.cpp's own test
        of them asks: their verify rows run in a step of their own with one-token products. A decoder
        without batch invariance (the llama.cpp engine's) verifies them with the rest, as llama-server."""
        verify = [f for f in feeds if f.all_logits]
        if not self.split_verify or not verify or self.dec.batch_invariant:
            return self.dec.step(feeds)
        self.dec.set_batch_invariant(True)
        try:
            res = self.dec.step(verify)
        finally:
            self.dec.set_batch_invariant(False)
        rest = [f for f in feeds if not f.all_logits]
        if rest:
            res.update(self.dec.step(rest))
        return res

    def _sample(self, s: Slot, logits) -> None:
        tok = self._pick(s, logits)
        if tok is not None:
            self._emit(s, tok, logits)

    def _pick(self, s: Slot, logits) -> Optional[int]:
        """The request's sampler's token from logits; None where its grammar reached a dead end (the
        request alone ends)."""
        try:
            return s.req.sampler.sample(logits, s.history)
        except GrammarError as e:
            self._finish(s, f"error: grammar: {e}")
            return None

    def _emit(self, s: Slot, tok: int, logits) -> None:
        """Hands token tok (chosen from logits) to the request, or ends it."""
        r = s.req
        if r.cancelled.is_set():
            self._finish(s, "cancelled")
            return
        if self.llm.vocab.is_eog(tok):
            r.n_generated += 1   # sampled, so counted (llama-server's n_decoded), though never handed over
            self._finish(s, "stop")
            return
        lp = None if r.logprobs is None else r.probs(logits, tok, s.history) if r.probs else \
            logprob_entry(logits, tok, r.logprobs)
        with self.vocab_lock:
            piece = self.llm.vocab.piece(tok)
        if r.t_first is None:
            r.t_first = time.perf_counter()
        r.n_generated += 1
        if lp is not None:
            r.logprob_entries.append(lp)
        r.out.put(("token", tok, piece, lp))
        s.history.append(tok)
        if r.n_generated >= r.max_tokens or len(s.history) >= self.n_ctx and not self.ctx_shift:
            self._finish(s, "length")
        else:
            if len(s.history) >= self.n_ctx:
                self._shift(s)
            s.next_tok = tok

    def _shift(self, s: Slot) -> None:
        """llama-server's context shift: keep the first n_keep tokens (the request's, else --keep;
        and the BOS), drop n_discard (half) of the rest (context_shift.plan). Where the engine can
        move cached rows (both engines, Context.can_shift), the later ones move down as in llama-server,
        their keys rotated; elsewhere (a recurrent memory, media) the tokens after the dropped ones run
        again at their new positions, as prompt chunks."""
        r = s.req
        n_keep, n_discard = context_shift.plan(len(r.prompt), len(s.history) - 1, self.n_ctx,
                                               self.n_keep if r.n_keep is None else r.n_keep, r.n_discard or 0,
                                               self.llm.vocab.add_bos)
        # the cache holds every token but the newest (not so mid-way through a step's drafts: then they run again)
        movable = self.dec.can_shift and not s.media and self.dec.pos(s.seq) == len(s.history) - 1
        s.history = s.history[:n_keep] + s.history[n_keep + n_discard:]
        if movable:
            self.dec.drop(s.seq, n_keep, n_keep + n_discard)
            s.cached = s.history[:-1]
            s.pending = []
            return
        self.dec.truncate(s.seq, n_keep)
        s.cached = s.history[:n_keep]
        s.pending = s.history[n_keep:-1]   # the newest token runs when the slot decodes again
