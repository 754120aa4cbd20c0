"""`pyriver eval`: fidelity of River against full depth on the same model file.

Reference: the model's own full-depth greedy continuation of each prompt. A River run is
teacher-forced along it token by token (decode steps, so exits apply); its top-1 token is
compared with the reference's at every position. Until the first miss the River's own greedy
text is the reference's, so the first miss is the length of the identical greedy continuation.
Perplexity is computed with token-by-token decoding too. The competitor, llama.cpp running the
model uniformly requantized to the river type, is measured against the same references."""
from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional

from pyriver.cli.args import device_kwargs, positive
from pyriver.cli import TOOLS, guarded
from pyriver.api.llama import DEFAULT_DRAFT_MAX, DEFAULT_RIVER, Llama

from pyriver.tools import datasets, kld
from pyriver.tools.args import add_set_args, apply_calibration
from pyriver.tools.engine import LlamaCppEngine, perplexity, progress, references, teacher_forced
from pyriver.tools.quantize import requantized
from pyriver.tools.results import conditions, write_json


def text_tokens(llm, texts, max_tokens: int) -> List[List[int]]:
    out = []
    for t in texts:
        toks = llm.tokenize(t["text"].encode("utf-8"), add_bos=True)[:max_tokens]
        if len(toks) < 2:
            raise ValueError(f"text {t['id']} has fewer than 2 tokens")
        out.append(toks)
    return out


def parser() -> argparse.ArgumentParser:
    e = argparse.ArgumentParser(prog="pyriver eval", description=TOOLS["eval"][1])
    add_set_args(e, 128, None)
    e.add_argument("--river", default=None, help=f"river type (default: the calibrated setting, else {DEFAULT_RIVER})")
    e.add_argument("--tau", type=float, nargs="+", default=None, help="exit thresholds (default 0.985)")
    e.add_argument("--min-exit-layer", type=int, nargs="+", default=None, help="(default 4)")
    e.add_argument("--text", default=None, help="perplexity text: builtin, humaneval (prompts + canonical solutions), "
                   "or a UTF-8 file of passages separated by blank lines")
    e.add_argument("--text-tokens", type=int, default=256, help="longest passage in tokens (0: no perplexity)")
    e.add_argument("--text-limit", type=positive, default=None, help="use this many passages, round-robin over categories")
    e.add_argument("--competitor", action="store_true", help="also llama.cpp on the model uniformly requantized to the river type")
    k = e.add_argument_group("KL divergence, as llama-perplexity computes it (its flags)")
    k.add_argument("-f", "--file", default=None, help="the text to cut into chunks (UTF-8)")
    k.add_argument("--chunks", type=int, default=-1, help="at most this many chunks (default: all)")
    k.add_argument("--kl-divergence-base", default=None, metavar="FILE",
                   help="llama-perplexity's base file: written from the model at full depth, or read with --kl-divergence")
    k.add_argument("--kl-divergence", action="store_true", help="compare with the base file: the model at full depth, "
                   "or with --river/--tau each River point (decode steps over the scored half of each chunk), or with "
                   "--lossless lossless mode (its verify steps)")
    k.add_argument("--lossless", action="store_true", help="with --kl-divergence: lossless mode, each chunk's scored half "
                   "in its verify steps of --draft-max + 1 rows (the steps it takes when every draft is kept)")
    k.add_argument("--draft-max", type=int, nargs="+", default=None, metavar="K",
                   help=f"lossless: draft lengths, one point each (default {DEFAULT_DRAFT_MAX}, lossless mode's)")
    k.add_argument("--verify-tile-rows", type=int, default=0, metavar="N",
                   help="lossless: verify steps of N to 63 rows attend through flash attention's tiled kernel, as lossless "
                   "mode's measured cost table may choose (needs --flash-attn; default 0: never)")
    e.set_defaults(ctx=None)   # 1024, or llama-perplexity's 512 for the chunks
    return e


def _report(r: Dict) -> None:
    ppl = f", perplexity {r['perplexity']:.3f} ({100 * r['perplexity_change']:+.2f}%)" if "perplexity" in r else ""
    mean = r["mean_exit_layer"]
    label = (f"river {r['river']} tau {r['tau']:.4g} min layer {r['min_exit_layer']}" if r["kind"] == "river"
             else f"uniform {r['river']} (llama.cpp)")
    print(f"{label}: top-1 agreement {r['top1_agreement']:.4f} ({r['positions']} positions), identical greedy "
          f"prefix {r['mean_identical_prefix']:.1f} tokens, mean exit block "
          f"{'-' if mean is None else f'{mean:.2f}'}, river work {100 * r['river_work_share']:.1f}%{ppl}")
    if r.get("histogram"):
        print("  exit histogram: " + " ".join(f"{k}:{v}" for k, v in sorted(r["histogram"].items())))


