"""Lossless mode: speculative decoding whose output is the backbone's at full depth. The river
(the same model on the River path, sharing the KV cache) or a draft model (n-gram lookup, no
model work) proposes tokens; the backbone checks them all in one full-depth step.

A step starts with the cache holding the sequence but its newest token (sampled, not yet run):
1. Draft up to k tokens: decode steps under the exit rule from the newest token (their K/V are
   cut from the cache afterwards), or the draft model's proposal.
2. Verify: the newest token and the drafts in one full-depth step with logits for every
   position (a prompt-like eval): every drafted position's cache rows are rewritten at full depth.
3. Accept, position by position, with the speculative sampling rule (accept_or_resample: draft
   d with probability min(1, p(d)/q(d)), else a token from the normalized max(0, p - q)), where p
   and q are the sampler's distributions (penalties, top-k, top-p, min-p, typical, temperature)
   of the verify and draft logits; greedy, both are one-hot, so a draft is kept exactly when it
   is the backbone's argmax and the first mismatch is replaced by the argmax. After all drafts
   are kept, one more token from the last row. The rows of rejected drafts are cut.
After a step the cache holds exactly what full depth holds, and every emitted token was chosen
from full-depth logits: on a batch-invariant context (batch_invariant=True) those are bit for bit
the logits single decode steps give, so greedy output equals river=None's token for token. On
a context that is not batch-invariant (the default) a verify step's logits
differ from decode steps' in the last bits; the output is then full depth's as multi-token
steps compute it (greedy may differ from river=None's where two logits nearly tie)."""
from __future__ import annotations

import itertools
import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from pyriver.speculative.draft import SuffixLookup, proposal
from pyriver.speculative.draftlen import DraftCost, DraftLength
from pyriver.engine import VERIFY
from pyriver.text.logprobs import entry as logprob_entry
from pyriver.engine.sampling import Sampler


def verify(llm, tokens: List[int]) -> np.ndarray:
    """A verify step: tokens (the newest one and the drafts) in one full-depth step with the logits
    of every row (engine.VERIFY: the verify kernels, tiled where Context.set_verify_tile_rows says).
    Speculator._step's call, and `pyriver eval --lossless`'s (pyriver.tools.kld), so that a lossless
    point's KLD is of these logits."""
    return llm.decode_logits(tokens, logits_all=True, prompt=VERIFY)


def accept_or_resample(p: np.ndarray, q: Optional[np.ndarray], d: int, rng: np.random.Generator) -> Optional[int]:
    """The speculative sampling rule for one drafted token d drawn from q (None: a deterministic
    draft, q one-hot at d) against the target distribution p: None keeps d, else the token that
    replaces it. The token that results is distributed as p, whatever q is."""
    qd = 1.0 if q is None else float(q[d])
    if qd > 0.0 and rng.random() * qd < p[d]:
        return None
    rest = p.copy()
    if q is None:
        rest[d] = 0.0
    else:
        np.maximum(p - q, 0.0, out=rest)
    total = rest.sum()
    if total <= 0.0:   # p == q: d is rejected with probability 0; rounding alone lands here
        return int(d)
    return int(rng.choice(rest.size, p=rest / total))


def draft_token(sampler: Sampler, logits: np.ndarray, hist: List[int]) -> Tuple[int, np.ndarray]:
    """A river draft: the sampler's distribution q of the draft logits and the token drawn from it
    (its argmax when greedy)."""
    q = sampler.distribution(logits, hist)
    d = int(np.argmax(q)) if sampler.greedy else int(sampler.rng.choice(q.size, p=q))
    return d, q


def decide(rows: np.ndarray, drafts: List[int], qs: List[Optional[np.ndarray]], hist: List[int], sampler: Sampler,
           rule: Callable = accept_or_resample) -> List[Tuple[int, np.ndarray]]:
    """What a verify step emits: rows are the full-depth logits of the newest token (the last of
    hist) and of each draft. Drafts are kept while the rule keeps them; the first rejected one is
    replaced by the rule's token; after all are kept, one more token from the last row. Each
    token comes with the logits that chose it."""
    hist = list(hist)
    out: List[Tuple[int, np.ndarray]] = []
    for i, d in enumerate(drafts):
        r = rule(sampler.distribution(rows[i], hist), qs[i], d, sampler.rng)
        out.append((d if r is None else r, rows[i]))
        if r is not None:
            return out
        hist.append(d)
    out.append((sampler.sample(rows[len(drafts)], hist), rows[len(drafts)]))
    return out


