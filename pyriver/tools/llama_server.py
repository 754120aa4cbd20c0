"""llama.cpp's `llama-server`, the batching anchor of `pyriver bench --serve`: built once, from the
llama.cpp source inside the sdist of the installed llama-cpp-python, against the libggml that
llama-cpp-python installed (LLAMA_USE_SYSTEM_GGML: the kernels pyriver itself runs), into the
cache (`<cache>/llama-server/<version>/`)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from pyriver.models.cache import cache_dir


def _site() -> Path:
    import llama_cpp
    return Path(llama_cpp.__file__).resolve().parent.parent


def binary() -> Path:
    import llama_cpp
    return cache_dir() / "llama-server" / llama_cpp.__version__ / "build" / "bin" / "llama-server"


def sdist_download(python: str, version: str, dest: Path) -> list:
    """The command that downloads llama-cpp-python's sdist. pip prepares its metadata on the way, which
    needs its build backend (scikit-build-core): in pip's isolated build environment, since the
    environment pyriver's README makes does not have it. Only llama-cpp-python as source: with
    `--no-binary :all:` pip also built that backend's own build dependencies from source, cmake
    among them (20 minutes and more on a 2-core machine, against 17 s)."""
    return [python, "-m", "pip", "download", f"llama-cpp-python=={version}", "--no-binary", "llama-cpp-python",
            "--no-deps", "-q", "-d", str(dest)]


def _source(root: Path, version: str) -> Path:
    """The sdist's vendor/llama.cpp, downloaded (pip, from the index pip is set up for) and unpacked once."""
    src = root / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if src.is_dir():
        return src
    dl = root / "sdist"
    subprocess.run(sdist_download(sys.executable, version, dl), check=True)
    tar = next(dl.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(tar) as t:
        t.extractall(root, filter="data")
    return src


def sdist_root() -> Path:
    """llama_cpp_python-<version>/ of the installed llama-cpp-python's sdist, unpacked once into the
    cache: the one copy llama-server's build, the peer suites and the tests read."""
    import llama_cpp
    root = binary().parents[2]
    root.mkdir(parents=True, exist_ok=True)
    return _source(root, llama_cpp.__version__).parents[1]


def check_runs(exe: Path) -> Path:
    """exe, if it starts (`--version`). A binary that the loader cannot run, e.g. built by a C++
    compiler whose libstdc++ is newer than the one the loader finds (CMake's choice of /opt/gcc's g++
    on a GPU machine did it), would make every server bench fail later with an exit status 127 and no reason."""
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        why = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit status {r.returncode}"]
        raise RuntimeError(f"{exe} was built but does not run: {why[0]} (check the C++ compiler that built it, "
                           f"CMAKE_CXX_COMPILER in {exe.parents[1] / 'CMakeCache.txt'}; rebuild with CXX set to the "
                           f"system's, after removing {exe.parents[1]})")
    return exe


def _build(target: str, exe: Path, jobs: int) -> Path:
    """Build one of llama.cpp's targets into the shared build directory (configured once)."""
    import llama_cpp
    root = exe.parents[2]
    root.mkdir(parents=True, exist_ok=True)
    src = _source(root, llama_cpp.__version__)
    build = root / "build"
    print(f"building {target} {llama_cpp.__version__} into {build} (once)", file=sys.stderr)
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    if not (build / "CMakeCache.txt").is_file():
        subprocess.run(["cmake", "-S", str(src), "-B", str(build), *gen, "-DCMAKE_BUILD_TYPE=Release",
                        f"-DCMAKE_PREFIX_PATH={_site()}", "-DLLAMA_USE_SYSTEM_GGML=ON", "-DLLAMA_BUILD_SERVER=ON",
                        "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF",
                        "-DLLAMA_OPENSSL=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
                        f"-DCMAKE_BUILD_RPATH={_site() / 'llama_cpp' / 'lib'}"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build), "--target", target, "-j", str(jobs)], check=True,
                   stdout=subprocess.DEVNULL)
    if not exe.is_file():
        raise RuntimeError(f"{target} build finished without {exe}")
    return check_runs(exe)


def ensure(jobs: int = 2) -> Path:
    """The llama-server binary, built first when the cache has none (minutes; progress on stderr)."""
    exe = binary()
    return check_runs(exe) if exe.is_file() else _build("llama-server", exe, jobs)


def perplexity_binary() -> Path:
    return binary().parent / "llama-perplexity"


def ensure_perplexity(jobs: int = 2) -> Path:
    """llama-perplexity, the KL-divergence referee, built beside llama-server from the same sdist
    and against the same libggml (minutes, once)."""
    exe = perplexity_binary()
    return check_runs(exe) if exe.is_file() else _build("llama-perplexity", exe, jobs)
