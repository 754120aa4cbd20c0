"""`pyriver serve --draft-store FILE / --no-draft-store` (issue 71): the default n-gram drafts learn
across requests; the store is written at shutdown and read at start; a file that is corrupt or of
another model is refused with a clear line and the server starts without it (the file left as it
is). Texts are checked against the plain server (--batch-invariant: decode steps' bits)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from server_proc import ServerProcess, http

pytestmark = pytest.mark.slow
COMMON = ("-np", "1", "-t", "2", "--ctx", "1024", "--batch-invariant")
PROMPT = "Write a Python function that returns the sum of the squares of a list."


def ask(server, prompt=PROMPT):
    status, body = http("POST", server.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": prompt}], "max_tokens": 60, "temperature": 0})
    assert status == 200, body
    return body["choices"][0]["message"]["content"], body["timings"].get("draft_n_accepted", 0)


def store_kept(server, prompt=PROMPT):
    """The drafts kept that the request's statistics count as the store's (by_source["store"])."""
    status, body = http("POST", server.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": prompt}], "max_tokens": 60, "temperature": 0})
    assert status == 200, body
    return body["river"]["lossless"].get("by_source", {}).get("store", {}).get("accepted", 0)


@pytest.fixture(scope="module")
def reference(smol_path):
    s = ServerProcess(smol_path, *COMMON, "--no-lossless")
    try:
        return ask(s)[0]
    finally:
        s.close()


def _stop(s: ServerProcess) -> str:
    """Stops the server (as close does) and returns what it printed."""
    s.proc.terminate()
    out = s.proc.communicate(timeout=60)[0]
    s.close()
    return out


def test_the_store_learns_is_kept_and_read_back(smol_path, reference, tmp_path):
    p = tmp_path / "store.bin"
    s = ServerProcess(smol_path, *COMMON, "--draft-store", str(p))
    try:
        t1, kept1 = ask(s)
        t2, kept2 = ask(s)
        from_store = store_kept(s)   # the third: counted under the store, not under the request's own n-grams
    finally:
        s.close()
    assert t1 == t2 == reference
    assert kept2 >= kept1 + 30, (kept1, kept2)   # the second answer came from the first
    assert from_store >= 30, from_store
    assert p.exists()   # written at shutdown
    s = ServerProcess(smol_path, *COMMON, "--draft-store", str(p))
    try:
        t3, kept3 = ask(s)
    finally:
        s.close()
    assert t3 == reference and kept3 >= kept1 + 30, (kept1, kept3)


def test_no_draft_store(smol_path, reference):
    s = ServerProcess(smol_path, *COMMON, "--no-draft-store")
    try:
        t1, kept1 = ask(s)
        t2, kept2 = ask(s)
        from_store = store_kept(s)
    finally:
        s.close()
    assert t1 == t2 == reference and kept2 == kept1 and from_store == 0


@pytest.mark.parametrize("damage", ["truncated", "another model"])
def test_a_bad_file_is_refused_and_the_server_starts_without_it(smol_path, gemma_path, reference, tmp_path, damage):
    from pyriver.speculative.store import DraftStore
    from pyriver.engine.vocab import Vocab
    p = tmp_path / "store.bin"
    v = Vocab(smol_path if damage == "truncated" else gemma_path)
    try:
        fp = v.fingerprint()
    finally:
        v.close()
    st = DraftStore(fp)
    st.add(list(range(100, 400)))
    st.save(str(p))
    if damage == "truncated":
        p.write_bytes(p.read_bytes()[:-100])
    before = p.read_bytes()
    s = ServerProcess(smol_path, *COMMON, "--draft-store", str(p))
    try:
        t1, _ = ask(s)
        _, kept2 = ask(s)
        assert t1 == reference and kept2 >= 30   # a store in memory still learns
    finally:
        out = _stop(s)
    assert "--draft-store refused" in out and damage in out and "Traceback" not in out
    assert p.read_bytes() == before   # not overwritten


@pytest.mark.parametrize("args,words", [
    (["--no-draft-store", "--draft-store", "x.bin"], "excludes"),
    (["--no-lossless", "--draft-store", "x.bin"], "keeps n-gram drafts"),
    (["--draft-store-mib", "0"], ">= 1"),
])
def test_bad_settings_refused(smol_path, args, words):
    p = subprocess.run([sys.executable, "-m", "pyriver.server", smol_path, *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and words in p.stderr and "Traceback" not in p.stderr, p.stderr
