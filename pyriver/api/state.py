"""save_state / load_state as llama-cpp-python's (`Llama.states`): they return and take llama_cpp's own
`LlamaState`, so `llama_cpp.LlamaRAMCache` and `LlamaDiskCache` store pyriver's states unchanged. `llama_state` holds a short pyriver header (JSON: what kind of
computation made each cached token, the model's identity) and the native KV rows
(the engine's state bytes: pr_state_get, or llama.cpp's llama_state_get_data; checked against the
context before anything is written)."""
from __future__ import annotations

import json
import struct
import zlib

import numpy as np
from llama_cpp.llama import LlamaState


MAGIC = b"PYRIVER-STATE-1\n"


class State:
    """`Llama.states` (a part of `pyriver.Llama`): save_state and load_state."""

    def __init__(self, llm):
        self.llm = llm

    def identity(self) -> dict:
        L = self.llm
        i = L.info
        out = {"model": [i["arch"], i["n_layer"], i["n_embd"], i["n_vocab"], i["n_params"], i["n_bytes"]],
               "n_ctx": L.n_ctx()}
        if L.engine != "native":   # the engines' KV bytes differ (native states keep their old header)
            out["engine"] = L.engine
        return out

    def save_state(self) -> LlamaState:
        L = self.llm
        with L.lock:
            L.check_live()
            L.context.reconcile()
            native = L.context.engine.state_get()
            head = json.dumps({**self.identity(), "kinds": L.context.kinds, "crc32": zlib.crc32(native)}).encode()
            blob = MAGIC + struct.pack("<Q", len(head)) + head + native
            return LlamaState(input_ids=L.input_ids.copy(), scores=L.scores[:L.n_tokens].copy(), n_tokens=L.n_tokens,
                              llama_state=blob, llama_state_size=len(blob), seed=L.seed)

    def load_state(self, state: LlamaState) -> None:
        """Restore a state of save_state. A state of another model or context size, or corrupt
        bytes, is a ValueError and leaves this Llama as it was."""
        L = self.llm
        blob = getattr(state, "llama_state", None)
        if not isinstance(blob, (bytes, bytearray)) or not blob.startswith(MAGIC):
            raise ValueError("not a pyriver state (llama_cpp's own states hold llama.cpp's KV cache, which pyriver cannot read)")
        try:
            (n_head,) = struct.unpack_from("<Q", blob, len(MAGIC))
            at = len(MAGIC) + 8
            head = json.loads(blob[at:at + n_head].decode())
            kinds = [int(k) for k in head["kinds"]]
            ids = [int(t) for t in np.asarray(state.input_ids)[: int(state.n_tokens)]]
        except (struct.error, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"corrupt pyriver state: {e}") from None
        mine = self.identity()
        if head.get("model") != mine["model"]:
            raise ValueError(f"the state is of another model ({head.get('model')}; this one: {mine['model']})")
        if head.get("engine", "native") != mine.get("engine", "native"):
            raise ValueError(f"the state is of the {head.get('engine', 'native')} engine; this Llama runs on the "
                             f"{L.engine} engine")
        if head.get("n_ctx") != mine["n_ctx"]:
            raise ValueError(f"the state is of a context of n_ctx {head.get('n_ctx')}; this one has {mine['n_ctx']}")
        if len(kinds) != len(ids) or int(state.n_tokens) != len(ids):
            raise ValueError("corrupt pyriver state: token count and bookkeeping disagree")
        native = bytes(blob[at + n_head:])
        if zlib.crc32(native) != head.get("crc32"):
            raise ValueError("corrupt pyriver state: its KV rows do not match their checksum")
        with L.lock:
            L.check_live()
            L.context.version += 1
            L.context.engine.state_set(native)   # checked by the engine before it writes
            L.context.tokens, L.context.kinds = ids, kinds
            L.context.reconcile()
            L.context.requires_eval = True   # llama_cpp's: a restored state is decoded again before sampling
            L.context.last_logits = None
            L.seed = state.seed
            if L.context.logits_all:
                n = len(ids)
                L.context.scores_all[:n] = np.asarray(state.scores)[:n]
