"""Token sampling with llama.cpp's own samplers (llama_sampler_*, through llama-cpp-python) over
a token-data array filled from pyriver's logits, as llama_sampler_sample fills it from a llama.cpp
context: the same logits, settings and seed draw the same tokens as llama_cpp.Llama and llama-server.

Two chains. llama-server's (Sampler; common_sampler_init): logit bias, then the request's
`samplers` in their order (default penalties -> DRY -> top-n-sigma -> top-k -> typical -> top-p ->
min-p -> XTC -> temperature, dynamic with dynatemp_range), then the draw (dist, or adaptive-p when
named); with mirostat 1 or 2: logit bias -> temperature -> mirostat, nothing else. llama_cpp.Llama's
(ChainSampler, pyriver.text.sampling_chain; Llama._init_sampler): penalties -> top-k -> typical ->
top-p -> min-p -> temperature -> dist (temperature 0: greedy; < 0: a draw from the penalized
softmax; mirostat without temperature). A chain is held in stages so that pyriver can ask the
questions a chain cannot answer: the history stages (bias, penalties, DRY: they remember accepted
tokens) are fed the history each call is given and rebuilt when that history was rewound (lossless
drafts); `distribution` is the stages' softmax without a draw (what speculative sampling compares);
a chain whose every filter keeps the best token draws nothing at temperature 0 (`greedy`)."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import llama_cpp
import numpy as np

# llama_token_data {id, logit, p}
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
# llama-server's default DRY sequence breakers (common_params_sampling::dry_sequence_breakers)
DRY_BREAKERS = ("\n", ":", "\"", "*")
# llama-server's default sampler order (common_params_sampling::samplers), by common_sampler_type_to_str's names
SERVER_ORDER = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
SAMPLER_NAMES = frozenset(SERVER_ORDER) | {"infill", "adaptive_p"}
_HISTORY = frozenset({"penalties", "dry"})   # the samplers that remember accepted tokens
PROMPT_TOO = "prompt too"   # a history stage that sees the prompt where llama_cpp's penalties do not


# llama-server's samplers that llama_cpp.Llama's signature lacks: Llama's keyword-only extras (absent:
# off, llama_cpp's chain unchanged), each named as llama-server's request field and SamplingParams' attribute
LLAMA_EXTRAS = ("dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers",
                "xtc_probability", "xtc_threshold", "top_n_sigma", "dynatemp_range", "dynatemp_exponent")


@dataclass
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    # llama-server's samplers that llama_cpp.Llama does not chain (off at these values)
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    # llama.cpp's default (common_params_sampling); llama_sampler_init_dry takes -1 as 0, which is off
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: Tuple[str, ...] = field(default=DRY_BREAKERS)
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    top_n_sigma: float = -1.0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    # llama-server's chain only (Sampler): min_keep of top-p, min-p, typical and XTC; the order of
    # the samplers; mirostat (0 off, 1, 2); adaptive-p's settings (used when `samplers` names it)
    min_keep: int = 0
    samplers: Tuple[str, ...] = field(default=SERVER_ORDER)
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9

    def validate(self) -> None:
        if not np.isfinite(self.temperature):
            raise ValueError("temperature must be finite")
        if not 0.0 <= self.top_p <= 1.0:
            raise ValueError(f"top_p must be in [0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if not 0.0 < self.typical_p <= 1.0:
            raise ValueError(f"typical_p must be in (0, 1], got {self.typical_p}")
        if self.repeat_penalty <= 0.0:
            raise ValueError(f"repeat_penalty must be > 0, got {self.repeat_penalty}")
        for name in ("frequency_penalty", "presence_penalty", "dry_multiplier", "dry_base", "xtc_probability",
                     "xtc_threshold", "top_n_sigma", "dynatemp_range", "dynatemp_exponent", "mirostat_tau",
                     "mirostat_eta", "adaptive_target", "adaptive_decay"):
            if not np.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")
        if self.penalty_last_n < -1 or self.dry_penalty_last_n < -1:
            raise ValueError("penalty_last_n and dry_penalty_last_n must be >= -1")
        if self.dry_multiplier < 0.0 or self.dry_allowed_length < 0:
            raise ValueError("dry_multiplier and dry_allowed_length must be >= 0")
        if self.dry_multiplier > 0.0 and self.dry_base < 1.0:
            raise ValueError(f"dry_base must be >= 1, got {self.dry_base}")
        if not 0.0 <= self.xtc_probability <= 1.0:
            raise ValueError(f"xtc_probability must be in [0, 1], got {self.xtc_probability}")
        if not all(isinstance(s, str) and s for s in self.dry_sequence_breakers):
            raise ValueError("dry_sequence_breakers must be non-empty strings")
        if self.min_keep < 0:
            raise ValueError(f"min_keep must be >= 0, got {self.min_keep}")
        if self.mirostat not in (0, 1, 2):
            raise ValueError(f"mirostat must be 0, 1 or 2, got {self.mirostat}")
        if not 0.0 <= self.adaptive_decay <= 0.99:
            raise ValueError(f"adaptive_decay must be in [0, 0.99], got {self.adaptive_decay}")
        bad = [s for s in self.samplers if s not in SAMPLER_NAMES]
        if bad:
            raise ValueError(f"unknown sampler {bad[0]!r}: samplers are {', '.join(sorted(SAMPLER_NAMES))}")

    @property
    def penalized(self) -> bool:
        return self.penalty_last_n != 0 and (self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0
                                             or self.presence_penalty != 0.0)

    @property
    def dry(self) -> bool:
        return self.dry_multiplier != 0.0 and self.dry_base >= 1.0 and self.dry_penalty_last_n > 0


def _seed(seed: Optional[int]) -> int:
    """llama.cpp's seed: a uint32 (ctypes wraps as llama_cpp passes it); None is LLAMA_DEFAULT_SEED, a random one."""
    return llama_cpp.LLAMA_DEFAULT_SEED if seed is None else int(seed) & 0xFFFFFFFF


