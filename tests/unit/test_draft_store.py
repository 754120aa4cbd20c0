"""The draft store (issue 71, pyriver.speculative.store): what it drafts from earlier texts, how it
combines with the request's own lookup, its memory bound and its files. No model: token ids."""
from __future__ import annotations

import json
import random
import tracemalloc

import pytest

from pyriver.speculative.draft import SuffixLookup
from pyriver.speculative.draftlen import parse_ngram, prior
from pyriver.speculative.lossless import proposal_key
from pyriver.speculative.store import DraftStore, DraftStoreError, StoreLookup, open_store

ANSWER = list(range(1000, 1060))
TEMPLATE = [1, 2, 3, 4, 5]   # a chat template's turn opening, the same in every request


def test_an_answer_seen_before_is_drafted_from_the_store():
    s = DraftStore("m")
    s.add([7, 8, 9] + TEMPLATE + ANSWER)
    # another request's prompt; its answer so far repeats the first 4 tokens of the earlier one
    draft, m = s.lookup([40, 41, 42] + TEMPLATE + ANSWER[:4], num_pred=16)
    assert draft == ANSWER[4:20]
    assert m == 9   # the template and the 4 tokens: the longest suffix the earlier text shares
    assert s.lookup([40, 41, 42] + TEMPLATE + ANSWER[:4], num_pred=16, max_ngram=4)[1] == 4
    assert s.lookup([40, 41, 42, 43, 44], num_pred=16) == ([], 0)   # nothing seen ends so


def test_the_path_follows_what_most_texts_continue_with():
    s = DraftStore("m")
    for tail in ([50, 51, 52, 53], [50, 51, 52, 53], [50, 51, 60, 61], [70, 71, 72, 73]):
        s.add([9] + TEMPLATE + tail)
    # 3 of 4 continue with 50, 51; then 2 of 3 with 52, 53 (weights: a text seen twice counts twice)
    assert s.lookup([8] + TEMPLATE, num_pred=8)[0] == [50, 51, 52, 53]
    s.add([9] + TEMPLATE + [50, 51, 60, 61])
    s.add([9] + TEMPLATE + [50, 51, 60, 61])
    assert s.lookup([8] + TEMPLATE, num_pred=8)[0] == [50, 51, 60, 61]
    # no majority: no draft past the agreement
    t = DraftStore("m")
    for tail in ([50], [60], [70]):
        t.add([9] + TEMPLATE + tail + [99, 98])
    assert t.lookup([8] + TEMPLATE, num_pred=8) == ([], 5)


def test_a_text_seen_again_is_counted_not_kept_twice():
    s = DraftStore("m")
    s.add([9] + TEMPLATE + ANSWER)
    n = s.nbytes
    s.add([9] + TEMPLATE + ANSWER)
    assert s.nbytes == n and len(s) == 1 and s.added == 2


def test_combined_with_the_requests_own_lookup_never_less():
    s = DraftStore("m")
    lk = StoreLookup(s)
    own = SuffixLookup()
    # a code edit: the answer copies the prompt; the store knows another text with the same 3 tokens
    prompt = [9] + list(range(200, 240)) + TEMPLATE
    text = prompt + list(range(200, 210))
    s.add([300, 301, 207, 208, 209, 400, 401, 402, 403])
    got = lk.propose(text)
    assert got == own.propose(text) and lk.match_size == own.match_size and not lk.from_store
    assert proposal_key(lk, len(prompt)) == proposal_key(own, len(prompt))
    # the store's match is the longer: its draft, under its own key
    s.add(ANSWER)
    text = [5, 6] + ANSWER[:12]
    assert lk.propose(text) == ANSWER[12:]
    assert lk.from_store and lk.match_size == 12 and proposal_key(lk, 2) == "store12"
    assert parse_ngram("store12") == ("store", 12) and prior("store12")[0] > 0
    lk.learn([77, 78, 79, 80, 81])
    assert s.lookup([1, 77, 78, 79], num_pred=3)[0] == [80, 81]