def next_draft_len(k: int, n_drafted: int, n_kept: int, draft_max: int) -> int:
    """The draft length after a step: one shorter after a rejection, one longer (up to draft_max)
    after a step that kept all of its k drafts."""
    if n_kept < n_drafted:
        return max(1, k - 1)
    if n_drafted == k > 0:
        return min(draft_max, k + 1)
    return k


def length_rule(cost: Optional[DraftCost]) -> str:
    """The name lossless statistics give Llama's draft length rule: by one, or by cost (pyriver.speculative.draftlen)."""
    return "grow/shrink" if cost is None else "by cost"


def new_stats(source: str, length: str = "grow/shrink") -> Dict:
    """The draft statistics of one generation (filled by a Speculator or the server's scheduler);
    length: the draft length rule ("grow/shrink" by one, or "by cost": pyriver.speculative.draftlen)."""
    return {"draft": source, "drafted": 0, "accepted": 0, "verify_steps": 0, "draft_exits": [], "draft_length": length}


def cut_proposal(draft_model, prop: List[int], cap: int, dl: Optional[DraftLength] = None,
                 n_prompt: Optional[int] = None, context: Optional[int] = None):
    """A draft model's proposal (one sequence's) cut to at most cap tokens, or with dl to its choice
    by cost at context (the tokens the cache holds before the step), under proposal_key's key;
    returns (drafts, key). The server's slots choose together (draftlen.choose_together)."""
    key = proposal_key(draft_model, n_prompt)
    return (prop[:cap] if dl is None else prop[:dl.choose(key, min(cap, len(prop)), context=context)]), key


def proposal_key(draft_model, n_prompt: Optional[int] = None) -> str:
    """The key of a draft model's last proposal in a DraftLength: "ngram<n>" (n: its match length, if
    it says), "repeat<n>" where the match it copies lies in the generated text (its match_end at or
    after n_prompt, the generation's prompt length): the answer repeating itself, whose drafts are
    kept less often than a copy of the prompt's (draftlen.prior); "store<n>" where it came from the
    texts of earlier requests (pyriver.speculative.store.StoreLookup)."""
    n = getattr(draft_model, "match_size", 0)
    if n and getattr(draft_model, "from_store", False):
        return f"store{n}"
    if n and n_prompt is not None and getattr(draft_model, "match_end", -1) >= n_prompt:
        return f"repeat{n}"
    return f"ngram{n or ''}"


def count_step(ls: Dict, n_drafted: int, n_kept: int, source: Optional[str] = None) -> None:
    """One verify step in the statistics; source: the drafter asked ("river", "ngram"; None: none)."""
    ls["drafted"] += n_drafted
    ls["accepted"] += n_kept
    ls["verify_steps"] += 1
    if source is not None:
        per = ls.setdefault("by_source", {}).setdefault(source, [0, 0, 0, 0])   # drafted, kept, steps, longest
        per[0], per[1], per[2], per[3] = per[0] + n_drafted, per[1] + n_kept, per[2] + 1, max(per[3], n_drafted)


