"""pyriver's OpenAI-compatible server (`pyriver serve`, `python -m pyriver.server`): continuous
batching of many requests over the slots of one context, River included. It depends on the
runtime; the runtime never imports it. Needs the extra: pip install "pyriver[server]"."""
from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import List, Optional

from pyriver.cli.args import (add_cache_type_args, add_draft_args, add_flash_attn_arg, add_layout_arg, add_rope_args,
                              cache_kwargs, flash_attn, layout_kwargs, require_lossless, rope_kwargs)
from pyriver.server.prompt_cache import DEFAULT_MIB, SLOT_SIMILARITY


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pyriver serve", description="OpenAI-compatible server with batched decoding")
    p.add_argument("model", nargs="?", default=None, help="GGUF path or registry name (default: SmolLM2-135M-Instruct)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback only; A,B: several)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--parallel", "-np", type=int, default=4, help="slots: requests decoded together")
    p.add_argument("--ctx", type=int, default=2048, help="context length of each slot")
    p.add_argument("--ctx-size", "-c", type=int, default=None,
                   help="llama-server's: the whole context, split evenly over the slots (overrides --ctx)")
    p.add_argument("--kv-unified", "-kvu", dest="kv_unified", action="store_true",
                   help="llama-server's unified KV buffer: any slot may grow to the whole --ctx-size, all slots together "
                   "hold at most that many tokens (past it, idle slots' caches go, then the busy requests end with "
                   "'Context size has been exceeded.'); pyriver still reserves each slot's rows apart")
    p.add_argument("--no-kv-unified", "-no-kvu", dest="kv_unified", action="store_false")
    p.add_argument("--threads", "-t", type=int, default=None)
    p.add_argument("--queue", type=int, default=64, help="requests that may wait for a slot; beyond: 503")
    p.add_argument("--prompt-chunk", type=int, default=None,
                   help="prompt tokens per slot and step (default: 64 while other slots decode, else the whole batch)")
    p.add_argument("--cache-ram", "-cram", dest="cache_ram", type=int, default=DEFAULT_MIB,
                   help="llama-server's prompt cache in host memory, MiB: a slot's prompt is kept when another "
                        f"request takes the slot and loaded back for a request that continues it (default {DEFAULT_MIB}; "
                        "0: off; -1: no limit)")
    p.add_argument("--cache-idle-slots", dest="cache_idle_slots", action="store_true", default=True,
                   help="llama-server's: when a request starts, idle slots' prompts are saved to the prompt cache "
                        "(--cache-ram), and with --kv-unified their rows are cleared (the default)")
    p.add_argument("--no-cache-idle-slots", dest="cache_idle_slots", action="store_false",
                   help="idle slots keep their rows and are saved only when a request takes them")
    p.add_argument("--slot-prompt-similarity", "-sps", dest="slot_prompt_similarity", type=float, default=SLOT_SIMILARITY,
                   help="llama-server's: a request takes the free slot whose cache shares the largest part of its "
                        "prompt if more than this part, else the least recently used slot "
                        f"(default {SLOT_SIMILARITY}; 0: always LRU)")
    p.add_argument("--engine", choices=("auto", "native", "llama.cpp"), default="auto",
                   help="what computes: pyriver's graphs (native, with River), llama.cpp's own (llama.cpp), or "
                        "native where pyriver builds the architecture (auto)")
    # llama-server's multimodal flags (server/multimodal.py, engine/mtmd.py)
    p.add_argument("--mmproj", "-mm", default=None, metavar="FILE",
                   help="a multimodal projector (the model's mmproj GGUF): image and audio input through libmtmd; "
                        "the model then runs on the llama.cpp engine (no River, no default drafts)")
    p.add_argument("--no-mmproj", "--no-mmproj-auto", dest="no_mmproj", action="store_true",
                   help="llama-server's: no projector looked up with the model (pyriver looks none up; --mmproj wins)")
    p.add_argument("--media-path", default=None, metavar="DIR",
                   help="file:// media URLs are read from below DIR (relative paths, no '..'); without it they are refused")
    # llama-server's LoRA flags (server/lora.py), kept in their order: an adapter's id is its place
    p.add_argument("--lora", dest="lora", action="append", default=[], type=lambda v: ("lora", v), metavar="FILE",
                   help="a LoRA adapter at scale 1 (repeatable; comma-separated: several); runs on the llama.cpp engine")
    p.add_argument("--lora-scaled", dest="lora", action="append", type=lambda v: ("lora-scaled", v),
                   metavar="FILE:SCALE", help="a LoRA adapter at its scale (repeatable; comma-separated: several)")
    p.add_argument("--lora-init-without-apply", action="store_true",
                   help="the adapters load at scale 0 (POST /lora-adapters or a request's lora applies them)")
    p.add_argument("--river", default=None, help="river type (q4_0, ...) or sidecar path, or auto (the setting "
                   "`pyriver calibrate` stored, with the exit rule it measured on this device); off by default")
    p.add_argument("--tau", type=float, default=None, help="exit threshold")
    p.add_argument("--min-exit-layer", type=int, default=None)
    p.add_argument("--exit-rule", choices=["checked", "predicted", "guarded"], default=None,
                   help="how a decode step finds its exit block (docs/river.md, Predicted exits); with --batch-rule. "
                   "Default: with --river auto the rule calibrated on this device, else checked")
    p.add_argument("--lossless", action="store_true",
                   help="the river (or --lossless-draft) drafts, the backbone verifies: every stream's tokens are full "
                   "depth's (needs --river, unless --lossless-draft ngram). Without --river, --spec-type, --model-draft "
                   "or --embedding, n-grams draft by default (pyriver.speculative.draft.DEFAULT_DRAFTING) where they pay")
    p.add_argument("--no-lossless", action="store_true",
                   help="no drafts at all: every token is one decode step (the default drafts n-grams where they pay)")
    p.add_argument("--draft-max", "--spec-draft-n-max", "--draft", "--draft-n", dest="draft_max", type=int, default=None,
                   help="most tokens drafted per step (lossless mode; a draft model: default 3)")
    p.add_argument("--draft-store", default=None, metavar="FILE",
                   help="the n-gram drafts' store of earlier prompts and answers (pyriver.speculative.store), read from "
                   "FILE at start (a corrupt, truncated or other model's file is refused: the server starts without "
                   "it) and written back at shutdown; without it the store lives in memory only")
    p.add_argument("--no-draft-store", action="store_true",
                   help="n-gram drafts from the request's own tokens only (no store across requests)")
    p.add_argument("--draft-store-mib", type=int, default=None, metavar="MIB",
                   help="the store's memory bound in MiB (the least recently used texts go first; default 64)")
    # run's, bench's and calibrate's --draft, named apart: --draft is llama-server's --draft-max here
    add_draft_args(p, flag="--lossless-draft")
    # llama-server's speculative decoding (server/drafting.py): a draft model or n-gram lookup
    p.add_argument("--model-draft", "-md", "--spec-draft-model", dest="model_draft", default=None,
                   help="a draft model (GGUF of the same vocabulary) whose drafts the model verifies")
    p.add_argument("--spec-type", default=None, help="draft-simple (with --model-draft) or ngram-simple")
    p.add_argument("--spec-draft-n-min", "--draft-min", "--draft-n-min", dest="draft_min", type=int, default=None,
                   help="a draft model's drafts shorter than this are dropped (default 0)")
    p.add_argument("--spec-draft-p-min", "--draft-p-min", dest="draft_p_min", type=float, default=None,
                   help="a draft model stops drafting below this probability of its top token (default 0)")
    p.add_argument("--spec-draft-ngl", "-ngld", "--n-gpu-layers-draft", "--gpu-layers-draft", dest="draft_ngl",
                   type=int, default=None, help="the draft model's blocks on devices, as -ngl")
    p.add_argument("--spec-ngram-simple-size-n", dest="ngram_n", type=int, default=12,
                   help="ngram-simple: tokens looked up (default 12)")
    p.add_argument("--spec-ngram-simple-size-m", dest="ngram_m", type=int, default=48,
                   help="ngram-simple: most tokens drafted (default 48)")
    p.add_argument("--spec-synth-rates", default=None,
                   help="benchmarking only: keep draft i with these probabilities instead of checking it")
    p.add_argument("--spm-infill", action="store_true",
                   help="/infill lays out suffix before prefix (llama-server's, for models trained so)")
    p.add_argument("--context-shift", action="store_true",
                   help="a full slot drops half of its tokens (after the BOS) and generates on, as llama-server")
    p.add_argument("--no-context-shift", action="store_true", help="a full slot ends its request (the default)")
    p.add_argument("--keep", type=int, default=0, metavar="N",
                   help="number of tokens to keep from the initial prompt at a context shift (default: 0, -1 = all; "
                   "a request's n_keep wins), llama-server's")
    p.add_argument("--cache-reuse", type=int, default=0, metavar="N",
                   help="min chunk size to attempt reusing from the cache via KV shifting, requires prompt caching "
                   "to be enabled (default: 0, off), llama-server's")
    p.add_argument("--batch-rule", choices=["split", "minimum", "all"], default="split",
                   help="how a step of several sequences exits (see docs/server.md)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="every product computed one token at a time, so that a stream's text never depends on its "
                   "batch-mates, prompt chunks or prefix reuse (slower: docs/default-cpu.md)")
    p.add_argument("--not-batch-invariant", action="store_true",
                   help="llama.cpp's multi-token kernels, as llama-server runs them (the default)")
    add_flash_attn_arg(p)
    add_cache_type_args(p)
    add_cache_type_args(p, draft=True)
    add_layout_arg(p)
    add_rope_args(p)
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY on /v1/*")
    p.add_argument("--alias", "-a", default=None, help="the model's names, comma-separated: /v1/models reports the first "
                   "in sorted order as its id, and all as its aliases (llama-server's; default: the file name)")
    p.add_argument("--tags", default=None, help="the model's tags, comma-separated (informational, in /v1/models)")
    p.add_argument("--no-webui", action="store_true", help="do not serve the chat page at /")
    p.add_argument("--embedding", "--embeddings", action="store_true", help="serve /v1/embeddings and /embeddings")
    p.add_argument("--pooling", choices=["none", "mean", "cls", "last", "rank"], default=None,
                   help="embeddings' pooling (default: the model's, else none, which /v1/embeddings refuses)")
    p.add_argument("--reranking", "--rerank", action="store_true", help="serve /rerank (--embedding --pooling rank)")
    p.add_argument("--verbose", action="store_true")
    # llama-server's names, same meaning: its command line starts this server unchanged where it can
    p.add_argument("--model", "-m", dest="model_file", default=None, help="the GGUF path (the positional argument)")
    p.add_argument("--seed", "-s", type=int, default=-1, help="default seed of requests (-1: random)")
    p.add_argument("--temp", type=float, default=None, help="default temperature of requests (default 0.8)")
    p.add_argument("--n-predict", "-n", "--predict", type=int, default=-1,
                   help="most tokens a request generates (-1: until the context ends)")
    p.add_argument("--n-gpu-layers", "-ngl", "--gpu-layers", type=int, default=0,
                   help="last blocks (and the head) on devices; -1 = all")
    p.add_argument("--chat-template-file", default=None, help="a jinja chat template used instead of the GGUF's")
    p.add_argument("--chat-template", default=None,
                   help="llama.cpp's built-in template by name (chatml, llama3, command-r ...) or jinja source")
    p.add_argument("--cors-origins", default="*", help="'*' (default), 'localhost' or an origin: CORS as llama-server")
    p.add_argument("--reasoning", choices=["on", "off", "auto"], default="auto",
                   help="thinking in the chat template: off renders enable_thinking=false and closes a forced <think>")
    p.add_argument("--reasoning-format", choices=["none", "auto", "deepseek", "deepseek-legacy"], default="auto",
                   help="a thinking model's thoughts: none leaves them in content; auto, deepseek and deepseek-legacy "
                   "put them in message.reasoning_content (llama-server's; a request's reasoning_format wins)")
    p.add_argument("--reasoning-budget", type=_budget, default=-1, metavar="N",
                   help="token budget for thinking: -1 for unrestricted, 0 for immediate end, N>0 for token budget "
                   "(llama-server's; a request's reasoning_budget_tokens wins)")
    p.add_argument("--reasoning-budget-message", default="", metavar="MESSAGE",
                   help="message injected before the end-of-thinking tag when reasoning budget is exhausted "
                   "(llama-server's; a request's reasoning_budget_message wins)")
    p.add_argument("--jinja", action="store_true", help="accepted: chat templates always render with jinja2")
    p.add_argument("--no-jinja", action="store_true", help="accepted: chat templates always render with jinja2")
    p.add_argument("--metrics", action="store_true", help="serve GET /metrics, Prometheus text (llama-server's; "
                   "without it 501)")
    p.add_argument("--backend-sampling", "-bs", "--backend_sampling", dest="backend_sampling", action="store_true",
                   help="accepted: llama.cpp samples on the device with it; pyriver samples on the host either way, "
                   "from the same distribution")
    p.add_argument("--slots", dest="slots", action="store_true", default=True,
                   help="serve GET /slots, the slots' state (llama-server's; the default)")
    p.add_argument("--no-slots", dest="slots", action="store_false", help="GET /slots answers 501")
    p.add_argument("--props", action="store_true", help="POST /props answers success (llama-server's; it changes "
                   "nothing there either); without it 501")
    p.add_argument("--slot-save-path", default=None, metavar="DIR",
                   help="POST /slots/ID?action=save|restore|erase: a slot's prompt cache to DIR/filename and back")
    p.add_argument("--cont-batching", "-cb", action="store_true", help="accepted: batching is always continuous")
    # llama-server's router: several models in one server, the request's "model" choosing (router.py)
    p.add_argument("--models-dir", default=None, metavar="DIR",
                   help="serve every GGUF of DIR (NAME.gguf as NAME, a folder by its name), loaded on first use")
    p.add_argument("--models-preset", default=None, metavar="FILE.ini",
                   help="llama-server's model presets: an INI section per model, its keys the flags without "
                        "dashes ([*]: every model's); models of their own name their file (model = PATH)")
    p.add_argument("--sleep-idle-seconds", type=int, default=-1, metavar="N",
                   help="after N seconds without a request the model's memory goes; the next request loads it "
                        "again (llama-server's; -1: never)")
    p.add_argument("--models-max", type=int, default=4,
                   help="most models loaded at once; past it the least recently used idle one unloads (0: no limit)")
    p.add_argument("--models-autoload", dest="models_autoload", action="store_true", default=True,
                   help="a request loads the model it names (the default)")
    p.add_argument("--no-models-autoload", dest="models_autoload", action="store_false",
                   help="a request for a model not loaded is refused (POST /models/load loads it)")
    return p


def _budget(v: str) -> int:
    n = int(v)
    if n < -1:   # llama-server's check
        raise argparse.ArgumentTypeError("invalid value")
    return n


def check_lossless_draft(a: argparse.Namespace) -> None:
    """--lossless-draft and --draft-cost: what the server's batch scheduler can run, else why not."""
    require_lossless(a, "--lossless-draft and --draft-cost")
    if a.draft == "both":
        raise ValueError("--lossless-draft both: the server's batch step drafts each slot on the River path or from "
                         "n-grams, not from both (use river or ngram; pyriver run, bench and Llama draft with both)")
    if a.draft == "ngram" and a.river is not None:
        raise ValueError("--lossless-draft ngram drafts without the river and verifies at full depth: leave out --river")


def settings(a: argparse.Namespace) -> dict:
    if a.model_file is not None:
        if a.model is not None:
            raise ValueError("give the model once: as the argument or as --model")
        a.model = a.model_file
    if a.models_dir is not None or a.models_preset is not None:
        if a.model is not None or a.alias is not None or a.model_draft is not None:
            raise ValueError("--models-dir and --models-preset serve their models under their own names: leave out "
                             "the model, --alias and --model-draft (a preset may set a model's)")
        if a.sleep_idle_seconds > 0:
            raise ValueError("--sleep-idle-seconds is for one model (the router unloads past --models-max)")
        if a.models_max < 0:
            raise ValueError("--models-max must be >= 0")
    if a.ctx_size is not None:
        if a.ctx_size < 0:
            raise ValueError("--ctx-size must be >= 0")
        a.ctx = a.ctx_size // max(a.parallel, 1)
    kv_pool = None
    if a.kv_unified:   # every slot's context is the whole pool (scheduler.Scheduler's kv_pool keeps the total)
        kv_pool = a.ctx_size if a.ctx_size is not None else a.ctx * max(a.parallel, 1)
        a.ctx = kv_pool
    if a.parallel < 1 or a.queue < 0 or (a.prompt_chunk is not None and a.prompt_chunk < 1) or a.ctx < 16:
        raise ValueError("--parallel and --prompt-chunk must be >= 1, --queue >= 0, --ctx >= 16")
    kw = {"river": None}
    check_lossless_draft(a)
    by_default = False
    if a.lossless and a.no_lossless:
        raise ValueError("--lossless and --no-lossless exclude each other")
    media_path = _multimodal(a, kw)
    if not (a.lossless or a.no_lossless or a.river is not None or a.spec_type is not None or a.model_draft is not None
            or a.embedding or a.reranking or a.mmproj):
        from pyriver.speculative.draft import DEFAULT_DRAFTING  # n-grams by the measured cost
        a.lossless, a.draft, a.draft_cost = True, DEFAULT_DRAFTING["draft_model"], DEFAULT_DRAFTING["draft_cost"]
        by_default = True
    from pyriver.server.lora import from_args as lora_from_args
    lora = lora_from_args(a.lora, a.lora_init_without_apply)
    if lora:
        from pyriver.engine import check_lora
        check_lora(a.engine)
        if a.river is not None:
            raise ValueError("--river needs pyriver's own graphs; with --lora the model runs on llama.cpp's (no River)")
        kw["lora_adapters"] = lora
    if a.river is not None:
        kw = dict(kw, river=a.river, exit_threshold=a.tau, min_exit_layer=a.min_exit_layer, exit_rule=a.exit_rule)
    elif (a.tau is not None or a.min_exit_layer is not None or a.exit_rule is not None
          or (a.lossless and a.draft != "ngram")):
        raise ValueError("--tau, --min-exit-layer, --exit-rule and --lossless need --river (--lossless --lossless-draft "
                         "ngram needs none)")
    from pyriver.server.drafting import settings as draft_settings
    spec = draft_settings(a, a.lossless, a.river is not None)
    if a.lossless:
        kw.update(lossless=True, draft_model=a.draft, draft_cost=a.draft_cost,
                  **({} if a.draft_max is None else {"draft_max": a.draft_max}))
    kw.update(draft_store_settings(a))
    if a.batch_invariant and a.not_batch_invariant:
        raise ValueError("--batch-invariant and --not-batch-invariant exclude each other")
    if a.batch_invariant or a.not_batch_invariant:
        kw["batch_invariant"] = bool(a.batch_invariant)
    kw["flash_attn"] = flash_attn(a.flash_attn, a.batch_invariant)
    kw.update(cache_kwargs(a, kw["flash_attn"]))   # a quantized V without -fa fails here, before the load
    if spec is not None and spec["type"] == "draft-simple":   # -ctkd/-ctvd: the draft model's cache
        spec.update(cache_kwargs(a, kw["flash_attn"], draft=True))
    kw.update(layout_kwargs(a))
    kw.update(rope_kwargs(a))
    if a.reranking:   # as llama-server's: embeddings on, pooling RANK
        a.embedding, a.pooling = True, "rank"
    if a.embedding:
        from pyriver.server.embeddings import POOLINGS
        kw.update(embedding=True, pooling_type=-1 if a.pooling is None else POOLINGS[a.pooling])
    elif a.pooling is not None:
        raise ValueError("--pooling needs --embedding")
    if a.n_gpu_layers:
        kw["n_gpu_layers"] = a.n_gpu_layers
    if a.engine != "auto":
        kw["engine"] = a.engine
    if a.keep < -1 or a.cache_reuse < 0:
        raise ValueError("--keep must be >= -1 (-1: the whole prompt) and --cache-reuse >= 0")
    if a.cors_origins == "":
        raise ValueError("--cors-origins must not be empty")
    if a.slot_save_path is not None and not os.path.isdir(a.slot_save_path):
        raise ValueError(f"--slot-save-path: not a directory: {a.slot_save_path}")
    defaults = {k: v for k, v in (("temperature", a.temp), ("seed", a.seed if a.seed >= 0 else None)) if v is not None}
    return dict(model=a.model, n_ctx=a.ctx, threads=a.threads, parallel=a.parallel, queue=a.queue,
                prompt_chunk=a.prompt_chunk, cache_ram=a.cache_ram, cache_idle_slots=a.cache_idle_slots,
                slot_prompt_similarity=a.slot_prompt_similarity, batch_rule=a.batch_rule, api_key=a.api_key, alias=a.alias, tags=a.tags,
                verbose=a.verbose, spm_infill=a.spm_infill, webui=not a.no_webui, llama_kwargs=kw, defaults=defaults, n_predict=a.n_predict,
                chat_template_file=a.chat_template_file, chat_template=a.chat_template, cors_origins=a.cors_origins,
                reasoning=a.reasoning, reasoning_format=a.reasoning_format, reasoning_budget=a.reasoning_budget, reasoning_budget_message=a.reasoning_budget_message, spec=spec, ctx_shift=a.context_shift and not a.no_context_shift,
                n_keep=a.keep, cache_reuse=a.cache_reuse,
                drafts_by_default=by_default, endpoint_metrics=a.metrics, endpoint_slots=a.slots, endpoint_props=a.props,
                slot_save_path=a.slot_save_path, models_dir=a.models_dir, models_preset=a.models_preset,
                models_max=a.models_max, models_autoload=a.models_autoload, kv_pool=kv_pool, mmproj=a.mmproj,
                media_path=media_path, sleep_idle_seconds=a.sleep_idle_seconds)


def draft_store_settings(a: argparse.Namespace) -> dict:
    """--draft-store, --no-draft-store, --draft-store-mib: Llama's draft_store (True: in memory; a
    DraftStore sized by --draft-store-mib is made at load, app.Server.load) where n-grams draft."""
    if a.no_draft_store and (a.draft_store is not None or a.draft_store_mib is not None):
        raise ValueError("--no-draft-store excludes --draft-store and --draft-store-mib")
    if a.draft_store_mib is not None and a.draft_store_mib < 1:
        raise ValueError("--draft-store-mib must be >= 1")
    if a.no_draft_store or not (a.lossless and a.draft in ("ngram", "both")):
        if a.draft_store is not None:
            raise ValueError("--draft-store keeps n-gram drafts (the default drafts, or --lossless --lossless-draft ngram)")
        return {}
    if a.draft_store is not None and os.path.isdir(a.draft_store):
        raise ValueError(f"--draft-store: a directory: {a.draft_store}")
    return {"draft_store": a.draft_store or True,
            **({} if a.draft_store_mib is None else {"draft_store_mib": a.draft_store_mib})}


def _multimodal(a: argparse.Namespace, kw: dict) -> Optional[str]:
    """--mmproj's rules (llama-server's where it has them): the llama.cpp engine, no River or drafts
    (their tokens would run over media positions), no context shift (llama-server turns it off); and
    --media-path, a directory given with its separator at the end. Returns the media path."""
    media_path = a.media_path
    if media_path is not None:
        if not os.path.isdir(media_path):
            raise ValueError(f"--media-path: not a directory: {media_path}")
        media_path = media_path if media_path.endswith(os.sep) else media_path + os.sep
    if a.mmproj is None:
        return media_path
    if not os.path.isfile(a.mmproj):
        raise ValueError(f"--mmproj: no such file: {a.mmproj}")
    if a.engine == "native":
        raise ValueError("--mmproj runs on the llama.cpp engine (libmtmd over llama.cpp's context): leave out --engine native")
    if a.river is not None or a.lossless or a.spec_type is not None or a.model_draft is not None:
        raise ValueError("--mmproj: River and drafts do not run over media positions; leave out --river, --lossless, "
                         "--spec-type and --model-draft")
    if a.embedding or a.reranking or a.models_dir is not None or a.models_preset is not None:
        raise ValueError("--mmproj serves chat and completions of one model: not with --embedding, --reranking, "
                         "--models-dir or --models-preset")
    if a.context_shift:
        print("pyriver serve: warning: context shift is not supported with --mmproj (a media chunk's positions "
              "cannot move): it is disabled", file=sys.stderr)
        a.context_shift = False
    kw["engine"] = "llama.cpp"
    return media_path


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parser().parse_args(argv)
    try:
        s = settings(a)
        if s["models_preset"] is not None:   # each preset model's settings, checked before anything loads
            from pyriver.server.models_dir import scan
            from pyriver.server.models_preset import load
            dirs = scan(s["models_dir"]) if s["models_dir"] is not None else {}
            s["presets"] = load(s["models_preset"], dirs, argv, parser(), settings)
        if s["spec"] is not None and s["spec"]["model"] is not None:
            from pyriver.server.drafting import check_vocab
            check_vocab(s["model"], s["spec"]["model"])
        if s["mmproj"] is not None:   # a projector that cannot serve the model stops the server, as llama-server
            from pyriver import models
            from pyriver.engine import check_projector
            from pyriver.errors import ModelLoadError
            try:
                check_projector(str(models.resolve(s["model"])), s["mmproj"])
            except ModelLoadError as e:
                raise ValueError(f"--mmproj: {e}") from None
        import uvicorn
    except ImportError as e:
        print(f"pyriver serve needs the server extra (pip install \"pyriver[server]\"): {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:
        print(f"pyriver serve: error: {e}", file=sys.stderr)
        return 2
    from pyriver.server.app import Server, build_app
    srv = None   # the one model's server (not the router's)
    try:
        if s["models_dir"] is not None or s["models_preset"] is not None:
            from pyriver.server.router import Router
            app = Router(s)
        else:
            srv = Server(s)
            app = build_app(srv)
            if s["sleep_idle_seconds"] > 0:
                from pyriver.server.sleep import Sleeper
                app = Sleeper(srv, app, s["sleep_idle_seconds"])
    except ValueError as e:
        print(f"pyriver serve: error: {e}", file=sys.stderr)
        return 2
    from pyriver.server.gcp import port as gcp_port
    try:
        port = gcp_port()
    except ValueError as e:
        print(f"pyriver serve: error: {e}", file=sys.stderr)
        return 2
    if port is not None and port != a.port:   # llama-server's Vertex AI compatibility (server/gcp.py)
        print(f"pyriver serve: AIP_MODE=PREDICTION: listening on AIP_HTTP_PORT {port}, not {a.port}", file=sys.stderr)
        a.port = port
    level = "info" if a.verbose else "warning"
    hosts = [h.strip() for h in a.host.split(",") if h.strip()]
    if len(hosts) <= 1:
        server = uvicorn.Server(uvicorn.Config(app, host=a.host, port=a.port, log_level=level))
        return _serve(server, srv)
    # several addresses (llama-server's --host A,B): one socket each, one server
    socks = []
    try:
        for h in hosts:
            info = socket.getaddrinfo(h, a.port, type=socket.SOCK_STREAM)[0]
            sk = socket.socket(info[0], socket.SOCK_STREAM)
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            socks.append(sk)
            sk.bind(info[4])
    except OSError as e:
        print(f"pyriver serve: error: cannot listen on {h}:{a.port}: {e}", file=sys.stderr)
        return 1
    return _serve(uvicorn.Server(uvicorn.Config(app, log_level=level)), srv, sockets=socks)


def _serve(server, srv, sockets=None) -> int:
    """Runs the uvicorn server to its end; its exit status. A model that cannot load at start-up
    stops it with the reason and status 1, as llama-server exits (\"exiting due to model loading
    error\"): a server that could never answer does not stay up."""
    status = [0]
    if srv is not None:
        def failed():
            print(f"pyriver serve: error: failed to load the model: {srv.error}", file=sys.stderr, flush=True)
            status[0] = 1
            server.should_exit = True
        srv.on_load_error = failed
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:   # uvicorn re-raises the Ctrl-C it shut down on (uvicorn.run swallows it)
        pass
    if not server.started:   # it could not listen (uvicorn.run's STARTUP_FAILURE)
        return 3
    return status[0]
