"""The server's drafters beside the River (lossless mode): a draft model (llama-server's
--model-draft, its "draft-simple") and n-gram lookup in the slot's own tokens ("ngram-simple").
Each decoding slot's drafts run in the scheduler's batch step with its newest token; the target
then samples every position with the request's own sampler and keeps a draft while it equals the
sampled token (llama-server's rule). A stream's tokens are therefore the ones the target samples
without drafts: greedy exactly, sampled with the same random draws. For a deterministic draft
this is the speculative sampling rule: d is kept with probability p(d), else the token is drawn
from p without d.

--spec-synth-rates (llama-server's benchmarking mode) keeps draft i with a fixed probability
instead of checking it: its output is not the model's."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from pyriver.api.batch import BatchDecoder, Feed
from pyriver.speculative.draft import SuffixLookup, occurrences, proposal
from pyriver.speculative.draftlen import DraftLength, choose_together
from pyriver.speculative.lossless import proposal_key

TYPES = ("draft-simple", "ngram-simple")
OTHER_TYPES = ("draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark", "ngram-map-k", "ngram-map-k4v",
               "ngram-mod", "ngram-cache")


def settings(a, lossless: bool, river: bool) -> Optional[Dict]:
    """The drafter a command line asks for (None: none), checked: one drafter per server."""
    kind = a.spec_type
    if kind is not None and kind not in TYPES:
        known = "not built in pyriver" if kind in OTHER_TYPES else "unknown"
        raise ValueError(f"--spec-type {kind}: {known} (pyriver serves {', '.join(TYPES)}; --lossless drafts on the "
                         "River path)")
    if kind is None and a.model_draft is not None:
        kind = "draft-simple"   # llama-server infers it from a draft model
    if kind == "draft-simple" and a.model_draft is None:
        raise ValueError("--spec-type draft-simple needs --model-draft")
    if kind == "ngram-simple" and a.model_draft is not None:
        raise ValueError("--model-draft drafts with --spec-type draft-simple, not ngram-simple")
    if kind is None:   # the draft sizes are accepted and change nothing, as llama-server takes them
        if a.spec_synth_rates is not None:
            raise ValueError("--spec-synth-rates needs a drafter (--model-draft or --spec-type ngram-simple)")
        return None
    if lossless:
        raise ValueError("one drafter per server: --lossless drafts on the River path, --model-draft/--spec-type "
                         "bring another (give one of them)")
    if river:
        raise ValueError("--river without --lossless exits early in decode steps, which a drafter's verify step "
                         "does not (use --lossless for River drafts, or no --river with a drafter)")
    n_max = 3 if a.draft_max is None else a.draft_max   # llama-server's defaults
    n_min = a.draft_min or 0
    p_min = 0.0 if a.draft_p_min is None else a.draft_p_min
    if n_max < 0 or n_min < 0 or not 0.0 <= p_min <= 1.0:
        raise ValueError("--spec-draft-n-max and --spec-draft-n-min must be >= 0, --spec-draft-p-min in [0, 1]")
    if a.ngram_n < 1 or a.ngram_m < 1:
        raise ValueError("--spec-ngram-simple-size-n and -size-m must be >= 1")
    if kind == "ngram-simple":
        n_max = a.ngram_m   # llama-server: an n-gram draft is up to size_m tokens
    rates = None
    if a.spec_synth_rates is not None:
        try:
            rates = [float(x) for x in a.spec_synth_rates.split(",")]
        except ValueError:
            raise ValueError(f"--spec-synth-rates: not numbers: {a.spec_synth_rates!r}") from None
        if len(rates) != n_max:
            raise ValueError(f"--spec-synth-rates must give {n_max} values (the draft length), got {len(rates)}")
        if any(not 0.0 <= r <= 1.0 for r in rates) or any(b > r for r, b in zip(rates, rates[1:])):
            raise ValueError("--spec-synth-rates must be within [0, 1] and non-increasing")
    return dict(type=kind, model=a.model_draft, n_max=n_max, n_min=n_min, p_min=p_min, ngram_n=a.ngram_n,
                ngram_m=a.ngram_m, synth_rates=rates, n_gpu_layers=a.draft_ngl or 0)


def check_vocab(model, draft: str) -> None:
    """Refuses (ValueError) a draft model whose vocabulary is not the model's, before anything loads."""
    from pyriver.models import resolve
    from pyriver.engine.vocab import Vocab
    a, b = Vocab(str(resolve(model))), Vocab(str(resolve(draft)))
    try:
        why = a.mismatch(b)
    finally:
        a.close()
        b.close()
    if why is not None:
        raise ValueError(f"the draft model {draft} does not share the model's vocabulary: {why}")


