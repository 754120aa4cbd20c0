"""Drafts that learn across requests (issue 71): a store of the prompts and answers a model has
seen, shared by every request and slot of one Llama (or several Llamas of the same vocabulary),
and the drafter that combines it with the request's own n-gram lookup.

The store is an n-gram index with hash chains (LZ77's): each text's tokens, and per position the
previous position where the same KEY_LEN tokens ended. A lookup follows the chain of the text's
last KEY_LEN tokens (the most recent occurrence first, at most MAX_CANDIDATES), extends each
occurrence backwards to the longest common suffix (at most max_ngram tokens: the node a suffix tree
would reach), keeps the occurrences of the longest, and drafts the path their continuations agree
on: each next token is the one most of them (weighted by how often their text was seen) continue
with, while at least MIN_AGREE of them do. That is SuffixDecoding's frequency-scored path, without
its tree; the engine verifies one path per step, so no branches are proposed.

Memory is bounded in bytes (an estimate of what the arrays and the index hold, checked by
tests/unit/test_draft_store.py against tracemalloc); the least recently used text goes first. A
store belongs to one vocabulary (Vocab.fingerprint): its file names it in a header with a checksum
of the rest, and a file that is corrupt, truncated or of another vocabulary is refused
(DraftStoreError) before anything of it is used."""
from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from array import array
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

from pyriver.speculative.draft import SuffixLookup

FORMAT = "pyriver-draft-store"
VERSION = 1
KEY_LEN = 3            # the shortest match the store drafts from: across requests one or two tokens say little
MAX_CANDIDATES = 32    # occurrences followed per lookup (the most recent)
# a request's own match this long is kept over a longer one of the store: the request's own text is
# the more recent evidence (an agent's file, edited turn after turn, outvoted by its older versions)
OWN_FIRST = 3   # 8 measured agent loops at 1.34x plain llama-server against 1.43x without the store
MIN_AGREE = 0.5        # a path goes on while this share of its occurrences (by weight) agree on the next token
DEFAULT_MAX_BYTES = 64 << 20
# The estimate of what each part costs in CPython (64-bit), measured with tracemalloc
# (tests/unit/test_draft_store.py holds the estimate above what is allocated)
TOKEN_BYTES = 13       # the token (array "i"), its chain link (array "q") and their arrays' slack
HEAD_BYTES = 184       # an index entry: a dict slot, its share of the table, and two ints
TEXT_BYTES = 640       # a text's arrays, its LRU, weight and digest entries
_HEADER_MAX = 4096
_NONE = -1


class DraftStoreError(ValueError):
    """A store file pyriver will not use (corrupt, truncated, another vocabulary's, not a store)."""


def _key(toks: Sequence[int]) -> int:
    return hash(tuple(toks))   # ints hash the same in every process: the index is rebuilt on load anyway


