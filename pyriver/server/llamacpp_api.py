"""llama-server's own endpoints, in its shapes (tools/server/README.md of llama.cpp): the native
/completion (also /completions), /tokenize, /detokenize (its chat-shaped ones are openai_api's); the fields
llama-server adds to the OpenAI ones (system_fingerprint, timings, chat logprobs, logit_bias).
Requests run on the same scheduler as the OpenAI endpoints; bad input is a 400, never a 500."""
from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from pyriver import __version__
from pyriver.text import completion as C
from pyriver.server import context_shift, multimodal, sampling_fields as SF, streams
from pyriver.server.disconnect import or_cancel
from pyriver.server.schema import APIError, end_error, generation, json_object

LLAMA_DEFAULT_SEED = 0xFFFFFFFF   # what llama-server reports for "a random seed"


def fingerprint() -> str:
    """llama-server's system_fingerprint is its build ("b<number>-<commit>"); pyriver's names its version."""
    return f"b{__version__}-pyriver"


def _bias_value(v) -> float:
    if v is False:
        return float("-inf")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v):
        return float(min(max(v, -1e4), 1e4))   # beyond, float32 logits would overflow to inf (NaN odds)
    raise APIError(400, f"a logit_bias value must be a number or false, got {json.dumps(v)[:40]}",
                   param="logit_bias")


def logit_bias(srv, value) -> Dict[int, float]:
    """{token id: bias} from llama-server's forms: [[token id or text, bias], ...] or
    {"token id" or text: bias}; a text biases each of its tokens."""
    if value is None:
        return {}
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = [tuple(p) for p in value]
    else:
        raise APIError(400, "'logit_bias' must be an object or a list of [token, bias] pairs", param="logit_bias")
    n_vocab, out = srv.llm.n_vocab(), {}
    for key, v in pairs:
        bias = _bias_value(v)
        if isinstance(key, str) and key.lstrip("-").isdigit() and isinstance(value, dict):
            key = int(key)
        if isinstance(key, int) and not isinstance(key, bool):
            if 0 <= key < n_vocab:
                out[key] = bias
            continue   # llama-server skips ids out of range
        if not isinstance(key, str):
            raise APIError(400, "a logit_bias token must be a token id or a text", param="logit_bias")
        with srv.sched.vocab_lock:
            toks = srv.llm.tokenize(key.encode("utf-8"), add_bos=False, special=False)
        for t in toks:
            out[t] = bias
    if sum(b == float("-inf") for b in out.values()) >= n_vocab:
        raise APIError(400, "'logit_bias' forbids every token", param="logit_bias")
    return out


def eog_bias(srv) -> Dict[int, float]:
    """ignore_eos: every end-of-generation token at -inf."""
    if getattr(srv, "eog_ids", None) is None:   # found once: ~50k vocabulary look-ups
        vocab = srv.llm.vocab
        srv.eog_ids = [t for t in range(srv.llm.n_vocab()) if vocab.is_eog(t)]
    return {t: float("-inf") for t in srv.eog_ids}


# -- timings and log-probabilities ----------------------------------------------------------------
def timings(r, t_end: Optional[float] = None) -> Dict[str, Any]:
    t_end = t_end or time.perf_counter()
    t_first = r.t_first or t_end
    n_prompt = len(r.prompt) - r.n_cached
    p_ms, g_ms = (t_first - r.t_submit) * 1e3, (t_end - t_first) * 1e3
    n_gen = r.n_decoded
    return {"cache_n": r.n_cached, "prompt_n": n_prompt, "prompt_ms": p_ms,
            "prompt_per_token_ms": p_ms / n_prompt if n_prompt else 0.0,
            "prompt_per_second": 1e3 * n_prompt / p_ms if p_ms > 0 else 0.0,
            "predicted_n": n_gen, "predicted_ms": g_ms,
            "predicted_per_token_ms": g_ms / (n_gen - 1) if n_gen > 1 else 0.0,
            "predicted_per_second": 1e3 * (n_gen - 1) / g_ms if g_ms > 0 and n_gen > 1 else 0.0,
            **_draft_counts(r)}


