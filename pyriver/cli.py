"""The `pyriver` command: run, chat-free one-shot generation; models; bench."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", default=None, help="GGUF path, registry name or hf:REPO/FILE (default: SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--threads", "-t", type=int, default=None, help="decode threads")
    p.add_argument("--ctx", type=int, default=2048, help="context length (n_ctx)")
    p.add_argument("--n-gpu-layers", type=int, default=0)


def cmd_run(a) -> int:
    from . import Llama
    llm = Llama(a.model, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, n_gpu_layers=a.n_gpu_layers,
                seed=a.seed, verbose=a.verbose)
    kw = dict(max_tokens=a.n, temperature=a.temp, seed=a.seed, stream=True)
    out = sys.stdout
    if a.chat:
        for ch in llm.create_chat_completion([{"role": "user", "content": a.prompt}], **kw):
            out.write(ch["choices"][0]["delta"].get("content", ""))
            out.flush()
    else:
        for ch in llm(a.prompt, **kw):
            out.write(ch["choices"][0]["text"])
            out.flush()
    s = llm.last_stats
    pf = s["prompt_eval_tokens"] / s["prompt_s"] if s["prompt_s"] else 0.0
    dc = s["decode_tokens"] / s["decode_s"] if s["decode_s"] else 0.0
    out.write(f"\n\n[prompt {s['prompt_eval_tokens']} tok, {pf:.1f} tok/s | decode {s['decode_tokens']} tok, {dc:.1f} tok/s]\n")
    llm.close()
    return 0


def cmd_models(a) -> int:
    from . import models
    return models.main_models(a.rest)


def cmd_bench(a) -> int:
    from . import bench
    return bench.main(a)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="pyriver", description="GGUF models on ggml with River early exit")
    sub = ap.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="generate from a prompt, streaming")
    r.add_argument("prompt")
    _add_model_args(r)
    r.add_argument("-n", type=int, default=128, help="tokens to generate")
    r.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    r.add_argument("--temp", type=float, default=0.0, help="temperature (0 = greedy)")
    r.add_argument("--seed", type=int, default=None)
    r.add_argument("--verbose", action="store_true")
    r.set_defaults(fn=cmd_run)

    m = sub.add_parser("models", help="list or fetch registry models (models fetch NAME)")
    m.add_argument("rest", nargs=argparse.REMAINDER)
    m.set_defaults(fn=cmd_models)

    b = sub.add_parser("bench", help="pyriver vs llama.cpp on one GGUF: prefill, decode, RSS")
    b.add_argument("model", nargs="?", default=None)
    b.add_argument("--threads", "-t", type=int, default=2)
    b.add_argument("--repeats", "-r", type=int, default=5)
    b.add_argument("--prompt-tokens", type=int, default=512)
    b.add_argument("--gen-tokens", type=int, default=128)
    b.add_argument("--json", default=None, help="write results to this file")
    b.set_defaults(fn=cmd_bench)

    a = ap.parse_args(argv)
    try:
        return a.fn(a)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, RuntimeError) as e:
        print(f"pyriver: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
