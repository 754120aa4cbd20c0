"""llama-cpp-python's sampler chain (Llama._init_sampler) over pyriver's Sampler (llama.cpp's
samplers): logits processors first (called with (input_ids, logits) as llama_cpp's custom sampler
calls them), then the rest of the chain (pyriver.engine.sampling)."""
from __future__ import annotations

from typing import Dict, Sequence

import numpy as np

from pyriver.engine.sampling import Sampler, SamplingParams


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
    """A Sampler with llama_cpp's logits processors. sample(logits, history, input_ids): history
    feeds the penalties; input_ids (default: history) is what the logits processors see."""
    LLAMA_CPP_CHAIN = True

    def __init__(self, params: SamplingParams, seed=None, *, logits_processor=None, **kwargs):
        if logits_processor is not None and not callable(logits_processor):
            raise TypeError("logits_processor must be callable (a llama_cpp.LogitsProcessorList)")
        super().__init__(params, seed, **kwargs)
        self.processors = logits_processor
        self.accepted: list = []   # the tokens this chain drew (llama_cpp's penalty history)

    def _process(self, logits: np.ndarray, input_ids) -> np.ndarray:
        if self.processors is None:
            return logits
        x = np.array(logits, dtype=np.float32, copy=True)
        out = self.processors(np.asarray(input_ids, dtype=np.intc), x)
        out = np.asarray(out, dtype=np.float32)
        if out.shape != x.shape:
            raise ValueError(f"a logits processor returned shape {out.shape}, expected {x.shape}")
        return out

    def sample(self, logits: np.ndarray, history: Sequence[int] = (), input_ids=None) -> int:
        return super().sample(self._process(logits, history if input_ids is None else input_ids), history)

    def greedy_scores(self, logits: np.ndarray, history: Sequence[int] = (), input_ids=None):
        """Sampler.greedy_scores; None with logits processors (they may read the masked logits)."""
        if self.processors is not None:
            return None
        return super().greedy_scores(logits, history)

    def distribution(self, logits: np.ndarray, history: Sequence[int] = ()) -> np.ndarray:
        return super().distribution(self._process(logits, history), history)