def _settings(a, full) -> None:
    """The river and the grid to measure: --river, else the calibrated setting, else the default
    river type; tau and min exit layer likewise. Checked before the references are computed."""
    apply_calibration(a, full.model_path, tau_list=True)
    if a.river is None:
        a.river = DEFAULT_RIVER
        print(f"eval: no --river given and no calibration stored: using the default river type {DEFAULT_RIVER}",
              file=sys.stderr)
    L = full.info["n_layer"]
    for mn in a.min_exit_layer:
        if not 0 <= mn < L:
            raise ValueError(f"--min-exit-layer {mn} is outside this model's blocks [0, {L})")


def _engines(a, path: str):
    """Each River setting of the grid on one Llama (exits set in turn), then with --competitor
    llama.cpp on the uniformly requantized model: (kind, engine, min layer, tau)."""
    llm = Llama(path, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                river=a.river, river_force=a.river_force, exit_threshold=2.0, **device_kwargs(a))
    yield "sidecar", llm, None, None
    for mn in a.min_exit_layer:
        for tau in a.tau:
            llm.set_exit(tau, mn)
            yield "river", llm, mn, tau
    llm.close()
    if a.competitor:
        u = LlamaCppEngine(requantized(path, a.river), a.ctx, a.threads, **device_kwargs(a))
        yield "uniform", u, None, None
        u.close()


def main(argv: Optional[List[str]] = None) -> int:
    """`pyriver eval`: every (min layer, tau) of one river type against full depth; with
    --competitor also llama.cpp on the model requantized to the river type."""
    a = parser().parse_args(argv)
    if a.kl_divergence_base or a.kl_divergence or a.file or a.lossless:
        return kl_divergence(a)
    a.ctx = a.ctx or 1024
    prompts = datasets.subset(datasets.load_prompts(a.prompts), a.limit)
    texts = datasets.subset(datasets.load_texts(a.text), a.text_limit) if a.text_tokens > 0 else []
    full = Llama(a.model, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, river=None,
                 **device_kwargs(a))
    path = full.model_path
    _settings(a, full)
    res: Dict = {"schema": "pyriver.eval/1", "interrupted": False, "full_depth": {}, "results": []}
    res["conditions"] = conditions(
        path, a.threads, river=a.river, prompt_set=datasets.set_name(a.prompts, a.limit), prompts=len(prompts),
        tokens_per_prompt=a.n, text_set=datasets.set_name(a.text, a.text_limit) if texts else None, texts=len(texts),
        text_tokens_max=a.text_tokens, ctx=a.ctx, taus=a.tau, min_exit_layers=a.min_exit_layer, calibrated=a.calibrated,
        n_gpu_layers=a.n_gpu_layers, flash_attn=a.flash_attn)
    try:
        bar = progress(len(prompts) * a.n, "references")
        refs = references(full, prompts, a.n, bar)
        bar.close()
        toks = text_tokens(full, texts, a.text_tokens)
        if toks:
            bar = progress(sum(len(t) - 1 for t in toks), "perplexity, full depth")
            res["full_depth"] = perplexity(full, toks, bar)
            bar.close()
            print(f"full depth: perplexity {res['full_depth']['perplexity']:.3f} over {res['full_depth']['text_tokens']} tokens")
        full.close()
        for kind, eng, mn, tau in _engines(a, path):
            if kind == "sidecar":
                res["conditions"]["sidecar"] = eng.river_path
                continue
            bar = progress(len(refs) * a.n + sum(len(t) - 1 for t in toks), f"{kind} {tau or a.river}")
            r = {"kind": kind, "river": a.river, "tau": tau, "min_exit_layer": mn, **teacher_forced(eng, refs, bar)}
            r.pop("decode_tok_s")   # speed is `bench`'s and `sweep`'s job, not measured under these conditions
            if toks:
                p = perplexity(eng, toks, bar)
                r.update(perplexity=p["perplexity"], perplexity_change=p["perplexity"] / res["full_depth"]["perplexity"] - 1)
            if kind == "uniform":
                r["model"] = eng.model_path
            bar.close()
            res["results"].append(r)
            _report(r)
    except KeyboardInterrupt:
        res["interrupted"] = True
        print(f"\ninterrupted: {len(res['results'])} setting(s) measured, kept above" + (" and in --json" if a.json else ""),
              file=sys.stderr)
    if a.json:
        write_json(a.json, res)
    return 130 if res["interrupted"] else 0


