"""llama-server's __verbose field of the OpenAI routes: the request's native /completion result
(llamacpp_api.result: the rendered prompt, generation settings, stop type, timings), on with
--verbose or a request's "verbose": true (which wins either way). A chat answer carries it, a
streamed chat its finishing chunk; a /v1/completions answer carries it, and each streamed chunk
the native chunk of its text."""
from __future__ import annotations

from typing import Any, Dict, List

from pyriver.server import llamacpp_api as L


def wanted(srv, f: Dict) -> bool:
    return bool(srv.settings.get("verbose", False) if f.get("verbose") is None else f["verbose"])


def native_fields(srv, f: Dict) -> Dict[str, Any]:
    """An OpenAI request's fields (schema.parse) in parse_native's terms, for generation_settings."""
    n_probs = (f.get("top_logprobs") or 0) if f.get("logprobs") is True else (f.get("logprobs") or 0)
    return {"params": f["sampling"], "seed": f["seed"], "stops": f["stops"], "n_probs": int(n_probs),
            "stream": f["stream"], "body": {"backend_sampling": f.get("backend_sampling", False)},
            "bias": L.logit_bias(srv, f.get("logit_bias"))}


def final(srv, r, f: Dict, toks: List[int], content: str, ev) -> Dict[str, Any]:
    """The native result of request r (ev: its openai_api.Events, which knows how it stopped); a
    stream's holds no text, as llama-server's (its chunks had it)."""
    max_tokens = f["max_tokens"] or srv.max_tokens(toks)
    return L.result(srv, r, native_fields(srv, f), toks, 0, max_tokens, "" if f["stream"] else content, [],
                    ev.stop_type, ev.word)
