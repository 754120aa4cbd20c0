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


class TextStream:
    """The push form of the text rule: feed(piece) gives (text, stopped), the text safe to show
    now and whether a stop string ended it (the text before the stop is that text); finish()
    gives what is left when the pieces end. text_events is its pull form."""

    def __init__(self, stops: List[bytes]):
        self.stops = stops
        self.buf = b""
        self.sent = 0

    def feed(self, piece: bytes) -> Tuple[str, bool]:
        self.buf += piece
        buf, sent = self.buf, self.sent
        hits = [i for i in (buf.find(s, max(0, sent - len(s))) for s in self.stops) if i >= 0]
        if hits:
            end = min(hits)
            self.sent = max(sent, end)
            return buf[sent:end].decode("utf-8", "ignore") if end > sent else "", True
        safe = utf8_complete_len(buf[: len(buf) - _held_suffix(buf, self.stops)])
        if safe <= sent:
            return "", False
        self.sent = safe
        return buf[sent:safe].decode("utf-8", "ignore"), False

    def finish(self) -> str:
        rest, self.sent = self.buf[self.sent:], len(self.buf)
        return rest.decode("utf-8", "ignore")


def text_events(pieces: Iterable[bytes], stops: List[bytes]) -> Iterator[Tuple[str, bool]]:
    """From token pieces, yield (text, stopped): text safe to show so far; stopped when a stop
    string ended the text. The pieces iterator is closed when a stop is found."""
    ts = TextStream(stops)
    it = iter(pieces)
    for piece in it:
        text, stopped = ts.feed(piece)
        if text:
            yield text, False
        if stopped:
            yield "", True
            close = getattr(it, "close", None)
            if close:
                close()
            return
    rest = ts.finish()
    if rest:
        yield rest, False


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
