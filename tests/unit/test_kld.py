"""llama-perplexity's KL-divergence file and statistics as pyriver ports them
(pyriver.tools.kld_file, kld_stats): the file round-trips in its byte layout, a row is what
perplexity.cpp's element-by-element loop stores, and the statistics are the hand computation's
on a tiny case. llama-perplexity itself referees in tests/tools/test_kld_peer.py."""
from __future__ import annotations

import io
import math

import numpy as np
import pytest

from pyriver.tools import kld_file, kld_stats


def _logits(rows, n_vocab, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 4, (rows, n_vocab)).astype(np.float32)
    x[0, :] = 1.5          # a flat row: scale 0, every value stored as 0
    return x


def _loop_row(x: np.ndarray) -> np.ndarray:
    """perplexity.cpp's log_softmax(n_vocab, logits, log_prob, tok), one element at a time, with its
    nearest_int (the float32 12582912 trick), float32 where it computes in float."""
    f = np.float32
    mx, mn = f(x.max()), f(x.min())
    mn = max(mn, f(mx - f(16)))
    s = 0.0
    for v in x:
        s += float(np.exp(f(v - mx)))
    lse = f(math.log(s))
    mlp = f(f(mn - mx) - lse)
    scale = f(f(mx - mn) / f(65535))
    out = [*np.array([scale, mlp], np.float32).view(np.uint16)]
    for v in x:
        if scale and v > mn:
            t = np.array([f(f(f(1) / scale) * f(v - mn)) + f(12582912)], np.float32).view(np.int32)[0]
            out.append(((int(t) & 0x7FFFFF) - 0x400000) & 0xFFFF)
        else:
            out.append(0)
    out += [0] * (kld_file.row_width(len(x)) - len(out))
    return np.array(out, np.uint16)


