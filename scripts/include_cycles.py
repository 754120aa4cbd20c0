#!/usr/bin/env python3
"""Include cycles in native/: exits 1 naming each one, 0 when there are none.

Two graphs, both from the files' #include "..." lines (system and ggml headers are ignored):

- headers: a.h -> b.h when a.h includes b.h. A cycle is a header that includes itself back,
  directly or through others.
- files: a unit is a stem's header and source together (model.h + model.cpp); unit a -> unit b
  when a.h or a.cpp includes b.h. A cycle is two (or more) units each of which depends on the
  other: model.cpp including river.h while river.h includes model.h, say.

Usage: python scripts/include_cycles.py [native_dir]
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def includes(native: Path) -> dict[str, list[str]]:
    """{file name: [local header names it includes]} over native/*.h and *.cpp."""
    files = sorted(p for p in native.iterdir() if p.suffix in (".h", ".cpp"))
    names = {p.name for p in files}
    return {p.name: [h for h in INCLUDE.findall(p.read_text()) if h in names] for p in files}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node, or of one node with a self edge
    (Tarjan), each sorted; sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def find(native: Path) -> list[str]:
    """One line per cycle, headers' first, then units'."""
    inc = includes(native)
    headers = {f: set(hs) for f, hs in inc.items() if f.endswith(".h")}
    units: dict[str, set[str]] = {}
    for f, hs in inc.items():
        stem = f.rsplit(".", 1)[0]
        units.setdefault(stem, set()).update(h.rsplit(".", 1)[0] for h in hs if h.rsplit(".", 1)[0] != stem)
    lines = []
    for comp in cycles(headers):
        lines.append("header cycle: " + " <-> ".join(comp))
    for comp in cycles(units):
        why = []
        for a in comp:
            for f in (a + ".h", a + ".cpp"):
                why += [f"{f} includes {h}" for h in inc.get(f, ()) if h.rsplit(".", 1)[0] in comp and h.rsplit(".", 1)[0] != a]
        lines.append("file cycle: " + " <-> ".join(comp) + " (" + "; ".join(why) + ")")
    return lines


def main(argv: list[str]) -> int:
    native = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "native"
    lines = find(native)
    for line in lines:
        print(line)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
