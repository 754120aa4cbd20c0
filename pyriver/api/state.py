"""save_state / load_state as llama-cpp-python's (a mixin): they return and take llama_cpp's own
`LlamaState`, so `llama_cpp.LlamaRAMCache` and `LlamaDiskCache` store pyriver's states unchanged,
and set_cache / set_seed. `llama_state` holds a short pyriver header (JSON: what kind of
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


class StateMixin:
    def set_cache(self, cache) -> None:
        """A llama_cpp.BaseLlamaCache (LlamaRAMCache, LlamaDiskCache): create_completion restores
        the longest cached prefix of a prompt from it, and stores its state after."""
        self.cache = cache

    def __getstate__(self) -> dict:
        """llama_cpp's pickling: the constructor's arguments (with the current seed); unpickling
        loads the model again from model_path. The cache, the tokens and any setting changed
        after construction (set_exit, set_lossless, ...) are not carried, as in llama_cpp."""
        return {**self._init_args, "model_path": self.model_path, "seed": self._seed}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def set_seed(self, seed: int) -> None:
        self._seed = int(seed)

    def _identity(self) -> dict:
        i = self.info
        out = {"model": [i["arch"], i["n_layer"], i["n_embd"], i["n_vocab"], i["n_params"], i["n_bytes"]],
               "n_ctx": self._n_ctx}
        if self.engine != "native":   # the engines' KV bytes differ (native states keep their old header)
            out["engine"] = self.engine
        return out

    def save_state(self) -> LlamaState:
        with self._lock:
            self._live()
            self._reconcile()
            native = self._ectx.state_get()
            head = json.dumps({**self._identity(), "kinds": self._kinds, "crc32": zlib.crc32(native)}).encode()
            blob = MAGIC + struct.pack("<Q", len(head)) + head + native
            return LlamaState(input_ids=self.input_ids.copy(), scores=self._scores.copy(), n_tokens=self.n_tokens,
                              llama_state=blob, llama_state_size=len(blob), seed=self._seed)

    def load_state(self, state: LlamaState) -> None:
        """Restore a state of save_state. A state of another model or context size, or corrupt
        bytes, is a ValueError and leaves this Llama as it was."""
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
        mine = self._identity()
        if head.get("model") != mine["model"]:
            raise ValueError(f"the state is of another model ({head.get('model')}; this one: {mine['model']})")
        if head.get("engine", "native") != mine.get("engine", "native"):
            raise ValueError(f"the state is of the {head.get('engine', 'native')} engine; this Llama runs on the "
                             f"{self.engine} engine")
        if head.get("n_ctx") != mine["n_ctx"]:
            raise ValueError(f"the state is of a context of n_ctx {head.get('n_ctx')}; this one has {mine['n_ctx']}")
        if len(kinds) != len(ids) or int(state.n_tokens) != len(ids):
            raise ValueError("corrupt pyriver state: token count and bookkeeping disagree")
        native = bytes(blob[at + n_head:])
        if zlib.crc32(native) != head.get("crc32"):
            raise ValueError("corrupt pyriver state: its KV rows do not match their checksum")
        with self._lock:
            self._live()
            self._version += 1
            self._ectx.state_set(native)   # checked by the engine before it writes
            self._tokens, self._kinds = ids, kinds
            self._reconcile()
            self._requires_eval = True   # llama_cpp's: a restored state is decoded again before sampling
            self._last_logits = None
            self._seed = state.seed
            if self._logits_all:
                n = len(ids)
                self._scores_all[:n] = np.asarray(state.scores)[:n]
