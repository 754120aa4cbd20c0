"""pyriver.tools.llama_server gets llama.cpp's source from llama-cpp-python's sdist: its download
command must work in a fresh virtual environment (the README's install has no scikit-build-core)."""
from __future__ import annotations

import subprocess
import sys
import tarfile

import llama_cpp
import pytest

from pyriver.tools import llama_server


@pytest.mark.slow
def test_the_sdist_downloads_in_a_fresh_venv(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    py = str(tmp_path / "venv" / "bin" / "python")
    gone = subprocess.run([py, "-c", "import scikit_build_core"], capture_output=True)
    assert gone.returncode != 0   # the fresh venv lacks the sdist's build backend, as a user's does
    dest = tmp_path / "sdist"
    r = subprocess.run(llama_server.sdist_download(py, llama_cpp.__version__, dest), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (tar,) = dest.glob("llama_cpp_python-*.tar.gz")
    with tarfile.open(tar) as t:
        assert f"llama_cpp_python-{llama_cpp.__version__}/vendor/llama.cpp/CMakeLists.txt" in t.getnames()


def test_a_built_binary_that_does_not_start_is_a_clear_error(tmp_path, monkeypatch):
    """The GPU machine's llama-server once built against a newer libstdc++ than the loader found:
    ensure() must say so, not hand the benches a binary that exits 127."""
    exe = tmp_path / "llama-server" / "0" / "build" / "bin" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho 'symbol lookup error: libllama-common.so.0: undefined symbol: _ZX' >&2\nexit 127\n")
    exe.chmod(0o755)
    monkeypatch.setattr(llama_server, "binary", lambda: exe)
    with pytest.raises(RuntimeError, match="does not run: symbol lookup error.*CMakeCache.txt"):
        llama_server.ensure()
    exe.write_text("#!/bin/sh\necho 'version: 0'\n")
    assert llama_server.ensure() == exe
