"""llama.cpp's own server tests (`tools/server/tests` of the llama.cpp inside llama-cpp-python's
sdist) run once against `llama-server` and once against `pyriver serve`, on the same local GGUF
files, each test reported side by side: passed by llama-server, by pyriver, both, neither, N/A.

The suite's `utils.ServerProcess` builds a llama-server command line and fetches its models from
the Hugging Face hub. Here its binary is a shim (`python -m pyriver.tools.server_suite shim
llama|pyriver ...`): the hub and URL model flags become the local GGUF files, and for pyriver the
flags map onto `pyriver serve` (a flag `pyriver serve` knows passes unchanged; one that changes
nothing served is dropped; any other passes too, so `pyriver serve` refuses it and the test fails,
which is the truth). No network: the suite's downloads are answered with the local files.

Tests whose expected text belongs to the suite's usual models (stories260K ...) fail on both and
drop out by themselves ("neither"). Tests of llama-server's own internals are N/A (NA below). The
suite's multimodal model, ggml-org/tinygemma3-GGUF, is the local synthetic one (synth_mmproj): its
text model, and its projector as the hub would hand it with the model (--mmproj, unless --no-mmproj).
The suite's split model (test_load_split_model) is a local split in three shards (_split_source).

  python -m pyriver.tools.server_suite --server both --json out.json [--files test_basic ...]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Optional

from pyriver.models.cache import cache_dir
from pyriver.tools import llama_server

FILES = ["test_basic", "test_security", "test_completion", "test_chat_completion", "test_tokenize",
         "test_embedding", "test_rerank", "test_infill", "test_tool_call", "test_ctx_shift", "test_template",
         "test_speculative", "test_compat_oai_responses", "test_stream", "test_ignore_eos", "test_vision_api",
         "test_compat_anthropic", "test_compat_gcp", "test_metrics", "test_sleep", "test_kv_keep_only_active",
         "test_slot_save", "test_lora", "test_router"]

# (file, test name regex, reason): llama-server's own internals, no part of the OpenAI-style API. What
# a client sees and pyriver lacks is no N/A: it is a gap (tests/tools/server_suite_gaps.json)
NA = [
    ("test_basic", r"test_no_ui$", "llama-server's web UI (--no-ui)"),
    ("test_security", r"test_access_static_assets_without_api_key$", "llama-server's web UI assets"),
    ("test_security", r"test_cors_origins_defaults_to_localhost_with_tools_enabled|test_cors_proxy_.*",
     "llama-server's built-in tools and CORS proxy"),
]

# llama-server flags that take no value (everything else the suite passes takes one)
_BOOL = {"--offline", "--cont-batching", "--embedding", "--reranking", "--metrics", "--kv-unified", "--swa-full",
         "--slots", "--no-slots", "--verbose", "--context-shift", "--no-ui", "--no-models-autoload", "--jinja",
         "--no-jinja", "--no-mmproj", "--no-cache-idle-slots", "--ui-mcp-proxy", "--backend_sampling"}
# flags that change nothing a client can see of pyriver (speed knobs, llama-server's own switches)
_DROP = {"--offline", "--cont-batching", "--batch-size", "--ubatch-size", "--swa-full",
         "--no-jinja", "--no-mmproj", "--n-gpu-layers"}
_MODEL = {"--model", "--hf-repo", "--hf-file", "--model-url"}
_MMPROJ = {"--mmproj", "--mmproj-url"}


# -- the suite's files ---------------------------------------------------------------------------
def _version() -> str:
    import llama_cpp
    return llama_cpp.__version__


def suite_dir() -> Path:
    """<cache>/server-suite/<version>/llama.cpp/tools/server/tests, extracted once with the chat
    templates (models/templates) the tests name by relative path."""
    version = _version()
    root = cache_dir() / "server-suite" / version / "llama.cpp"
    tests = root / "tools" / "server" / "tests"
    if (tests / "utils.py").is_file():
        _media(root)   # a copy extracted before the multimodal tests ran has no image
        return tests
    src = llama_server.sdist_root() / "vendor" / "llama.cpp"
    for sub in ("tools/server/tests", "models/templates"):
        shutil.copytree(src / sub, root / sub, dirs_exist_ok=True)
    _media(root)
    return tests


def _media(root: Path) -> None:
    """The image test_security's --media-path tests read (tools/mtmd/test-1.jpeg, "../../../tools" from the tests)."""
    img = root / "tools" / "mtmd" / "test-1.jpeg"
    if not img.is_file():
        img.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(llama_server.sdist_root() / "vendor" / "llama.cpp" / "tools" / "mtmd" / "test-1.jpeg", img)


