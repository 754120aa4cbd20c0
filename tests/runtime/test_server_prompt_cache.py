"""The server's prompt cache in host memory (llama-server's --cache-ram): a slot's prompt is saved when
another request takes the slot and loaded back for a request that continues it, on a real server
with one slot, through the openai client: usage's cached_tokens counts the rows not computed again,
and the text is the one computed without the cache."""
from __future__ import annotations

import openai
import pytest

from server_proc import ServerProcess, http

DOC = ("The river rises in the hills above the town, runs through the old mill race, under three stone bridges "
       "and past the church, then widens into the marsh where herons stand in the reeds all summer long. ")
FIRST = DOC + "Question: where does the river rise? Answer:"
FOLLOW = DOC + "Question: what stands in the reeds? Answer:"   # the same document, another question
OTHER = "Write one sentence about the moon, the tides and the night sky over the sea."


def _serve(path, *extra):
    return ServerProcess(path, "--parallel", "1", "--ctx", "512", "--threads", "2", "--no-lossless", *extra)


def _ask(client, prompt):
    r = client.completions.create(model="m", prompt=prompt, max_tokens=8, temperature=0.0)
    return r.choices[0].text, r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens


@pytest.mark.parametrize("engine", ["native", "llama.cpp", "lfm2"])
def test_a_prompt_comes_back_after_its_slot_went_to_another(engine, smol_path, foreign_paths):
    path = foreign_paths["lfm2"] if engine == "lfm2" else smol_path
    flags = ("--engine", "llama.cpp") if engine != "native" else ()
    srv = _serve(path, *flags)
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        text, n_prompt, cached = _ask(client, FIRST)
        assert cached == 0
        _ask(client, OTHER)                        # the one slot now holds another prompt
        again, n_again, cached_again = _ask(client, FIRST)
        assert again == text and n_again == n_prompt
        if engine == "lfm2":
            # a recurrent state is reused whole or not at all: its slot kept the answer too, so the same
            # prompt cannot use it, and a prompt that continues prompt and answer (a next turn) loads it
            assert cached_again == 0
            _, first = http("POST", srv.url + "/completion", {"prompt": FIRST, "n_predict": 8, "temperature": 0,
                                                              "return_tokens": True})
            _ask(client, OTHER)
            _, tok = http("POST", srv.url + "/tokenize", {"content": FIRST})
            _, turn = http("POST", srv.url + "/completion", {"prompt": tok["tokens"] + first["tokens"] + tok["tokens"][:5],
                                                             "n_predict": 4, "temperature": 0})
            assert turn["tokens_cached"] >= len(tok["tokens"]) + len(first["tokens"]) - 1
        else:
            assert cached_again == n_prompt - 1    # loaded back: only the last token runs again
            _ask(client, OTHER)
            follow, _, cached_follow = _ask(client, FOLLOW)
            assert cached_follow >= len(DOC) // 8  # the document's rows, loaded for another question
    finally:
        srv.close()
    # the same requests without the cache: nothing comes back, and the texts are the same
    srv = _serve(path, *flags, "--cache-ram", "0")
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        _ask(client, FIRST)
        _ask(client, OTHER)
        plain, _, cached_plain = _ask(client, FIRST)
        assert cached_plain < n_prompt // 4 and plain == text
        if engine != "lfm2":
            _ask(client, OTHER)
            assert _ask(client, FOLLOW)[0] == follow
    finally:
        srv.close()


@pytest.mark.parametrize("engine", ["native", "llama.cpp"])
def test_a_sequence_state_loads_into_another_sequence(engine, smol_path):
    """The decoders' state_get/state_set of one sequence (what the cache keeps), between sequences."""
    import numpy as np
    from pyriver import Llama
    from pyriver.api.batch import BatchDecoder, Feed
    with Llama(smol_path, n_ctx=256, n_threads=2, verbose=False, engine=engine) as llm:
        dec = BatchDecoder(llm, 3)
        try:
            toks = llm.tokenize(FIRST.encode())
            dec.step([Feed(0, llm.tokenize(OTHER.encode()), prompt=True)])
            dec.step([Feed(2, toks[:-1], prompt=True)])
            blob = dec.state_get(2)
            dec.state_set(0, blob)          # sequence 0's other prompt is replaced
            assert dec.pos(0) == dec.pos(2) == len(toks) - 1
            res = dec.step([Feed(0, toks[-1:]), Feed(2, toks[-1:])])
            assert np.array_equal(res[0][0], res[2][0])
            with pytest.raises(ValueError):
                dec.state_get(3)
            with pytest.raises(ValueError):
                dec.state_set(1, blob[:len(blob) // 2])
        finally:
            dec.close()