class _Chain:
    """An owned llama.cpp sampler chain (freed with it)."""

    def __init__(self):
        self.ptr = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        self.n = 0
        # its samplers remember the accepted tokens (Sampler._sync feeds it): True, history[skip:];
        # PROMPT_TOO, the whole history (llama_cpp.Llama's DRY, which llama-server feeds the prompt)
        self.history = False

    def add(self, smpl) -> None:
        if not smpl:
            raise ValueError("llama.cpp refused the sampler's settings")
        llama_cpp.llama_sampler_chain_add(self.ptr, smpl)
        self.n += 1

    def apply(self, arr: np.ndarray, sorted_: bool = False) -> Tuple[np.ndarray, int, bool]:
        """Apply to arr in place. llama.cpp's samplers sort, shrink and move the candidates within
        arr's buffer (XTC drops the top ones by moving the start): returns (the candidates, a view
        of arr; selected, an index into them; sorted)."""
        base = arr.ctypes.data
        ta = llama_cpp.llama_token_data_array(data=arr.ctypes.data_as(llama_cpp.llama_token_data_p),
                                              size=arr.size, selected=-1, sorted=sorted_)
        if self.n:
            llama_cpp.llama_sampler_apply(self.ptr, ctypes.byref(ta))
        off = (ctypes.cast(ta.data, ctypes.c_void_p).value - base) // arr.itemsize
        if not (0 <= off and off + ta.size <= arr.size):
            raise RuntimeError("a llama.cpp sampler moved the candidates out of their buffer")
        return arr[off:off + ta.size], ta.selected, bool(ta.sorted)

    def close(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr:
            llama_cpp.llama_sampler_free(ptr)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Sampler:
    """One request's sampler, llama-server's chain. sample(logits, history) -> token; history[skip:]
    is what the penalties and DRY have seen (llama_cpp.Llama feeds them the tokens it drew,
    llama-server also the prompt). bias: {token id: logit bias} (llama.cpp's logit-bias sampler,
    first in the chain); vocab (a pyriver Vocab) is needed for DRY and infill; n_vocab for the bias
    and mirostat. mirostat_*: llama_cpp's names for params.mirostat* (None: the params')."""

    # llama-server's chain; ChainSampler (pyriver.text.sampling_chain) sets it for llama_cpp.Llama's
    # (whose temperature < 0 draws from the penalized softmax where llama-server's is greedy)
    LLAMA_CPP_CHAIN = False

    def __init__(self, params: SamplingParams, seed: Optional[int] = None, *, bias=None, vocab=None,
                 n_vocab: int = 0, mirostat_mode: Optional[int] = None, mirostat_tau: Optional[float] = None,
                 mirostat_eta: Optional[float] = None):
        params.validate()
        mirostat_mode = params.mirostat if mirostat_mode is None else mirostat_mode
        if mirostat_mode not in (0, 1, 2):
            raise ValueError(f"mirostat_mode must be 0, 1 or 2, got {mirostat_mode}")
        self.p = params
        self.seed = seed
        self.vocab = vocab
        self.n_vocab = int(n_vocab or (vocab.n_vocab if vocab is not None else 0))
        self.bias = dict(bias or {})
        self.mirostat_mode = int(mirostat_mode)
        self.tau = float(params.mirostat_tau if mirostat_tau is None else mirostat_tau)
        self.eta = float(params.mirostat_eta if mirostat_eta is None else mirostat_eta)
        # lossless mode's own draws (its drafts on the river, its acceptance test): default_rng(seed)'s
        # stream, its seed sequence kept (the server's synthetic drafts spawn from it)
        self.seed_seq = np.random.SeedSequence(seed)
        self.rng = np.random.Generator(np.random.PCG64(self.seed_seq))
        self.skip = 0
        self._fed: dict = {}     # per history stage, the history it has accepted
        self._adaptive = False
        steps, draw = self._plan()
        self._stages = self._group(steps)
        self._draw = self._chain_of(draw) if draw is not None else None
        self._arr: Optional[np.ndarray] = None

    # -- the chain ----------------------------------------------------------------------------
    def _bias_sampler(self):
        if not self.n_vocab:
            raise ValueError("a logit bias needs n_vocab")
        lb = (llama_cpp.llama_logit_bias * len(self.bias))(*[llama_cpp.llama_logit_bias(int(t), float(b))
                                                              for t, b in self.bias.items()])
        return llama_cpp.llama_sampler_init_logit_bias(self.n_vocab, len(self.bias), lb)

    def _needs_vocab(self, what: str):
        if self.vocab is None:
            raise ValueError(f"{what} sampling needs the model's vocabulary")
        return self.vocab.handle

    def _make(self, name: str, temp: float):
        """llama.cpp's sampler `name` (common_sampler_init's arguments), or None where it would
        change nothing and remember nothing (penalties and DRY off: no history to feed)."""
        p, s, k = self.p, _seed(self.seed), self.p.min_keep
        if name == "penalties":
            return llama_cpp.llama_sampler_init_penalties(self.n_vocab, p.penalty_last_n, p.repeat_penalty,
                                                          p.frequency_penalty, p.presence_penalty) if p.penalized else None
        if name == "dry":
            if not p.dry:
                return None
            br = [x.encode("utf-8") for x in p.dry_sequence_breakers]
            arr = (ctypes.c_char_p * max(1, len(br)))(*br)
            return llama_cpp.llama_sampler_init_dry(self._needs_vocab("DRY"), p.dry_multiplier, p.dry_base,
                                                    p.dry_allowed_length, p.dry_penalty_last_n, arr, len(br))
        if name == "top_n_sigma":
            return llama_cpp.llama_sampler_init_top_n_sigma(p.top_n_sigma)
        if name == "top_k":
            return llama_cpp.llama_sampler_init_top_k(p.top_k)
        if name == "typ_p":
            return llama_cpp.llama_sampler_init_typical(p.typical_p, k)
        if name == "top_p":
            return llama_cpp.llama_sampler_init_top_p(p.top_p, k)
        if name == "min_p":
            return llama_cpp.llama_sampler_init_min_p(p.min_p, k)
        if name == "xtc":
            return llama_cpp.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, k, s)
        if name == "temperature":
            return llama_cpp.llama_sampler_init_temp_ext(temp, p.dynatemp_range, p.dynatemp_exponent)
        if name == "infill":
            return llama_cpp.llama_sampler_init_infill(self._needs_vocab("infill"))
        raise ValueError(f"unknown sampler {name!r}")

    def _greedy_ok(self, temp: float) -> bool:
        """At temperature <= 0 the chain's token is the argmax after its history samplers: every
        filter keeps the best token and no history sampler comes after a filter."""
        p = self.p
        if temp > 0.0 or "temperature" not in p.samplers or p.dynatemp_range > 0.0 or "adaptive_p" in p.samplers:
            return False
        seen_filter = False
        for name in p.samplers:
            if name in _HISTORY:
                if seen_filter and (p.penalized if name == "penalties" else p.dry):
                    return False
                continue
            seen_filter = True
            if name == "infill" or (name == "typ_p" and p.typical_p < 1.0) or \
                    (name == "xtc" and p.xtc_probability > 0.0 and p.xtc_threshold <= 0.5):
                return False
        return True

    def _plan(self):
        """([(sampler, is a history sampler)], the drawing sampler or None for greedy): llama-server's
        common_sampler_init."""
        p, s = self.p, _seed(self.seed)
        steps = [(self._bias_sampler(), True)] if self.bias else []
        if self.LLAMA_CPP_CHAIN:
            return self._plan_llama_cpp(steps)
        t = max(p.temperature, 0.0)   # llama-server clamps it
        if self.mirostat_mode:
            if t <= 0.0:   # temperature 0 leaves one candidate: mirostat draws it
                return steps, None
            steps.append((llama_cpp.llama_sampler_init_temp(t), False))
            if self.mirostat_mode == 1:
                return steps, llama_cpp.llama_sampler_init_mirostat(self.n_vocab, s, self.tau, self.eta, 100)
            return steps, llama_cpp.llama_sampler_init_mirostat_v2(s, self.tau, self.eta)
        greedy = self._greedy_ok(t)
        for name in p.samplers:
            if name == "adaptive_p":
                continue
            if greedy and name not in _HISTORY:
                break   # filters that keep the best token, then the argmax
            smpl = self._make(name, t)
            if smpl is not None:
                steps.append((smpl, name in _HISTORY))
        if greedy:
            return steps, None
        if "adaptive_p" in p.samplers:
            self._adaptive = True
            return steps, llama_cpp.llama_sampler_init_adaptive_p(p.adaptive_target, p.adaptive_decay, s)
        return steps, llama_cpp.llama_sampler_init_dist(s)

    def _plan_llama_cpp(self, steps):
        """llama_cpp.Llama._init_sampler's chain (penalties always, mirostat without temperature),
        with llama-server's samplers it lacks where they are on, in llama-server's places."""
        p, s, t = self.p, _seed(self.seed), self.p.temperature
        for name in ("penalties", "dry"):
            smpl = self._make(name, t)
            if smpl is not None:
                steps.append((smpl, PROMPT_TOO if name == "dry" else True))
        if t < 0.0:   # a draw from the penalized softmax
            return steps, llama_cpp.llama_sampler_init_dist(s)
        if t == 0.0:   # greedy: np.argmax is llama.cpp's greedy sampler (the first of equals)
            return steps, None
        if self.mirostat_mode == 1:
            return steps, llama_cpp.llama_sampler_init_mirostat(self.n_vocab, s, self.tau, self.eta, 100)
        if self.mirostat_mode == 2:
            return steps, llama_cpp.llama_sampler_init_mirostat_v2(s, self.tau, self.eta)
        if p.top_n_sigma > 0.0:
            steps.append((llama_cpp.llama_sampler_init_top_n_sigma(p.top_n_sigma), False))
        steps += [(llama_cpp.llama_sampler_init_top_k(p.top_k), False),
                  (llama_cpp.llama_sampler_init_typical(p.typical_p, 1), False),
                  (llama_cpp.llama_sampler_init_top_p(p.top_p, 1), False),
                  (llama_cpp.llama_sampler_init_min_p(p.min_p, 1), False)]
        if p.xtc_probability > 0.0:
            steps.append((llama_cpp.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, 1, s), False))
        steps.append((llama_cpp.llama_sampler_init_temp_ext(t, p.dynatemp_range, p.dynatemp_exponent)
                       if p.dynatemp_range > 0.0 else llama_cpp.llama_sampler_init_temp(t), False))
        return steps, llama_cpp.llama_sampler_init_dist(s)

    @staticmethod
    def _chain_of(smpl) -> _Chain:
        c = _Chain()
        c.add(smpl)
        return c

    @staticmethod
    def _group(steps) -> List[_Chain]:
        """Consecutive samplers of one kind in one chain; a history chain is marked `history`."""
        out: List[_Chain] = []
        for smpl, hist in steps:
            if not out or out[-1].history != hist:
                c = _Chain()
                c.history = hist
                out.append(c)
            out[-1].add(smpl)
        return out

    @property
    def greedy(self) -> bool:
        """Every token is the argmax of the penalized logits (no draw)."""
        return self._draw is None

    @property
    def stateful(self) -> bool:
        """Mirostat and adaptive-p learn from each draw: their distribution depends on the draws before."""
        return (self.mirostat_mode != 0 or self._adaptive) and not self.greedy

    # -- the history stages ---------------------------------------------------------------------
    def _sync(self, history: Sequence[int]) -> None:
        """Feed each history stage what it has not seen of history[skip:] (a PROMPT_TOO stage: of the
        whole history); rebuild it when that history is not an extension of what it saw (a rewind)."""
        for i, c in enumerate(self._stages):
            if not c.history:
                continue
            h = [int(t) for t in history[0 if c.history is PROMPT_TOO else self.skip:]]
            fed = self._fed.get(i, [])
            k = len(fed)
            if len(h) < k or h[:k] != fed:
                llama_cpp.llama_sampler_reset(c.ptr)
                k = 0
            for t in h[k:]:
                if t >= 0:   # a media position (NULL_TOKEN) is no token: llama-server accepts text tokens only
                    llama_cpp.llama_sampler_accept(c.ptr, t)
            self._fed[i] = h

    def _array(self, logits: np.ndarray) -> np.ndarray:
        """The token-data array of logits in id order (llama_sampler_sample's)."""
        x = np.asarray(logits, dtype=np.float32)
        if self._arr is None or self._arr.size != x.size:
            self._ids = np.arange(x.size, dtype=np.int32)
            self._arr = np.empty(x.size, dtype=TOKEN_DATA)
        arr = self._arr
        arr["id"] = self._ids
        arr["logit"] = x
        arr["p"] = 0.0
        return arr

    def _filtered(self, logits: np.ndarray, history: Sequence[int]) -> Tuple[np.ndarray, bool]:
        """(the candidates after every stage, sorted): the chain up to its draw."""
        arr = self._array(logits)
        self._sync(history)
        sub, srt = arr, False
        for c in self._stages:
            sub, _, srt = c.apply(sub, srt)
        return sub, srt

    def _greedy_logits(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """What a greedy sampler takes the argmax of: the logits after its history stages (a greedy
        chain has no other), the logits themselves when it has none (the common case)."""
        if not self._stages:
            return np.asarray(logits, dtype=np.float32)
        sub, _ = self._filtered(logits, history)   # history stages keep every candidate in id order
        return sub["logit"]

    # -- what the generation loops call ------------------------------------------------------
    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        if self._draw is None:
            return int(np.argmax(self._greedy_logits(logits, history)))
        sub, srt = self._filtered(logits, history)
        sub, sel, _ = self._draw.apply(sub, srt)
        if not 0 <= sel < sub.size:
            raise ValueError("the sampler selected no token (every candidate was removed)")
        return int(sub["id"][sel])

    def greedy_scores(self, logits: np.ndarray, history: Sequence[int] = ()) -> Optional[np.ndarray]:
        """When greedy, the scores sample() takes the argmax of (None otherwise): a grammar can
        then look for the best token it allows among the top few (pyriver.text.grammar)."""
        if self._draw is not None:
            return None
        return np.array(self._greedy_logits(logits, history), copy=True)

    def distribution(self, logits: np.ndarray, history: Sequence[int] = ()) -> np.ndarray:
        """The distribution sample() draws from, over the whole vocabulary (float64; one-hot at
        the argmax when greedy): what speculative decoding compares drafts against."""
        if self.stateful:
            raise ValueError("mirostat and adaptive-p sampling cannot be verified in lossless mode (their "
                             "distribution changes with every draw); use lossless=False")
        if self._draw is None:
            x = self._greedy_logits(logits, history)
            out = np.zeros(x.size, dtype=np.float64)
            out[int(np.argmax(x))] = 1.0
            return out
        n = np.asarray(logits).size
        sub, _ = self._filtered(logits, history)
        out = np.zeros(n, dtype=np.float64)
        x = sub["logit"].astype(np.float64)
        e = np.exp(x - x.max())
        out[sub["id"]] = e / e.sum()
        return out

    def close(self) -> None:
        for c in (*self._stages, self._draw):
            if c is not None:
                c.close()
