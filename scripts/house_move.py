"""One-off: move pyriver's flat modules into packages by concern and rewrite every import and
dotted/path reference (issue 73). Run from the repository root: python3 scripts/house_move.py"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# old module -> new module (a module that becomes a package's __init__ keeps its name)
MAP = {
    "pyriver.args": "pyriver.cli.args",
    "pyriver.backends": "pyriver.engine.backends",
    "pyriver.batch": "pyriver.api.batch",
    "pyriver.cache": "pyriver.models.cache",
    "pyriver.chat": "pyriver.text.chat_template",
    "pyriver.chat_api": "pyriver.api.chat",
    "pyriver.chat_app": "pyriver.chat.app",
    "pyriver.completion": "pyriver.text.completion",
    "pyriver.completion_api": "pyriver.api.completion",
    "pyriver.costcurve": "pyriver.speculative.costcurve",
    "pyriver.ctor_args": "pyriver.api.ctor_args",
    "pyriver.debug": "pyriver.engine.debug",
    "pyriver.draft": "pyriver.speculative.draft",
    "pyriver.draftlen": "pyriver.speculative.draftlen",
    "pyriver.embedding": "pyriver.api.embedding",
    "pyriver.fetch": "pyriver.models.fetch",
    "pyriver.generation": "pyriver.api.generation",
    "pyriver.grammar": "pyriver.text.grammar",
    "pyriver.hub": "pyriver.models.hub",
    "pyriver.infill": "pyriver.text.infill",
    "pyriver.llama": "pyriver.api.llama",
    "pyriver.llama_api": "pyriver.api.low_level",
    "pyriver.logprobs": "pyriver.text.logprobs",
    "pyriver.lossless": "pyriver.speculative.lossless",
    "pyriver.native": "pyriver.engine.binding",
    "pyriver.pretrained": "pyriver.models.pretrained",
    "pyriver.river": "pyriver.river.stats",
    "pyriver.rpc": "pyriver.engine.rpc",
    "pyriver.sampling": "pyriver.engine.sampling",
    "pyriver.sampling_chain": "pyriver.text.sampling_chain",
    "pyriver.schema_gbnf": "pyriver.text.schema_gbnf",
    "pyriver.shards": "pyriver.models.shards",
    "pyriver.sidecar": "pyriver.river.sidecar",
    "pyriver.state": "pyriver.api.state",
    "pyriver.structured": "pyriver.text.structured",
    "pyriver.toolcall": "pyriver.text.toolcall",
    "pyriver.vocab": "pyriver.engine.vocab",
    "pyriver.widerows": "pyriver.engine.widerows",
    # modules that become their package's __init__ (same dotted name)
    "pyriver.models": "pyriver.models",
    "pyriver.cli": "pyriver.cli",
}
SHIMS = ["pyriver.backends", "pyriver.rpc", "pyriver.debug"]   # re-exports: deleted
PKG_INIT = {"pyriver.models": "pyriver/models/__init__.py", "pyriver.cli": "pyriver/cli/__init__.py"}
PACKAGES = {
    "api": "Llama and its parts: the high-level API as llama-cpp-python shapes it, composed over an engine "
           "context.\nMay import: pyriver.engine, pyriver.text, pyriver.speculative, pyriver.river, pyriver.models, "
           "pyriver.errors.",
    "text": "Text in and out of the model: chat templates, grammars and JSON schemas, structured output, tool "
            "calls, stop strings and UTF-8, logprobs, fill-in-the-middle, llama-cpp-python's sampler chain.\n"
            "May import: pyriver.engine (its vocab and samplers), pyriver.errors.",
    "speculative": "Lossless (speculative) decoding: drafters, the draft length by cost, the verify-cost "
                   "curve.\nMay import: pyriver.engine, pyriver.text, pyriver.models (cache), pyriver.errors.",
    "river": "River: exit statistics and the sidecar files of river blocks (building and binding them is "
             "pyriver.engine.river's).\nMay import: pyriver.models (cache), pyriver.errors.",
    "chat": "`pyriver chat`: the interactive terminal chat.\nMay import: pyriver.api, pyriver.cli, "
            "pyriver.speculative.",
}
# python files whose own location changes (old path -> new path)
OLD_FILES = {m: m.replace(".", "/") + ".py" for m in MAP}
NEW_FILES = {m: (PKG_INIT[n] if n in PKG_INIT and m == n else n.replace(".", "/") + ".py") for m, n in MAP.items()}


def git(*a):
    subprocess.run(["git", *a], cwd=ROOT, check=True)


def resolve_relative(pkg: str, dots: int, name: str) -> str:
    parts = pkg.split(".")
    base = parts[: len(parts) - (dots - 1)]
    return ".".join(base + ([name] if name else []))


def map_module(mod: str) -> str:
    """The new dotted name of an old module (or of an attribute path below one)."""
    best = None
    for old in MAP:
        if mod == old or mod.startswith(old + "."):
            if best is None or len(old) > len(best):
                best = old
    return mod if best is None else MAP[best] + mod[len(best):]


def is_module(mod: str) -> bool:
    p = ROOT / (mod.replace(".", "/"))
    return mod in MAP or p.with_suffix(".py").exists() or (p / "__init__.py").exists()


FROM_RE = re.compile(r"^(\s*)from\s+(\.+|pyriver\b)([\w.]*)\s+import\s+(.*)$")
IMPORT_RE = re.compile(r"^(\s*)import\s+(pyriver\.[\w.]+)(\s+as\s+\w+)?\s*$")


def rewrite_python(text: str, old_module: str | None, is_pkg: bool) -> str:
    """Import lines rewritten as imports (absolute), every other line's references as text: one
    pass over the old names only (new package names such as pyriver.river.* must not be mapped again)."""
    pkg = None
    if old_module:
        pkg = old_module if is_pkg else old_module.rsplit(".", 1)[0]
    out = []
    for line in text.split("\n"):
        m = FROM_RE.match(line)
        if m:
            ind, lead, rest, names = m.groups()
            if lead.startswith("."):
                if pkg is None:
                    out.append(line)
                    continue
                base = resolve_relative(pkg, len(lead), rest)
            else:
                base = "pyriver" + rest
            names_s = names.strip()
            if not names_s.startswith("(") and not names_s.endswith("\\"):
                items = [x.strip() for x in names_s.split("#")[0].split(",") if x.strip()]
                comment = ("  #" + names_s.split("#", 1)[1]) if "#" in names_s else ""
                mods, attrs = [], []
                for it in items:
                    nm, _, alias = it.partition(" as ")
                    nm, alias = nm.strip(), alias.strip()
                    if is_module(base + "." + nm) and (base + "." + nm) in MAP:
                        mods.append((nm, alias))
                    else:
                        attrs.append(it)
                lines = []
                if attrs:
                    lines.append(f"{ind}from {map_module(base)} import {', '.join(attrs)}")
                for nm, alias in mods:
                    new = map_module(base + "." + nm)
                    parent, leaf = new.rsplit(".", 1)
                    a = alias or nm
                    lines.append(f"{ind}from {parent} import {leaf}" + (f" as {a}" if a != leaf else ""))
                if lines:
                    lines[0] += comment
                out.extend(lines)
                continue
            out.append(f"{ind}from {map_module(base)} import {names}")
            continue
        m = IMPORT_RE.match(line)
        if m:
            ind, mod, alias = m.groups()
            out.append(f"{ind}import {map_module(mod)}{alias or ''}")
            continue
        out.append(rewrite_refs(line))
    return "\n".join(out)


DOTTED_RE = re.compile(r"\bpyriver\.(" + "|".join(sorted((k.split('.', 1)[1] for k in MAP), key=len, reverse=True)) + r")\b(?![/\w])")
PATH_RE = re.compile(r"\bpyriver/(" + "|".join(sorted((k.split('.', 1)[1] for k in MAP), key=len, reverse=True)) + r")\.py\b")


def rewrite_refs(text: str) -> str:
    text = DOTTED_RE.sub(lambda m: map_module("pyriver." + m.group(1)), text)
    return PATH_RE.sub(lambda m: NEW_FILES["pyriver." + m.group(1)], text)


def main():
    # 1. rewrite imports in every python file, knowing its old module name
    pyfiles = [p for p in ROOT.rglob("*.py") if ".git" not in p.parts and "build" not in p.parts
               and not any(x.startswith(".") for x in p.relative_to(ROOT).parts)]
    for p in pyfiles:
        rel = p.relative_to(ROOT).as_posix()
        old_module = None
        is_pkg = False
        if rel.startswith("pyriver/"):
            old_module = rel[:-3].replace("/", ".")
            if old_module.endswith(".__init__"):
                old_module, is_pkg = old_module[:-9], True
        t = p.read_text()
        t2 = rewrite_python(t, old_module, is_pkg) if p.name != "house_move.py" else t
        if t2 != t:
            p.write_text(t2)
    # 2. other text files: dotted names and paths
    for pat in ("*.md", "*.sh", "*.toml", "*.txt", "*.tsv", "*.cfg", "*.ini", "*.yml", "*.yaml", "run"):
        for p in ROOT.rglob(pat):
            if ".git" in p.parts or any(x.startswith(".") and x not in (".ci",) for x in p.relative_to(ROOT).parts):
                continue
            if "results" in p.parts or p.suffix == ".json":
                continue
            t = p.read_text()
            t2 = rewrite_refs(t)
            if t2 != t:
                p.write_text(t2)
    # 3. move the files
    for pkg, doc in PACKAGES.items():
        d = ROOT / "pyriver" / pkg
        d.mkdir(exist_ok=True)
    for old, new in MAP.items():
        if old in SHIMS:
            git("rm", "-q", "-f", OLD_FILES[old])
            continue
        src, dst = OLD_FILES[old], NEW_FILES[old]
        if src == dst:
            continue
        (ROOT / dst).parent.mkdir(parents=True, exist_ok=True)
        git("mv", src, dst)
    for pkg, doc in PACKAGES.items():
        init = ROOT / "pyriver" / pkg / "__init__.py"
        if not init.exists():
            init.write_text('"""' + doc + '"""\n')
            git("add", init.relative_to(ROOT).as_posix())


if __name__ == "__main__":
    main()
