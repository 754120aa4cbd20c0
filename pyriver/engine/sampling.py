"""Token sampling with llama.cpp's own samplers (llama_sampler_*, through llama-cpp-python) over
a token-data array filled from pyriver's logits, as llama_sampler_sample fills it from a llama.cpp
context: the same logits, settings and seed draw the same tokens as llama_cpp.Llama and llama-server.

The chain is llama-server's order (common_sampler), which is llama_cpp.Llama's where the samplers
llama_cpp lacks are off: logit bias -> penalties -> DRY -> top-n-sigma -> top-k -> typical ->
top-p -> min-p -> XTC -> temperature -> draw (temperature 0: greedy; < 0: greedy in llama-server,
a draw from the penalized softmax in llama_cpp.Llama). It is held in three parts so that pyriver can ask the questions a chain
cannot answer: the history part (bias, penalties, DRY: they remember accepted tokens) is fed the
history each call is given and rebuilt when that history was rewound (lossless drafts);
`distribution` is the filters' softmax without a draw (what speculative sampling compares)."""
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
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: Tuple[str, ...] = field(default=DRY_BREAKERS)
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    top_n_sigma: float = -1.0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0

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
                     "xtc_threshold", "top_n_sigma", "dynatemp_range", "dynatemp_exponent"):
            if not np.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")
        if self.penalty_last_n < -1 or self.dry_penalty_last_n < -1:
            raise ValueError("penalty_last_n and dry_penalty_last_n must be >= -1 (-1: the whole context)")
        if self.dry_multiplier < 0.0 or self.dry_allowed_length < 0:
            raise ValueError("dry_multiplier and dry_allowed_length must be >= 0")
        if self.dry_multiplier > 0.0 and self.dry_base < 1.0:
            raise ValueError(f"dry_base must be >= 1, got {self.dry_base}")
        if not 0.0 <= self.xtc_probability <= 1.0:
            raise ValueError(f"xtc_probability must be in [0, 1], got {self.xtc_probability}")
        if not all(isinstance(s, str) and s for s in self.dry_sequence_breakers):
            raise ValueError("dry_sequence_breakers must be non-empty strings")

    @property
    def penalized(self) -> bool:
        return self.penalty_last_n != 0 and (self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0
                                             or self.presence_penalty != 0.0)


def _seed(seed: Optional[int]) -> int:
    """llama.cpp's seed: a uint32 (ctypes wraps as llama_cpp passes it); None is LLAMA_DEFAULT_SEED, a random one."""
    return llama_cpp.LLAMA_DEFAULT_SEED if seed is None else int(seed) & 0xFFFFFFFF


