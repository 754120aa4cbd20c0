"""llama-cpp-python's low-level Llama API (a mixin): n_tokens, input_ids and scores, eval,
sample and generate with llama_cpp's prefix-reuse rules, seeds, and the small accessors its
users call. pyriver's own decode loop (generation.py) stays underneath: a token evaluated here
is cached, kinded and counted as any other, so River and lossless mode keep working."""
from __future__ import annotations

from collections import deque
from typing import Generator, List, Optional, Sequence

import llama_cpp
import numpy as np
from llama_cpp.llama_tokenizer import BaseLlamaTokenizer

from pyriver.api.ctor_args import rng_seed
from pyriver.engine.mtmd import NULL_TOKEN
from pyriver.errors import ContextFullError
from pyriver.text.grammar import constrain
from pyriver.engine.sampling import SamplingParams
from pyriver.text.sampling_chain import ChainSampler


class PyriverTokenizer(BaseLlamaTokenizer):
    """llama_cpp's LlamaTokenizer over pyriver's vocabulary (llama.cpp's tokenizer)."""

    def __init__(self, llama):
        self._llama = llama

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> List[int]:
        return self._llama.vocab.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None, special: bool = False) -> bytes:
        return self._llama.vocab.detokenize(list(tokens), prev_tokens, special)

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> List[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos, special=special)

    def decode(self, tokens: List[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")


class LlamaCppMixin:
    _is_recurrent = False   # pyriver's architectures are all transformers
    _is_hybrid = False

    # -- the cache as llama_cpp shows it -------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return len(self._tokens)

    @n_tokens.setter
    def n_tokens(self, n: int) -> None:
        """llama_cpp code rewinds by assigning n_tokens; the cache keeps the first n. A larger n is
        what llama-cpp-python's multimodal chat handlers set after libmtmd decoded an image on the
        context itself: the engine checks that its cache holds n positions, the new ones media
        (NULL_TOKEN in input_ids, as llama-server keeps them)."""
        with self._lock:
            n = int(n)
            if n > len(self._tokens) and self._ectx is not None:
                self._ectx.note_external(n)   # a ValueError unless the cache holds exactly n
                self._version += 1
                k = n - len(self._tokens)
                self._tokens += [NULL_TOKEN] * k
                self._kinds += [self.PROMPT_LIKE] * k   # full depth, reusable by a prompt that holds them
                self._last_logits = None
            if not 0 <= n <= len(self._tokens):
                raise ValueError(f"n_tokens must be in [0, {len(self._tokens)}], got {n}")
            if n < len(self._tokens):
                self._truncate(n)
            self._requires_eval = True

    @property
    def input_ids(self) -> np.ndarray:
        """llama_cpp's input_ids: n_ctx token ids, valid up to n_tokens."""
        n = len(self._tokens)
        self._ids[:n] = self._tokens
        return self._ids

    @property
    def _input_ids(self) -> np.ndarray:
        return self.input_ids[: self.n_tokens]

    @property
    def scores(self) -> np.ndarray:
        """[n_ctx, n_vocab] float32: with logits_all=True every evaluated token's logits, else
        the last evaluated token's row (llama_cpp keeps none then)."""
        if self._logits_all:
            return self._scores_all
        out = np.zeros((self._n_ctx, self.n_vocab()), dtype=np.single)   # pages untouched until written
        if self._last_logits is not None and self._tokens:
            out[len(self._tokens) - 1] = self._last_logits
        return out

    @property
    def _scores(self) -> np.ndarray:
        return self.scores[: self.n_tokens, :]

    @property
    def eval_tokens(self) -> deque:
        return deque(self._tokens, maxlen=self._n_ctx)

    @property
    def eval_logits(self) -> deque:
        return deque(self._scores.tolist(), maxlen=self._n_ctx if self._logits_all else 1)

    logits_to_logprobs = staticmethod(llama_cpp.Llama.logits_to_logprobs)
    longest_token_prefix = staticmethod(llama_cpp.Llama.longest_token_prefix)

    def _note_logits(self, n_new: int, rows: np.ndarray) -> None:
        """After a decode of n_new tokens ending at n_tokens: the last row, and every row into
        scores with logits_all. A single row is kept as it is (decode_logits made it a fresh copy;
        llama_cpp's processors too write into the scores they are given); a row of many is copied
        so that it does not keep the others alive."""
        self._last_logits = rows[-1] if rows.shape[0] == 1 else rows[-1].copy()
        self._requires_eval = False
        if self._logits_all:
            end = len(self._tokens)
            self._scores_all[end - rows.shape[0]:end] = rows

    # -- llama_cpp's eval / sample / generate --------------------------------------------------
    def eval(self, tokens: Sequence[int]) -> None:
        """llama_cpp's eval: append tokens (n_batch at a time) after the first n_tokens."""
        self._eval_chunks(tokens, prompt=False)

    def _eval_chunks(self, tokens: Sequence[int], prompt: bool) -> None:
        toks = [int(t) for t in tokens]
        bad = [t for t in toks if not 0 <= t < self.n_vocab()]
        if bad:
            raise ValueError(f"token id {bad[0]} is out of range [0, {self.n_vocab()})")
        with self._lock:
            self._live()
            self._reconcile()
            if self.n_tokens + len(toks) > self._n_ctx:
                raise ContextFullError(f"Requested tokens ({self.n_tokens + len(toks)}) exceed context window "
                                       f"of {self._n_ctx}")
            for i in range(0, len(toks), self.n_batch):
                self.decode_logits(toks[i:i + self.n_batch], prompt=prompt)

    def _chain(self, top_k=40, top_p=0.95, min_p=0.05, typical_p=1.0, temp=0.80, repeat_penalty=1.0,
               frequency_penalty=0.0, presence_penalty=0.0, mirostat_mode=0, mirostat_tau=5.0,
               mirostat_eta=0.1, logits_processor=None, grammar=None, **_ignored):
        """llama_cpp's sampler chain (a ChainSampler), under grammar when given (pyriver.text.grammar;
        its history is the chain's own draws, as llama.cpp's grammar sampler accepts them)."""
        params = SamplingParams(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                                repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                                presence_penalty=presence_penalty, penalty_last_n=self.last_n_tokens_size)
        chain = ChainSampler(params, rng_seed(self._seed), mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
                             mirostat_eta=mirostat_eta, logits_processor=logits_processor, n_vocab=self.n_vocab(),
                             vocab=self.vocab)
        return constrain(chain, self.vocab, grammar, 0)

    def _logits_at(self, idx: Optional[int]) -> np.ndarray:
        self._live()
        n = self.n_tokens
        if n == 0 or self._last_logits is None:
            raise ValueError("sample needs evaluated tokens (call eval first)")
        i = n - 1 if idx is None else int(idx)
        if i == n - 1:
            return self._last_logits
        if self._logits_all and 0 <= i < n:
            return self._scores_all[i]
        raise ValueError(f"idx {i}: only the last evaluated token ({n - 1}) has logits without logits_all=True")

    def sample(self, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
               temp: float = 0.80, repeat_penalty: float = 1.0, frequency_penalty: float = 0.0,
               presence_penalty: float = 0.0, tfs_z: float = 1.0, mirostat_mode: int = 0,
               mirostat_eta: float = 0.1, mirostat_tau: float = 5.0, penalize_nl: bool = True,
               logits_processor=None, grammar=None, idx: Optional[int] = None) -> int:
        """llama_cpp's sample: a token from the logits of token idx (default: the last), with
        the sampler of the running generate, else a fresh chain."""
        with self._lock:
            logits = self._logits_at(idx)
            chain = self._sampler or self._chain(top_k, top_p, min_p, typical_p, temp, repeat_penalty,
                                                 frequency_penalty, presence_penalty, mirostat_mode,
                                                 mirostat_tau, mirostat_eta, logits_processor, grammar)
            upto = self.n_tokens if idx is None else int(idx) + 1
            tok = chain.sample(logits, chain.accepted, self._input_ids[:upto])
            chain.accepted.append(tok)   # llama.cpp's penalties remember the tokens their chain drew
            return tok

    def generate(self, tokens: Sequence[int], top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, tfs_z: float = 1.0,
                 mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                 penalize_nl: bool = True, logits_processor=None, stopping_criteria=None,
                 grammar=None) -> Generator[int, Optional[Sequence[int]], None]:
        """llama_cpp's generate: tokens after the prompt, forever (the caller stops). A prompt
        already evaluated with live logits is sampled at once; otherwise the longest cached
        prefix is kept (one token short of the whole prompt, to refresh the logits). A token is
        evaluated when the next one is asked for. Lossless mode does not apply here (it drafts
        inside create_completion); River exits do, on every decode step."""
        chain = self._chain(top_k, top_p, min_p, typical_p, temp, repeat_penalty, frequency_penalty,
                            presence_penalty, mirostat_mode, mirostat_tau, mirostat_eta, logits_processor, grammar)
        tokens = [int(t) for t in tokens]
        with self._lock:
            self._live()
            if reset and self.n_tokens > 0:
                longest = 0   # a token an exit rule computed is not a prompt's (as _sync_prefix)
                for a, b, kind in zip(self._tokens, tokens, self._kinds):
                    if a != b or kind != self.PROMPT_LIKE:
                        break
                    longest += 1
                consumed = longest == len(tokens)
                if consumed and self.n_tokens == len(tokens) and not self._requires_eval:
                    reset, tokens, reuse = False, [], 0
                else:
                    reuse = longest - 1 if consumed else longest
                    if reuse < self.n_tokens and not self._ectx.partial_cuts:
                        reuse = 0   # llama_cpp resets where the memory cannot be cut part-way
                if reuse > 0:
                    reset = False
                    tokens = tokens[reuse:]
                    self.n_tokens = reuse
            if reset:
                self.reset()
        sample_idx = self.n_tokens + len(tokens) - 1
        prompt = True   # the prompt's tokens run as a prompt (full depth), later ones as decode steps
        while True:
            with self._lock:
                self._eval_chunks(tokens, prompt=prompt and len(tokens) > 0)
            prompt = False
            while sample_idx < self.n_tokens:
                with self._lock:
                    self._sampler = chain
                    try:
                        token = self.sample(idx=sample_idx)
                    finally:
                        self._sampler = None
                    sample_idx += 1
                    if stopping_criteria is not None and stopping_criteria(self._input_ids[:sample_idx],
                                                                           self._logits_at(sample_idx - 1)):
                        return
                more = yield token
                tokens = [token] + ([int(t) for t in more] if more is not None else [])
                if sample_idx < self.n_tokens and token != self._tokens[sample_idx]:
                    self.n_tokens = sample_idx
                    break