def _fill(s: DraftStore, n_texts: int, length: int, vocab: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    for _ in range(n_texts):
        s.add([rng.randrange(vocab) for _ in range(length)])


@pytest.mark.parametrize("length,vocab", [(300, 5000), (600, 300), (50, 100)])
def test_memory_stays_within_the_bound(length, vocab):
    """The byte estimate holds the store below its bound (least recently used out), and what Python
    allocates for it stays below the estimate (tracemalloc)."""
    bound = 2 << 20
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        s = DraftStore("m", bound)
        _fill(s, 60000 // length * 10, length, vocab)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert s.evicted > 0 and s.nbytes <= bound
    assert used <= bound, f"{used} bytes allocated for a store bounded at {bound}"


def test_the_least_recently_used_text_goes_first():
    s = DraftStore("m", 0)
    s.max_bytes = 10 ** 9
    a, b, c = [[k] * 2 + list(range(k * 100, k * 100 + 40)) for k in (1, 2, 3)]
    for t in (a, b):
        s.add(t)
    s.lookup([0, 100, 101, 102], num_pred=4)   # a's text drafts: it is used
    s.max_bytes = s.nbytes + 10   # room for none more: c pushes out the least recently used, b
    s.add(c)
    assert s.lookup([0, 100, 101, 102], num_pred=2)[0] == [103, 104]
    assert s.lookup([0, 200, 201, 202], num_pred=2) == ([], 0)
    assert s.lookup([0, 300, 301, 302], num_pred=2)[0] == [303, 304]


def test_save_and_load(tmp_path):
    p = tmp_path / "store.bin"
    s = DraftStore("model-a", 1 << 20)
    s.add([9] + TEMPLATE + ANSWER)
    s.add([9] + TEMPLATE + ANSWER)
    _fill(s, 20, 50, 3000)
    s.save(str(p))
    t = DraftStore.load(str(p), "model-a")
    assert t.info()["tokens"] == s.info()["tokens"] and t.weight == s.weight and t.max_bytes == s.max_bytes
    assert t.lookup([8] + TEMPLATE + ANSWER[:3], num_pred=5) == s.lookup([8] + TEMPLATE + ANSWER[:3], num_pred=5)
    assert len(open_store(str(tmp_path / "none.bin"), "model-a")) == 0   # no file yet: a new store


def _saved(tmp_path) -> bytes:
    p = tmp_path / "store.bin"
    s = DraftStore("model-a")
    _fill(s, 10, 40, 3000)
    s.save(str(p))
    return p.read_bytes()


def test_another_models_store_is_refused(tmp_path):
    p = tmp_path / "s.bin"
    p.write_bytes(_saved(tmp_path))
    with pytest.raises(DraftStoreError, match="another model"):
        DraftStore.load(str(p), "model-b")


@pytest.mark.parametrize("damage,words", [
    (lambda b: b[:-7], "truncated"),
    (lambda b: b[:b.index(b"\n") + 1], "truncated"),
    (lambda b: b[:-20] + bytes([b[-20] ^ 1]) + b[-19:], "corrupt"),
    (lambda b: b + b"\0\0\0\0", "corrupt"),
    (lambda b: b"GGUF" + b[4:], "not a pyriver draft store"),
    (lambda b: b"", "not a pyriver draft store"),
    (lambda b: b[:30], "not a pyriver draft store"),
])
def test_a_corrupt_or_truncated_file_is_refused(tmp_path, damage, words):
    p = tmp_path / "s.bin"
    p.write_bytes(damage(_saved(tmp_path)))
    with pytest.raises(DraftStoreError, match=words):
        DraftStore.load(str(p), "model-a")


def test_a_file_whose_checksum_holds_but_whose_texts_do_not_is_refused(tmp_path):
    """A header rewritten to match a damaged payload (its sizes wrong): refused, not half-loaded."""
    import hashlib
    raw = _saved(tmp_path)
    head, payload = raw.split(b"\n", 1)
    payload = b"\xff\xff\xff\x7f" + payload[4:]   # the first text's count: far past the end
    h = json.loads(head)
    h["sha256"] = hashlib.sha256(payload).hexdigest()
    p = tmp_path / "s.bin"
    p.write_bytes(json.dumps(h).encode() + b"\n" + payload)
    with pytest.raises(DraftStoreError, match="corrupt"):
        DraftStore.load(str(p), "model-a")
    # token ids outside the vocabulary
    with pytest.raises(DraftStoreError, match="corrupt"):
        tmp = tmp_path / "t.bin"
        tmp.write_bytes(_saved(tmp_path))
        DraftStore.load(str(tmp), "model-a", n_vocab=10)


def test_pickled_with_its_texts():
    """A pickled Llama carries its arguments, draft_store included."""
    import pickle
    s = DraftStore("m")
    s.add([9] + TEMPLATE + ANSWER)
    t = pickle.loads(pickle.dumps(s))
    assert t.lookup([8] + TEMPLATE, num_pred=4) == s.lookup([8] + TEMPLATE, num_pred=4) != ([], 0)
    t.add([1, 2, 3, 4, 5, 6])   # its own lock
