"""The server's prompt cache in host memory: llama-server's `--cache-ram`. A slot holds one prompt's
KV rows; when a request takes a slot whose prompt it does not continue, the slot's rows are saved
here first (its sequence's state bytes), and the cached prompt that serves the new request best is
loaded into the slot instead, so a prompt seen before (a conversation's earlier turn, a document
asked about again) does not run again once its slot went to another request. llama-server has this
on by default (8192 MiB); the rules below are its (tools/server/server-task.cpp, server_prompt_cache).
Each entry has a tag, the LoRA scales its rows were computed with: a prompt is loaded back only
under the same ones."""
from __future__ import annotations

from typing import Hashable, List, Optional, Tuple

DEFAULT_MIB = 8192   # llama-server's --cache-ram default
SLOT_SIMILARITY = 0.1   # llama-server's --slot-prompt-similarity default (Scheduler._slot_for)


def common_prefix(a: List[int], b: List[int]) -> int:
    """Their common tokens from the start, up to the first media position (a negative id,
    NULL_TOKEN: two images are not told apart by it, so reuse stops there)."""
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n] and a[n] >= 0:
        n += 1
    return n


class PromptCache:
    """Saved prompts, oldest first, each (tokens, state bytes, tag), within limit_bytes (None: no limit)."""

    def __init__(self, limit_bytes: Optional[int]):
        self.limit = limit_bytes
        self.entries: List[Tuple[List[int], bytes, Hashable]] = []
        self.hits = 0   # prompts loaded back into a slot

    def size(self) -> int:
        return sum(len(b) for _, b, _ in self.entries)

    def holds(self, tokens: List[int], tag: Hashable = ()) -> bool:
        """Whether a saved prompt already holds all of tokens (then saving them again is skipped)."""
        return any(g == tag and common_prefix(t, tokens) == len(tokens) for t, _, g in self.entries)

    def save(self, tokens: List[int], state: bytes, tag: Hashable = ()) -> bool:
        """Keeps a slot's prompt; saved prompts it continues are dropped (it holds them), the oldest
        go while the limit is exceeded; a state larger than the whole limit is not kept."""
        if not tokens or self.holds(tokens, tag) or (self.limit is not None and len(state) > self.limit):
            return False
        self.entries = [(t, b, g) for t, b, g in self.entries if g != tag or common_prefix(t, tokens) < len(t)]
        while self.entries and self.limit is not None and self.size() + len(state) > self.limit:
            self.entries.pop(0)
        self.entries.append((list(tokens), state, tag))
        return True

    def take(self, prompt: List[int], have: List[int], whole: bool = False,
             tag: Hashable = ()) -> Optional[Tuple[List[int], bytes]]:
        """The saved prompt to load for a request whose slot holds have, removed from the cache; None
        where none serves it better. llama-server's rule: a saved prompt whose common prefix with the
        request keeps at least a quarter of it, and keeps a larger share both of itself (f_keep) and of
        the request (f_sim) than the slot's own tokens do (an empty slot: any). whole: a memory that
        cannot be cut part-way (a recurrent state) loads only a saved prompt the request continues whole."""
        if not prompt:
            return None
        lcp = common_prefix(have, prompt)
        best, keep_best, sim_best = None, (lcp / len(have) if have else -1.0), lcp / len(prompt)
        for i, (tokens, _, g) in enumerate(self.entries):
            if g != tag:
                continue
            n = common_prefix(tokens, prompt)
            keep, sim = n / len(tokens), n / len(prompt)
            if keep < 0.25 or (whole and not n == len(tokens) < len(prompt)):
                continue
            if keep > keep_best and sim > sim_best:
                best, keep_best, sim_best = i, keep, sim
        if best is None:
            return None
        self.hits += 1
        tokens, state, _ = self.entries.pop(best)
        return tokens, state
