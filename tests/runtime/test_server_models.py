"""llama-server's /v1/models of one model on a real `pyriver serve`: --alias takes comma-separated
names (the id is the first in sorted order, every one an alias), --tags informational tags, and a
loaded model's meta; the same entry as llama-server's for the same flags (pyriver's owned_by aside)."""
from __future__ import annotations

import openai
import pytest

from server_proc import ServerProcess, http, llama_server

FLAGS = ("--alias", "tinyllama-2, fim,code", "--tags", "chat,fim,small")


def _entry(url: str) -> dict:
    status, body = http("GET", url + "/v1/models")
    assert status == 200 and len(body["data"]) == 1
    return body["data"][0]


@pytest.fixture(scope="module")
def ours(smol_path):
    s = ServerProcess(smol_path, "--ctx", "512", "--threads", "2", "--no-lossless", *FLAGS)
    try:
        yield _entry(s.url), [m.id for m in openai.OpenAI(base_url=s.url + "/v1", api_key="x").models.list()]
    finally:
        s.close()


def test_aliases_and_tags(ours):
    entry, ids = ours
    assert entry["id"] == "code" and ids == ["code"]   # the first alias in sorted order
    assert entry["aliases"] == ["code", "fim", "tinyllama-2"] and entry["tags"] == ["chat", "fim", "small"]
    assert entry["meta"]["n_ctx"] == 512 and entry["meta"]["n_vocab"] == 49152


@pytest.mark.peer
def test_the_entry_is_llama_server_s(ours, smol_path):
    p = llama_server("-m", smol_path, "-c", "512", "-np", "1", "-t", "2", *FLAGS)
    try:
        theirs = _entry(p.url)
    finally:
        p.close()
    entry = ours[0]
    for k in ("id", "object"):
        assert entry[k] == theirs[k], k
    assert sorted(entry["aliases"]) == sorted(theirs["aliases"]) and sorted(entry["tags"]) == sorted(theirs["tags"])
    for k, v in entry["meta"].items():
        assert theirs["meta"][k] == v, k