class DraftStore:
    """Texts seen (prompt and answer token ids) and their n-gram index; thread-safe. model: the
    vocabulary's fingerprint (Vocab.fingerprint): a store never drafts for another one."""

    def __init__(self, model: str, max_bytes: int = DEFAULT_MAX_BYTES, max_ngram: int = 32):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.model = str(model)
        self.max_bytes = int(max_bytes)
        self.max_ngram = int(max_ngram)
        self.lock = threading.Lock()
        self.texts: "OrderedDict[int, array]" = OrderedDict()   # id -> tokens, least recently used first
        self.links: Dict[int, array] = {}    # id -> per position, the previous position of the same key (packed)
        self.weight: Dict[int, int] = {}     # id -> times the text was seen
        self.digest: Dict[bytes, int] = {}   # a text's digest -> its id (a text seen again is counted, not kept twice)
        self.ids: Dict[int, bytes] = {}
        self.head: Dict[int, int] = {}       # key -> its most recent position (id << 32 | index of its last token)
        self.nbytes = 0
        self.next_id = 0
        self.added = 0                       # texts added (seen again included)
        self.evicted = 0

    # -- learning --------------------------------------------------------------------------
    def add(self, tokens: Sequence[int]) -> None:
        """Learns a text (a request's prompt and answer). One seen before counts once more."""
        toks = array("i", tokens)
        if len(toks) <= KEY_LEN:
            return
        dig = hashlib.blake2b(toks.tobytes(), digest_size=16).digest()
        with self.lock:
            self.added += 1
            tid = self.digest.get(dig)
            if tid is not None:
                self.weight[tid] += 1
                self.texts.move_to_end(tid)
                return
            self._insert(toks, dig, 1)
            while self.nbytes > self.max_bytes and self.texts:
                self._evict(next(iter(self.texts)))

    def _insert(self, toks: array, dig: bytes, weight: int) -> None:
        tid = self.next_id
        self.next_id += 1
        n = len(toks)
        links = array("q", [_NONE]) * n
        head, base, fresh = self.head, tid << 32, 0
        for i in range(KEY_LEN - 1, n):
            k = _key(toks[i - KEY_LEN + 1:i + 1])
            p = head.get(k, _NONE)
            if p == _NONE:
                fresh += 1
            links[i] = p
            head[k] = base | i
        self.texts[tid], self.links[tid], self.weight[tid] = toks, links, weight
        self.digest[dig], self.ids[tid] = tid, dig
        self.nbytes += TEXT_BYTES + TOKEN_BYTES * n + HEAD_BYTES * fresh

    def _evict(self, tid: int) -> None:
        """Drops a text; index entries that pointed into it point to the older occurrence (or go).
        Chains of newer texts that ran through it end there."""
        toks, links = self.texts.pop(tid), self.links.pop(tid)
        del self.weight[tid]
        del self.digest[self.ids.pop(tid)]
        head, base, gone = self.head, tid << 32, 0
        for i in range(KEY_LEN - 1, len(toks)):
            k = _key(toks[i - KEY_LEN + 1:i + 1])
            if head.get(k) == base | i:
                p = links[i]
                if p != _NONE and (p >> 32) in self.texts:
                    head[k] = p
                else:
                    del head[k]
                    gone += 1
        self.nbytes -= TEXT_BYTES + TOKEN_BYTES * len(toks) + HEAD_BYTES * gone
        self.evicted += 1

    # -- drafting --------------------------------------------------------------------------
    def lookup(self, tokens: Sequence[int], max_ngram: Optional[int] = None, num_pred: int = 64) -> Tuple[List[int], int]:
        """(the draft for the text `tokens`, the length of the match it continues; ([], 0): none)."""
        n = len(tokens)
        if n < KEY_LEN or num_pred <= 0:
            return [], 0
        most = self.max_ngram if max_ngram is None else max_ngram
        last = tokens[n - KEY_LEN:]
        with self.lock:
            p = self.head.get(_key(last), _NONE)
            texts, links = self.texts, self.links
            found: List[Tuple[int, int, int]] = []   # (match length, text id, index of its last matched token)
            best, seen = 0, 0
            while p != _NONE and seen < MAX_CANDIDATES:
                tid, i = p >> 32, p & 0xFFFFFFFF
                doc = texts.get(tid)
                if doc is None:   # evicted: the chain ends
                    break
                p = links[tid][i]
                seen += 1
                m = 0
                while m < most and m <= i and m < n and doc[i - m] == tokens[n - 1 - m]:
                    m += 1
                if m < KEY_LEN or i + 1 >= len(doc) or m < best:   # a hash collision, nothing after, or shorter
                    continue
                if m > best:
                    best, found = m, []
                found.append((m, tid, i))
            if not found:
                return [], 0
            weight = self.weight
            alive = [(tid, i + 1, weight[tid]) for _, tid, i in found]   # (text, next position, weight)
            out: List[int] = []
            while alive and len(out) < num_pred:
                votes: Dict[int, int] = {}
                total = 0
                for tid, j, w in alive:
                    total += w
                    doc = texts[tid]
                    if j < len(doc):
                        votes[doc[j]] = votes.get(doc[j], 0) + w
                if not votes:
                    break
                tok, w = max(votes.items(), key=lambda kv: kv[1])
                if w < MIN_AGREE * total:
                    break
                out.append(tok)
                alive = [(tid, j + 1, wt) for tid, j, wt in alive if j < len(texts[tid]) and texts[tid][j] == tok]
            if out:
                for tid, _, _ in alive:   # the texts drafted from are recently used
                    texts.move_to_end(tid)
            return out, best

    def __getstate__(self) -> Dict:   # a pickled Llama carries its store (its lock is made anew)
        with self.lock:
            return {k: v for k, v in self.__dict__.items() if k != "lock"}

    def __setstate__(self, state: Dict) -> None:
        self.__dict__.update(state)
        self.lock = threading.Lock()

    # -- size ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.texts)

    def info(self) -> Dict:
        return {"texts": len(self.texts), "tokens": sum(len(t) for t in self.texts.values()),
                "bytes": self.nbytes, "max_bytes": self.max_bytes, "added": self.added, "evicted": self.evicted}

    # -- files -----------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Writes the store (whole or not at all, pyriver.atomic): a JSON header line naming the
        vocabulary, the sizes and the payload's sha256, then each text oldest first (count, weight,
        tokens as little-endian int32)."""
        from pyriver.atomic import replacing
        with self.lock:
            parts = []
            for tid, toks in self.texts.items():
                t = toks if toks.itemsize == 4 else array("i", toks)
                b = t.tobytes() if _LITTLE else _swap(t)
                parts.append(struct.pack("<II", len(t), self.weight[tid]) + b)
            payload = b"".join(parts)
            header = {"format": FORMAT, "version": VERSION, "model": self.model, "texts": len(parts),
                      "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest(),
                      "max_bytes": self.max_bytes}
        with replacing(path) as tmp:
            with open(tmp, "wb") as f:
                f.write(json.dumps(header).encode() + b"\n")
                f.write(payload)

    @classmethod
    def load(cls, path: str, model: str, max_bytes: Optional[int] = None, n_vocab: Optional[int] = None) -> "DraftStore":
        """The store in path, for the vocabulary `model`; DraftStoreError when the file is not a store,
        is another vocabulary's, is truncated or corrupt (nothing of it is used then)."""
        with open(path, "rb") as f:
            line = f.readline(_HEADER_MAX)
            try:
                header = json.loads(line.decode("utf-8"))
                ok = isinstance(header, dict) and header.get("format") == FORMAT
            except (UnicodeDecodeError, ValueError):
                ok = False
            if not ok or not line.endswith(b"\n"):
                raise DraftStoreError(f"{path}: not a pyriver draft store (no header)")
            if header.get("version") != VERSION:
                raise DraftStoreError(f"{path}: draft store version {header.get('version')!r}, this pyriver reads {VERSION}")
            if header.get("model") != model:
                raise DraftStoreError(f"{path}: a draft store of another model (vocabulary {str(header.get('model'))[:16]}, "
                                      f"this model's is {model[:16]}): refused")
            payload = f.read()
        size = header.get("bytes")
        if not isinstance(size, int) or len(payload) < size:
            raise DraftStoreError(f"{path}: truncated draft store ({len(payload)} of {size} bytes)")
        if len(payload) > size or hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            raise DraftStoreError(f"{path}: corrupt draft store (checksum mismatch)")
        store = cls(model, header.get("max_bytes", DEFAULT_MAX_BYTES) if max_bytes is None else max_bytes)
        off, n_texts = 0, 0
        try:
            while off < len(payload):
                n, w = struct.unpack_from("<II", payload, off)
                off += 8
                toks = array("i")
                toks.frombytes(payload[off:off + 4 * n])
                off += 4 * n
                if len(toks) != n or w < 1:
                    raise ValueError("a text's size")
                if not _LITTLE:
                    toks.byteswap()
                if n_vocab is not None and n and (min(toks) < 0 or max(toks) >= n_vocab):
                    raise ValueError("token ids out of the vocabulary")
                n_texts += 1
                store.add_seen(toks, w)
        except (struct.error, ValueError) as e:
            raise DraftStoreError(f"{path}: corrupt draft store ({e})") from None
        if n_texts != header.get("texts"):
            raise DraftStoreError(f"{path}: corrupt draft store ({n_texts} texts, the header says {header.get('texts')})")
        return store

    def add_seen(self, toks: array, weight: int) -> None:
        """A text seen `weight` times (a file's, as load reads it)."""
        if len(toks) <= KEY_LEN:
            return
        dig = hashlib.blake2b(toks.tobytes(), digest_size=16).digest()
        with self.lock:
            if dig in self.digest:
                self.weight[self.digest[dig]] += weight
                return
            self._insert(toks, dig, weight)
            while self.nbytes > self.max_bytes and self.texts:
                self._evict(next(iter(self.texts)))


