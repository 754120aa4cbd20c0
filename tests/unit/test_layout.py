"""The package's shape: the runtime (pyriver) never imports its tools (pyriver.tools), the imports of
the whole package form no cycle, and what needs no native library imports without one."""
from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from helpers import REPO, child_env

PKG = REPO / "pyriver"


def _module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path):
    """The pyriver modules a file imports anywhere in it (inside functions too)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    modules = {_module_name(p) for p in PKG.rglob("*.py")}
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:   # `from . import x`: the submodule x, else what x is in base
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in out if m in modules and m != name}


def _graph():
    return {_module_name(p): _imports(p) for p in PKG.rglob("*.py")}


def test_runtime_never_imports_tools():
    bad = {m: sorted(i for i in deps if i.startswith("pyriver.tools")) for m, deps in _graph().items()
           if not m.startswith("pyriver.tools")}
    assert not {m: d for m, d in bad.items() if d}


def test_runtime_never_imports_the_server():
    """pyriver.server depends on the runtime, never the reverse (the CLI names it as a string only)."""
    bad = {m: sorted(i for i in deps if i.startswith("pyriver.server")) for m, deps in _graph().items()
           if not m.startswith(("pyriver.server", "pyriver.tools"))}
    assert not {m: d for m, d in bad.items() if d}


def test_only_the_engine_calls_the_native_library():
    """The engine seam (pyriver/engine/): the rest of the runtime computes through an engine, so
    the native library's binding has no importer outside that package."""
    bad = sorted(m for m, deps in _graph().items() if "pyriver.engine.binding" in deps and not m.startswith("pyriver.engine"))
    assert not bad


def _cycle(graph):
    """A cycle of the graph as a list of modules, or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == "open":
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycle():
    assert _cycle(_graph()) is None


def test_the_cycle_finder_finds_one():
    """Control: the walk above would see a cycle."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _in_child(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=str(REPO),
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.parametrize("module", ["pyriver", "pyriver.models", "pyriver.river.sidecar", "pyriver.cli",
                                    "pyriver_dev.synth", "pyriver.tools.gguf_io", "pyriver_dev.corrupt"])
def test_imports_without_the_native_library(module):
    out = _in_child(f"import sys, {module}; print(sorted(m for m in sys.modules if m in "
                    "('pyriver.engine.binding', 'llama_cpp')))")
    assert out.strip() == "[]"
