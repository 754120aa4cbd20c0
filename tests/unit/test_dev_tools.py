"""pyriver_dev/ (the writers of test files, the fuzzers, the checks only the tests run) stays out of
the wheel: the wheel ships the package `pyriver` alone, and pyriver imports pyriver_dev only inside
the two functions that write a missing synthetic model (bench --systems, the server suite), which
say to run from a checkout when it is not there."""
import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAZY = {"pyriver/tools/systems.py", "pyriver/tools/server_suite.py"}


def test_the_wheel_ships_pyriver_alone():
    text = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^wheel\.packages = \["pyriver"\]$', text, re.M), "pyproject.toml: wheel.packages"
    assert (REPO / "pyriver_dev" / "__init__.py").is_file()


def _dev_uses(tree: ast.AST) -> list:
    """(line, at module level) of each import of pyriver_dev (messages and docstrings may name it)."""
    out = []

    def visit(node, top):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, top) for a in node.names if a.name.split(".")[0] == "pyriver_dev")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "pyriver_dev":
            out.append((node.lineno, top))
        for child in ast.iter_child_nodes(node):
            visit(child, top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, True)
    return out


def test_pyriver_imports_pyriver_dev_only_lazily_where_it_writes_a_synthetic_model():
    users = {}
    for p in sorted((REPO / "pyriver").rglob("*.py")):
        rel = p.relative_to(REPO).as_posix()
        text = p.read_text()
        uses = _dev_uses(ast.parse(text))
        if re.search(r'import_module\(f?"pyriver_dev', text):   # by name: inside a function (checked above)
            uses.append((0, False))
        if uses:
            users[rel] = uses
    assert set(users) <= LAZY, sorted(set(users) - LAZY)
    assert not [(f, line) for f, uses in users.items() for line, top in uses if top]


def test_the_check_sees_a_module_level_import():
    assert _dev_uses(ast.parse("from pyriver_dev import synth\n")) == [(1, True)]
    assert _dev_uses(ast.parse("def f():\n    import pyriver_dev.synth\n")) == [(2, False)]


def test_bench_systems_without_pyriver_dev_says_to_run_from_a_checkout(monkeypatch, tmp_path):
    from pyriver.tools import systems
    monkeypatch.setitem(sys.modules, "pyriver_dev", None)   # as an installed wheel has it: absent
    with pytest.raises(SystemExit, match="from a checkout"):
        systems._synth(tmp_path / "m.gguf")


def test_the_server_suite_without_pyriver_dev_says_to_run_from_a_checkout(monkeypatch):
    from pyriver.tools import server_suite
    monkeypatch.setitem(sys.modules, "pyriver_dev", None)
    with pytest.raises(SystemExit, match="from a checkout"):
        server_suite._dev("gguf_split", "the split model")
