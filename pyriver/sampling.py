"""Token sampling in NumPy, in llama.cpp's default chain order:
penalties -> top-k -> typical -> top-p -> min-p -> temperature -> draw. Temperature <= 0 is greedy."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np


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


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


class Sampler:
    def __init__(self, params: SamplingParams, seed: Optional[int] = None):
        params.validate()
        self.p = params
        self.rng = np.random.default_rng(seed)

    def _penalize(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        p = self.p
        if p.repeat_penalty == 1.0 and p.frequency_penalty == 0.0 and p.presence_penalty == 0.0:
            return logits
        recent = np.asarray(history[-p.penalty_last_n:] if p.penalty_last_n > 0 else [], dtype=np.int64)
        if recent.size == 0:
            return logits
        ids, counts = np.unique(recent, return_counts=True)
        logits = logits.copy()
        v = logits[ids]
        v = np.where(v <= 0, v * p.repeat_penalty, v / p.repeat_penalty)
        v -= counts * p.frequency_penalty + p.presence_penalty
        logits[ids] = v
        return logits

    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        logits = self._penalize(np.asarray(logits, dtype=np.float32), history)
        if self.p.temperature <= 0.0:
            return int(np.argmax(logits))
        ids, probs = self._candidates(logits)
        return int(ids[self.rng.choice(probs.size, p=probs)])

    def greedy_scores(self, logits: np.ndarray, history: Sequence[int] = ()) -> Optional[np.ndarray]:
        """When greedy, the scores sample() takes the argmax of (None otherwise): a grammar can
        then look for the best token it allows among the top few (pyriver.grammar)."""
        if self.p.temperature > 0.0:
            return None
        return self._penalize(np.asarray(logits, dtype=np.float32), history)

    def distribution(self, logits: np.ndarray, history: Sequence[int] = ()) -> np.ndarray:
        """The distribution sample() draws from, over the whole vocabulary (float64; one-hot at
        the argmax when greedy): what speculative decoding compares drafts against."""
        logits = self._penalize(np.asarray(logits, dtype=np.float32), history)
        out = np.zeros(logits.size, dtype=np.float64)
        if self.p.temperature <= 0.0:
            out[int(np.argmax(logits))] = 1.0
        else:
            ids, probs = self._candidates(logits)
            out[ids] = probs
        return out

    def _candidates(self, logits: np.ndarray):
        """The filter chain after the penalties: kept token ids, most likely first, and their
        probabilities at the temperature."""
        p = self.p
        ids = np.arange(logits.size)
        if 0 < p.top_k < logits.size:
            ids = np.argpartition(-logits, p.top_k - 1)[: p.top_k]
        ids = ids[np.argsort(-logits[ids], kind="stable")]
        cand = logits[ids].astype(np.float64)
        if p.typical_p < 1.0:
            probs = _softmax(cand)
            logp = np.log(np.maximum(probs, 1e-300))
            ent = -(probs * logp).sum()
            order = np.argsort(np.abs(-logp - ent), kind="stable")
            cum = np.cumsum(probs[order])
            keep = order[: max(1, int(np.searchsorted(cum, p.typical_p) + 1))]
            keep.sort()
            ids, cand = ids[keep], cand[keep]
        if p.top_p < 1.0:
            cum = np.cumsum(_softmax(cand))
            n = max(1, int(np.searchsorted(cum, p.top_p) + 1))
            ids, cand = ids[:n], cand[:n]
        if p.min_p > 0.0:
            probs = _softmax(cand)
            keep = probs >= p.min_p * probs[0]
            keep[0] = True
            ids, cand = ids[keep], cand[keep]
        return ids, _softmax(cand / p.temperature)
