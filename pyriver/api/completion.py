"""`Llama.create_completion` (`Llama.completions`, a part of `pyriver.Llama`): prompts, stop strings, streaming, logprobs and the
result dicts shaped as llama-cpp-python's."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

import random

import numpy as np
from llama_cpp.llama import LogitsProcessorList

from pyriver.text import completion as C
from pyriver.engine.mtmd import NULL_TOKEN
from pyriver.errors import ContextFullError
from pyriver.api.generation import TokenLimit
from pyriver.api.low_level import extra_samplers
from pyriver.text.grammar import constrain
from pyriver.text.infill import fim_tokens, has_fim
from pyriver.text.logprobs import as_dict as logprobs_dict
from pyriver.text.logprobs import merge, prompt_logprobs
from pyriver.speculative.lossless import stats as lossless_stats
from pyriver.river.stats import exit_stats
from pyriver.text.sampling_chain import logit_bias_processor


def longest_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def multibyte_fix(tail: bytes, fix: int) -> int:
    """llama_cpp's count of tokens still owed to a UTF-8 character the text ends inside (its
    _create_completion, "multibyte_fix"), from the text's last 3 bytes (fewer while it is shorter:
    they are numbered from the slice's start, 3 down, as llama_cpp numbers them) and the count so
    far, which stays where no lead byte says otherwise."""
    for i, char in enumerate(tail[-3:]):
        k = 3 - i
        for num, pattern in ((2, 192), (3, 224), (4, 240)):
            if num > k and pattern & char == pattern:
                fix = num - k
    return fix


class Completion:
    """`Llama.completions` (a part of `pyriver.Llama`): create_completion and its helpers;
    `n_generated`: tokens the last completion generated (streamed ones as far as they were read)."""

    def __init__(self, llm):
        self.llm = llm
        self.n_generated = 0

    # -- completion -------------------------------------------------------------------------
    def prompt_tokens(self, prompt: Union[str, List[int]], suffix: Optional[str] = None) -> List[int]:
        L = self.llm
        if suffix is not None and not isinstance(suffix, str):
            raise TypeError(f"suffix must be a str, not {type(suffix).__name__}")
        if suffix is not None and has_fim(L.vocab):   # fill-in-the-middle: pyriver/text/infill.py
            toks = fim_tokens(L.vocab, L.metadata, prompt, suffix, L.spm_infill)
        elif isinstance(prompt, str):
            toks = L.tokenize(prompt.encode("utf-8"), add_bos=True, special=True) if prompt else [L.token_bos()]
        else:
            toks = [int(t) for t in prompt]
            bad = [t for t in toks if not 0 <= t < L.n_vocab() and t != NULL_TOKEN]
            if bad:
                raise ValueError(f"token id {bad[0]} is out of range [0, {L.n_vocab()})")
            if NULL_TOKEN in toks:   # media positions (a multimodal chat handler's prompt): cached ones only
                last = len(toks) - toks[::-1].index(NULL_TOKEN)
                if toks[:last] != L.context.tokens[:last]:
                    raise ValueError(f"token id {NULL_TOKEN} marks a media position: the cache must hold the prompt's "
                                     "media there (a multimodal chat handler evaluates them)")
        if not toks:
            raise ValueError("the prompt is empty")
        if len(toks) > L.n_ctx():
            raise ContextFullError(f"Requested tokens ({len(toks)}) exceed context window of {L.n_ctx()}")
        return toks

    def create_completion(self, prompt: Union[str, List[int]], suffix: Optional[str] = None,
                          max_tokens: Optional[int] = 16, temperature: float = 0.8, top_p: float = 0.95,
                          min_p: float = 0.05, typical_p: float = 1.0, logprobs: Optional[int] = None,
                          echo: bool = False, stop: Optional[Union[str, List[str]]] = None,
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                          repeat_penalty: float = 1.0, top_k: int = 40, stream: bool = False,
                          seed: Optional[int] = None, tfs_z: float = 1.0, mirostat_mode: int = 0,
                          mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, model: Optional[str] = None,
                          stopping_criteria=None, logits_processor=None, grammar=None, logit_bias=None, *,
                          dry_multiplier: Optional[float] = None, dry_base: Optional[float] = None,
                          dry_allowed_length: Optional[int] = None, dry_penalty_last_n: Optional[int] = None,
                          dry_sequence_breakers: Optional[List[str]] = None, xtc_probability: Optional[float] = None,
                          xtc_threshold: Optional[float] = None, top_n_sigma: Optional[float] = None,
                          dynatemp_range: Optional[float] = None, dynatemp_exponent: Optional[float] = None):
        """llama-cpp-python's create_completion (its arguments, seeds, cache and result shapes). The
        keyword-only extras are llama-server's samplers, by its request fields' names and defaults
        (absent: off); they join llama_cpp's chain where llama-server's chain has them, and DRY sees
        the prompt as llama-server's does, so a seed draws llama-server's tokens."""
        L = self.llm
        L.check_live()
        extras = extra_samplers(dry_multiplier=dry_multiplier, dry_base=dry_base, dry_allowed_length=dry_allowed_length,
                                dry_penalty_last_n=dry_penalty_last_n, dry_sequence_breakers=dry_sequence_breakers,
                                xtc_probability=xtc_probability, xtc_threshold=xtc_threshold, top_n_sigma=top_n_sigma,
                                dynatemp_range=dynatemp_range, dynatemp_exponent=dynatemp_exponent)
        if logprobs is not None and logprobs < 0:
            raise ValueError("logprobs must be >= 0")
        if logprobs is not None and echo and not L.context.logits_all:
            raise ValueError("logprobs with echo=True needs the prompt's logits: make the Llama with logits_all=True")
        if L.speculator is not None and mirostat_mode and temperature > 0:
            raise ValueError("mirostat sampling cannot be verified in lossless mode; use lossless=False")
        prompt_tokens = self.prompt_tokens(prompt, suffix)
        # llama_cpp's rule for a model without FIM tokens: the suffix follows the returned text
        tail = suffix if suffix is not None and not has_fim(L.vocab) else ""
        procs = list(logits_processor) if logits_processor is not None else []
        if logit_bias:
            procs.append(logit_bias_processor(logit_bias, L.n_vocab()))
        self.cache_lookup(prompt_tokens)
        # llama_cpp's seeds: the call's, else one drawn from the last (a seeded Llama repeats its runs)
        L.set_seed(seed if seed is not None else random.Random(L.seed).randint(0, 2 ** 32))
        chain = L.sampling.chain(top_k, top_p, min_p, typical_p, temperature, repeat_penalty, frequency_penalty,
                            presence_penalty, mirostat_mode, mirostat_tau, mirostat_eta,
                            LogitsProcessorList(procs) if procs else None, extras=extras)
        chain.skip = len(prompt_tokens)
        chain = constrain(chain, L.vocab, grammar, len(prompt_tokens))   # grammar: pyriver.text.grammar
        if max_tokens is None or max_tokens <= 0:
            max_tokens = L.n_ctx() - len(prompt_tokens)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        stops_b = [s.encode("utf-8") for s in stops if s]
        events = self.events(prompt_tokens, chain, max_tokens, stops_b, logprobs, stopping_criteria)
        cid, created = C.new_id("cmpl"), C.now()
        name = model if model is not None else L.model_path
        prefix = L.detokenize(prompt_tokens).decode("utf-8", "ignore") if echo else ""
        if stream:
            return self.stream(events, cid, created, prefix, name, logprobs, len(prompt) if isinstance(prompt, str) else 0)
        parts = [prefix]
        finish = "length"
        for text, fin in events:
            parts.append(text)
            if fin:
                finish = fin
        text = "".join(parts)
        lp = None
        if logprobs is not None:
            base = 0 if echo else (len(prompt) if isinstance(prompt, str) else 0)
            lp = logprobs_dict(L.vocab, L.last_stats["logprobs"], text[len(prefix):], base + len(prefix))
            if echo:
                lp = merge(prompt_logprobs(self.llm, prompt_tokens, logprobs), lp)
        return C.completion_dict(cid, created, name, text + tail, finish,
                                 C.usage_dict(len(prompt_tokens), self.n_generated), logprobs=lp,
                                 river=self.river_stats())

    def cache_lookup(self, prompt_tokens: List[int]) -> None:
        """llama_cpp's: restore the cached state with the longest prefix of the prompt when it is
        longer than what the context holds."""
        L = self.llm
        if not L.cache:
            return
        try:
            item = L.cache[prompt_tokens]
        except KeyError:
            return
        except Exception as e:   # an unreadable disk cache, a foreign object
            raise ValueError(f"the prompt cache could not be read: {type(e).__name__}: {e}") from e
        ids = getattr(item, "input_ids", None)
        if not isinstance(ids, np.ndarray):
            raise ValueError(f"the prompt cache returned a {type(item).__name__}, not a LlamaState")
        if longest_prefix(ids.tolist(), prompt_tokens) > longest_prefix(L.context.tokens, prompt_tokens):
            L.load_state(item)

    def cache_store(self, tokens: List[int]) -> None:
        L = self.llm
        if L.cache:
            L.cache[tokens] = L.save_state()

    def river_stats(self, exits: Optional[Sequence[int]] = None, lossless: Optional[Dict] = None) -> Optional[Dict]:
        """Exit statistics of the decode steps of the last generation, or of the given exit blocks
        and draft statistics (the server's requests); in lossless mode also the draft statistics
        under "lossless" (its tokens then all ran at full depth, so the exit statistics count none).
        None without a river and lossless mode."""
        L = self.llm
        if L.river_path is None and (L.speculator is None or exits is not None and lossless is None):
            return None   # (the server's requests in lossless mode with n-gram drafts have draft statistics)
        d = exit_stats(L.last_stats.get("exits", []) if exits is None else exits, L.info["n_layer"])
        d.update(river=L.river_path, exit_threshold=L.exit_threshold, min_exit_layer=L.min_exit_layer,
                 calibrated=L.calibration is not None,
                 lossless=lossless_stats(L.last_stats.get("lossless") if exits is None else lossless))
        return d

    def events(self, prompt_tokens, sampler, max_tokens, stops, logprobs=None, stopping_criteria=None):
        """(text, finish_reason or None) pairs; the last pair carries the finish reason."""
        L = self.llm
        self.n_generated = 0
        state = {"eog": False, "stopped": False}
        done: List[int] = []

        def pieces():
            n, fix, tail = 0, 0, b""
            lim = TokenLimit(max_tokens)
            for tok in L.context.generate_tokens(prompt_tokens, sampler, lim, logprobs):
                if stopping_criteria is not None and stopping_criteria(
                        np.asarray(prompt_tokens + done, dtype=np.intc), L.last_stats["logits"]):
                    state["stopped"] = True
                    return
                n += 1
                done.append(tok)
                self.n_generated = n
                piece = L.vocab.piece(tok)
                tail = (tail + piece)[-3:]
                fix = multibyte_fix(tail if len(tail) >= 3 else L.detokenize(done, prev_tokens=prompt_tokens)[-3:],
                                    fix)
                if fix > 0:   # llama_cpp skips its max_tokens check for this token
                    fix -= 1
                    lim.n = max(lim.n, n + 1)
                yield piece
            # Context.generate_tokens ends by itself on EOG (stop) or on max_tokens / context end (length)
            state["eog"] = n < lim.n and len(prompt_tokens) + n < L.n_ctx()

        for text, stopped in C.text_events(pieces(), stops):
            if stopped:
                self.cache_store(prompt_tokens + done)
                yield text, "stop"
                return
            if text:
                yield text, None
        self.cache_store(prompt_tokens + done)
        yield "", "stop" if state["eog"] or state["stopped"] else "length"

    def stream(self, events, cid, created, prefix, name, logprobs, base):
        L = self.llm
        entries = L.last_stats.get("logprobs", []) if logprobs is not None else None
        sent, offset = 0, base + len(prefix)
        if prefix:
            yield C.completion_dict(cid, created, name, prefix, None, None)
        for text, fin in events:
            if text:
                lp = None
                if logprobs is not None:   # the tokens this chunk's text came from (llama_cpp's shape)
                    entries = L.last_stats["logprobs"]
                    lp = logprobs_dict(L.vocab, entries[sent:], text, offset)
                    sent = len(entries)
                    offset += len(text)
                yield C.completion_dict(cid, created, name, text, None, None, logprobs=lp)
            if fin:
                yield C.completion_dict(cid, created, name, "", fin, None)
