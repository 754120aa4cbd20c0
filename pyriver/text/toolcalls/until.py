"""Text up to a delimiter as llama.cpp's PEG grammar builder writes it (common/peg-parser.cpp:
gbnf_excluding_grammar, gbnf_including_grammar): the states of an Aho-Corasick automaton of the
delimiters, one GBNF rule each. Exact, where a rule written by hand is not: `until("<tool_call>\\n")`
takes "<tool_call><" and refuses "<tool_call>\\n"; text that overlaps a delimiter (the closing
"\\n</parameter>\\n" after "\\n</parameter>") ends where llama.cpp's ends."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple


def _automaton(strings: Sequence[str]):
    """(goto function, terminal states, alphabet) of the delimiters' Aho-Corasick automaton."""
    goto: List[Dict[str, int]] = [{}]
    terminal = [False]
    for s in strings:
        q = 0
        for c in s:
            if c not in goto[q]:
                goto.append({})
                terminal.append(False)
                goto[q][c] = len(goto) - 1
            q = goto[q][c]
        terminal[q] = True
    fail = [0] * len(goto)
    order, queue = [], list(goto[0].values())
    while queue:   # breadth first: a state's failure state is known before its children's
        q = queue.pop(0)
        order.append(q)
        for c, d in goto[q].items():
            f = fail[q]
            while f and c not in goto[f]:
                f = fail[f]
            fail[d] = goto[f].get(c, 0) if goto[f].get(c, 0) != d else 0
            terminal[d] = terminal[d] or terminal[fail[d]]
            queue.append(d)
    alphabet = sorted({c for s in strings for c in s})

    def step(q: int, c: str) -> int:
        while q and c not in goto[q]:
            q = fail[q]
        return goto[q].get(c, 0)
    return step, terminal, alphabet, len(goto)


def _char(c: str) -> str:
    o = ord(c)
    if c in "\\]^-[":
        return "\\" + c
    if c == "\n":
        return "\\n"
    if c == "\r":
        return "\\r"
    if c == "\t":
        return "\\t"
    if 0x20 <= o <= 0x7E:
        return c
    return f"\\x{o:02X}" if o <= 0xFF else (f"\\u{o:04X}" if o <= 0xFFFF else f"\\U{o:08X}")


def _cls(chars: List[str], negate: bool) -> str:
    return ("[^" if negate else "[") + "".join(_char(c) for c in chars) + "]"


def _rules(conv, name: str, strings: Sequence[str], including: bool) -> str:
    step, terminal, alphabet, n = _automaton(strings)
    names = {0: name}
    for q in range(1, n):
        names[q] = f"{name}-{q:02d}"
    # the rule names are taken first (a state refers to states not yet written)
    taken = {q: conv.add_rule(names[q], "|") for q in range(n) if not terminal[q]}
    for q in range(n):
        if terminal[q]:
            continue
        buckets: Dict[int, List[str]] = {}
        completing, specific = [], []
        for c in alphabet:
            d = step(q, c)
            if terminal[d]:
                completing.append(c)
                specific.append(c)
            elif d:
                buckets.setdefault(d, []).append(c)
                specific.append(c)
        alts = []
        if including and completing:
            alts.append(_cls(completing, False))
        for d, chars in sorted(buckets.items()):
            alts.append(f"{_cls(chars, False)} {taken[d]}")
        alts.append(f"{_cls(specific, True)} {taken[0]}")
        body = " | ".join(alts)
        conv.set_rule(taken[q], ("| " + body) if not including else body)
    return taken[0]


def excluding(conv, strings: Sequence[str], name: str) -> str:
    """A rule for any text that contains none of strings (llama.cpp's until / until_one_of)."""
    return _rules(conv, name, strings, including=False)


def including(conv, strings: Sequence[str], name: str) -> str:
    """A rule for any text up to and including the first of strings (llama.cpp's p.ac)."""
    return _rules(conv, name, strings, including=True)