def progress_timings(report: Dict, prompt_ms: float) -> Dict[str, Any]:
    """A prompt progress report's timings (timings_per_token): the prompt computed so far, nothing
    generated yet; the first report, before any prompt token ran, is all zeros (llama-server's)."""
    n = report["processed"] - report["cache"]
    prompt_ms = prompt_ms if n > 0 else 0.0
    return {"cache_n": report["cache"], "prompt_n": n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / n if n else 0.0,
            "prompt_per_second": 1e3 * n / prompt_ms if prompt_ms > 0 else 0.0,
            "predicted_n": 0, "predicted_ms": 0.0, "predicted_per_token_ms": 0.0, "predicted_per_second": 0.0}


def _draft_counts(r) -> Dict[str, int]:
    """llama-server's draft_n and draft_n_accepted, with a drafter or in lossless mode."""
    ls = r.lossless
    return {} if ls is None else {"draft_n": ls["drafted"], "draft_n_accepted": ls["accepted"]}


def _tok(vocab, tok: int) -> Tuple[str, List[int]]:
    b = vocab.piece(tok)
    return b.decode("utf-8", "ignore"), list(b)


def native_probs(srv, entries, post: bool = False) -> List[Dict]:
    """llama-server's completion_probabilities: id, token, bytes, logprob, top_logprobs (post:
    prob and top_probs, the probabilities the sampler drew from)."""
    with srv.sched.vocab_lock:   # the Vocab's piece buffer is shared with the scheduler thread
        return _probs(srv.llm.vocab, entries, *(("prob", "top_probs") if post else ("logprob", "top_logprobs")))


def _probs(vocab, entries, key: str = "logprob", tops_key: str = "top_logprobs") -> List[Dict]:
    out = []
    for tok, lp, top in entries:
        text, b = _tok(vocab, tok)
        tops = []
        for i, v in top:
            t, tb = _tok(vocab, i)
            tops.append({"id": i, "token": t, "bytes": tb, key: v})
        out.append({"id": tok, "token": text, "bytes": b, key: lp, tops_key: tops})
    return out


def post_sampling(sampler, n: int):
    """post_sampling_probs: each token's entry from the distribution the sampler drew from (after
    penalties, top-k, top-p, min-p, temperature): its probability and the n most likely, zeros left out."""
    def entry(logits, tok, history):
        dist = sampler.distribution(logits, history)
        top = np.argsort(-dist, kind="stable")[:n]
        return int(tok), float(dist[tok]), [(int(i), float(dist[i])) for i in top if dist[i] > 0.0]
    return entry


def chat_logprobs(srv, entries) -> Optional[Dict]:
    """OpenAI's chat logprobs: {"content": [{token, logprob, bytes, top_logprobs}]}."""
    if not entries:
        return None
    content = []
    for e in native_probs(srv, entries):
        content.append({"token": e["token"], "logprob": e["logprob"], "bytes": e["bytes"],
                        "top_logprobs": [{k: t[k] for k in ("token", "logprob", "bytes")} for t in e["top_logprobs"]]})
    return {"content": content, "refusal": None}


# -- the native /completion -------------------------------------------------------------------------
def _is_tokens(v) -> bool:
    return isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in v)


def is_mixed(v) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(isinstance(t, (int, str)) and not isinstance(t, bool)
                                                     for t in v) and any(isinstance(t, int) for t in v)


def prompts_of(p) -> Tuple[List[Any], bool]:
    """(prompts, several): llama-server's prompt forms. A string, a list of token ids (with strings
    mixed in), {"prompt_string": ...}, or a list of those: one result per prompt."""
    if isinstance(p, (str, dict)) or _is_tokens(p) or is_mixed(p):
        return [p], False
    if isinstance(p, list) and p:
        return list(p), True
    raise APIError(400, "'prompt' must be a string, a list of token ids or a list of prompts", param="prompt")


def tokens_of(srv, p, add_special: bool = True) -> List[int]:
    if isinstance(p, dict):
        if set(p) - {"prompt_string", "multimodal_data"} or not isinstance(p.get("prompt_string"), str):
            raise APIError(400, "a JSON prompt is {\"prompt_string\": text, \"multimodal_data\": [base64, ...]}",
                           param="prompt")
        p = p["prompt_string"]
    parts = [p] if isinstance(p, str) else p
    if not isinstance(parts, list):
        raise APIError(400, "each prompt must be a string, a list of token ids or {prompt_string}", param="prompt")
    out: List[int] = []
    with srv.sched.vocab_lock:
        for i, x in enumerate(parts):
            if isinstance(x, str):
                out += srv.llm.tokenize(x.encode("utf-8"), add_bos=add_special and i == 0, special=True)
            elif isinstance(x, int) and not isinstance(x, bool):
                out.append(x)
            else:
                raise APIError(400, "a prompt list holds token ids and strings only", param="prompt")
    return out


