"""Moving cached rows (Context.drop: the context shift and --cache-reuse): on the native engine,
pr_seq_drop removes positions and rotates the later keys to their new places, as llama.cpp's
llama_memory_seq_rm + seq_add and K-shift do on the llama.cpp engine. The peer is that engine on the
same file: the next token's logits after the same drop are its logits, bit for bit, on an f16 cache
(mul_mat attention) and on quantized K (flash attention, K rotated through F32 and its Hadamard
rotation)."""
from __future__ import annotations

import numpy as np
import pytest

from pyriver import Llama
from pyriver.api.batch import BatchDecoder, Feed

TEXT = ("Once upon a time, in a small village by the sea, there lived an old fisherman named Tom. "
        "Every morning he rowed out past the rocks to cast his nets, and every evening he came home. ") * 2


def _next_logits(path, engine, fa, tk, drops):
    """The prompt, then each (p0, p1) of drops in turn (a negative one counts from the end, None is the end), then one
    more token: its logits."""
    with Llama(path, n_ctx=256, n_threads=2, verbose=False, engine=engine, flash_attn=fa, type_k=tk,
               type_v=tk if fa else "f16", river=None) as llm:
        toks = llm.tokenize(TEXT.encode())
        d = BatchDecoder(llm, 1)
        try:
            assert d.can_shift
            d.step([Feed(seq=0, tokens=toks, prompt=True)])
            for p0, p1 in drops:
                p0, p1 = (len(toks) if p is None else p if p >= 0 else len(toks) + p for p in (p0, p1))
                d.drop(0, p0, p1)
                toks = toks[:p0] + toks[p1:]
            assert d.pos(0) == len(toks)
            return np.array(d.step([Feed(seq=0, tokens=[toks[-1]])])[0][0])
        finally:
            d.close()


@pytest.mark.parametrize("fa, tk", [(False, "f16"), (True, "q8_0"), (True, "q4_0")])
def test_native_shift_gives_llama_cpp_s_logits(smol_path, fa, tk):
    drops = [(20, 50), (5, 9)]   # two shifts add up, as llama.cpp's deltas per cell
    want = _next_logits(smol_path, "llama.cpp", fa, tk, drops)
    got = _next_logits(smol_path, "native", fa, tk, drops)
    assert np.array_equal(got, want)
    unmoved = _next_logits(smol_path, "native", fa, tk, [])
    assert not np.array_equal(unmoved, want)   # the drop changed what the token attends to


def test_drop_at_the_end_only_shortens(smol_path):
    """Nothing after the range: no rows move (the cache is cut as truncate cuts it)."""
    want = _next_logits(smol_path, "llama.cpp", False, "f16", [(-10, None)])
    assert np.array_equal(_next_logits(smol_path, "native", False, "f16", [(-10, None)]), want)


def test_bad_ranges_are_refused_and_change_nothing(smol_path):
    with Llama(smol_path, n_ctx=64, n_threads=2, verbose=False, engine="native", river=None) as llm:
        d = BatchDecoder(llm, 2)
        try:
            toks = llm.tokenize(b"The quick brown fox jumps over the lazy dog.")
            d.step([Feed(seq=0, tokens=toks, prompt=True)])
            for seq, p0, p1, match in ((0, -1, 2, "cannot drop"), (0, 3, 2, "cannot drop"),
                                       (0, 0, len(toks) + 1, "cannot drop"), (1, 0, 1, "cannot drop"),
                                       (2, 0, 1, "sequence 2 is not in")):
                with pytest.raises(ValueError, match=match):
                    d.drop(seq, p0, p1)
            assert d.pos(0) == len(toks) and d.pos(1) == 0
        finally:
            d.close()