def make(spec: Optional[Dict], llm, n_slots: int, threads: Optional[int], llama_kwargs: Dict):
    """The drafter for the target llm's server, or None."""
    if spec is None:
        return None
    if spec["type"] == "ngram-simple":
        return NgramSimple(spec)
    return DraftModel(spec, llm, n_slots, threads, llama_kwargs)


class Drafter:
    """What the scheduler calls: propose() the drafts of the decoding slots, decide() a verify step."""
    source = ""
    length = "fixed"   # the draft length rule, as lossless statistics name it
    exact = True       # verified with one-token products: every token a decode step's bits (scheduler._run_step)

    @property
    def kind(self) -> str:
        """The drafter as lossless statistics' by_source names it."""
        return self.source

    def step_source(self, seq: int) -> str:
        """The source of slot seq's drafts this step, as by_source names it."""
        return self.kind

    def __init__(self, spec: Dict):
        self.n_max, self.n_min = spec["n_max"], spec["n_min"]
        rates = spec["synth_rates"]
        # per position: the probability of keeping draft i once draft i-1 was kept
        self.synth = None if rates is None else [r / q if q > 0 else 0.0 for r, q in zip(rates, [1.0] + rates)]
        self.rngs: Dict[int, np.random.Generator] = {}

    def start(self, seq: int, sampler, n_prompt: int) -> None:
        """A request takes slot seq: its sampler, and its prompt's length (the slot's tokens before it generated)."""
        if self.synth is not None:   # the request's seed, without drawing from its sampler
            ss = getattr(sampler, "seed_seq", None) or sampler.rng.bit_generator.seed_seq
            self.rngs[seq] = np.random.default_rng(ss.spawn(1)[0])

    def finish(self, seq: int, tokens: Sequence[int]) -> None:
        """Slot seq's request ended with these tokens (its prompt and answer)."""

    def propose(self, want: Dict[int, Tuple[List[int], int]]) -> Dict[int, List[int]]:
        """want: {slot: (its tokens, the newest not yet run; most drafts)} -> {slot: drafts}."""
        raise NotImplementedError

    def decide(self, seq: int, rows: np.ndarray, drafts: List[int], hist: Sequence[int], sampler, is_eog):
        """What a verify step emits (as pyriver.speculative.lossless.decide): rows are the target's logits of
        the newest token and each draft. Each position is sampled as without drafts; a draft is
        kept while it is the sampled token (synthetic mode: by chance, never an end token)."""
        hist = list(hist)
        out = []
        for i, d in enumerate(drafts):
            t = sampler.sample(rows[i], hist)
            keep = t == d if self.synth is None else self.rngs[seq].random() < self.synth[i] and not is_eog(d)
            out.append((d if keep else t, rows[i]))
            if not keep:
                return out
            hist.append(d)
        out.append((sampler.sample(rows[len(drafts)], hist), rows[len(drafts)]))
        return out

    def close(self) -> None:
        pass


class NgramSimple(Drafter):
    """llama.cpp's ngram-simple (common_ngram_simple_draft): the last size_n tokens (the newest
    included) searched backwards in the earlier ones; the up to size_m tokens after the nearest
    match are the draft (none when fewer than size_n follow it)."""
    source = "ngram-simple"

    def __init__(self, spec: Dict):
        super().__init__(spec)
        self.size_n, self.size_m = spec["ngram_n"], spec["ngram_m"]

    def propose(self, want):
        return {seq: lookup(hist, self.size_n, self.size_m)[:limit] if limit > 0 else []
                for seq, (hist, limit) in want.items()}


