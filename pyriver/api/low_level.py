"""llama-cpp-python's low-level Llama API: eval, sample and generate (`Llama.sampling`), and the
tokenizer it hands out. pyriver's own decode loop (generation.py) stays underneath: a token
evaluated here is cached, kinded and counted as any other, so River and lossless mode keep working."""
from __future__ import annotations

from typing import Generator, List, Optional, Sequence

import numpy as np
from llama_cpp.llama_tokenizer import BaseLlamaTokenizer

from pyriver.api.ctor_args import rng_seed
from pyriver.api.generation import Context
from pyriver.errors import ContextFullError
from pyriver.text.grammar import constrain
from pyriver.engine.sampling import LLAMA_EXTRAS, SamplingParams
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


class Sampling:
    """`Llama.sampling` (a part of `pyriver.Llama`): llama-cpp-python's low-level eval, sample and
    generate with llama_cpp's prefix-reuse rules over the Llama's context (generation.Context): a
    token evaluated here is cached, kinded and counted as any other, so River and lossless mode
    keep working. `running`: generate's chain while it samples."""

    def __init__(self, llm):
        self.llm = llm
        self.running = None

    # -- llama_cpp's eval / sample / generate --------------------------------------------------
    def eval(self, tokens: Sequence[int]) -> None:
        """llama_cpp's eval: append tokens (n_batch at a time) after the first n_tokens."""
        self.eval_chunks(tokens, prompt=False)

    def eval_chunks(self, tokens: Sequence[int], prompt: bool) -> None:
        L = self.llm
        toks = [int(t) for t in tokens]
        bad = [t for t in toks if not 0 <= t < L.n_vocab()]
        if bad:
            raise ValueError(f"token id {bad[0]} is out of range [0, {L.n_vocab()})")
        with L.lock:
            L.check_live()
            L.context.reconcile()
            if L.n_tokens + len(toks) > L.n_ctx():
                raise ContextFullError(f"Requested tokens ({L.n_tokens + len(toks)}) exceed context window "
                                       f"of {L.n_ctx()}")
            for i in range(0, len(toks), L.n_batch):
                L.decode_logits(toks[i:i + L.n_batch], prompt=prompt)

    def chain(self, top_k=40, top_p=0.95, min_p=0.05, typical_p=1.0, temp=0.80, repeat_penalty=1.0,
               frequency_penalty=0.0, presence_penalty=0.0, mirostat_mode=0, mirostat_tau=5.0,
               mirostat_eta=0.1, logits_processor=None, grammar=None, extras=None, **_ignored):
        """llama_cpp's sampler chain (a ChainSampler), under grammar when given (pyriver.text.grammar;
        its history is the chain's own draws, as llama.cpp's grammar sampler accepts them); extras:
        llama-server's samplers (extra_samplers' dict), in the chain where llama-server places them."""
        L = self.llm
        params = SamplingParams(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                                repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                                presence_penalty=presence_penalty, penalty_last_n=L.last_n_tokens_size,
                                **(extras or {}))
        chain = ChainSampler(params, rng_seed(L.seed), mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
                             mirostat_eta=mirostat_eta, logits_processor=logits_processor, n_vocab=L.n_vocab(),
                             vocab=L.vocab)
        return constrain(chain, L.vocab, grammar, 0)

    def logits_at(self, idx: Optional[int]) -> np.ndarray:
        L = self.llm
        L.check_live()
        n = L.n_tokens
        if n == 0 or L.context.last_logits is None:
            raise ValueError("sample needs evaluated tokens (call eval first)")
        i = n - 1 if idx is None else int(idx)
        if i == n - 1:
            return L.context.last_logits
        if L.context.logits_all and 0 <= i < n:
            return L.context.scores_all[i]
        raise ValueError(f"idx {i}: only the last evaluated token ({n - 1}) has logits without logits_all=True")

    def sample(self, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
               temp: float = 0.80, repeat_penalty: float = 1.0, frequency_penalty: float = 0.0,
               presence_penalty: float = 0.0, tfs_z: float = 1.0, mirostat_mode: int = 0,
               mirostat_eta: float = 0.1, mirostat_tau: float = 5.0, penalize_nl: bool = True,
               logits_processor=None, grammar=None, idx: Optional[int] = None) -> int:
        """llama_cpp's sample: a token from the logits of token idx (default: the last), with
        the sampler of the running generate, else a fresh chain."""
        L = self.llm
        with L.lock:
            logits = self.logits_at(idx)
            chain = self.running or self.chain(top_k, top_p, min_p, typical_p, temp, repeat_penalty,
                                                 frequency_penalty, presence_penalty, mirostat_mode,
                                                 mirostat_tau, mirostat_eta, logits_processor, grammar)
            upto = L.n_tokens if idx is None else int(idx) + 1
            tok = chain.sample(logits, chain.accepted, L.input_ids[:L.n_tokens][:upto])
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
        L = self.llm
        chain = self.chain(top_k, top_p, min_p, typical_p, temp, repeat_penalty, frequency_penalty,
                            presence_penalty, mirostat_mode, mirostat_tau, mirostat_eta, logits_processor, grammar)
        tokens = [int(t) for t in tokens]
        with L.lock:
            L.check_live()
            if reset and L.n_tokens > 0:
                longest = 0   # a token an exit rule computed is not a prompt's (as Context.sync_prefix)
                for a, b, kind in zip(L.context.tokens, tokens, L.context.kinds):
                    if a != b or kind != Context.PROMPT_LIKE:
                        break
                    longest += 1
                consumed = longest == len(tokens)
                if consumed and L.n_tokens == len(tokens) and not L.context.requires_eval:
                    reset, tokens, reuse = False, [], 0
                else:
                    reuse = longest - 1 if consumed else longest
                    if reuse < L.n_tokens and not L.context.engine.partial_cuts:
                        reuse = 0   # llama_cpp resets where the memory cannot be cut part-way
                if reuse > 0:
                    reset = False
                    tokens = tokens[reuse:]
                    L.n_tokens = reuse
            if reset:
                L.reset()
        sample_idx = L.n_tokens + len(tokens) - 1
        prompt = True   # the prompt's tokens run as a prompt (full depth), later ones as decode steps
        while True:
            with L.lock:
                self.eval_chunks(tokens, prompt=prompt and len(tokens) > 0)
            prompt = False
            while sample_idx < L.n_tokens:
                with L.lock:
                    self.running = chain
                    try:
                        token = self.sample(idx=sample_idx)
                    finally:
                        self.running = None
                    sample_idx += 1
                    if stopping_criteria is not None and stopping_criteria(L.input_ids[:L.n_tokens][:sample_idx],
                                                                           self.logits_at(sample_idx - 1)):
                        return
                more = yield token
                tokens = [token] + ([int(t) for t in more] if more is not None else [])
                if sample_idx < L.n_tokens and token != L.context.tokens[sample_idx]:
                    L.n_tokens = sample_idx
                    break


def extra_samplers(**given) -> dict:
    """The extras a call gave (None: absent) as SamplingParams' fields; TypeError for an unknown
    name or breakers that are not a list of strings (SamplingParams.validate checks the values)."""
    unknown = sorted(set(given) - set(LLAMA_EXTRAS))
    if unknown:
        raise TypeError(f"unknown sampling argument {unknown[0]!r}")
    out = {k: v for k, v in given.items() if v is not None}
    br = out.get("dry_sequence_breakers")
    if br is not None:
        if isinstance(br, (str, bytes)) or not all(isinstance(x, str) for x in br):
            raise TypeError("dry_sequence_breakers must be a list of strings (llama-server's field)")
        out["dry_sequence_breakers"] = tuple(br)
    return out
