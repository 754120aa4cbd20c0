"""gpt-oss's harmony channels (llama.cpp's common/parsers/gpt-oss.cpp; test-chat.cpp's
openai-gpt-oss-120b cases). The generation prompt ends with `<|start|>assistant`; the answer is
messages, the next one after `<|end|><|start|>assistant`: `<|channel|>analysis<|message|>...` is
reasoning, `<|channel|>final<|message|>...` (or commentary without a recipient) content, and a
call names its recipient in the role or the channel header:
` to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>{...}` or
`<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}`."""
from __future__ import annotations

import json
import re
from typing import Dict, List, Sequence

from pyriver.text.toolcalls import jsontext as J
from pyriver.text.toolcalls.family import names_of, Call, Family, Parsed, alts, args_rules, lit
from pyriver.text.toolcalls.until import excluding

START, MSG, END = "<|start|>assistant", "<|message|>", "<|end|>"
_ENDS = ("<|end|>", "<|call|>", "<|return|>")
_RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>(\w+)")


class Harmony(Family):
    name = "gpt-oss"
    channels = True
    continue_marks = ("<|channel|>analysis<|message|>", "<|end|><|start|>assistant<|channel|>final<|message|>")
    lead_space = False   # llama.cpp's parser: generation prompt + content, no space() between
    # llama.cpp's triggers (common/parsers/gpt-oss.cpp): a group, else the match, starts the call (the
    # generation prompt ends with <|start|>assistant: a first message's header is the text's start)
    patterns = (r"^\s+to$", r"^<\|channel\|>(?:commentary|analysis)\s+to=functions$",
                r"<\|start\|>assistant(\s+to)", r"<\|start\|>assistant(<\|channel\|>(?:commentary|analysis)\s+to)")

    def parse(self, text: str, tools: List[Dict], partial: bool) -> Parsed:
        names = names_of(tools)
        out = Parsed("")
        for msg in text.split(START):
            if not msg:
                continue
            h = msg.find(MSG)
            if h < 0:   # a header still coming, or text out of the format
                if not partial and msg.strip():
                    out.content += msg
                continue
            header, body = msg[:h], msg[h + len(MSG):]
            k, end = J.find_any(body, _ENDS, 0, partial)
            cut = k < 0 or not end
            if k >= 0:
                body = body[:k]
            rec = _RECIPIENT.search(header)
            chan = _CHANNEL.search(header)
            if rec:
                name = rec.group(1)
                if name not in names:
                    if not partial:
                        out.content += msg
                    continue
                v, e, raw = J.read(body, J.skip_ws(body, 0), partial)
                if raw is None or (v is not None and not isinstance(v, dict)):
                    if partial and not body.strip():
                        out.calls.append(Call(name, "{"))
                        continue
                    out.complete = False
                    continue
                if v is None and not partial:
                    out.complete = False
                    continue
                out.calls.append(Call(name, raw or "{"))
            elif chan and chan.group(1) == "analysis":
                out.reasoning += body
            else:
                out.content += body
        if not partial and not out.calls and not out.content and not out.reasoning:
            out.content = text
        return out

    def root(self, conv, tools: List[Dict], parallel: bool, force: bool) -> str:
        """llama.cpp's tool call: the recipient in the role header or in the channel header, the
        channel commentary or analysis, an optional constraint; one call."""
        chan = '"<|channel|>" ( "commentary" | "analysis" )'
        cons = '( space "<|constrain|>"? [A-Za-z0-9_-]+ )?'
        alt = []
        for n, r, _ in args_rules(conv, tools):
            fn = lit(conv, " to=functions." + n)
            alt += [f'{fn} {chan} {cons} "<|message|>" {r}', f'{chan} {fn} {cons} "<|message|>" {r}']
        return conv.add_rule("tool-call", alts(alt))

    def required_root(self, conv, tools: List[Dict], parallel: bool) -> str:
        """llama.cpp's `(start any)* start tool-call` less the generation prompt's `start`: analysis
        and preamble messages may come before the call."""
        call = self.root(conv, tools, parallel, True)
        body = conv.add_rule("message-content", excluding(conv, (END,), "until-end"))
        conv.add_rule("any", f'( "<|channel|>commentary<|message|>" {body} "<|end|>" ) | '
                             f'( ( "<|channel|>commentary" " to=assistant"? )? "<|channel|>analysis<|message|>" {body} "<|end|>" )')
        return f'( any "<|start|>assistant" )* {call}'
