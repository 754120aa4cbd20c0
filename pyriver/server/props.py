"""llama-server's /props and /slots on `pyriver serve`, in its shapes (tools/server/server-context.cpp:
get_res_props, server_slot::to_json, the slot tasks), so that llama.cpp's web UI and tools that read
them work:

- GET /props: the model, the slots, the default generation settings of a request that gives none
  (the server's --temp, --seed (-1 reported as llama-server does, 4294967295), --n-predict and
  llama.cpp's sampler defaults, which are pyriver's), the chat template, the build. POST /props is
  501 unless --props (llama-server's: with it, nothing changes and the answer is success).
- GET /slots (on by default, off with --no-slots: 501, as llama-server's --slots): one entry per
  slot, read on the scheduler thread between two steps (a consistent picture, as llama-server
  answers it from its loop). `?fail_on_no_slot=1`: 503 when every slot is busy.
- POST /slots/{id}?action=save|restore|erase under --slot-save-path DIR: a slot's cached prompt
  tokens and its sequence's state bytes to DIR/filename and back (pyriver's file, not llama.cpp's:
  the native engine's state is its own), or dropped. An action on a busy slot waits until the slot
  is free, as llama-server defers it. File names are llama.cpp's fs_validate_filename's: no path
  separators, no "..", no control or reserved characters (400)."""
from __future__ import annotations

import asyncio
import os
import struct
import time
from typing import Any, Dict, List, Optional

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse
from starlette.routing import Route

from pyriver.atomic import replacing
from pyriver.server import llamacpp_api as L, multimodal, sampling_fields as SF
from pyriver.server.lora import brief as lora_brief
from pyriver.server.schema import APIError, json_object

MAGIC, VERSION = b"PRSL", 1
_HEAD = struct.Struct("<4sIII")   # magic, version, n_vocab, n_tokens; then the tokens (int32), then the state


def _not_supported(message: str) -> APIError:
    return APIError(501, message, type_="not_supported_error")


# -- /props ----------------------------------------------------------------------------------------
def default_params(srv) -> Dict[str, Any]:
    """llama-server's default_generation_settings.params (task_params::to_json(true)): the settings a
    request gets where it gives none, as far as pyriver's server takes them from a request."""
    s, d = srv.settings, srv.settings.get("defaults", {})
    n_predict = s.get("n_predict", -1)
    n_predict = n_predict if n_predict and n_predict > 0 else -1
    sampling = {f.name: d.get(f.name, f.default) for f in SF.FIELDS if f.param}   # the request fields' table
    return {"seed": d.get("seed", L.LLAMA_DEFAULT_SEED), **sampling, "dry_sequence_breakers":
            list(sampling["dry_sequence_breakers"]), "samplers": list(sampling["samplers"]),
            "max_tokens": n_predict, "n_predict": n_predict, "ignore_eos": False, "stream": False, "n_probs": 0,
            "timings_per_token": False, "post_sampling_probs": False,
            # llama-server prints its request default ([]); pyriver the adapters such a request gets
            "lora": lora_brief(srv.sched.lora)}


def _token_text(srv, tok: int) -> str:
    if tok is None or tok < 0:
        return ""
    with srv.sched.vocab_lock:
        try:
            return srv.llm.vocab.piece(tok, special=True).decode("utf-8", "replace")
        except ValueError:
            return ""


def props(srv) -> Dict[str, Any]:
    s, llm = srv.settings, srv.llm
    template = getattr(llm.chats.template, "source", None) or ""
    return {
        "default_generation_settings": {"params": default_params(srv), "n_ctx": srv.sched.n_ctx},
        "total_slots": s["parallel"],
        "model_alias": srv.model_id,
        "model_path": llm.model_path,
        "modalities": multimodal.modalities(srv),   # --mmproj's projector, as libmtmd reports it
        "media_marker": multimodal.marker(),
        "endpoint_slots": s.get("endpoint_slots", True),
        "endpoint_props": s.get("endpoint_props", False),
        "endpoint_metrics": bool(srv.settings.get("endpoint_metrics")),   # --metrics
        "ui": s.get("webui", True),
        "chat_template": template,
        "bos_token": _token_text(srv, llm.token_bos()),
        "eos_token": _token_text(srv, llm.token_eos()),
        "build_info": L.fingerprint(),
        # pyriver's: the slots' KV cache, its types (-ctk/-ctv) and bytes (llama.cpp logs them at load)
        "kv_cache": srv.sched.dec.kv_cache() if srv.sched is not None else None,
        "is_sleeping": False,
        "cors_proxy_enabled": False,
    }