@pytest.mark.parametrize("n_vocab", [7, 8])
def test_rows_are_perplexity_cpps_loop(n_vocab):
    x = _logits(5, n_vocab)
    x[2, 3] = x[2].max() - 40    # below the floor: stored as 0
    rows = kld_file.quantize_rows(x, n_vocab)
    assert rows.shape == (5, kld_file.row_width(n_vocab)) and rows.shape[1] == 2 * ((n_vocab + 1) // 2) + 4
    for r in range(5):
        assert rows[r].tolist() == _loop_row(x[r]).tolist(), r
    assert rows[2, 4 + 3] == 0


def test_file_round_trips_in_its_layout():
    n_ctx, n_vocab, n_chunk = 8, 7, 2
    toks = [(5 * i + 1) % n_vocab for i in range(n_ctx * n_chunk + 3)]   # more text than whole chunks: only theirs written
    chunks = [_logits(kld_file.scored_rows(n_ctx), n_vocab, seed=s) for s in range(n_chunk)]
    buf = io.BytesIO()
    kld_file.write_header(buf, n_ctx, n_vocab, n_chunk, toks)
    for c in chunks:
        kld_file.write_chunk(buf, c, n_vocab)
    raw = buf.getvalue()
    nv = kld_file.row_width(n_vocab)
    assert raw[:8] == b"_logits_" and np.frombuffer(raw[8:20], np.int32).tolist() == [n_ctx, n_vocab, n_chunk]
    assert len(raw) == 20 + 4 * n_ctx * n_chunk + 2 * nv * (n_ctx - 1 - n_ctx // 2) * n_chunk
    f = io.BytesIO(raw)
    h = kld_file.read_header(f, "mem")
    assert (h.n_ctx, h.n_vocab, h.n_chunk) == (n_ctx, n_vocab, n_chunk)
    assert h.tokens.tolist() == toks[:n_ctx * n_chunk]
    for i, c in enumerate(chunks):
        rows = kld_file.read_chunk(f, h, i, "mem")
        lp = kld_file.row_log_probs(rows, n_vocab)
        want = c - c.max(axis=1, keepdims=True) - np.log(np.exp(c - c.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True))
        scale = rows[:, :4].copy().view(np.float32)[:, 0:1]
        live = c >= c.max(axis=1, keepdims=True) - 16
        assert np.all(np.abs(lp - want)[live] <= (scale / 2 + 1e-5).repeat(n_vocab, 1)[live])
        assert np.all(rows[:, -1] == 0)   # the odd vocabulary's padding
    assert f.read() == b""


def test_bad_files_are_clear_errors():
    with pytest.raises(ValueError, match="does not look like"):
        kld_file.read_header(io.BytesIO(b"_nologs_" + bytes(12)), "x.kld")
    buf = io.BytesIO()
    kld_file.write_header(buf, 8, 7, 2, [i % 7 for i in range(16)])
    with pytest.raises(ValueError, match="truncated"):
        kld_file.read_header(io.BytesIO(buf.getvalue()[:-5]), "x.kld")
    h = kld_file.read_header(io.BytesIO(buf.getvalue()), "x.kld")
    bad = io.BytesIO()
    kld_file.write_header(bad, 8, 7, 2, [3] * 15 + [7])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        kld_file.read_header(io.BytesIO(bad.getvalue()), "x.kld")
    with pytest.raises(ValueError, match="chunk 0"):
        kld_file.read_chunk(io.BytesIO(bytes(10)), h, 0, "x.kld")


def test_statistics_are_the_hand_computation():
    n_vocab, n = 6, 120        # llama-perplexity prints its statistics from 100 tokens on
    rng = np.random.default_rng(3)
    base_logits = rng.normal(0, 3, (n, n_vocab)).astype(np.float32)
    q = (base_logits + rng.normal(0, 0.7, (n, n_vocab))).astype(np.float32)
    targets = rng.integers(0, n_vocab, n)
    base_logits[::3, 5] = base_logits[::3].max(axis=1) - 20   # under the floor: left out of the sum, as there,
    q[::3, 5] = -1000.0                                       # though the evaluated model's term would weigh
    rows = kld_file.quantize_rows(base_logits, n_vocab)
    k = kld_stats.KLDivergence()
    k.add(q[:50], rows[:50], targets[:50], n_vocab)    # two chunks
    k.add(q[50:], rows[50:], targets[50:], n_vocab)
    s = kld_stats.summary(k)

    klds, nll, nll_b, same, dp = [], [], [], 0, []
    for r in range(n):
        b = [float(v) for v in kld_file.row_log_probs(rows[r:r + 1], n_vocab)[0]]   # the base as stored
        m = max(float(v) for v in q[r])
        lq = [float(v) - m - math.log(sum(math.exp(float(w) - m) for w in q[r])) for v in q[r]]
        klds.append(sum(math.exp(bi) * (bi - qi) for bi, qi in zip(b, lq) if bi > -16))
        nll.append(-lq[targets[r]])
        nll_b.append(-b[targets[r]])
        same += int(np.argmax(lq) == np.argmax(b))
        dp.append(math.exp(-nll[-1]) - math.exp(-nll_b[-1]))
    mean_kld = sum(klds) / n
    assert s["tokens"] == n
    assert s["kld"] == pytest.approx(mean_kld, rel=1e-5)
    sd = math.sqrt((sum(v * v for v in klds) / n - mean_kld ** 2) / (n - 1))
    assert s["kld_unc"] == pytest.approx(sd, rel=1e-4)
    assert s["same_top"] == same / n
    assert s["same_top_unc"] == pytest.approx(math.sqrt(same / n * (1 - same / n) / (n - 1)))
    assert s["ppl"] == pytest.approx(math.exp(sum(nll) / n), rel=1e-5)
    assert s["ppl_base"] == pytest.approx(math.exp(sum(nll_b) / n), rel=1e-5)
    assert s["ln_ppl_ratio"] == pytest.approx((sum(nll) - sum(nll_b)) / n, rel=1e-4)
    assert s["rms_p_diff"] == pytest.approx(math.sqrt(sum(v * v for v in dp) / n), rel=1e-4)
    srt = sorted(klds)
    assert s["kld_percentiles"]["max"] == pytest.approx(srt[-1], rel=1e-4)
    assert s["kld_percentiles"]["min"] == pytest.approx(srt[0], rel=1e-4, abs=1e-6)   # float32 terms, as there
    assert s["kld_percentiles"]["median"] == pytest.approx((srt[59] + srt[60]) / 2, rel=1e-4)
    p = 0.9 * (n - 1)   # 107.1: between the 108th and 109th smallest
    assert s["kld_percentiles"]["90.0"] == pytest.approx(srt[107] + (p - 107) * (srt[108] - srt[107]), rel=1e-4)
    lines = kld_stats.report_lines(s)
    assert f"Mean    KLD: {s['kld']:10.6f} ± {s['kld_unc']:10.6f}" in lines
    assert any(line.startswith("99.9%   KLD: ") for line in lines) and any(line.startswith(" 0.1%   Δp: ") for line in lines)
    assert lines[-1] == f"Same top p: {100 * same / n:6.3f} ± {100 * s['same_top_unc']:5.3f} %"


def test_chunk_count_is_llama_perplexitys():
    from pyriver.tools.kld import n_chunks
    assert n_chunks(1300, 512, None) == 2 and n_chunks(1300, 512, 1) == 1 and n_chunks(5000, 512, -1) == 9
    with pytest.raises(ValueError, match="at least 1024 tokens"):
        n_chunks(1000, 512, None)
