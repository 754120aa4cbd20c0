"""`Llama.create_completion` (a mixin): prompts, stop strings, streaming, logprobs and the
result dicts shaped as llama-cpp-python's."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

from . import completion as C
from .errors import ContextFullError
from .grammar import constrain
from .logprobs import as_dict as logprobs_dict
from .lossless import stats as lossless_stats
from .river import exit_stats
from .sampling import Sampler, SamplingParams


class CompletionMixin:
    # -- completion -------------------------------------------------------------------------
    def _prompt_tokens(self, prompt: Union[str, List[int]]) -> List[int]:
        if isinstance(prompt, str):
            toks = self.tokenize(prompt.encode("utf-8"), add_bos=True, special=True) if prompt else [self.token_bos()]
        else:
            toks = [int(t) for t in prompt]
            bad = [t for t in toks if not 0 <= t < self.n_vocab()]
            if bad:
                raise ValueError(f"token id {bad[0]} is out of range [0, {self.n_vocab()})")
        if not toks:
            raise ValueError("the prompt is empty")
        if len(toks) > self._n_ctx:
            raise ContextFullError(f"Requested tokens ({len(toks)}) exceed context window of {self._n_ctx}")
        return toks

    def create_completion(self, prompt: Union[str, List[int]], max_tokens: Optional[int] = 16,
                          temperature: float = 0.8, top_p: float = 0.95, min_p: float = 0.05,
                          typical_p: float = 1.0, stop: Optional[Union[str, List[str]]] = None,
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                          repeat_penalty: float = 1.0, top_k: int = 40, stream: bool = False,
                          seed: Optional[int] = None, echo: bool = False, logprobs: Optional[int] = None,
                          grammar=None, **unsupported):
        if unsupported:
            raise TypeError(f"create_completion does not support: {', '.join(sorted(unsupported))}")
        if logprobs is not None and (stream or echo):
            raise NotImplementedError("logprobs is supported without stream and echo")
        if logprobs is not None and logprobs < 0:
            raise ValueError("logprobs must be >= 0")
        prompt_tokens = self._prompt_tokens(prompt)
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                                repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                                presence_penalty=presence_penalty)
        sampler = constrain(Sampler(params, seed if seed is not None else self._seed), self.vocab, grammar,
                            len(prompt_tokens))   # grammar: pyriver.grammar
        if max_tokens is None or max_tokens <= 0:
            max_tokens = self._n_ctx - len(prompt_tokens)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        stops_b = [s.encode("utf-8") for s in stops if s]
        events = self._events(prompt_tokens, sampler, max_tokens, stops_b, logprobs)
        cid, created = C.new_id("cmpl"), C.now()
        prefix = self.detokenize(prompt_tokens).decode("utf-8", "ignore") if echo else ""
        if stream:
            return self._stream(events, cid, created, prefix, len(prompt_tokens))
        parts = [prefix]
        finish = "length"
        for text, fin in events:
            parts.append(text)
            if fin:
                finish = fin
        text = "".join(parts)
        lp = (logprobs_dict(self.vocab, self.last_stats["logprobs"], text, len(prompt) if isinstance(prompt, str) else 0)
              if logprobs is not None else None)
        return C.completion_dict(cid, created, self.model_path, text, finish,
                                 C.usage_dict(len(prompt_tokens), self._n_generated), logprobs=lp,
                                 river=self.river_stats())

    __call__ = create_completion

    @property
    def n_generated(self) -> int:
        """Tokens the last completion generated (streamed ones as far as they were read)."""
        return self._n_generated

    def river_stats(self, exits: Optional[Sequence[int]] = None, lossless: Optional[Dict] = None) -> Optional[Dict]:
        """Exit statistics of the decode steps of the last generation, or of the given exit blocks
        and draft statistics (the server's requests); in lossless mode also the draft statistics
        under "lossless" (its tokens then all ran at full depth, so the exit statistics count none).
        None without a river and lossless mode."""
        if self.river_path is None and (self._spec is None or exits is not None):
            return None
        d = exit_stats(self.last_stats.get("exits", []) if exits is None else exits, self.info["n_layer"])
        d.update(river=self.river_path, exit_threshold=self.exit_threshold, min_exit_layer=self.min_exit_layer,
                 calibrated=self.calibration is not None,
                 lossless=lossless_stats(self.last_stats.get("lossless") if exits is None else lossless))
        return d

    def _events(self, prompt_tokens, sampler, max_tokens, stops, logprobs=None):
        """(text, finish_reason or None) pairs; the last pair carries the finish reason."""
        self._n_generated = 0
        state = {"eog": False}

        def pieces():
            n = 0
            for tok in self.generate(prompt_tokens, sampler, max_tokens, logprobs):
                n += 1
                self._n_generated = n
                yield self.vocab.piece(tok)
            # generate() ends by itself on EOG (stop) or on max_tokens / context end (length)
            state["eog"] = n < max_tokens and len(prompt_tokens) + n < self._n_ctx

        for text, stopped in C.text_events(pieces(), stops):
            if stopped:
                yield text, "stop"
                return
            if text:
                yield text, None
        yield "", "stop" if state["eog"] else "length"

    def _stream(self, events, cid, created, prefix, n_prompt):
        if prefix:
            yield C.completion_dict(cid, created, self.model_path, prefix, None, None)
        for text, fin in events:
            if text:
                yield C.completion_dict(cid, created, self.model_path, text, None, None)
            if fin:
                yield C.completion_dict(cid, created, self.model_path, "", fin, None)