class Speculator:
    """The draft-and-verify loop of one Llama. draft_model: None drafts on the River path (the
    Llama's exit rule), else a callable as llama-cpp-python's draft models; one with a true
    `river_fallback` attribute (pyriver.speculative.draft.NgramOrRiver) drafts on the River path where it
    proposes nothing. The draft length: with cost (a DraftCost), chosen before each step by
    expected tokens per cost (pyriver.speculative.draftlen), at most draft_max; without, it starts at
    draft_max each call, grows by one after a step that kept every draft and shrinks by one after
    a rejection. A river draft also stops early when the draft's top token has a probability (raw
    softmax) below draft_p_min."""

    def __init__(self, draft_model: Optional[Callable] = None, draft_max: int = 4, draft_p_min: float = 0.0,
                 cost: Optional[DraftCost] = None):
        if draft_max < 0:
            raise ValueError(f"draft_max must be >= 0, got {draft_max}")
        if not 0.0 <= draft_p_min <= 1.0:
            raise ValueError(f"draft_p_min must be in [0, 1], got {draft_p_min}")
        if draft_model is not None and not callable(draft_model):
            raise TypeError("draft_model must be callable: draft(input_ids) -> proposed token ids")
        self.draft_model = draft_model
        self.draft_max = int(draft_max)
        self.draft_p_min = float(draft_p_min)
        self.cost = cost
        self.river_fallback = draft_model is None or bool(getattr(draft_model, "river_fallback", False))
        self.rule = accept_or_resample

    @property
    def source(self) -> str:
        return "river" if self.draft_model is None else type(self.draft_model).__name__

    def generate(self, llm, seq: List[int], sampler: Sampler, max_new, logprobs: Optional[int],
                 st: Dict) -> Iterator[int]:
        """Llama._generate_tokens in lossless mode (seq: the prompt; st: the call's statistics). Tokens
        decided by one step are yielded one by one; between steps the cache is re-synced when
        another caller used it."""
        n_prompt = len(seq)
        ls = st["lossless"] = new_stats(self.source, length_rule(self.cost))
        k = self.draft_max   # each call starts afresh: its result never depends on earlier calls
        dl = DraftLength(self.cost, self.draft_max) if self.cost is not None else None
        ready: List[Tuple[int, np.ndarray]] = []   # decided tokens, each with the logits that chose it
        mine = -1   # the cache version when this generation last left the cache
        try:
            yield from self._steps(llm, seq, sampler, max_new, logprobs, st, n_prompt, ls, k, dl, ready, mine)
        finally:   # a drafter that learns across requests (store.StoreLookup) learns the text, however it ended
            learn = getattr(self.draft_model, "learn", None)
            if learn is not None:
                learn(seq)

    def _steps(self, llm, seq, sampler, max_new, logprobs, st, n_prompt, ls, k, dl, ready, mine) -> Iterator[int]:
        """generate's loop."""
        for emitted in itertools.count():
            if emitted >= max_new.n:   # a TokenLimit (generation.py): its consumer may raise it
                return
            with llm.lock:
                llm.check_live()
                if not ready:
                    t0 = time.perf_counter()
                    if mine == -1:   # the first token, from the prompt's logits
                        logits, n_eval, _ = llm.context.sync_prefix(seq, n_prompt)
                        ready = [(sampler.sample(logits, seq), logits)]
                        st["prompt_eval_tokens"] += n_eval
                        st["prompt_s"] += time.perf_counter() - t0
                    else:
                        if llm.context.version != mine:   # another caller used the cache: hold seq[:-1] again
                            st["prompt_eval_tokens"] += llm.context.sync_prefix(seq[:-1], len(seq) - 1, need_logits=False)[1]
                            t1, t0 = t0, time.perf_counter()
                            st["prompt_s"] += t0 - t1
                        room = min(max_new.n - emitted, llm.n_ctx() - len(seq))
                        ready, n_drafted = self._step(llm, seq, sampler, min(k, room - 1), ls, dl, room - 1, n_prompt)
                        k = next_draft_len(k, n_drafted, len(ready) - 1, self.draft_max)
                        st["decode_tokens"] += len(ready)
                        st["decode_s"] += time.perf_counter() - t0
                    mine = llm.context.version
                tok, logits = ready.pop(0)
                if llm.vocab.is_eog(tok):
                    return
                if logprobs is not None:
                    st["logprobs"].append(logprob_entry(logits, tok, logprobs))
                st["logits"] = logits   # what chose tok (stopping criteria read it)
                yield tok
                seq.append(tok)
                if len(seq) >= llm.n_ctx():
                    return

    def _step(self, llm, seq: List[int], sampler: Sampler, k: int, ls: Dict,
              dl: Optional[DraftLength] = None, room: int = 0, n_prompt: Optional[int] = None):
        """One draft-and-verify step (the cache holds seq[:-1]; seq[-1] has not run). Returns the
        decided tokens with the logits that chose each, and how many tokens were drafted. With dl
        the draft length is dl's choice (at most room), else k. n_prompt: where the generated text
        begins (proposal_key)."""
        n0 = len(seq) - 1
        drafts, qs, source, key = self._draft(llm, seq, sampler, k, ls, dl, room, n_prompt)
        rows = verify(llm, [seq[-1]] + drafts)   # full depth
        out = decide(rows, drafts, qs, seq, sampler, self.rule)
        m = len(out) - 1   # drafts kept
        llm.context.truncate(n0 + 1 + m)
        count_step(ls, len(drafts), m, source)
        if source is not None and dl is not None:
            dl.update(key, len(drafts), m)
        return out, len(drafts)

    def _draft(self, llm, seq: List[int], sampler: Sampler, k: int, ls: Dict,
               dl: Optional[DraftLength] = None, room: int = 0, n_prompt: Optional[int] = None):
        """Up to k drafted tokens (dl's choice with dl), the distribution each was drawn from (None:
        deterministic), their source ("ngram", "river"; None: no draft) and dl's key for them."""
        if dl is None and k <= 0 or dl is not None and room <= 0:
            return [], [], None, None
        if self.draft_model is not None:
            # the suffix lookup's proposals no draft could come of: skipped, or not chosen over (most of a chat's)
            short = dl is not None and type(self.draft_model) is SuffixLookup
            if short and dl.skipping(len(seq), room):
                return [], [], "ngram", None
            prop = proposal(self.draft_model, seq)
            bad = [t for t in prop if t < 0 or t >= llm.n_vocab()]
            if bad:
                raise ValueError(f"draft_model proposed token id {int(bad[0])}, out of range [0, {llm.n_vocab()})")
            if short and dl.cut_short(len(seq), room, self.draft_model.match_size):
                return [], [], "ngram", None
            if prop or not self.river_fallback:
                prop, key = cut_proposal(self.draft_model, prop, k if dl is None else room, dl, n_prompt, len(seq) - 1)
                # drafts from earlier requests' texts (store.StoreLookup) are counted apart
                return prop, [None] * len(prop), "store" if getattr(self.draft_model, "from_store", False) else "ngram", key
        if dl is not None:
            k = dl.choose("river", room, context=len(seq) - 1)
            if k <= 0:
                return [], [], "river", "river"
        drafts, qs = self._river_draft(llm, seq, sampler, k, ls)
        return drafts, qs, "river", "river"

    def _river_draft(self, llm, seq: List[int], sampler: Sampler, k: int, ls: Dict):
        """Up to k decode steps under the exit rule from seq[-1]; their rows are cut afterwards."""
        n0 = len(seq) - 1
        hist = list(seq)
        drafts: List[int] = []
        qs: List[np.ndarray] = []
        for _ in range(k):
            logits = llm.decode_logits([hist[-1]])[-1]   # a decode step under the exit rule
            ls["draft_exits"].append(llm.last_exits[0])
            d, q = draft_token(sampler, logits, hist)
            drafts.append(d)
            qs.append(q)
            hist.append(d)
            if self.draft_stops(llm.vocab, d, logits):
                break
        llm.context.truncate(n0)   # the verify step rewrites these rows at full depth
        return drafts, qs

    def draft_stops(self, vocab, d: int, logits: np.ndarray) -> bool:
        """A river draft ends at an end-of-generation token or when its top token is unsure."""
        return vocab.is_eog(d) or (self.draft_p_min > 0.0 and _top_prob(logits) < self.draft_p_min)


