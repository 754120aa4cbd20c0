"""The README's and docs/'s runnable parts: every relative link resolves (file, and heading for an
#anchor, GitHub's slugs), every `pyriver ...` command in a ```bash block parses with the CLI's own
argparse parsers (nothing runs), every path in the layout table exists, and every ```python block of
the README runs on the default model (slow). A block that cannot run here carries
`<!-- docs-test: skip (reason) -->` on the line above it."""
from __future__ import annotations

import argparse
import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from helpers import REPO, child_env

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((.+?)\)\s*-->")
FENCE = re.compile(r"^(```|~~~)\s*([\w+-]*)\s*$")


# ------------------------------------------------------------------ markdown

def blocks(text: str) -> List[Tuple[str, str, int, Optional[str]]]:
    """(language, code, first line number, skip reason) of each fenced block."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(m.group(1)):
            j += 1
        prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        skip = SKIP.search(prev)
        out.append((m.group(2).lower(), "\n".join(lines[i + 1:j]), i + 2, skip.group(1) if skip else None))
        i = j + 1
    return out


def outside_fences(text: str) -> List[str]:
    keep, fenced = [], None
    for line in text.splitlines():
        m = FENCE.match(line.strip())
        if fenced is None and m:
            fenced = m.group(1)
        elif fenced is not None and line.strip().startswith(fenced):
            fenced = None
        elif fenced is None:
            keep.append(line)
    return keep


def prose(text: str) -> str:
    """The text outside fenced blocks and inline code (where links are links)."""
    return "\n".join(re.sub(r"`[^`]*`", "", line) for line in outside_fences(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but - and _ removed,
    spaces to hyphens."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())   # a link's text
    t = t.replace("`", "").replace("*", "").lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors(text: str) -> set:
    """The anchors of a page's headings (repeats get -1, -2 ... as on GitHub)."""
    seen: Dict[str, int] = {}
    out = set()
    for line in outside_fences(text):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def broken_links(page: Path, text: str) -> List[str]:
    bad = []
    for target in LINK.findall(prose(text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):   # http:, https:, mailto:
            continue
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else None
        if dest is not None and not dest.exists():
            bad.append(f"{page.name}: {target} (no such file)")
        elif frag and (dest is None or dest.suffix == ".md") and \
                frag not in anchors(text if dest is None else dest.read_text()):
            bad.append(f"{page.name}: {target} (no heading #{frag})")
    return bad


# ------------------------------------------------------------------ commands

SEPARATORS = {"&&", "||", ";", "|", "&"}


def commands(code: str) -> List[List[str]]:
    """The `pyriver ...` and `python -m pyriver.server ...` commands of a bash block, as argv lists."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split, lex.commenters = True, "#"
        cmd: List[str] = []
        for tok in list(lex) + [";"]:
            if tok not in SEPARATORS:
                cmd.append(tok)
                continue
            while cmd and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[0]):   # VAR=value before the command
                cmd.pop(0)
            if cmd[:1] == ["pyriver"] or cmd[:3] == ["python", "-m", "pyriver.server"]:
                out.append(cmd)
            cmd = []
    return out


def parse(cmd: List[str]) -> argparse.Namespace:
    """Parses a command with the parser the command itself uses; argparse errors are SystemExit."""
    from pyriver import cli
    from pyriver import models
    from pyriver import server
    if cmd[0] == "python":
        return server.settings(server.parser().parse_args(cmd[3:]))
    sub, rest = (cmd[1], cmd[2:]) if len(cmd) > 1 else ("", [])
    if sub == "serve":
        return server.settings(server.parser().parse_args(rest))
    if sub == "bench":   # bench.main's routing: llama-bench's lists go to the grid's parser
        from pyriver.tools import grid_args
        if grid_args.wants_grid(rest):
            return grid_args.parse(rest)
    if sub in cli.TOOLS:
        return importlib.import_module(cli.TOOLS[sub][0]).parser().parse_args(rest)
    a = cli.parser().parse_args(cmd[1:])
    if sub == "models":
        models.parser().parse_args(a.rest)
    return a


def doc_commands() -> List[Tuple[str, List[str]]]:
    out = []
    for page in PAGES:
        for lang, code, line, _ in blocks(page.read_text()):
            if lang in ("bash", "sh", "shell"):
                out += [(f"{page.relative_to(REPO)}:{line}", c) for c in commands(code)]
    return out


# ------------------------------------------------------------------ tests

def test_relative_links_resolve():
    bad = [b for page in PAGES for b in broken_links(page, page.read_text())]
    assert not bad, "\n".join(bad)


def test_the_link_check_finds_broken_links(tmp_path):
    """Control: a missing file and a missing heading are reported, good ones are not."""
    (tmp_path / "other.md").write_text("# Set-up: two `commands`\n## Set-up: two commands\n")
    page = tmp_path / "page.md"
    text = ("# Top\n[a](other.md#set-up-two-commands) [b](other.md#set-up-two-commands-1) [c](#top)\n"
            "[d](missing.md) [e](other.md#nope) [f](#gone) [g](https://example.com/x)\n"
            "```\n[h](not-a-link-in-code.md)\n```\n")
    assert broken_links(page, text) == ["page.md: missing.md (no such file)", "page.md: other.md#nope (no heading #nope)",
                                        "page.md: #gone (no heading #gone)"]


def test_documented_commands_parse():
    found = doc_commands()
    subs = {c[1] if c[0] == "pyriver" else "python -m pyriver.server" for _, c in found}
    # The pages show every command; an extractor that found none would pass vacuously.
    assert {"run", "chat", "serve", "bench", "eval", "sweep", "calibrate", "models", "rpc-server"} <= subs, subs
    bad = []
    for where, cmd in found:
        try:
            parse(cmd)
        except SystemExit as e:
            if e.code:   # --help exits 0
                bad.append(f"{where}: {shlex.join(cmd)}")
        except ValueError as e:   # pyriver serve's own checks (e.g. --tau without --river)
            bad.append(f"{where}: {shlex.join(cmd)}: {e}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("line", [
    "pyriver run 'Hi' --no-such-flag",
    "pyriver bench --repeats",
    "pyriver bench -p 1-4+0",
    "pyriver sweep --river q4_0 --tau x",
    "CMAKE_ARGS=x pip install . && pyriver serve --tau 0.9",
    "pyriver models fetch",
    "python -m pyriver.server --batch-rule nope",
])
def test_the_command_check_rejects_bad_arguments(line, capsys):
    """Control: each of these is refused by the parser the check uses."""
    (cmd,) = commands(line)
    with pytest.raises((SystemExit, ValueError)):
        parse(cmd)


def test_commands_are_split_as_a_shell_splits_them():
    code = ('CMAKE_ARGS="-DA=on -DB" pip install . && pyriver run --chat "What is a river?"   # note\n'
            "pyriver bench -t 2 --rpc-servers 127.0.0.1:1,127.0.0.1:2 \\\n    --n-gpu-layers -1\n"
            "python -m pyriver_dev.fuzz --cases 3; python -m pyriver.server M.gguf --port 8000\n")
    assert commands(code) == [["pyriver", "run", "--chat", "What is a river?"],
                              ["pyriver", "bench", "-t", "2", "--rpc-servers", "127.0.0.1:1,127.0.0.1:2",
                               "--n-gpu-layers", "-1"],
                              ["python", "-m", "pyriver.server", "M.gguf", "--port", "8000"]]


def _layout_paths() -> List[str]:
    """The paths in the first column of docs/design.md's layout table (`a`, `b` share a's folder)."""
    rows = re.findall(r"^\| (`[^|]+`) \|", (REPO / "docs" / "design.md").read_text(), re.M)
    out = []
    for cell in rows:
        names = re.findall(r"`([^`]+)`", cell)
        folder = str(Path(names[0]).parent) if "/" in names[0] else ""
        out += [names[0]] + [n if "/" in n.rstrip("/") else f"{folder}/{n}" for n in names[1:]]
    return out


def test_layout_table_paths_exist():
    paths = _layout_paths()
    assert len(paths) > 40, paths
    missing = [p for p in paths if not (REPO / p).exists()]
    assert not missing, missing


def test_readme_test_command_is_what_ci_runs():
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    readme = [c for lang, c, _, _ in blocks((REPO / "README.md").read_text()) if lang == "bash"]
    assert any(ci in c for c in readme), ci


def readme_python() -> List[Tuple[int, str, Optional[str]]]:
    return [(line, code, skip) for lang, code, line, skip in blocks((REPO / "README.md").read_text())
            if lang == "python"]


def test_skips_are_rare_and_give_reasons():
    blocks_ = readme_python()
    assert len(blocks_) >= 4
    skips = [s for _, _, s in blocks_ if s is not None]
    assert all(len(s) > 10 for s in skips) and len(skips) <= 2, skips


@pytest.mark.slow
@pytest.mark.parametrize("line,code,skip", readme_python(), ids=[f"README.md:{b[0]}" for b in readme_python()])
def test_readme_python_block_runs(line, code, skip, smol_path, tmp_path):
    """Each block in a fresh interpreter, in an empty folder, on the default model."""
    if skip:
        pytest.skip(skip)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(tmp_path),
                       env=child_env(), timeout=600)
    assert r.returncode == 0, f"README.md:{line}\n{r.stderr[-3000:]}"