# -- /slots ----------------------------------------------------------------------------------------
def slot_json(sched, s) -> Dict[str, Any]:
    """server_slot::to_json of one slot (without `params`), read on the scheduler thread."""
    r, t = s.req, s.task
    d: Dict[str, Any] = {"id": s.seq, "n_ctx": sched.n_ctx,
                         "speculative": sched.spec is not None or sched.drafter is not None,
                         "is_processing": r is not None}
    if t is not None:
        pending = len(s.pending) if r is t else 0
        d.update(id_task=s.last_start - 1, n_prompt_tokens=len(t.prompt),
                 n_prompt_tokens_processed=max(0, len(t.prompt) - t.n_cached - pending),
                 n_prompt_tokens_cache=t.n_cached,
                 # an idle slot keeps nothing of its last request's budget (llama-server resets it: -1, 0)
                 next_token=[{"has_next_token": r is t, "n_remain": max(0, t.max_tokens - t.n_generated) if r is t else -1,
                              "n_decoded": t.n_decoded if r is t else 0}],
                 lora=lora_brief(t.lora or ()))   # the adapters its request ran with (llama-server: in params)
    return d


async def on_scheduler(srv, fn, seq: Optional[int] = None):
    return await asyncio.wrap_future(srv.sched.call(fn, seq))


# -- slot files ------------------------------------------------------------------------------------
def valid_filename(name: str) -> bool:
    """llama.cpp's fs_validate_filename (no subfolders): what may name a slot file in --slot-save-path."""
    if not isinstance(name, str) or not name or len(name.encode("utf-8", "surrogatepass")) > 255:
        return False
    for ch in name:
        c = ord(ch)
        if (c <= 0x1F or c == 0x7F or 0x80 <= c <= 0x9F or c in (0xFF0E, 0x2215, 0x2216, 0xFFFD, 0xFEFF)
                or 0xD800 <= c <= 0xDFFF or ch in ':*?"<>|/\\'):
            return False
    return not (name[0] == " " or name[-1] in " ." or ".." in name or name == ".")


def pack(n_vocab: int, tokens: List[int], state: bytes) -> bytes:
    return _HEAD.pack(MAGIC, VERSION, n_vocab, len(tokens)) + struct.pack(f"<{len(tokens)}i", *tokens) + state


def unpack(blob: bytes, n_vocab: int, n_ctx: int):
    """(tokens, state) of a slot file; ValueError where it is not one of this model's."""
    if len(blob) < _HEAD.size:
        raise ValueError("not a slot file of pyriver")
    magic, version, nv, n = _HEAD.unpack_from(blob)
    if magic != MAGIC or version != VERSION:
        raise ValueError("not a slot file of pyriver")
    at = _HEAD.size + 4 * n
    if len(blob) < at:
        raise ValueError("the slot file is cut short")
    if nv != n_vocab:
        raise ValueError(f"the slot file is of a model with {nv} tokens, this one has {n_vocab}")
    if n > n_ctx:
        raise ValueError("Restored prompt does not fit in the slot context")
    tokens = list(struct.unpack_from(f"<{n}i", blob, _HEAD.size))
    if any(not 0 <= t < n_vocab for t in tokens):
        raise ValueError("Invalid tokens in slot save file")
    return tokens, blob[at:]


async def _filename(srv, req: HTTPRequest) -> str:
    body = json_object(await req.body())
    name = body.get("filename")
    if not isinstance(name, str):
        raise APIError(400, "'filename' is required (a string)", param="filename")
    if not valid_filename(name):
        raise APIError(400, "Invalid filename", param="filename")
    return os.path.join(srv.settings["slot_save_path"], name)