def prompt_input(srv, p) -> Tuple[List[int], Optional[Dict]]:
    """(tokens, media chunks by position or None) of one prompt: a JSON prompt with multimodal_data
    through the projector (server/multimodal.py), anything else as text and token ids, unchecked."""
    mp = multimodal.json_prompt(srv, p) if isinstance(p, dict) and isinstance(p.get("prompt_string"), str) else None
    if mp is None:
        return tokens_of(srv, p), None
    return multimodal.check(srv, mp), mp.media


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


_BOOL = (lambda v: isinstance(v, bool), "a boolean")
# /completion's own fields beside the generation fields both APIs share (server/sampling_fields.py): name: (check, what)
_FIELDS = {
    "n_probs": (_int, "an integer"), "ignore_eos": _BOOL, "return_tokens": _BOOL, "post_sampling_probs": _BOOL,
    "timings_per_token": _BOOL,
    "response_fields": (lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v), "a list of strings"),
}


def parse_native(srv, raw: bytes) -> Dict[str, Any]:
    body = json_object(raw)
    if body.get("prompt") is None:
        raise APIError(400, "'prompt' is required", param="prompt")
    for name, (ok, what) in _FIELDS.items():
        if body.get(name) is not None and not ok(body[name]):
            raise APIError(400, f"'{name}' must be {what}, got {json.dumps(body[name])[:80]}", param=name)
    gen, params = generation(body, srv.settings.get("defaults", {}))
    n_predict = gen["n_predict"]
    n_probs = int(body.get("n_probs") or 0)
    if not 0 <= n_probs <= 100:
        raise APIError(400, f"'n_probs' must be in [0, 100], got {n_probs}", param="n_probs")
    stop = gen["stop"] or []
    bias = logit_bias(srv, body.get("logit_bias"))
    if body.get("ignore_eos"):
        bias.update(eog_bias(srv))
    return {"body": body, "params": params, "seed": gen["seed"],
            "n_predict": None if n_predict is None or n_predict < 0 else n_predict, "n_probs": n_probs,
            "stops": [stop] if isinstance(stop, str) else stop, "bias": bias, "stream": gen["stream"],
            "return_tokens": bool(body.get("return_tokens")), "fields": body.get("response_fields") or [],
            "post": bool(body.get("post_sampling_probs")), "lora": body.get("lora"),
            "id_slot": gen["id_slot"], "timings_per_token": bool(body.get("timings_per_token")),
            "progress": bool(gen["stream"] and gen["return_progress"]), "cache_prompt": gen["cache_prompt"],
            "shift": context_shift.check_fields(body)}


def _settings(srv, f: Dict, max_tokens: int) -> Dict[str, Any]:
    """llama-server's generation_settings: every sampling field by its name, and the request's own."""
    return {"n_predict": max_tokens, "seed": LLAMA_DEFAULT_SEED if f["seed"] is None else f["seed"],
            **SF.settings(f["params"]), "stop": f["stops"], "n_probs": f["n_probs"], "stream": f["stream"],
            "ignore_eos": bool(f["body"].get("ignore_eos")), "backend_sampling": bool(f["body"].get("backend_sampling")),
            "logit_bias": [{"token": t, "bias": None if b == float("-inf") else b} for t, b in f["bias"].items()]}


def _nested(fields: List[str], d: Dict) -> Dict:
    """llama-server's response_fields: "a/b" picks d["a"]["b"], keyed by the path."""
    out = {}
    for path in fields:
        v: Any = d
        for k in path.split("/"):
            v = v.get(k) if isinstance(v, dict) else None
        if v is not None:
            out[path] = v
    return out


