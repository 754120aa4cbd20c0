"""Grammar-constrained sampling with llama.cpp's own grammar engine (llama_sampler_init_grammar,
held by pyriver.engine.grammar) over the vocabulary pyriver already loads; pyriver parses no grammar.

`Grammar` is one grammar state (a llama.cpp grammar sampler). `ConstrainedSampler` wraps a
pyriver Sampler under a grammar and has its interface (sample, distribution, p, rng): the
generation loops (Llama.generate, lossless mode, the server's scheduler) call it as they call a
Sampler. It keeps the grammar state of each position of the history it is asked about (the
prompt, then the tokens generated so far, in lossless mode also drafts), so a rejected draft
rewinds by dropping states, and every token is accepted into a state only after the grammar
allowed it (llama.cpp aborts the process on accepting a token its grammar forbids)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np

from pyriver.engine.grammar import TOKEN_DATA, GrammarSampler
from pyriver.errors import PyriverError

# States kept behind the newest: a lossless rewind goes back at most a draft's length.
_KEEP = 64
# Candidates a greedy choice checks against the grammar before the whole vocabulary (Grammar.best).
_TOP = 1024
# Tokens a lazy grammar refuses in a row (each would open a call in a form the grammar refuses) before it gives up.
_RETRIES = 32


class GrammarError(PyriverError, ValueError):
    """A grammar that does not parse, or a point of generation where it allows no token."""


@dataclass(frozen=True)
class LazyGrammar:
    """A grammar that applies from a trigger on (llama.cpp's lazy grammar, as its server uses for
    tool_choice auto): generation is free until a trigger word (a single-token word triggers as
    that token) or pattern (whose first capture group, else the whole match, starts the
    constrained text) appears; from there the text must be in the grammar's language."""
    text: str
    words: Tuple[str, ...] = ()
    patterns: Tuple[str, ...] = ()


def _regex_literal(word: str) -> str:
    """word as a regex literal in both ECMAScript (std::regex) and Python."""
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}" else c for c in word)


def gbnf_text(grammar) -> tuple:
    """(GBNF text, root rule) of a llama_cpp.LlamaGrammar, a LazyGrammar or a GBNF string."""
    if isinstance(grammar, str):
        return grammar, "root"
    if isinstance(grammar, LazyGrammar):
        return grammar.text, "root"
    text = getattr(grammar, "_grammar", None)
    if not isinstance(text, str):
        raise TypeError(f"grammar must be a llama_cpp.LlamaGrammar or a GBNF string, got {type(grammar).__name__}")
    return text, getattr(grammar, "_root", "root") or "root"


