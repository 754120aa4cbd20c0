"""llama-cpp-python's sampler chain (Llama._init_sampler) over pyriver's Sampler: logits
processors first (called with (input_ids, logits) as llama_cpp calls them), then the penalties,
then temperature < 0: a draw from the softmax; 0: greedy; mirostat 1 or 2 (llama.cpp's
samplers, no temperature, as llama_cpp chains them); else top-k, typical, top-p, min-p,
temperature, draw."""
from __future__ import annotations

import math
from typing import Dict, Optional, Sequence

import numpy as np

from .sampling import Sampler, SamplingParams, _softmax

MIROSTAT_M = 100   # llama_cpp's mirostat_m


class LogitBias:
    """A bias added to some tokens' logits (-inf: never sampled), as a logits processor: the one
    home of the rule for llama_cpp's logit_bias and the server's."""

    def __init__(self, bias: Dict[int, float]):
        self.ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
        self.vals = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))

    def __call__(self, input_ids, scores):
        out = np.array(scores, dtype=np.float32, copy=True)
        out[self.ids] += self.vals
        return out


def logit_bias_processor(logit_bias: Dict, n_vocab: int) -> LogitBias:
    """llama_cpp's logit_bias (token id -> bias added to its logit) as a logits processor; an
    id outside the vocabulary is a ValueError here, before anything runs."""
    bias = {}
    for k, v in logit_bias.items():
        try:
            t = int(k)
        except (TypeError, ValueError):
            raise ValueError(f"logit_bias keys are token ids, got {k!r}") from None
        if not 0 <= t < n_vocab:
            raise ValueError(f"logit_bias token id {t} is out of range [0, {n_vocab})")
        bias[t] = float(v)
    return LogitBias(bias)


class ChainSampler(Sampler):
    """A Sampler with llama_cpp's extra links. sample(logits, history, input_ids): history feeds
    the penalties; input_ids (default: history) is what the logits processors see."""

    def __init__(self, params: SamplingParams, seed: Optional[int] = None, *, mirostat_mode: int = 0,
                 mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, logits_processor=None, n_vocab: int = 0):
        if mirostat_mode not in (0, 1, 2):
            raise ValueError(f"mirostat_mode must be 0, 1 or 2, got {mirostat_mode}")
        if logits_processor is not None and not callable(logits_processor):
            raise TypeError("logits_processor must be callable (a llama_cpp.LogitsProcessorList)")
        super().__init__(params, seed)
        self.mirostat_mode = int(mirostat_mode)
        self.tau, self.eta = float(mirostat_tau), float(mirostat_eta)
        self.mu = 2.0 * self.tau
        self.processors = logits_processor
        self.n_vocab = n_vocab
        self.accepted: list = []   # the tokens this chain drew (llama_cpp's penalty history)
        # history[skip:] feeds the penalties: llama.cpp's penalty sampler has seen only the tokens
        # it drew, never the prompt (create_completion sets skip to the prompt's length)
        self.skip = 0

    @property
    def stateful(self) -> bool:
        """Mirostat learns from each draw: its distribution depends on the draws before."""
        return self.mirostat_mode != 0 and self.p.temperature > 0

    def _process(self, logits: np.ndarray, input_ids) -> np.ndarray:
        x = np.array(logits, dtype=np.float32, copy=True)
        if self.processors is None:
            return x
        out = self.processors(np.asarray(input_ids, dtype=np.intc), x)
        out = np.asarray(out, dtype=np.float32)
        if out.shape != x.shape:
            raise ValueError(f"a logits processor returned shape {out.shape}, expected {x.shape}")
        return out

    def sample(self, logits: np.ndarray, history: Sequence[int] = (), input_ids=None) -> int:
        x = self._penalize(self._process(logits, history if input_ids is None else input_ids), history[self.skip:])
        t = self.p.temperature
        if t < 0.0:
            probs = _softmax(x.astype(np.float64))
            return int(self.rng.choice(probs.size, p=probs))
        if t == 0.0:
            return int(np.argmax(x))
        if self.mirostat_mode:
            return self._mirostat(x)
        ids, probs = self._candidates(x)
        return int(ids[self.rng.choice(probs.size, p=probs)])

    def greedy_scores(self, logits: np.ndarray, history: Sequence[int] = (), input_ids=None):
        """Sampler.greedy_scores; None with logits processors (they may read the masked logits)."""
        if self.p.temperature != 0.0 or self.processors is not None:
            return None
        return self._penalize(np.asarray(logits, dtype=np.float32), history[self.skip:])

    def distribution(self, logits: np.ndarray, history: Sequence[int] = ()) -> np.ndarray:
        if self.stateful:
            raise ValueError("mirostat sampling cannot be verified in lossless mode (its distribution "
                             "changes with every draw); use lossless=False")
        return super().distribution(self._process(logits, history), history[self.skip:])

    def _mirostat(self, x: np.ndarray) -> int:
        """llama.cpp's llama_sampler_mirostat (v1, m = 100) and mirostat_v2 on the sorted softmax."""
        order = np.argsort(-x, kind="stable")
        p = _softmax(x[order].astype(np.float64))
        if self.mirostat_mode == 1:
            m = min(MIROSTAT_M, p.size) - 1
            i = np.arange(m)
            t = np.log((i + 2) / (i + 1))
            b = np.log(p[:m] / np.maximum(p[1:m + 1], 1e-300))
            s_hat = float((t * b).sum() / (t * t).sum())
            eps = s_hat - 1.0
            k = (eps * 2.0 ** self.mu) / (1.0 - float(self.n_vocab or p.size) ** (-eps))
            k = int(k ** (1.0 / s_hat)) if k > 0 and math.isfinite(k) else 1
            keep = max(1, min(k, p.size))
        else:
            keep = max(1, int(np.searchsorted(-np.log2(np.maximum(p, 1e-300)), self.mu, side="right")))
        q = p[:keep] / p[:keep].sum()
        j = int(self.rng.choice(keep, p=q))
        self.mu -= self.eta * (-math.log2(q[j]) - self.tau)
        return int(order[j])