def _top_prob(logits: np.ndarray) -> float:
    x = logits.astype(np.float64)
    return float(1.0 / np.exp(x - x.max()).sum())


def stats(ls: Optional[Dict]) -> Optional[Dict]:
    """The lossless statistics of a call: drafted and accepted tokens, acceptance rate, mean
    accepted length (drafts kept per verify step), tokens per verify step, the drafts' exits."""
    if ls is None:
        return None
    steps, ex = ls["verify_steps"], ls["draft_exits"]
    return {"draft": ls["draft"], "draft_length": ls.get("draft_length"), "drafted": ls["drafted"],
            "accepted": ls["accepted"],
            "acceptance_rate": ls["accepted"] / ls["drafted"] if ls["drafted"] else None,
            "verify_steps": steps,
            "mean_accepted_length": ls["accepted"] / steps if steps else None,
            "tokens_per_step": (ls["accepted"] + steps) / steps if steps else None,
            **({"by_source": {s: {"drafted": d, "accepted": a, "steps": n, "longest": k}
                              for s, (d, a, n, k) in ls["by_source"].items()}}
               if "by_source" in ls else {}),
            "draft_mean_exit_layer": float(np.mean(ex)) if ex else None}


def describe(ls: Dict) -> str:
    """One line for people (pyriver run --stats, chat's /stats) from stats()."""
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)
    return (f"lossless ({ls['draft']} drafts): drafted {ls['drafted']} | accepted {ls['accepted']} "
            f"({num(ls['acceptance_rate'] and 100 * ls['acceptance_rate'], '.1f')}%) | verify steps "
            f"{ls['verify_steps']} | mean accepted length {num(ls['mean_accepted_length'], '.2f')} | "
            f"tokens per step {num(ls['tokens_per_step'], '.2f')} | draft mean exit block "
            f"{num(ls['draft_mean_exit_layer'], '.2f')}"
            + "".join(f" | {src}: kept {v['accepted']}/{v['drafted']} in {v['steps']} steps"
                      for src, v in sorted(ls.get("by_source", {}).items()))
            + f" | draft length {ls.get('draft_length') or '-'}")