class Native:
    """One /completion request on the scheduler: its tokens, text and end in llama-server's terms."""

    def __init__(self, srv, f: Dict, toks: List[int], index: int, media: Optional[Dict] = None):
        self.srv, self.f, self.index = srv, f, index
        self.toks = toks if media else srv.prompt_tokens(toks)   # a media prompt was checked as it was made
        self.max_tokens = f["n_predict"] or srv.max_tokens(toks)
        sampler = srv.base_sampler(f["params"], f["seed"], f["bias"])
        self.r = srv.submit_request(toks, sampler, self.max_tokens, f["n_probs"] or None,
                                    post_sampling(sampler, f["n_probs"]) if f["post"] else None, f["lora"],
                                    f["id_slot"], progress=f["progress"], media=media, cache_prompt=f["cache_prompt"],
                                    stream=f["stream"], stops=f["stops"], shift=f["shift"])
        self.text = C.TextStream([s.encode("utf-8") for s in f["stops"] if s])
        self.stop_type, self.word, self.t_end, self.raw = "none", "", None, b""

    async def items(self):
        """(text, token ids, logprob entries) as they come, a prompt progress report as (None, report, []);
        the end sets stop_type."""
        n_read = 0
        while True:
            item = await self.r.out.get()
            if item[0] == "progress":   # return_progress: (None, the report, [its prompt ms])
                yield None, item[1], [item[2] if len(item) > 2 else 0.0]
                continue
            if item[0] == "token":
                n_read += 1
                self.raw += item[2]
                text, stopped = self.text.feed(item[2])
                if stopped:
                    self.stop_type, self.word = "word", stopping_word(self.f["stops"], self.raw)
                    self.r.stop_at(n_read)
                    self.t_end = time.perf_counter()
                    yield text, [item[1]], [item[3]] if item[3] else []
                    return
                yield text, [item[1]], [item[3]] if item[3] else []
                continue
            reason = item[1]
            self.t_end = time.perf_counter()
            if reason.startswith("error"):
                raise end_error(reason)
            self.stop_type = "eos" if reason == "stop" else "limit"
            rest = self.text.finish()
            if rest:
                yield rest, [], []
            return

    def final(self, content: str, tokens: List[int], entries) -> Dict[str, Any]:
        d = result(self.srv, self.r, self.f, self.toks, self.index, self.max_tokens, content,
                   tokens if self.f["return_tokens"] else [], self.stop_type, self.word, self.t_end)
        if entries and not self.f["stream"]:
            d["completion_probabilities"] = native_probs(self.srv, entries, self.f["post"])
        return _nested(self.f["fields"], d) if self.f["fields"] else d

    def partial(self, text: str, toks: List[int]) -> Dict[str, Any]:
        return partial(self.r, self.index, text, toks, len(self.toks))


def result(srv, r, f: Dict, toks: List[int], index: int, max_tokens: int, content: str, tokens: List[int],
           stop_type: str, word: str, t_end: Optional[float] = None) -> Dict[str, Any]:
    """llama-server's native result of a request (to_json_non_oaicompat): /completion's answer, and the
    __verbose field of the OpenAI routes (server/verbose.py). f: parse_native's fields."""
    with srv.sched.vocab_lock:   # media positions (NULL_TOKEN) have no text, as llama-server's detokenize
        prompt = srv.llm.vocab.detokenize([t for t in toks if t >= 0], special=True).decode("utf-8", "replace")
    return {"index": index, "content": content, "tokens": tokens, "id_slot": r.slot, "stop": True, "model": srv.model_id,
            "tokens_predicted": r.n_decoded, "tokens_evaluated": len(toks),
            "generation_settings": _settings(srv, f, max_tokens), "prompt": prompt, "has_new_line": "\n" in content,
            "truncated": stop_type == "limit" and len(toks) + r.n_generated >= srv.sched.n_ctx, "stop_type": stop_type,
            "stopping_word": word, "tokens_cached": r.n_cached, "timings": timings(r, t_end)}


def partial(r, index: int, text: str, tokens: List[int], n_prompt: int) -> Dict[str, Any]:
    """llama-server's native stream chunk (a token's text, or a prompt progress report's empty one)."""
    return {"index": index, "content": text, "tokens": tokens, "stop": False, "id_slot": r.slot,
            "tokens_predicted": r.n_decoded, "tokens_evaluated": n_prompt}


def stopping_word(stops: List[str], raw: bytes) -> str:
    """The stop string a text ended at (the first of the request's that it holds)."""
    return next((s for s in stops if s and s.encode("utf-8") in raw), "")


async def run_one(n: Native) -> Dict[str, Any]:
    parts, toks, entries = [], [], []
    try:
        async for text, ts, es in n.items():   # no progress reports: it does not stream
            parts.append(text)
            toks += ts
            entries += es
    finally:
        n.r.cancel()
    return n.final("".join(parts), toks, entries)