def lookup(hist: Sequence[int], n: int, m: int) -> List[int]:
    """NgramSimple's draft from hist (the newest token last): the up to m tokens after the most recent
    earlier occurrence (starting at index 1 or later, ending before the newest token) of hist's last n
    tokens; none when fewer than n follow it (candidates by draft.occurrences)."""
    ids = hist if isinstance(hist, list) else list(hist)
    cur = len(ids) - 1   # the tokens searched: all but the newest
    if cur <= n + m + 1:
        return []
    pattern = ids[-n:]
    for j in reversed(occurrences(ids, pattern[0], 1, cur - n)):   # window starts 1 .. cur - n - 1, most recent first
        if ids[j:j + n] == pattern:
            copy = min(m, cur - (j + n))
            return [] if copy < n else ids[j + n:j + n + copy]
    return []


class LlamaDrafter(Drafter):
    """The served Llama's own draft model in lossless mode (`--lossless --lossless-draft ngram`:
    pyriver.speculative.draft's n-gram prompt lookup; any callable with llama-cpp-python's draft-model
    signature), called on each decoding slot's tokens. Its proposal is cut to the slot's limit,
    or with the Llama's DraftCost (--draft-cost) to each slot's own draft length by cost
    (pyriver.speculative.draftlen), as Llama's lossless mode cuts it alone."""

    kind = "ngram"   # as Llama's lossless mode counts a draft model's drafts
    exact = False    # lossless mode: multi-token verify steps, as Llama's (the speed drafts need)

    def __init__(self, speculator, n_vocab: int):
        super().__init__(dict(n_max=speculator.draft_max, n_min=0, synth_rates=None))
        self.model, self.cost, self.n_vocab = speculator.draft_model, speculator.cost, n_vocab
        self.source = speculator.source
        self.length = "fixed" if self.cost is None else "by cost"
        self.dls: Dict[int, Optional[DraftLength]] = {}
        self.keys: Dict[int, str] = {}
        self.n_prompt: Dict[int, int] = {}
        self.sources: Dict[int, str] = {}   # a slot's last proposal: "store" where from earlier requests
        self.suffix = type(self.model) is SuffixLookup and self.cost is not None

    def start(self, seq: int, sampler, n_prompt: int) -> None:
        self.dls[seq] = None if self.cost is None else DraftLength(self.cost, self.n_max)
        self.n_prompt[seq] = n_prompt

    def propose(self, want):
        if self.suffix and len(want) == 1:
            seq, (hist, limit) = next(iter(want.items()))
            return {seq: self._alone(seq, hist, limit)}
        model, keys, n_prompt = self.model, self.keys, self.n_prompt
        props, context = {}, 0
        for seq, (hist, limit) in want.items():
            prop = proposal(model, hist)
            self.sources[seq] = "store" if getattr(model, "from_store", False) else self.kind
            if prop:
                if min(prop) < 0 or max(prop) >= self.n_vocab:   # a draft model's bad token: no drafts this step
                    prop = []
                elif len(prop) > limit:
                    prop = prop[:max(limit, 0)]
            keys[seq] = proposal_key(model, n_prompt.get(seq))
            props[seq] = prop
            context = max(context, len(hist) - 1)   # the step's longest
            if self.suffix:
                self.dls[seq].no_window()   # slots decoding together choose together
        if self.cost is not None and props:
            # the decoding slots verify in one step: their draft lengths are chosen together, by the
            # whole step's expected tokens per cost
            ks = choose_together([(self.dls[q], keys[q], len(p)) for q, p in props.items()], self.cost, context=context)
            props = {q: p[:k] if k else [] for (q, p), k in zip(props.items(), ks)}
        return props   # lists of ints (draft.proposal)

    def step_source(self, seq: int) -> str:
        return self.sources.get(seq, self.kind)

    def finish(self, seq: int, tokens: Sequence[int]) -> None:
        learn = getattr(self.model, "learn", None)   # a drafter that learns across requests (store.StoreLookup)
        if learn is not None:
            learn(tokens)

    def _alone(self, seq: int, hist: Sequence[int], limit: int) -> List[int]:
        """The drafts of a slot decoding alone with the suffix lookup (its own tokens: no vocabulary
        check), as choose_together of one cuts them, with less Python on most of a chat's steps (each
        step's Python runs on caches the model step left cold: 70 us where a loop takes 25): the
        proposals no draft could come of are skipped, or not chosen over (DraftLength.cut_short)."""
        n, dl = len(hist), self.dls[seq]
        if dl.skipping(n, limit):
            return []
        model = self.model
        prop = proposal(model, hist)
        self.sources[seq] = "store" if getattr(model, "from_store", False) else self.kind
        if dl.cut_short(n, limit, model.match_size):
            return []
        key = self.keys[seq] = proposal_key(model, self.n_prompt.get(seq))
        prop = prop[:max(limit, 0)]
        k = choose_together([(dl, key, len(prop))], self.cost, context=n - 1)[0]
        return prop[:k] if k else []

    def decide(self, seq: int, rows: np.ndarray, drafts: List[int], hist: Sequence[int], sampler, is_eog):
        out = super().decide(seq, rows, drafts, hist, sampler, is_eog)
        dl = self.dls.get(seq)
        if dl is not None and drafts:
            dl.update(self.keys[seq], len(drafts), len(out) - 1)
        return out