# -- the shims: the suite's command line, local models, pyriver's flags -------------------------------
def _split(argv: List[str]) -> List[List[str]]:
    out, i = [], 0
    while i < len(argv):
        flag = argv[i]
        if flag in _BOOL or i + 1 >= len(argv):
            out.append([flag])
            i += 1
        else:
            out.append([flag, argv[i + 1]])
            i += 2
    return out


def _model_names(pairs: List[List[str]]) -> str:
    return " ".join(p[1] for p in pairs if p[0] in _MODEL and len(p) > 1).lower()


def _dev(name: str, what: str):
    """A module of pyriver_dev (the repository's writers of test files, not in the wheel)."""
    import importlib
    try:
        importlib.import_module("pyriver_dev")
    except ModuleNotFoundError as e:
        if e.name != "pyriver_dev":
            raise
        raise SystemExit(f"server_suite: {what} is written by pyriver_dev.{name}, which is in pyriver's "
                         "repository, not in the installed package: run the suite from a checkout (its "
                         "root on PYTHONPATH)") from None
    return importlib.import_module(f"pyriver_dev.{name}")


def tinygemma3() -> List[str]:
    """[text model, mmproj] of the local tinygemma3, written into the cache once."""
    ensure_tinygemma3 = _dev("synth_mmproj", "the local tinygemma3").ensure_tinygemma3
    models = cache_dir() / "models"
    return list(ensure_tinygemma3(cache_dir() / "synthetic" / "tinygemma3", models / "gemma-3-270m-q4_k_m.gguf"))


