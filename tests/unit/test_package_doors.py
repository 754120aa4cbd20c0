"""Each package of pyriver says in its __init__ what it may import ("May import: pyriver.x, ...");
its modules import nothing else of pyriver (their own package aside). The runtime never imports the
server or the tools."""
import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "pyriver"
DECLARED = ["api", "text", "speculative", "river", "chat", "engine", "models"]


def allowed(pkg: str) -> set:
    doc = ast.get_docstring(ast.parse((PKG / pkg / "__init__.py").read_text())) or ""
    m = re.search(r"May import:(.*)", doc, re.S)
    assert m, f"pyriver/{pkg}/__init__.py does not say what it may import"
    return set(re.findall(r"\bpyriver\.(\w+)", m.group(1))) | {pkg}


def imported(path: Path) -> set:
    """The pyriver subpackages/modules (first component) a module imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for n in names:
            parts = n.split(".")
            if parts[0] == "pyriver" and len(parts) > 1 and (PKG / parts[1]).exists() or \
                    parts[0] == "pyriver" and len(parts) > 1 and (PKG / f"{parts[1]}.py").exists():
                out.add(parts[1])
    return out


def violations(pkg: str) -> list:
    ok = allowed(pkg)
    return [("pyriver/" + p.relative_to(PKG).as_posix(), sorted(imported(p) - ok))
            for p in sorted((PKG / pkg).rglob("*.py")) if imported(p) - ok]


@pytest.mark.parametrize("pkg", DECLARED)
def test_a_package_imports_what_its_door_declares(pkg):
    assert violations(pkg) == []


def test_the_runtime_never_imports_the_server_or_the_tools():
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG).parts
        if rel[0] in ("server", "tools", "cli"):
            continue
        assert not imported(p) & {"server", "tools"}, p


def test_the_check_sees_an_undeclared_import(tmp_path, monkeypatch):
    (tmp_path / "river").mkdir()
    (tmp_path / "river" / "__init__.py").write_text('"""River.\nMay import: pyriver.models."""\n')
    (tmp_path / "river" / "x.py").write_text("from pyriver.api.llama import Llama\n")
    (tmp_path / "api").mkdir()
    monkeypatch.setattr(__import__(__name__), "PKG", tmp_path)
    assert violations("river") == [("pyriver/river/x.py", ["api"])]