class DraftModel(Drafter):
    """A second GGUF of the same vocabulary with its own cache, one sequence per slot, kept in step
    with the slot's tokens lazily: before drafting, its cache is cut to the common prefix with the
    slot's tokens and the rest runs (a new prompt, tokens the target decided). Drafts are greedy,
    all drafting slots in one step per token; a slot stops when its top token's probability (over
    the top 10, as llama.cpp's draft sampler) falls below p_min, and drafts fewer than n_min are
    dropped."""
    source = "draft model"

    def __init__(self, spec: Dict, llm, n_slots: int, threads: Optional[int], llama_kwargs: Dict):
        super().__init__(spec)
        from pyriver.api.llama import Llama
        self.p_min = spec["p_min"]
        kw = {k: llama_kwargs[k] for k in ("batch_invariant", "flash_attn") if k in llama_kwargs}
        kw.update({k: spec[k] for k in ("type_k", "type_v") if k in spec})   # -ctkd/-ctvd, not -ctk/-ctv
        self.llm = Llama(spec["model"], n_ctx=llm.n_ctx(), n_threads=threads, n_threads_batch=threads, verbose=False,
                         river=None, n_gpu_layers=spec["n_gpu_layers"], **kw)
        try:
            why = llm.vocab.mismatch(self.llm.vocab)
            if why is not None:
                raise ValueError(f"the draft model {spec['model']} does not share the model's vocabulary: {why}")
            self.dec = BatchDecoder(self.llm, n_slots)
        except Exception:
            self.llm.close()
            raise
        self.kv: List[List[int]] = [[] for _ in range(n_slots)]   # each sequence's tokens in the draft cache

    def propose(self, want):
        out: Dict[int, List[int]] = {seq: [] for seq in want}
        limits = {seq: limit for seq, (_, limit) in want.items()}
        feeds, budget = [], self.dec.n_batch
        for seq, (hist, limit) in want.items():
            if limit < max(1, self.n_min) or budget <= 0:
                continue
            kv = self.kv[seq]
            c, end = 0, min(len(kv), len(hist) - 1)   # the newest token runs again for its logits
            while c < end and kv[c] == hist[c]:
                c += 1
            if c < len(kv):
                self.dec.truncate(seq, c)
                del kv[c:]
            todo = list(hist[c:])[:budget]
            done = len(todo) == len(hist) - c   # caught up: this step drafts
            feeds.append(Feed(seq, todo, prompt=True, logits=done))
            kv.extend(todo)
            budget -= len(todo)
        while feeds:
            res = self.dec.step(feeds)
            going = []
            for f in feeds:
                logits = res[f.seq][0]
                if logits is None:
                    continue
                top = np.argpartition(logits, -10)[-10:]
                v = logits[top].astype(np.float64)
                d = int(top[int(np.argmax(v))])
                if 1.0 / np.exp(v - v.max()).sum() < self.p_min:
                    continue
                out[f.seq].append(d)
                if len(out[f.seq]) < limits[f.seq]:
                    going.append(Feed(f.seq, [d]))
                    self.kv[f.seq].append(d)
            feeds = going
        return {seq: d if len(d) >= self.n_min else [] for seq, d in out.items()}

    def close(self) -> None:
        self.dec.close()
        self.llm.close()
