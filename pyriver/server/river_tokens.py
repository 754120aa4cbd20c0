"""The stream extension that shows River at work token by token: with "river_tokens": true in a
request, each streamed chunk with text carries, in its choice, the exit block of every token that
made that text: "river": {"exits": [block, ...], "n_layer": N} (n_layer - 1 is full depth). Other
clients never ask and see plain OpenAI chunks. Without a river, or in lossless mode (whose tokens
all run at full depth), there is nothing per token to tell: the chunks stay plain."""
from __future__ import annotations

from typing import Optional


class TokenExits:
    """Attaches to chunks the exits of the tokens the request's Events have read since the last
    chunk with text. The scheduler records a token's exit block (Request.exits: one per decode
    step, the first token comes from the prompt at full depth) before it hands the token over, so
    the blocks of the tokens read are there when their text is."""

    def __init__(self, llm, r, ev):
        self.r, self.ev = r, ev
        self.n_layer = llm.info["n_layer"]
        self.sent = 0   # tokens whose exits went out

    @staticmethod
    def make(srv, r, ev, wanted: bool) -> Optional["TokenExits"]:
        llm = srv.llm
        if not wanted or llm.river_path is None or llm.speculator is not None:
            return None
        return TokenExits(llm, r, ev)

    def block(self, i: int) -> int:
        return self.n_layer - 1 if i == 0 else int(self.r.exits[i - 1])

    def attach(self, chunk: dict) -> dict:
        choice = chunk["choices"][0]
        if choice.get("text") or choice.get("delta", {}).get("content"):
            n = self.ev.n_tokens
            choice["river"] = {"exits": [self.block(i) for i in range(self.sent, n)], "n_layer": self.n_layer}
            self.sent = n
        return chunk
