"""A lossless point's KL divergence (issue 72 item 1): `pyriver eval --kl-divergence --lossless` and
`pyriver compare --lossless` compute each chunk's scored rows in lossless mode's verify steps of
draft-max + 1 rows, through its own verify call, so the figure is of the logits lossless generation
chooses its tokens with. Referee: lossless generation itself (pyriver.Llama in lossless mode, with a
drafter that proposes the text, so that every draft is kept), whose rows must come out bit for bit."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from pyriver import Llama
from pyriver.engine import VERIFY
from pyriver.tools import compare, kld
from pyriver.tools import eval as eval_tool
from pyriver.tools.results import schema

PROMPT = (b"The history of the river valley begins with the first farmers, who came down from the hills to plant "
          b"barley and wheat along its banks. Over many centuries their villages grew into towns, and the towns")


class TextDrafts:
    """A draft model that proposes the known continuation of the prompt (nothing off it)."""

    def __init__(self, prompt):
        self.prompt, self.text = list(prompt), []

    def __call__(self, input_ids, **_):
        seq = [int(t) for t in input_ids]
        gen = seq[len(self.prompt):]
        if seq[:len(self.prompt)] != self.prompt or self.text[:len(gen)] != gen:
            return np.array([], dtype=np.intc)
        return np.array(self.text[len(gen):len(gen) + 8], dtype=np.intc)


def _generated(path, prompt, k, m):
    """m greedy tokens of lossless mode (draft-max k) with every draft kept, and the logits that chose
    each (what stopping criteria are given). The drafter proposes the text of the last run until a run
    reproduces it: then every step was k + 1 rows."""
    drafts = TextDrafts(prompt)
    llm = Llama(path, n_ctx=256, n_threads=2, verbose=False, river=None, draft_model=drafts, draft_max=k)
    try:
        for _ in range(4):
            toks, rows = [], []

            def chose(ids, logits):
                rows.append(np.array(logits, copy=True))
                toks.append(int(np.argmax(logits)))
                return False
            llm.create_completion(prompt, max_tokens=m, temperature=0.0, stopping_criteria=chose)
            if toks == drafts.text:
                return toks, np.stack(rows), llm.last_stats["lossless"]
            drafts.text = toks
    finally:
        llm.close()
    raise AssertionError("lossless generation did not settle on one text")


@pytest.mark.parametrize("k", [0, 2])
def test_a_lossless_point_is_the_logits_lossless_generation_chooses_with(smol_path, k):
    full = kld.lossless_llama(smol_path, 256, 2)
    try:
        prompt = full.tokenize(PROMPT, add_bos=True)
        first = len(prompt) - 1            # a chunk whose first half and first scored token are the prompt
        n_ctx = 2 * first
        m = n_ctx - 1 - first
        toks, chosen, st = _generated(smol_path, prompt, k, m)
        assert len(toks) == m
        # every step verified k drafts and kept them all: steps of k + 1 rows, as the point's
        assert st["drafted"] == st["accepted"] == k * st["verify_steps"] and st["verify_steps"] == -(-(m - 1) // (k + 1))
        chunk = prompt + toks
        rows = kld.chunk_logits(full, chunk, None, False, verify=k + 1)
        assert rows.shape == chosen.shape and np.array_equal(rows, chosen)
        if k == 0:   # one-row verify steps are not a prompt's bits: a point computed as a plain prefill fails above
            assert not np.array_equal(kld.chunk_logits(full, chunk, None, False), chosen)
    finally:
        full.close()


def test_a_lossless_point_asks_the_engine_for_verify_steps(smol_path):
    llm = kld.lossless_llama(smol_path, 64, 2)
    asked = []
    real = llm.context.engine.decode

    def spy(tokens, logits_all, prompt):
        asked.append((len(tokens), prompt, logits_all))
        return real(tokens, logits_all, prompt)
    llm.context.engine.decode = spy
    try:
        chunk = llm.tokenize(PROMPT, add_bos=True)[:20]
        rows = kld.chunk_logits(llm, chunk, llm.token_bos(), False, verify=3)
    finally:
        llm.close()
    # the first half and the first scored token as a prompt, then the scored tokens 3 rows a step
    assert asked == [(11, True, False), (3, VERIFY, True), (3, VERIFY, True), (2, VERIFY, True)]
    assert rows.shape[0] == 20 - 1 - 10


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    from pyriver.tools import datasets
    p = tmp_path_factory.mktemp("kldl") / "builtin.txt"
    p.write_text("\n\n".join(t["text"] for t in datasets.load_texts("builtin")) * 8 + "\n")
    return str(p)


def test_eval_and_compare_read_a_lossless_point_alike(smol_path, text, tmp_path):
    out = tmp_path / "cmp"
    assert compare.main([smol_path, "--lossless", "ngram:2,q4_0:2", "-f", text, "-c", "128", "--chunks", "1", "-p", "16",
                         "-n", "4", "-r", "1", "-o", str(out), "--no-png"]) == 0
    res = json.loads((out / "compare.json").read_text())
    jsonschema.validate(res, schema("compare"))
    own, ll, lr = res["points"]
    assert ll["kind"] == lr["kind"] == "lossless" and ll["draft"] == "ngram" and ll["draft_max"] == 2
    assert ll["speed"]["ratio_to_anchor"] == ll["speed"]["ratio_to_llama_cpp"]
    assert set(ll["speed"]["engines"]) == {"pyriver", "llama.cpp"} and ll["speed"]["lossless"]["draft"] == "SuffixLookup"
    assert lr["speed"]["lossless"]["draft"] == "river" and lr["speed"]["lossless"]["drafted"] > 0
    # one verify path: the drafter changes the speed, never the KLD; a river drafter's sidecar is in its MiB
    assert lr["kld"] == ll["kld"] and ll["bytes"] == own["bytes"]
    assert lr["bytes"] == own["bytes"] + Path(lr["sidecar"]).stat().st_size and "river-q4_0" in lr["sidecar"]
    alone = tmp_path / "alone.json"
    assert eval_tool.main([smol_path, "--kl-divergence-base", str(out / "base.kld"), "--kl-divergence", "--lossless",
                           "--draft-max", "2", "0", "--json", str(alone)]) == 0
    e = json.loads(alone.read_text())["results"]
    assert [(r["kind"], r["draft_max"]) for r in e] == [("lossless", 2), ("lossless", 0)]
    assert (ll["kld"]["kld"], ll["kld"]["same_top"], ll["kld"]["ppl_ratio"]) == (e[0]["kld"], e[0]["same_top"], e[0]["ppl_ratio"])
    assert e[1]["tokens"] == e[0]["tokens"] == 63 and e[1]["kld"] >= 0


def test_lossless_flags_are_checked(smol_path, tmp_path):
    base = str(tmp_path / "none.kld")
    for argv, msg in [(["--kl-divergence-base", base, "--kl-divergence", "--draft-max", "2"], "add --lossless"),
                      (["--kl-divergence-base", base, "--lossless", "-f", base], "evaluated with --kl-divergence"),
                      (["--kl-divergence-base", base, "--kl-divergence", "--lossless", "--draft-max", "-1"], ">= 0"),
                      (["--kl-divergence-base", base, "--kl-divergence", "--lossless", "--verify-tile-rows", "8"],
                       "add --flash-attn")]:
        with pytest.raises(ValueError, match=msg):
            eval_tool.main([smol_path, *argv])
    for bad in ("q4_0:x", ":2", "q4_0:-1", "q4_0:2:3"):
        with pytest.raises(argparse.ArgumentTypeError):
            compare.lossless_spec(bad)
    assert compare.lossless_spec("q4_0") == {"draft": "q4_0", "draft_max": 2}
