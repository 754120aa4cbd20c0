"""Turning a stream of sampled tokens into text: stop strings (never emitted), UTF-8 boundaries,
and the result dicts shaped as llama-cpp-python returns them."""
from __future__ import annotations

import time
import uuid
from typing import Iterable, Iterator, List, Optional, Tuple


def utf8_complete_len(b: bytes) -> int:
    """Length of the longest prefix of b that does not end inside a UTF-8 sequence."""
    n = len(b)
    for k in range(1, min(4, n) + 1):
        c = b[n - k]
        if c & 0xC0 == 0x80:
            continue  # continuation byte: look further back for the lead byte
        need = 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 else 4 if c & 0xF8 == 0xF0 else 1
        return n if need <= k else n - k
    return n


def _held_suffix(text: bytes, stops: List[bytes]) -> int:
    """Bytes at the end of text that could be the start of a stop string."""
    held = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), held, -1):
            if text.endswith(s[:k]):
                held = k
                break
    return held


def text_events(pieces: Iterable[bytes], stops: List[bytes]) -> Iterator[Tuple[str, bool]]:
    """From token pieces, yield (text, stopped): text safe to show so far; stopped when a stop
    string ended the text. The pieces iterator is closed when a stop is found."""
    buf = b""
    sent = 0
    it = iter(pieces)
    for piece in it:
        buf += piece
        hits = [i for i in (buf.find(s, max(0, sent - len(s))) for s in stops) if i >= 0]
        if hits:
            end = min(hits)
            if end > sent:
                yield buf[sent:end].decode("utf-8", "ignore"), False
            yield "", True
            close = getattr(it, "close", None)
            if close:
                close()
            return
        safe = utf8_complete_len(buf[: len(buf) - _held_suffix(buf, stops)])
        if safe > sent:
            yield buf[sent:safe].decode("utf-8", "ignore"), False
            sent = safe
    if len(buf) > sent:
        yield buf[sent:].decode("utf-8", "ignore"), False


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def completion_dict(cid: str, created: int, model: str, text: str, finish: Optional[str],
                    usage: Optional[dict], logprobs=None, river: Optional[dict] = None) -> dict:
    d = {
        "id": cid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}],
    }
    if usage is not None:
        d["usage"] = usage
    if river is not None:
        d["river"] = river
    return d


def usage_dict(n_prompt: int, n_completion: int) -> dict:
    return {"prompt_tokens": n_prompt, "completion_tokens": n_completion, "total_tokens": n_prompt + n_completion}


def now() -> int:
    return int(time.time())
