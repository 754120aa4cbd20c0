"""llama-perplexity's KL-divergence statistics (tools/perplexity/perplexity.cpp, kl_divergence):
per scored token the KL divergence of the evaluated model from the base, the two negative
log-likelihoods, whether the top tokens agree and the difference of the two probabilities of the
text's token; then its lines, printed as it prints them. Ported with numpy: float32 where it
computes in float, float64 where in double."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, List, Tuple

import numpy as np

from pyriver.tools.kld_file import LOG_PROB_FLOOR, log_sum_exp, row_log_probs


@dataclass
class KLDivergence:
    sum_nll: float = 0.0
    sum_nll2: float = 0.0
    sum_nll_base: float = 0.0
    sum_nll_base2: float = 0.0
    sum_nll_nll_base: float = 0.0
    sum_kld: float = 0.0
    sum_kld2: float = 0.0
    sum_p_diff: float = 0.0
    sum_p_diff2: float = 0.0
    sum_p_diff4: float = 0.0
    max_p_diff: float = 0.0
    n_same_top: int = 0
    count: int = 0
    kld_values: List[np.ndarray] = field(default_factory=list)
    p_diff_values: List[np.ndarray] = field(default_factory=list)

    def add(self, logits: np.ndarray, base_rows: np.ndarray, targets: np.ndarray, n_vocab: int) -> None:
        """One chunk: logits [rows, n_vocab] of the evaluated model at the scored positions, the
        base's uint16 rows there, and the text's next tokens (perplexity.cpp's log_softmax with kld)."""
        x = np.asarray(logits, dtype=np.float32)[:, :n_vocab]
        r = np.arange(x.shape[0])
        t = np.asarray(targets, dtype=np.int64)
        mx, lse = log_sum_exp(x)
        imax = x.argmax(axis=1)                        # the first maximum, as its strict > scan finds
        nll = (mx + lse - x[r, t]).astype(np.float32)
        base = row_log_probs(base_rows, n_vocab)       # scale * q + min_log_prob, float32
        nll_base = (-base[r, t]).astype(np.float32)
        top = (mx + lse).astype(np.float32)
        keep = base > np.float32(-LOG_PROB_FLOOR)
        terms = np.exp(base) * (base - x + top[:, None])   # float32, as p_base * (p_log_base - logit + max)
        kld = np.where(keep, terms, np.float32(0)).astype(np.float64).sum(axis=1)
        p_diff = (np.exp(-nll) - np.exp(-nll_base)).astype(np.float32)
        f64 = lambda v: v.astype(np.float64)   # noqa: E731  products of two floats are float there
        self.sum_nll += f64(nll).sum()
        self.sum_nll2 += f64(nll * nll).sum()
        self.sum_nll_base += f64(nll_base).sum()
        self.sum_nll_base2 += f64(nll_base * nll_base).sum()
        self.sum_nll_nll_base += f64(nll * nll_base).sum()
        self.sum_kld += kld.sum()
        self.sum_kld2 += (kld * kld).sum()
        self.count += len(t)
        self.n_same_top += int((imax == base.argmax(axis=1)).sum())
        p2 = f64(p_diff * p_diff)
        self.sum_p_diff += f64(p_diff).sum()
        self.sum_p_diff2 += p2.sum()
        self.sum_p_diff4 += (p2 * p2).sum()
        self.max_p_diff = max(self.max_p_diff, float(np.abs(p_diff).max()))
        self.kld_values.append(kld.astype(np.float32))
        self.p_diff_values.append(p_diff)


def _sqrt(v: float) -> float:
    """C's sqrt: nan below 0 (a rounding-negative variance; printed as it prints it)."""
    return math.sqrt(v) if v >= 0 else float("nan")


def mean_and_uncertainty(s: float, s2: float, count: int) -> Tuple[float, float]:
    if count < 1:
        return 0.0, 0.0
    f = s / count
    df = s2 / count - f * f
    return f, (math.sqrt(df / (count - 1)) if df > 0 and count > 10 else 0.0)


def covariance(sa: float, sb: float, sab: float, count: int) -> float:
    if count < 10:
        return 0.0
    return (sab / count - (sa / count) * (sb / count)) / (count - 1)


def percentile(values: np.ndarray, fraction: float) -> float:
    """perplexity.cpp's percentile of sorted float32 values, interpolated in float32."""
    if fraction <= 0:
        return float(values[0])
    if fraction >= 1:
        return float(values[-1])
    p = np.float32(fraction) * np.float32(len(values) - 1)
    ip = int(p)
    p = np.float32(p - np.float32(ip))
    return float((np.float32(1) - p) * values[ip] + p * values[min(ip + 1, len(values) - 1)])


def median(values: np.ndarray) -> float:
    n = len(values)
    return float(np.float32(0.5) * (values[n // 2] + values[n // 2 - 1])) if n % 2 == 0 else float(values[n // 2])


def summary(k: KLDivergence, tails: bool = True) -> dict:
    """The figures of its statistics; with tails the percentiles too."""
    lp = mean_and_uncertainty(k.sum_nll, k.sum_nll2, k.count)
    lb = mean_and_uncertainty(k.sum_nll_base, k.sum_nll_base2, k.count)
    cov = covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count)
    ratio = lp[0] - lb[0]
    ratio_unc = _sqrt(lp[1] ** 2 + lb[1] ** 2 - 2.0 * cov)
    ppl, ppl_base = math.exp(lp[0]), math.exp(lb[0])
    kl = mean_and_uncertainty(k.sum_kld, k.sum_kld2, k.count)
    mse = mean_and_uncertainty(k.sum_p_diff2, k.sum_p_diff4, k.count)
    rms = math.sqrt(mse[0])
    same = k.n_same_top / k.count if k.count else 0.0
    out = {"tokens": k.count, "ppl": ppl, "ppl_unc": ppl * lp[1], "ppl_base": ppl_base, "ppl_base_unc": ppl_base * lb[1],
           "cor": cov / (lp[1] * lb[1]) if lp[1] * lb[1] else float("nan"),
           "ln_ppl_ratio": ratio, "ln_ppl_ratio_unc": ratio_unc,
           "ppl_ratio": math.exp(ratio), "ppl_ratio_unc": math.exp(ratio) * ratio_unc,
           "ppl_diff": ppl - ppl_base,
           "ppl_diff_unc": _sqrt((ppl * lp[1]) ** 2 + (ppl_base * lb[1]) ** 2 - 2.0 * ppl * ppl_base * cov),
           "kld": kl[0], "kld_unc": kl[1],
           "p_diff": mean_and_uncertainty(k.sum_p_diff, k.sum_p_diff2, k.count),
           "rms_p_diff": rms, "rms_p_diff_unc": 0.5 / rms * mse[1] if rms else 0.0,
           "same_top": same, "same_top_unc": math.sqrt(same * (1 - same) / (k.count - 1)) if k.count > 1 else 0.0}
    kv = np.sort(np.concatenate(k.kld_values)) if tails and k.kld_values else np.zeros(0, np.float32)
    pv = np.sort(np.concatenate(k.p_diff_values)) if tails and k.p_diff_values else np.zeros(0, np.float32)
    if tails and len(kv):
        out["kld_percentiles"] = {"max": float(kv[-1]), **{f"{q:.1f}": percentile(kv, q / 100) for q in (99.9, 99.0, 95.0, 90.0)},
                                  "median": median(kv), **{f"{q:.1f}": percentile(kv, q / 100) for q in (10.0, 5.0, 1.0, 0.1)},
                                  "min": float(kv[0])}
        out["p_diff_percentiles"] = {"max": float(pv[-1]),
                                     **{f"{q:.1f}": percentile(pv, q / 100) for q in (99.9, 99.0, 95.0, 90.0, 75.0)},
                                     "median": median(pv),
                                     **{f"{q:.1f}": percentile(pv, q / 100) for q in (25.0, 10.0, 5.0, 1.0, 0.1)},
                                     "min": float(pv[0])}
    return out


TABLE_HEAD = ("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
              "Δp RMS            Same top p")


def chunk_line(i: int, k: KLDivergence) -> str:
    """Its running line after chunk i (1-based)."""
    s = summary(k, tails=False)
    return (f"{i:4d}    {s['ppl']:9.4f} ± {s['ppl_unc']:9.4f}    {s['ln_ppl_ratio']:10.5f} ± {s['ln_ppl_ratio_unc']:10.5f}"
            f"    {s['kld']:10.5f} ± {s['kld_unc']:10.5f}    {100 * s['rms_p_diff']:6.3f} ± {100 * s['rms_p_diff_unc']:6.3f} %"
            f"    {100 * s['same_top']:6.3f} ± {100 * s['same_top_unc']:6.3f} %")


def report_lines(s: dict) -> List[str]:
    """Its final statistics, line by line as llama-perplexity prints them."""
    L = ["====== Perplexity statistics ======",
         f"Mean PPL(Q)                   : {s['ppl']:10.6f} ± {s['ppl_unc']:10.6f}",
         f"Mean PPL(base)                : {s['ppl_base']:10.6f} ± {s['ppl_base_unc']:10.6f}",
         f"Cor(ln(PPL(Q)), ln(PPL(base))): {100 * s['cor']:6.2f}%",
         f"Mean ln(PPL(Q)/PPL(base))     : {s['ln_ppl_ratio']:10.6f} ± {s['ln_ppl_ratio_unc']:10.6f}",
         f"Mean PPL(Q)/PPL(base)         : {s['ppl_ratio']:10.6f} ± {s['ppl_ratio_unc']:10.6f}",
         f"Mean PPL(Q)-PPL(base)         : {s['ppl_diff']:10.6f} ± {s['ppl_diff_unc']:10.6f}",
         "", "====== KL divergence statistics ======",
         f"Mean    KLD: {s['kld']:10.6f} ± {s['kld_unc']:10.6f}"]
    names = {"max": "Maximum", "median": "Median ", "min": "Minimum"}
    pct: Callable[[str], str] = lambda q: f"{float(q):4.1f}%  "   # noqa: E731  "99.9%  ", " 5.0%  "
    for q, v in s["kld_percentiles"].items():
        L.append(f"{names.get(q) or pct(q)} KLD: {v:10.6f}")
    L += ["", "====== Token probability statistics ======",
          f"Mean    Δp: {100 * s['p_diff'][0]:6.3f} ± {100 * s['p_diff'][1]:5.3f} %"]
    for q, v in s["p_diff_percentiles"].items():
        L.append(f"{names.get(q) or pct(q)} Δp: {100 * v:6.3f}%")
    L += [f"RMS Δp    : {100 * s['rms_p_diff']:6.3f} ± {100 * s['rms_p_diff_unc']:5.3f} %",
          f"Same top p: {100 * s['same_top']:6.3f} ± {100 * s['same_top_unc']:5.3f} %"]
    return L