async def _save(srv, req: HTTPRequest, seq: int) -> Dict[str, Any]:
    path = await _filename(srv, req)
    t0 = time.perf_counter()
    sched = srv.sched

    def grab(s):
        if sched.dec.pos(s.seq) != len(s.cached):
            raise APIError(500, "Unable to save slot: its cache does not hold its prompt alone", type_="server_error")
        return list(s.cached), sched.dec.state_get(s.seq)
    tokens, state = await on_scheduler(srv, grab, seq)
    blob = pack(srv.llm.n_vocab(), tokens, state)

    def write():
        with replacing(path) as tmp:   # a file saved before stays whole if this write fails
            tmp.write_bytes(blob)
    try:
        await run_in_threadpool(write)
    except OSError as e:
        raise APIError(500, f"Unable to save slot: {e.strerror}", type_="server_error") from None
    return {"id_slot": seq, "filename": os.path.basename(path), "n_saved": len(tokens), "n_written": len(blob),
            "timings": {"save_ms": (time.perf_counter() - t0) * 1e3}}


async def _restore(srv, req: HTTPRequest, seq: int) -> Dict[str, Any]:
    path = await _filename(srv, req)
    t0 = time.perf_counter()

    def read():
        with open(path, "rb") as f:
            return f.read()
    try:
        blob = await run_in_threadpool(read)
    except OSError:
        raise APIError(400, "Unable to restore slot: no such slot file", param="filename") from None
    try:
        tokens, state = unpack(blob, srv.llm.n_vocab(), srv.sched.n_ctx)
    except ValueError as e:
        raise APIError(400, f"Unable to restore slot: {e}", param="filename") from None
    sched = srv.sched

    def load(s):
        try:
            sched.dec.state_set(s.seq, state)
            if sched.dec.pos(s.seq) != len(tokens):
                raise ValueError("the state does not hold the file's tokens")
        except Exception as e:   # not this model's or context's state: the slot is left empty and usable, as llama-server's
            sched.dec.truncate(s.seq, 0)
            s.cached = []
            raise APIError(400, f"Unable to restore slot: {e}") from None
        s.cached = tokens
    await on_scheduler(srv, load, seq)
    return {"id_slot": seq, "filename": os.path.basename(path), "n_restored": len(tokens), "n_read": len(blob),
            "timings": {"restore_ms": (time.perf_counter() - t0) * 1e3}}


async def _erase(srv, seq: int) -> Dict[str, Any]:
    sched = srv.sched

    def erase(s):
        n = len(s.cached)
        sched.dec.truncate(s.seq, 0)
        s.cached = []
        return n
    return {"id_slot": seq, "n_erased": await on_scheduler(srv, erase, seq)}


def routes(srv, guarded) -> List[Route]:
    async def get_props(req: HTTPRequest):
        async def h(_):
            return JSONResponse(props(srv))
        return await guarded(req, h)

    async def post_props(req: HTTPRequest):
        async def h(_):
            if not srv.settings.get("endpoint_props", False):
                raise _not_supported("This server does not support changing global properties. Start it with `--props`")
            return JSONResponse({"success": True})   # as llama-server's: nothing to change
        return await guarded(req, h)

    async def get_slots(req: HTTPRequest):
        async def h(req):
            if not srv.settings.get("endpoint_slots", True):
                raise _not_supported("This server does not support slots endpoint. Start it with `--slots`")
            sched = srv.sched
            slots = await on_scheduler(srv, lambda: [slot_json(sched, s) for s in sched.slots])
            if req.query_params.get("fail_on_no_slot") and not any(not d["is_processing"] for d in slots):
                raise APIError(503, "no slot available", type_="unavailable_error")
            return JSONResponse(slots)
        return await guarded(req, h)

    async def post_slot(req: HTTPRequest):
        async def h(req):
            if not srv.settings.get("slot_save_path"):
                raise _not_supported("This server does not support slots action. Start it with `--slot-save-path`")
            try:
                seq = int(req.path_params["id_slot"])
            except ValueError:
                seq = -1
            if not 0 <= seq < len(srv.sched.slots):
                raise APIError(400, "Invalid slot ID", param="id_slot")
            action = req.query_params.get("action")
            if action == "save":
                return JSONResponse(await _save(srv, req, seq))
            if action == "restore":
                return JSONResponse(await _restore(srv, req, seq))
            if action == "erase":
                return JSONResponse(await _erase(srv, seq))
            raise APIError(400, "Invalid action", param="action")
        return await guarded(req, h)

    return [Route("/props", get_props, methods=["GET"]), Route("/props", post_props, methods=["POST"]),
            Route("/slots", get_slots, methods=["GET"]), Route("/slots/{id_slot}", post_slot, methods=["POST"])]