class Grammar:
    """One state of a GBNF grammar over a pyriver Vocab."""

    # lazy grammars: the strict twin (checks what a trigger would feed), the trigger tokens and
    # patterns, and while awaiting a trigger the text so far (bytes as latin-1, as llama.cpp's buffer)
    _strict: Optional["Grammar"] = None
    _awaiting = False
    sampler: Optional[GrammarSampler] = None   # llama.cpp's grammar sampler of this state

    def __init__(self, vocab, grammar: Union[str, object] = None, *, _sampler=None, _lazy=None):
        self.vocab = vocab
        if _sampler is not None:   # a clone (_lazy: its lazy state) or a strict twin
            self.sampler = _sampler
            if _lazy is not None:
                self._strict, self._awaiting, self._buffer, self._trigger_toks, self._trigger_res = _lazy
            return
        text, root = gbnf_text(grammar)
        if not text.strip():
            raise GrammarError("the grammar is empty")
        self.sampler = GrammarSampler.strict(vocab, text, root)
        if self.sampler is None:   # llama.cpp logs why (a syntax error, an undefined rule, left recursion)
            raise GrammarError(f"the grammar does not parse (llama.cpp's GBNF: a syntax error, an undefined rule, "
                               f"left recursion or no rule '{root}'): {text[:200]!r}")
        if not self.mask_allows_any():
            self.close()
            raise GrammarError(f"the grammar allows no token of this vocabulary at its start: {text[:200]!r}")
        if isinstance(grammar, LazyGrammar):
            self._make_lazy(grammar, text, root)

    def _make_lazy(self, lazy: LazyGrammar, text: str, root: str) -> None:
        """This state becomes the strict twin; self gets llama.cpp's lazy sampler of the same grammar."""
        strict = Grammar(self.vocab, _sampler=self.sampler)
        self.sampler = None
        toks = []
        for w in lazy.words:
            t = self.vocab.tokenize(w.encode("utf-8"), add_bos=False, special=True)
            if len(t) == 1 and self.vocab.piece(t[0], special=True) == w.encode("utf-8"):
                toks.append(t[0])
        pats = [f"({_regex_literal(w)})" for w in lazy.words] + list(lazy.patterns)
        self.sampler = GrammarSampler.lazy(self.vocab, text, root, pats, toks)
        if self.sampler is None:
            strict.close()
            raise GrammarError(f"the lazy grammar's triggers do not compile: {pats!r}")
        self._strict, self._awaiting, self._buffer = strict, True, ""
        self._trigger_toks, self._trigger_res = frozenset(toks), tuple(re.compile(p) for p in pats)

    def clone(self) -> "Grammar":
        lazy = None
        if self._strict is not None:   # the strict twin is never advanced: shared
            lazy = (self._strict, self._awaiting, self._buffer, self._trigger_toks, self._trigger_res)
        return Grammar(self.vocab, _sampler=self.sampler.clone(), _lazy=lazy)

    @property
    def awaiting(self) -> bool:
        """A lazy grammar whose trigger has not appeared yet."""
        return self._awaiting

    def _triggered(self, tok: int) -> Optional[bytes]:
        """While awaiting: the text token tok would hand the grammar (as llama.cpp's lazy sampler
        does), or None when it triggers nothing."""
        piece = self.vocab.piece(tok, special=True)
        if tok in self._trigger_toks:
            return piece
        buf = self._buffer + piece.decode("latin-1")
        for rx in self._trigger_res:
            m = rx.search(buf)
            if m:
                start = next((m.start(i) for i in range(1, (m.re.groups or 0) + 1) if m.group(i)), m.start())
                return buf[start:].encode("latin-1")
        return None

    def _text_allowed(self, text: bytes) -> bool:
        """Whether the grammar (from its start) takes text: llama.cpp aborts the process when a
        trigger hands its grammar text it refuses, so that is checked here first."""
        g = self._strict.clone()
        try:
            for t in self.vocab.tokenize(text, add_bos=False, special=False):
                if not g.allows(t):
                    return False
                g.sampler.accept(t)
            return True
        finally:
            g.close()

    def close(self) -> None:   # a lazy grammar's strict twin is shared by its clones: freed with the last
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def allows(self, tok: int) -> bool:
        """Whether the grammar allows token tok next (a one-candidate array: cheap)."""
        if self._awaiting:   # free text, unless tok opens a call the grammar refuses
            text = None if self.vocab.is_eog(tok) else self._triggered(tok)
            return text is None or self._text_allowed(text)
        return self.sampler.allows(tok)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of logits with every token the grammar forbids at -inf; GrammarError when it allows
        none. A lazy grammar awaiting its trigger masks nothing (ConstrainedSampler.sample refuses a
        token that would open a call the grammar refuses)."""
        if self._awaiting:
            return np.array(logits, dtype=np.float32)
        arr = np.empty(logits.size, dtype=TOKEN_DATA)
        arr["id"] = np.arange(logits.size, dtype=np.int32)
        arr["logit"] = logits
        self.sampler.apply(arr)
        out = arr["logit"].copy()
        if not np.isfinite(out).any():
            raise GrammarError("the grammar allows no token here (a dead end of the grammar for this vocabulary)")
        return out

    def best(self, scores: np.ndarray) -> int:
        """The highest-scoring token the grammar allows (the lowest id among equals), as
        argmax(mask(scores)) but the grammar is applied to the best _TOP candidates first: over a
        whole vocabulary it costs milliseconds a token, and the answer is nearly always among them."""
        scores = np.asarray(scores, dtype=np.float32)
        if scores.size > _TOP:
            part = np.argpartition(-scores, _TOP)
            top = part[:_TOP]
            top = top[np.lexsort((top, -scores[top]))]   # by score, then id: np.argmax's order
            arr = np.empty(_TOP, dtype=TOKEN_DATA)
            arr["id"], arr["logit"] = top, scores[top]
            self.sampler.apply(arr)
            ok = np.flatnonzero(np.isfinite(arr["logit"]))
            # exact only when no token left out scores as high (a tie at the cut could have a lower id)
            if ok.size and scores[top[ok[0]]] > scores[part[_TOP]]:
                return int(top[ok[0]])
        return int(np.argmax(self.mask(scores)))

    def mask_allows_any(self) -> bool:
        arr = np.zeros(min(_TOP, self.vocab.n_vocab), dtype=TOKEN_DATA)   # the first ids: nearly always enough
        arr["id"] = np.arange(arr.size, dtype=np.int32)
        self.sampler.apply(arr)
        if np.isfinite(arr["logit"]).any():
            return True
        try:
            self.mask(np.zeros(self.vocab.n_vocab, dtype=np.float32))
            return True
        except GrammarError:
            return False

    def accept(self, tok: int) -> None:
        """Advance by token tok, which must be allowed. An end-of-generation token leaves the state as it is."""
        if not self.allows(tok):
            raise GrammarError(f"token {tok} ({self.vocab.piece(tok)!r}) is not allowed by the grammar here")
        if self.vocab.is_eog(tok):
            return
        if self._awaiting:
            if self._triggered(tok) is not None:
                self._awaiting, self._buffer = False, ""
            else:
                self._buffer += self.vocab.piece(tok, special=True).decode("latin-1")
        self.sampler.accept(tok)


class ConstrainedSampler:
    """A Sampler under a grammar. A sampler that draws gets the allowed tokens only, as in
    llama_cpp's chain (the same seed, the same token). A greedy one (whose token is the grammar's
    argmax either way) and a lazy grammar awaiting its trigger do what llama.cpp's common sampler
    does: the sampler's token first, checked alone against the grammar; only when the grammar
    forbids it, the grammar applied to every candidate (a greedy sampler that exposes its scores,
    greedy_scores, gets the best allowed token found among the top candidates first, Grammar.best). distribution() (lossless mode's p and q) is the sampler's
    distribution over the allowed tokens."""

    def __init__(self, sampler, grammar: Grammar, n_prompt: int):
        self.inner = sampler
        self.n_prompt = int(n_prompt)
        self._states: Dict[int, Grammar] = {0: grammar}   # state after i generated tokens
        self._tokens: list = []   # the generated tokens the states were built from
        self._rewinds = False     # set by distribution(): lossless mode, whose drafts may be rejected

    def __getattr__(self, name):   # p, rng and whatever else the sampler has
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def state(self, history: Sequence[int]) -> Grammar:
        """The grammar state after history (the prompt, then generated tokens)."""
        k, m = len(self._tokens), len(history) - self.n_prompt
        if not self._rewinds and m >= k and (k == 0 or history[self.n_prompt + k - 1] == self._tokens[-1]):
            n, gen = k, self._tokens + [int(t) for t in history[self.n_prompt + k:]]   # it only grew
        else:
            gen = [int(t) for t in history[self.n_prompt:]]
            n = 0
            while n < min(len(gen), k) and gen[n] == self._tokens[n]:
                n += 1
        for i in [i for i in self._states if i > n]:   # a rejected draft: its states go
            self._states.pop(i).close()
        del self._tokens[n:]
        if n not in self._states:   # further back than kept: replay from the start
            base = self._states[0].clone()
            for t in self._tokens[:n]:
                base.accept(t)
            self._states[n] = base
        for t in gen[n:]:
            cur = len(self._tokens)
            if self._rewinds or cur == 0:   # lossless mode rewinds: each state kept (state 0 always)
                g = self._states[cur].clone()
                g.accept(t)
            else:   # no rewinds: the newest state advances in place (accept leaves it as it was if it refuses)
                g = self._states.pop(cur)
                try:
                    g.accept(t)
                except GrammarError:
                    self._states[cur] = g
                    raise
            self._tokens.append(t)
            self._states[len(self._tokens)] = g
            old = len(self._tokens) - _KEEP
            if old > 0 and old in self._states:
                self._states.pop(old).close()
        return self._states[len(self._tokens)]

    def sample(self, logits: np.ndarray, history: Sequence[int] = (), *args, **kwargs) -> int:
        g = self.state(history)
        if not self.inner.greedy and not g.awaiting:
            # a draw: llama_cpp's chain masks before it draws (one draw from the allowed tokens),
            # so the same seed draws the same token
            return self.inner.sample(g.mask(np.asarray(logits, dtype=np.float32)), history, *args, **kwargs)
        tok = self.inner.sample(logits, history, *args, **kwargs)
        if g.allows(tok):
            return tok
        if g.awaiting:   # a lazy grammar: tok would open a call the grammar refuses; the next best
            x = np.array(logits, dtype=np.float32)
            for _ in range(_RETRIES):
                x[tok] = -np.inf
                tok = self.inner.sample(x, history, *args, **kwargs)
                if g.allows(tok):
                    return tok
            raise GrammarError(f"{_RETRIES} tokens in a row would open a tool call the grammar refuses")
        greedy = getattr(self.inner, "greedy_scores", None)
        scores = greedy(logits, history, *args, **kwargs) if greedy is not None else None
        if scores is not None:
            return g.best(scores)
        return self.inner.sample(g.mask(np.asarray(logits, dtype=np.float32)), history, *args, **kwargs)

    def distribution(self, logits: np.ndarray, history: Sequence[int] = (), *args, **kwargs) -> np.ndarray:
        self._rewinds = True
        g = self.state(history)
        return self.inner.distribution(g.mask(np.asarray(logits, dtype=np.float32)), history, *args, **kwargs)

    def close(self) -> None:
        for g in self._states.values():
            g.close()
        self._states = {}


def constrain(sampler, vocab, grammar, n_prompt: int):
    """sampler under grammar (a llama_cpp.LlamaGrammar, a GBNF string, or None: sampler itself)."""
    if grammar is None:
        return sampler
    return ConstrainedSampler(sampler, Grammar(vocab, grammar), n_prompt)