def split_model(src: str) -> str:
    """The first of three shards of src (pyriver_dev.gguf_split), written into the cache once."""
    import gguf
    from pyriver.engine.shards import shard_name
    split = _dev("gguf_split", "the split model").split
    prefix = cache_dir() / "synthetic" / "split" / Path(src).stem
    shards = [Path(shard_name(str(prefix), i, 3)) for i in range(3)]
    if not all(p.is_file() for p in shards):
        prefix.parent.mkdir(parents=True, exist_ok=True)
        split(src, str(prefix), max_tensors=-(-len(gguf.GGUFReader(src, "r").tensors) // 3))
    return str(shards[0])


def _split_source() -> str:
    """What the suite's split model is a split of: Qwen2.5-Coder 1.5B when cached (never fetched here:
    1.1 GB), whose greedy answer to "Hello" has the "girl" that test_load_split_model expects of
    stories15M; else the local model."""
    qwen = cache_dir() / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    return str(qwen) if qwen.is_file() else _local_model([])


def _local_model(pairs: List[List[str]]) -> str:
    names = _model_names(pairs)
    models = cache_dir() / "models"
    if "tinygemma3" in names:
        return tinygemma3()[0]
    if re.search(r"-\d{5}-of-\d{5}\.gguf", names):   # a split model (test_load_split_model's stories15M)
        return split_model(_split_source())
    if "gemma" in names:
        return str(models / "gemma-3-270m-q4_k_m.gguf")
    return os.environ.get("PYRIVER_SUITE_MODEL") or str(models / "SmolLM2-135M-Instruct.Q4_1.gguf")


def _projector(pairs: List[List[str]]) -> List[str]:
    """The --mmproj the hub would hand with the model (tinygemma3's, unless --no-mmproj), or the
    local file for a projector named by URL; none otherwise."""
    flags = {p[0] for p in pairs}
    if "--mmproj-url" in flags or ("tinygemma3" in _model_names(pairs) and "--no-mmproj" not in flags
                                   and "--mmproj" not in flags):
        return ["--mmproj", tinygemma3()[1]]
    return []


def llama_args(argv: List[str]) -> List[str]:
    pairs = _split(argv)
    out = ["--model", _local_model(pairs), *_projector(pairs)]
    for p in pairs:
        if p[0] == "--model-draft":
            p = [p[0], _local_model([])]
        if p[0] not in _MODEL and p[0] not in ("--offline", "--mmproj-url"):
            out += p
    return out


def pyriver_args(argv: List[str]) -> List[str]:
    from pyriver.server import parser
    known = parser()._option_string_actions
    pairs = _split(argv)
    out = [_local_model(pairs), *_projector(pairs)]
    n_par = next((int(p[1]) for p in pairs if p[0] in ("--parallel", "-np")), None)
    for p in pairs:
        flag = p[0]
        if flag in _MODEL or flag == "--mmproj-url" or flag in known and flag in _DROP:
            continue
        if flag in known:
            out += p
        elif flag == "--ctx-size":   # pyriver's --ctx is each slot's; llama-server's -c all slots'
            out += ["--ctx", str(int(p[1]) // (n_par or 1))]
        elif flag == "--threads":
            out += ["-t", p[1]]
        elif flag not in _DROP and not os.environ.get("PYRIVER_SUITE_LENIENT"):
            out += p   # pyriver serve refuses what it does not know: the test fails, as it should
    # llama-server decodes without drafts unless told: pyriver serve too, the same configuration
    # (pyriver's default n-gram drafts are measured against llama-server's by `pyriver bench --spec-serve`)
    return out + ["--no-lossless"]


def shim(kind: str, argv: List[str]) -> int:
    if kind == "llama":
        cmd = [str(llama_server.binary()), *llama_args(argv)]
    else:
        cmd = [sys.executable, "-m", "pyriver.server", *pyriver_args(argv)]
    print("shim:", " ".join(cmd), flush=True)
    os.execv(cmd[0], cmd)
    return 1


# -- running pytest ------------------------------------------------------------------------------
_PLUGIN = '''"""Loaded by pyriver.tools.server_suite: no hub, no downloads, a time limit per test."""
import os, signal, pytest

def pytest_configure(config):
    import utils
    utils.ServerPreset.load_all = staticmethod(lambda: None)
    model = os.environ["PYRIVER_SUITE_LOCAL_MODEL"]
    def download_file(url, output_file_path=None):
        if url.endswith(".gguf"):
            return model
        raise RuntimeError(f"no network: {url}")
    utils.download_file = download_file

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    def boom(*_):
        raise TimeoutError("the test ran past its time limit")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(int(os.environ.get("PYRIVER_SUITE_TIMEOUT", "180")))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
'''

_WGET = '''def download(url, out=None):
    raise RuntimeError(f"no network: {url}")
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(kind: str, files: List[str], work: Path, lock: Optional[str], timeout: int, extra: List[str]) -> Dict[str, str]:
    """{test id: passed | failed | skipped} of the files against one server kind."""
    tests = suite_dir()
    plug = work / "plugin"
    plug.mkdir(parents=True, exist_ok=True)
    (plug / "pyriver_suite_plugin.py").write_text(_PLUGIN)
    try:
        import wget  # noqa: F401
    except ImportError:
        (plug / "wget.py").write_text(_WGET)
    exe = work / f"server-{kind}"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m pyriver.tools.server_suite shim {kind} \"$@\"\n")
    exe.chmod(0o755)
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, LLAMA_SERVER_BIN_PATH=str(exe), PYTHONPATH=os.pathsep.join(
        [str(plug), str(tests), str(repo), os.environ.get("PYTHONPATH", "")]),
        PYRIVER_SUITE_LOCAL_MODEL=_local_model([]), PYRIVER_SUITE_TIMEOUT=str(timeout), LLAMA_CACHE=str(work / "cache"))
    results: Dict[str, str] = {}
    for f in files:
        env["PORT"] = str(_free_port())
        xml = work / f"{kind}-{f}.xml"
        xml.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "pyriver_suite_plugin", "-m", "not slow", "-p", "no:cacheprovider",
               f"--junitxml={xml}", f"unit/{f}.py", *extra]
        if lock:
            cmd = ["flock", lock, *cmd]
        print(f"[{kind}] {f}", file=sys.stderr, flush=True)
        with open(work / f"{kind}-{f}.log", "w") as log:
            subprocess.run(cmd, cwd=tests, env=env, stdout=log, stderr=subprocess.STDOUT)
        results.update(_junit(xml, f))
    return results


def _junit(xml: Path, f: str) -> Dict[str, str]:
    if not xml.is_file():
        return {f"{f}::<collection>": "failed"}
    out = {}
    for tc in ET.parse(xml).getroot().iter("testcase"):
        tags = {c.tag for c in tc}
        state = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        out[f"{f}::{tc.get('name')}"] = "failed" if state == "failed" or out.get(f"{f}::{tc.get('name')}") == "failed" \
            else state
    return out


def na_reason(test_id: str) -> Optional[str]:
    f, name = test_id.split("::", 1)
    for nf, pat, why in NA:
        if nf == f and re.match(pat, name):
            return why
    return None


def compare(llama: Dict[str, str], pyr: Dict[str, str]) -> Dict:
    rows = []
    for t in sorted(set(llama) | set(pyr)):
        a, b = llama.get(t, "absent"), pyr.get(t, "absent")
        why = na_reason(t)
        if why:
            verdict = "N/A"
        elif a == "passed" and b == "passed":
            verdict = "both"
        elif a == "passed":
            verdict = "llama-server only"
        elif b == "passed":
            verdict = "pyriver only"
        elif "skipped" in (a, b):
            verdict = "skipped"
        else:
            verdict = "neither"
        rows.append({"test": t, "llama_server": a, "pyriver": b, "verdict": verdict, "na": why})
    counts: Dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    return {"rows": rows, "counts": counts,
            "llama_server_passed": sum(r["llama_server"] == "passed" for r in rows),
            "pyriver_passed": sum(r["pyriver"] == "passed" for r in rows),
            "missing": [r["test"] for r in rows if r["verdict"] == "llama-server only"]}


def table(cmp: Dict) -> str:
    lines = [f"{'test':<90} {'llama-server':<12} {'pyriver':<8} verdict"]
    for r in cmp["rows"]:
        lines.append(f"{r['test'][:90]:<90} {r['llama_server']:<12} {r['pyriver']:<8} {r['verdict']}"
                     + (f" ({r['na']})" if r["na"] else ""))
    lines.append("counts: " + ", ".join(f"{k} {v}" for k, v in sorted(cmp["counts"].items())))
    lines.append(f"passed: llama-server {cmp['llama_server_passed']}, pyriver {cmp['pyriver_passed']}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["shim"]:
        return shim(argv[1], argv[2:])
    p = argparse.ArgumentParser(prog="python -m pyriver.tools.server_suite", description=__doc__.split("\n\n")[0])
    p.add_argument("--server", choices=["llama", "pyriver", "both"], default="both")
    p.add_argument("--files", nargs="*", default=FILES, help="suite files (default: the OpenAI-relevant ones)")
    p.add_argument("--work", default=None, help="folder for logs and results (default <cache>/server-suite/run)")
    p.add_argument("--json", default=None, help="write the side-by-side results here")
    p.add_argument("--lock", default=None, help="run each pytest under flock LOCK")
    p.add_argument("--timeout", type=int, default=180, help="seconds one test may run")
    p.add_argument("--load", default=None, help="results JSON of an earlier run: reuse its side for a server not run")
    p.add_argument("-k", default=None, help="pytest -k expression")
    p.add_argument("--lenient", action="store_true", help="drop the flags pyriver serve does not know instead of "
                   "passing them (it would refuse to start): what its endpoints do, whatever its command line")
    a = p.parse_args(argv)
    work = Path(a.work) if a.work else cache_dir() / "server-suite" / "run"
    work.mkdir(parents=True, exist_ok=True)
    extra = ["-k", a.k] if a.k else []
    if a.lenient:
        os.environ["PYRIVER_SUITE_LENIENT"] = "1"
    prev = json.loads(Path(a.load).read_text()) if a.load else {"rows": []}
    res = {"llama": {r["test"]: r["llama_server"] for r in prev["rows"]},
           "pyriver": {r["test"]: r["pyriver"] for r in prev["rows"]}}
    if a.server in ("llama", "both"):
        from pyriver.tools import llama_server
        if not llama_server.binary().is_file():
            print("llama-server is not built: python -c 'from pyriver.tools import llama_server; "
                  "llama_server.ensure()'", file=sys.stderr)
            return 2
    for f in a.files:   # file by file, both servers: an interrupted run still compares what it ran
        for kind in (["llama", "pyriver"] if a.server == "both" else [a.server]):
            res[kind].update(run(kind, [f], work, a.lock, a.timeout, extra))
        if a.json:
            Path(a.json).write_text(json.dumps(compare(res["llama"], res["pyriver"]), indent=1))
    cmp = compare(res["llama"], res["pyriver"])
    print(table(cmp))
    if a.json:
        Path(a.json).write_text(json.dumps(cmp, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