def kl_divergence(a) -> int:
    """llama-perplexity's --kl-divergence-base / --kl-divergence, on its files (pyriver.tools.kld)."""
    if not a.kl_divergence_base:
        raise ValueError("-f/--kl-divergence need --kl-divergence-base FILE (the base to write, or to read)")
    river = a.river is not None or a.tau is not None or a.min_exit_layer is not None
    lossless = _lossless_args(a)
    if not a.kl_divergence:
        if not a.file:
            raise ValueError("writing a --kl-divergence-base needs the text: -f FILE")
        if river or lossless:
            raise ValueError("the base is the model at full depth: --river/--tau and --lossless apply with --kl-divergence")
        with open(a.file, "rb") as f:
            text = f.read()
        text = text[:-1] if text.endswith(b"\n") else text   # llama.cpp's -f drops one final newline
        llm = Llama(a.model, n_ctx=a.ctx or 512, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                    river=None, **device_kwargs(a))
        kld.write_base(llm, a.kl_divergence_base, llm.tokenize(text, add_bos=True), llm.n_ctx(), a.chunks)
        llm.close()
        return 0
    n_ctx = kld.read_header(a.kl_divergence_base).n_ctx   # the base's chunks set the context
    res: Dict = {"schema": "pyriver.kld/1", "base": a.kl_divergence_base, "results": []}
    if not river and not lossless:
        llm = Llama(a.model, n_ctx=n_ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, river=None,
                    **device_kwargs(a))
        res["results"].append({"kind": "full_depth", **kld.compare(llm, a.kl_divergence_base, False, a.chunks)})
        res["model"] = llm.model_path
        llm.close()
    if river:
        full = Llama(a.model, n_ctx=n_ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, river=None,
                     **device_kwargs(a))
        _settings(a, full)
        res["model"] = full.model_path
        full.close()
        llm = Llama(res["model"], n_ctx=n_ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                    river=a.river, river_force=a.river_force, exit_threshold=2.0, **device_kwargs(a))
        for mn in a.min_exit_layer:
            for tau in a.tau:
                llm.set_exit(tau, mn)
                label = f", river {a.river} tau {tau:.4g} min layer {mn}"
                s = kld.compare(llm, a.kl_divergence_base, True, a.chunks, label)
                res["results"].append({"kind": "river", "river": a.river, "tau": tau, "min_exit_layer": mn, **s})
        llm.close()
    if lossless:
        llm = kld.lossless_llama(a.model, n_ctx, a.threads, a.verify_tile_rows, **device_kwargs(a))
        res["model"] = llm.model_path
        for k in a.draft_max:
            label = f", lossless draft-max {k} (verify steps of {k + 1})"
            s = kld.compare(llm, a.kl_divergence_base, False, a.chunks, label, verify=k + 1)
            res["results"].append({"kind": "lossless", "draft_max": k, "verify_tile_rows": a.verify_tile_rows, **s})
        llm.close()
    if a.json:
        write_json(a.json, res)
    return 0


def _lossless_args(a) -> bool:
    """--lossless and its draft lengths, checked before anything runs; whether lossless points are asked for."""
    if not a.lossless:
        if a.draft_max is not None or a.verify_tile_rows:
            raise ValueError("--draft-max and --verify-tile-rows are lossless mode's: add --lossless")
        return False
    if not a.kl_divergence:
        raise ValueError("--lossless is evaluated with --kl-divergence (against a base written at full depth)")
    a.draft_max = a.draft_max or [DEFAULT_DRAFT_MAX]
    for k in a.draft_max:
        if k < 0:
            raise ValueError(f"--draft-max must be >= 0, got {k}")
    if a.verify_tile_rows and not a.flash_attn:
        raise ValueError("--verify-tile-rows attends through flash attention's tiled kernel: add --flash-attn")
    return True


if __name__ == "__main__":
    sys.exit(guarded(main, sys.argv[1:]))