class _Chain:
    """An owned llama.cpp sampler chain (freed with it)."""

    def __init__(self):
        self.ptr = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        self.n = 0

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
    """One request's sampler. sample(logits, history) -> token; history[skip:] is what the
    penalties and DRY have seen (llama_cpp.Llama feeds them the tokens it drew, llama-server also the
    prompt). bias: {token id: logit bias} (llama.cpp's logit-bias sampler, first in the chain);
    vocab (a pyriver Vocab) is needed for DRY; n_vocab for the bias and mirostat."""

    # llama-server's temperature <= 0 is greedy; llama_cpp.Llama's < 0 draws from the softmax (ChainSampler)
    NEGATIVE_TEMPERATURE_DRAWS = False

    def __init__(self, params: SamplingParams, seed: Optional[int] = None, *, bias=None, vocab=None,
                 n_vocab: int = 0, mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1):
        params.validate()
        if mirostat_mode not in (0, 1, 2):
            raise ValueError(f"mirostat_mode must be 0, 1 or 2, got {mirostat_mode}")
        if params.dry_multiplier > 0.0 and vocab is None:
            raise ValueError("DRY sampling needs the model's vocabulary")
        self.p = params
        self.seed = seed
        self.vocab = vocab
        self.n_vocab = int(n_vocab or (vocab.n_vocab if vocab is not None else 0))
        self.bias = dict(bias or {})
        self.mirostat_mode, self.tau, self.eta = int(mirostat_mode), float(mirostat_tau), float(mirostat_eta)
        # lossless mode's own draws (its drafts on the river, its acceptance test): default_rng(seed)'s
        # stream, its seed sequence kept (the server's synthetic drafts spawn from it)
        self.seed_seq = np.random.SeedSequence(seed)
        self.rng = np.random.Generator(np.random.PCG64(self.seed_seq))
        self.skip = 0
        self._fed: List[int] = []     # the history the history part has accepted
        self._hist = self._build_history()
        self._filters, self._draw = self._build_rest()
        self._arr: Optional[np.ndarray] = None

    def _build_history(self) -> _Chain:
        p, c = self.p, _Chain()
        if self.bias:
            if not self.n_vocab:
                raise ValueError("a logit bias needs n_vocab")
            lb = (llama_cpp.llama_logit_bias * len(self.bias))(*[llama_cpp.llama_logit_bias(int(t), float(b))
                                                                  for t, b in self.bias.items()])
            c.add(llama_cpp.llama_sampler_init_logit_bias(self.n_vocab, len(self.bias), lb))
        if p.penalized:
            c.add(llama_cpp.llama_sampler_init_penalties(self.n_vocab, p.penalty_last_n, p.repeat_penalty,
                                                         p.frequency_penalty, p.presence_penalty))
        if p.dry_multiplier > 0.0:
            br = [s.encode("utf-8") for s in p.dry_sequence_breakers]
            arr = (ctypes.c_char_p * max(1, len(br)))(*br)
            c.add(llama_cpp.llama_sampler_init_dry(self.vocab.handle, p.dry_multiplier, p.dry_base,
                                                   p.dry_allowed_length, p.dry_penalty_last_n, arr, len(br)))
        return c

    def _build_rest(self):
        """(filters, the drawing sampler): llama_cpp's branches on temperature and mirostat."""
        p, s, f = self.p, _seed(self.seed), _Chain()
        t = p.temperature
        if t < 0.0 and self.NEGATIVE_TEMPERATURE_DRAWS:   # a draw from the penalized softmax
            draw = _Chain()
            draw.add(llama_cpp.llama_sampler_init_dist(s))
        elif t <= 0.0:         # greedy: np.argmax is llama.cpp's greedy sampler (the first of equals)
            draw = None
        elif self.mirostat_mode == 1:
            draw = _Chain()
            draw.add(llama_cpp.llama_sampler_init_mirostat(self.n_vocab, s, self.tau, self.eta, 100))
        elif self.mirostat_mode == 2:
            draw = _Chain()
            draw.add(llama_cpp.llama_sampler_init_mirostat_v2(s, self.tau, self.eta))
        else:
            if p.top_n_sigma > 0.0:
                f.add(llama_cpp.llama_sampler_init_top_n_sigma(p.top_n_sigma))
            f.add(llama_cpp.llama_sampler_init_top_k(p.top_k))
            f.add(llama_cpp.llama_sampler_init_typical(p.typical_p, 1))
            f.add(llama_cpp.llama_sampler_init_top_p(p.top_p, 1))
            f.add(llama_cpp.llama_sampler_init_min_p(p.min_p, 1))
            if p.xtc_probability > 0.0:
                f.add(llama_cpp.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, 1, s))
            if p.dynatemp_range > 0.0:
                f.add(llama_cpp.llama_sampler_init_temp_ext(t, p.dynatemp_range, p.dynatemp_exponent))
            else:
                f.add(llama_cpp.llama_sampler_init_temp(t))
            draw = _Chain()
            draw.add(llama_cpp.llama_sampler_init_dist(s))
        return f, draw

    @property
    def greedy(self) -> bool:
        """Every token is the argmax of the penalized logits (no draw)."""
        return self._draw is None

    @property
    def stateful(self) -> bool:
        """Mirostat learns from each draw: its distribution depends on the draws before."""
        return self.mirostat_mode != 0 and self.p.temperature > 0

    # -- the history part ---------------------------------------------------------------------
    def _sync(self, history: Sequence[int]) -> None:
        """Feed the history part what it has not seen of history[skip:]; rebuild it when that
        history is not an extension of what it saw (a rewind)."""
        if not self._hist.n:
            return
        h = [int(t) for t in history[self.skip:]]
        k = len(self._fed)
        if len(h) < k or h[:k] != self._fed:
            llama_cpp.llama_sampler_reset(self._hist.ptr)
            self._fed, k = [], 0
        for t in h[k:]:
            if t >= 0:   # a media position (NULL_TOKEN) is no token: llama-server accepts text tokens only
                llama_cpp.llama_sampler_accept(self._hist.ptr, t)
        self._fed = h

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

    def _penalized(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """The token-data array after the history part (bias, penalties, DRY), still in id order."""
        arr = self._array(logits)
        self._sync(history)
        self._hist.apply(arr)
        return arr

    def _greedy_logits(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """What a greedy sampler takes the argmax of: the logits themselves when nothing changes
        them (no bias, penalties or DRY: no token-data array to fill, the common case)."""
        if not self._hist.n:
            return np.asarray(logits, dtype=np.float32)
        return self._penalized(logits, history)["logit"]

    # -- what the generation loops call ------------------------------------------------------
    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        if self._draw is None:
            return int(np.argmax(self._greedy_logits(logits, history)))
        arr = self._penalized(logits, history)
        sub, _, srt = self._filters.apply(arr)
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
            raise ValueError("mirostat sampling cannot be verified in lossless mode (its distribution "
                             "changes with every draw); use lossless=False")
        if self._draw is None:
            x = self._greedy_logits(logits, history)
            out = np.zeros(x.size, dtype=np.float64)
            out[int(np.argmax(x))] = 1.0
            return out
        arr = self._penalized(logits, history)
        out = np.zeros(arr.size, dtype=np.float64)
        sub, _, _ = self._filters.apply(arr)
        x = sub["logit"].astype(np.float64)
        e = np.exp(x - x.max())
        out[sub["id"]] = e / e.sum()
        return out

    def close(self) -> None:
        for c in (self._hist, self._filters, self._draw):
            if c is not None:
                c.close()