async def _run_all(runs: List[Native]) -> List[Dict[str, Any]]:
    return [await run_one(n) for n in runs]


def routes(srv, guarded) -> List[Route]:
    """The routes, each through app.py's guarded (API key, model ready, errors as JSON)."""

    async def completion(req: HTTPRequest):
        async def h(req):
            f = await run_in_threadpool(parse_native, srv, await req.body())
            prompts, several = prompts_of(f["body"]["prompt"])
            inputs = [await run_in_threadpool(prompt_input, srv, p) for p in prompts]
            if f["stream"] and several:
                raise APIError(400, "streaming takes one prompt", param="stream")
            runs = []
            try:
                for i, (t, media) in enumerate(inputs):
                    runs.append(Native(srv, f, t, i, media))
            except APIError:
                for n in runs:
                    n.r.cancel()
                raise
            if f["stream"]:
                return stream_response(runs[0])
            results = await or_cancel(req, [n.r for n in runs], _run_all(runs))
            return JSONResponse(results if several else results[0])
        return await guarded(req, h)

    async def tokenize(req: HTTPRequest):
        async def h(req):
            body = json_object(await req.body())
            content = body.get("content")
            if content is None:
                return JSONResponse({"tokens": []})
            for k in ("add_special", "parse_special", "with_pieces"):
                if k in body and not isinstance(body[k], bool):
                    raise APIError(400, f"'{k}' must be a boolean", param=k)
            add, special = body.get("add_special", False), body.get("parse_special", True)
            if isinstance(content, str):
                content = [content]
            if not is_mixed(content) and not (isinstance(content, list) and all(isinstance(x, str) for x in content)):
                raise APIError(400, "'content' must be a string or a list of strings and token ids", param="content")
            toks = []
            with srv.sched.vocab_lock:
                for i, x in enumerate(content):
                    toks += srv.llm.tokenize(x.encode("utf-8"), add_bos=add and i == 0, special=special) \
                        if isinstance(x, str) else [x]
                if not body.get("with_pieces"):
                    return JSONResponse({"tokens": toks})
                out = []
                for t in toks:
                    b = srv.llm.vocab.piece(t, True) if 0 <= t < srv.llm.n_vocab() else b""
                    try:
                        piece: Any = b.decode("utf-8")
                    except UnicodeDecodeError:
                        piece = list(b)
                    out.append({"id": t, "piece": piece})
            return JSONResponse({"tokens": out})
        return await guarded(req, h)

    async def detokenize(req: HTTPRequest):
        async def h(req):
            body = json_object(await req.body())
            toks = body.get("tokens", [])
            if not _is_tokens(toks):
                raise APIError(400, "'tokens' must be a list of token ids", param="tokens")
            bad = [t for t in toks if not 0 <= t < srv.llm.n_vocab()]
            if bad:
                raise APIError(400, f"token id {bad[0]} is out of range [0, {srv.llm.n_vocab()})", param="tokens")
            with srv.sched.vocab_lock:
                text = b"".join(srv.llm.vocab.piece(t) for t in toks)
            return JSONResponse({"content": text.decode("utf-8", "replace")})
        return await guarded(req, h)

    return [Route("/completion", completion, methods=["POST"]), Route("/completions", completion, methods=["POST"]),
            Route("/tokenize", tokenize, methods=["POST"]), Route("/detokenize", detokenize, methods=["POST"])]


def stream_response(n: Native) -> StreamingResponse:
    """llama-server's native stream: a chunk per token, then the final object (content empty)."""
    async def body():
        toks, entries = [], []
        try:
            async for text, ts, es in n.items():
                if text is None:   # a prompt progress report (return_progress)
                    ch = dict(n.partial('', []), prompt_progress=ts)
                    if n.f["timings_per_token"]:
                        ch["timings"] = progress_timings(ts, es[0])
                    yield f"data: {json.dumps(ch)}\n\n"
                    continue
                toks += ts
                entries += es
                ch = n.partial(text, ts)
                if n.f["timings_per_token"]:
                    ch["timings"] = timings(n.r)
                if es:
                    ch["completion_probabilities"] = native_probs(n.srv, es, n.f["post"])
                yield f"data: {json.dumps(ch)}\n\n"
            yield f"data: {json.dumps(n.final('', toks, entries))}\n\n"
        except APIError as e:
            yield f"data: {json.dumps(e.body())}\n\n"
        finally:
            n.r.cancel()
    return streams.event_stream(body())
