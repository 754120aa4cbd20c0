"""docs/architectures.md's list of every architecture llama.cpp knows stays true: its native ones are
native/arch.cpp's builders (each also in the llama.cpp engine suite, NATIVE), its tested ones the
llama.cpp engine suite's synthetic files (FOREIGN, synth_foreign.ARCHS), and all three lists together are LLM_ARCH_NAMES of the installed
llama-cpp-python's llama.cpp (src/llama-arch.cpp of its sdist, where the cache has it unpacked)."""
from __future__ import annotations

import ast
import re

import pytest

from helpers import REPO

SECTION = "## Every architecture llama.cpp knows"
LABELS = ("native", "llama.cpp engine, tested with a synthetic file", "llama.cpp engine, untested")
NOT_MODELS = {"clip", "(unknown)"}   # llama-quantize's dummy, and the unknown architecture's name


def doc_lists(text: str) -> dict:
    """{label: [names]} of the section's bold-labelled lists; each list's count must be its length."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + 1)
    body = text[start:end if end > 0 else None]
    out = {}
    for m in re.finditer(r"^\*\*(.+?)\*\* \((\d+)\): (.*?)(?=\n\n|\Z)", body, re.S | re.M):
        names = re.findall(r"`([^`]+)`", m.group(3))
        assert len(names) == int(m.group(2)), f"{m.group(1)}: says {m.group(2)}, lists {len(names)}"
        out[m.group(1)] = names
    return out


def llama_cpp_arch_names(arch_cpp: str) -> list:
    block = arch_cpp[arch_cpp.index("LLM_ARCH_NAMES = {"):]
    block = block[:block.index("\n};")]
    return [n for n in re.findall(r'\{\s*LLM_ARCH_\w+,\s*"([^"]+)"\s*\}', block) if n not in NOT_MODELS]


def engine_suite_keys(name: str = "FOREIGN") -> set:
    """The keys of a dict the llama.cpp engine suite parametrizes over (FOREIGN, NATIVE)."""
    tree = ast.parse((REPO / "tests" / "runtime" / "test_engine_llamacpp.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"no {name} in test_engine_llamacpp.py")


@pytest.fixture(scope="module")
def lists():
    out = doc_lists((REPO / "docs" / "architectures.md").read_text())
    assert tuple(out) == LABELS
    for label, names in out.items():
        assert len(set(names)) == len(names), f"{label}: a name twice"
    return out


def test_native_list_is_pyriver_builders(lists):
    builders = re.findall(r'entry\("([^"]+)"', (REPO / "native" / "arch.cpp").read_text())
    assert builders and sorted(lists["native"]) == sorted(builders)


def test_native_list_runs_on_both_engines(lists):
    """Each native architecture is in the llama.cpp engine suite too (NATIVE: engine="llama.cpp")."""
    assert set(lists["native"]) == engine_suite_keys("NATIVE")


def test_tested_list_is_the_suites_synthetic_files(lists):
    from pyriver_dev.synth_foreign import ARCHS
    assert set(lists[LABELS[1]]) == set(ARCHS) == engine_suite_keys()


def test_lists_are_llama_cpps_architectures(lists):
    import llama_cpp
    from pyriver.tools import llama_server
    # where sdist_root() unpacks it (without downloading it here)
    src = (llama_server.binary().parents[2] / f"llama_cpp_python-{llama_cpp.__version__}" / "vendor" / "llama.cpp"
           / "src" / "llama-arch.cpp")
    if not src.is_file():
        pytest.skip(f"llama-cpp-python's sdist is not unpacked ({src})")
    text = (REPO / "docs" / "architectures.md").read_text()
    assert f"llama-cpp-python {llama_cpp.__version__}'s" in text[text.index(SECTION):]
    names = llama_cpp_arch_names(src.read_text())
    listed = [n for label in LABELS for n in lists[label]]
    assert len(listed) == len(set(listed)), "an architecture in two lists"
    assert not set(names) - set(listed), f"llama.cpp's, not in the doc: {sorted(set(names) - set(listed))}"
    assert not set(listed) - set(names), f"in the doc, not llama.cpp's: {sorted(set(listed) - set(names))}"


def test_the_parsers_see_a_change():
    doc = f"{SECTION}\n\nText.\n\n**native** (2): `llama`\n`qwen2`\n\n**b** (1): `x-y`\n\n## Next\n\n**c** (1): `z`\n"
    assert doc_lists(doc) == {"native": ["llama", "qwen2"], "b": ["x-y"]}
    with pytest.raises(AssertionError, match="says 2, lists 3"):
        doc_lists(doc.replace("`qwen2`", "`qwen2` `falcon`"))
    arch_cpp = 'static const std::map<llm_arch, const char *> LLM_ARCH_NAMES = {\n    { LLM_ARCH_CLIP, "clip" },\n' \
               '    { LLM_ARCH_LLAMA, "llama" },\n    { LLM_ARCH_OPENAI_MOE, "gpt-oss" },\n};\n'
    assert llama_cpp_arch_names(arch_cpp) == ["llama", "gpt-oss"]