_LITTLE = array("i", [1]).tobytes()[0] == 1


def _swap(t: array) -> bytes:
    c = array("i", t)
    c.byteswap()
    return c.tobytes()


def open_store(path: str, model: str, max_bytes: Optional[int] = None, n_vocab: Optional[int] = None) -> DraftStore:
    """The store in path, or a new empty one where the file does not exist yet (DraftStoreError: refused)."""
    if not os.path.exists(path):
        return DraftStore(model, DEFAULT_MAX_BYTES if max_bytes is None else max_bytes)
    return DraftStore.load(path, model, max_bytes, n_vocab)


class StoreLookup(SuffixLookup):
    """The n-gram drafter with a store: the request's own suffix lookup (SuffixLookup), or the store's
    draft where the request's own proposes nothing, or where the store's match is longer (more
    evidence) than a short own match (under OWN_FIRST tokens), so a request drafts what it would
    without the store wherever its own text has a good match. `from_store` says which the last proposal was
    (its DraftLength key is then "store<n>": lossless.proposal_key). learn() adds a finished text."""

    def __init__(self, store: DraftStore, max_ngram_size: int = 32, num_pred_tokens: int = 64):
        super().__init__(max_ngram_size, num_pred_tokens)
        self.store = store
        self.from_store = False

    def propose(self, tokens: List[int]) -> List[int]:
        own = super().propose(tokens)
        prop, m = self.store.lookup(tokens, self.max_ngram_size, self.num_pred_tokens)
        if prop and (not own or m > self.match_size and self.match_size < OWN_FIRST):
            self.from_store, self.match_size, self.match_end = True, m, -1
            return prop
        self.from_store = False
        return own

    def learn(self, tokens: Sequence[int]) -> None:
        self.store.add(tokens)

    def __repr__(self) -> str:
        return f"StoreLookup({len(self.store)} texts, max_ngram_size={self.max_ngram_size})"
