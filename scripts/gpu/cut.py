"""The GPU run's cargo, made here (on the CPU machine) before any device call.

The device tool carries at most 64 MiB of the working tree per call (tracked files, untracked
files git does not ignore, and the ignored paths named in `carry`), so what the device needs and
cannot fetch travels in git-ignored folders `.ferry01/`, `.ferry02/` ..., one folder per call, each
holding at most `--cap` MiB (default 62) minus what the tracked tree (and, in call 1, .gpu-vocab) weighs:

  kit      the prebuilt CUDA llama-cpp-python (../shared/gpu/prebuilt/lcp.*), the wheels the GPU
           image lacks (cffi, pycparser, gguf, diskcache for pyriver; starlette, uvicorn for
           `pyriver serve`), ../shared/gpu/build.sh, and llama-cpp-python's sdist trimmed to what
           the CUDA build (fallback) and llama-server's build need (`src.tar.gz`)
  models   the 1.5B Q4_K_M first (xz -0 stream: about 8% fewer bytes, so one call fewer), then, in
           the calls after its last piece, SmolLM2 Q4_1 and Gemma 3 270M (optional calls)

The cargo is one byte stream cut at call boundaries: call 1 holds the kit and the first slice of
the 1.5B. Every folder holds `ferry.json`, the whole manifest (each cargo's size and sha256, each
piece's call, size and sha256); `scripts/gpu/run.sh ferry` on the device appends what its call
carried and assembles and checks each file whose pieces are all there.

  python3 scripts/gpu/cut.py kit      # .gpu-kit/ (seconds: wheels via pip, source trimmed) and .gpu-vocab/vocab.gguf
  python3 scripts/gpu/cut.py cut      # .ferryNN/ from .gpu-kit/ and the models (xz: ~2 min once)
  python3 scripts/gpu/cut.py plan     # calls, bytes per call, device-time estimate
  python3 scripts/gpu/cut.py check    # each call's weight now (tree + its folder) against 64 MiB

`cut` reuses compressed streams and pieces already written (checked by size and sha256), so
re-running it after the tree grew re-cuts without compressing again."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

MiB = 1 << 20
LIMIT = 64 * MiB            # the device tool's limit per call
ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / ".gpu-kit"
VOCAB = ROOT / ".gpu-vocab" / "vocab.gguf"   # carried with call 1: (f)'s synthetic model's tokenizer
STREAMS = ROOT / ".gpu-streams"   # compressed model streams (git-ignored; made once)
MODELS = Path(os.environ.get("PYRIVER_CACHE", Path.home() / ".cache" / "pyriver")) / "models"
Q15 = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"
WHEELS = ["cffi", "pycparser", "gguf", "diskcache", "starlette", "uvicorn"]
VERSION = "0.3.36"


def shared_gpu() -> Path:
    for p in (ROOT.parent / "shared" / "gpu", ROOT.parents[1] / "shared" / "gpu", Path("/work/shared/gpu")):
        if (p / "prebuilt").is_dir():
            return p
    raise SystemExit("../shared/gpu/prebuilt not found")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 22):
            h.update(b)
    return h.hexdigest()


def tree_weight() -> int:
    """Bytes of what a call carries besides its folders: tracked files and untracked ones git does
    not ignore (as the device tool counts them)."""
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         check=True, capture_output=True).stdout
    total = 0
    for name in out.split(b"\0"):
        p = ROOT / os.fsdecode(name)
        if name and p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


# --- kit -------------------------------------------------------------------------------------

TRIM = ["docs", "docker", "tests", "scripts", ".github", "vendor/llama.cpp/docs", "vendor/llama.cpp/media",
        "vendor/llama.cpp/models", "vendor/llama.cpp/tests", "vendor/llama.cpp/benches",
        "vendor/llama.cpp/conversion", "vendor/llama.cpp/gguf-py", "vendor/llama.cpp/examples",
        "vendor/llama.cpp/pocs", "vendor/llama.cpp/ci", "vendor/llama.cpp/skills", "vendor/llama.cpp/requirements",
        "vendor/llama.cpp/.github", "vendor/llama.cpp/.devops"]
GGML_KEEP = {"ggml-cpu", "ggml-cuda", "ggml-rpc", "ggml-blas"}
UI_KEEP = {"CMakeLists.txt", "sources.cmake", "ui.cpp.in", "ui.h.in", "scripts"}


def sdist_tree(dest: Path) -> Path:
    """llama-cpp-python's sdist unpacked under dest, trimmed: no docs, tests, model files, the
    ggml backends other than CPU/CUDA/RPC, llama.cpp's web UI sources (LLAMA_BUILD_UI=OFF)."""
    cached = Path.home() / ".cache" / "pyriver" / "llama-server" / VERSION / "sdist"
    tars = sorted(cached.glob(f"llama_cpp_python-{VERSION}.tar.gz"))
    if not tars:
        from pyriver.tools.llama_server import sdist_download  # the one command (an sdist, its build deps as wheels)
        subprocess.run(sdist_download(sys.executable, VERSION, dest), check=True)
        tars = sorted(dest.glob(f"llama_cpp_python-{VERSION}.tar.gz"))
    with tarfile.open(tars[0]) as t:
        t.extractall(dest, filter="data")
    src = dest / f"llama_cpp_python-{VERSION}"
    for rel in TRIM:
        shutil.rmtree(src / rel, ignore_errors=True)
    shutil.rmtree(src / ".git", ignore_errors=True)
    shutil.rmtree(src / "vendor" / "llama.cpp" / ".git", ignore_errors=True)
    for d in (src / "vendor/llama.cpp/ggml/src").iterdir():
        if d.is_dir() and d.name.startswith("ggml-") and d.name not in GGML_KEEP:
            shutil.rmtree(d)
    for d in (src / "vendor/llama.cpp/tools/ui").iterdir():
        if d.name not in UI_KEEP:
            shutil.rmtree(d) if d.is_dir() else d.unlink()
    # the batched example server (pyriver bench --serve --competitor without --chat) stays
    ex = src / "examples"
    if ex.is_dir():
        for d in ex.iterdir():
            if d.name != "server":
                shutil.rmtree(d) if d.is_dir() else d.unlink()
    return src


IGNORED = ["/.gpu-kit/", "/.gpu-vocab/", "/.gpu-streams/", "/.ferry*/"]


def ensure_ignored() -> None:
    """The cargo folders must be ignored by git in this checkout (else every call would carry all of
    them as untracked files): .gitignore has them from this branch on; older checkouts get them in
    .git/info/exclude."""
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--git-path", "info/exclude"], check=True,
                         capture_output=True, text=True).stdout.strip()
    ex = Path(out) if os.path.isabs(out) else ROOT / out
    have = ex.read_text().split("\n") if ex.exists() else []
    missing = [p for p in IGNORED if p not in have]
    if missing:
        ex.parent.mkdir(parents=True, exist_ok=True)
        with open(ex, "a") as f:
            f.write("".join(p + "\n" for p in missing))


def kit(a) -> None:
    ensure_ignored()
    sg = shared_gpu()
    if KIT.exists():
        shutil.rmtree(KIT)
    (KIT / "prebuilt").mkdir(parents=True)
    for f in sorted((sg / "prebuilt").iterdir()):
        shutil.copy2(f, KIT / "prebuilt" / f.name)
        os.chmod(KIT / "prebuilt" / f.name, 0o644)
    shutil.copy2(sg / "build.sh", KIT / "build.sh")
    os.chmod(KIT / "build.sh", 0o755)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp",
                    "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                    "--platform", "manylinux2014_x86_64", "-d", str(KIT / "wheels"), *WHEELS], check=True)
    with tempfile.TemporaryDirectory() as t:
        src = sdist_tree(Path(t))
        # build.sh reads this name (tar -xzf)
        with tarfile.open(KIT / f"llama_cpp_python-{VERSION}-trim.tar.gz", "w:gz", compresslevel=9) as tf:
            tf.add(src, arcname=src.name)
    for p in sorted(KIT.rglob("*")):
        if p.is_file():
            print(f"{p.stat().st_size:>12,}  {p.relative_to(ROOT)}")
    print(f"{sum(p.stat().st_size for p in KIT.rglob('*') if p.is_file()):>12,}  kit")
    vocab()
    print(f"{VOCAB.stat().st_size:>12,}  {VOCAB.relative_to(ROOT)}")


def vocab() -> None:
    """.gpu-vocab/vocab.gguf: SmolLM2's tokenizer alone (its GGUF's tokenizer.* keys, no tensors).
    exit_profile.py's synthetic 8B copies it on the device, where pyriver's default model (the
    tokenizer it would take otherwise) is not in the cache and cannot be fetched."""
    sys.path.insert(0, str(ROOT))
    from gguf import GGUFValueType
    from pyriver.tools.gguf_io import KV, Plan, write_plan
    from pyriver_dev.synth import _tokenizer_kv
    kv = {"general.architecture": KV("llama", GGUFValueType.STRING)}
    kv.update(_tokenizer_kv(MODELS / SMOL))
    VOCAB.parent.mkdir(exist_ok=True)
    tmp = VOCAB.with_suffix(".tmp")
    write_plan(tmp, Plan(kv=kv))
    tmp.replace(VOCAB)


# --- cut -------------------------------------------------------------------------------------

def xz_stream(model: Path) -> Path:
    """The model as one xz -0 stream (multi-block: the device decompresses it on all cores), made once."""
    STREAMS.mkdir(exist_ok=True)
    out = STREAMS / (model.name + ".xz")
    stamp = out.with_suffix(".xz.src")
    key = f"{model.stat().st_size} {model.stat().st_mtime_ns}"
    if out.exists() and stamp.exists() and stamp.read_text() == key:
        return out
    tmp = out.with_suffix(".xz.tmp")
    print(f"compressing {model.name} (xz -0 -T2, block 16 MiB) ...", flush=True)
    with open(model, "rb") as fi, open(tmp, "wb") as fo:
        subprocess.run(["xz", "-0", "-T2", "--block-size=16MiB", "-c"], stdin=fi, stdout=fo, check=True)
    tmp.replace(out)
    stamp.write_text(key)
    return out


def cargo(a) -> list:
    """[(name, source path, bytes to carry (path), dest, compressed)] in ferry order."""
    items = []
    for p in sorted(KIT.rglob("*")):
        if p.is_file():
            rel = p.relative_to(KIT).as_posix()
            items.append({"name": "kit/" + rel, "carry": p, "dest": "kit/" + rel, "xz": False})
    models = [Q15] + ([SMOL, GEMMA] if a.small else [])
    for m in models:
        src = MODELS / m
        c = xz_stream(src) if a.xz else src
        items.append({"name": m, "carry": c, "dest": "models/" + m, "xz": a.xz, "source": src})
    return items


def verified_sha(src: Path) -> str:
    v = src.with_name(src.name + ".verified")
    if v.exists():
        rec = json.loads(v.read_text())
        if rec.get("size") == src.stat().st_size:
            return rec["sha256"]
    return sha256(src)


def cut(a) -> None:
    ensure_ignored()
    if not KIT.is_dir():
        raise SystemExit("no .gpu-kit/: run `python3 scripts/gpu/cut.py kit` first")
    tree = tree_weight()
    cap = int(a.cap * MiB) - tree - int(a.slack * MiB)
    items = cargo(a)
    manifest = {"cap_bytes": cap, "tree_bytes_at_cut": tree, "calls": 0, "cargo": [], "pieces": []}
    if not VOCAB.exists():
        raise SystemExit("no .gpu-vocab/vocab.gguf: run `python3 scripts/gpu/cut.py kit` first")
    call, room, pieces = 1, cap - VOCAB.stat().st_size, []   # call 1 carries .gpu-vocab beside .ferry01
    for it in items:
        size = it["carry"].stat().st_size
        rec = {"name": it["name"], "dest": it["dest"], "xz": it["xz"], "carry_bytes": size,
               "carry_sha256": sha256(it["carry"])}
        if "source" in it:
            rec["bytes"] = it["source"].stat().st_size
            rec["sha256"] = verified_sha(it["source"])
        manifest["cargo"].append(rec)
        off, k = 0, 0
        while off < size:
            if room <= 0:
                call, room = call + 1, cap
            n = min(room, size - off)
            base = it["name"].replace("/", "__")
            pieces.append({"cargo": it["name"], "file": f"{base}.{k:03d}", "call": call, "offset": off, "bytes": n,
                           "src": str(it["carry"])})
            off, room, k = off + n, room - n, k + 1
    manifest["calls"] = call
    # write (or keep) each piece
    old = {}
    for d in ROOT.glob(".ferry[0-9][0-9]"):
        for f in d.iterdir():
            old[f.name] = f
    for p in pieces:
        d = ROOT / f".ferry{p['call']:02d}"
        d.mkdir(exist_ok=True)
        dst = d / p["file"]
        with open(p["src"], "rb") as f:
            f.seek(p["offset"])
            data = f.read(p["bytes"])
        p["sha256"] = hashlib.sha256(data).hexdigest()
        prev = old.get(p["file"])
        if prev is not None and prev.resolve() != dst.resolve() and prev.stat().st_size == p["bytes"]:
            prev.replace(dst)
        if not (dst.exists() and dst.stat().st_size == p["bytes"] and sha256(dst) == p["sha256"]):
            tmp = dst.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(dst)
        del p["src"]
    manifest["pieces"] = pieces
    keep = {f".ferry{p['call']:02d}/{p['file']}" for p in pieces}
    for d in ROOT.glob(".ferry[0-9][0-9]"):
        for f in d.iterdir():
            if f.name != "ferry.json" and f"{d.name}/{f.name}" not in keep:
                f.unlink()
        if int(d.name[6:]) > call:
            shutil.rmtree(d)
    for c in range(1, call + 1):
        (ROOT / f".ferry{c:02d}" / "ferry.json").write_text(json.dumps(dict(manifest, this_call=c), indent=1))
    write_calls(max(p["call"] for p in pieces if p["cargo"] == Q15))
    plan(a)


def write_calls(last: int) -> None:
    """scripts/gpu/calls.tsv: the device calls in order (the README's table; rehearse.sh runs them)."""
    rows = ["# call\ttimeout_s\tcarry\tcommand   (written by cut.py; scripts/gpu/README.md explains them)",
            "1\t300\t.ferry01,.gpu-vocab\tbash scripts/gpu/run.sh setup"]
    rows += [f"{c}\t120\t.ferry{c:02d}\tbash scripts/gpu/run.sh ferry" for c in range(2, last)]
    rows += [f"{last}\t600\t.ferry{last:02d}\tbash scripts/gpu/run.sh ferry derive full plane",
             f"{last + 1}\t600\t-\tbash scripts/gpu/run.sh spec serve drafts profile counts gaps"]
    (ROOT / "scripts" / "gpu" / "calls.tsv").write_text("\n".join(rows) + "\n")


def plan(a) -> None:
    calls = sorted(ROOT.glob(".ferry[0-9][0-9]"))
    if not calls:
        raise SystemExit("no .ferryNN/: run cut first")
    m = json.loads((calls[0] / "ferry.json").read_text())
    tree = tree_weight()
    print(f"tree (tracked + untracked not ignored): {tree / MiB:.2f} MiB; cap per call {a.cap} MiB; "
          f"pieces per call at most {m['cap_bytes'] / MiB:.2f} MiB")
    last_of = {}
    for p in m["pieces"]:
        last_of[p["cargo"]] = p["call"]
    for c in m["cargo"]:
        extra = f" ({c['bytes']:,} bytes as a file)" if "bytes" in c else ""
        print(f"  {c['name']:<58} {c['carry_bytes']:>13,} carried{extra}, last piece in call {last_of[c['name']]}")
    worst = 0
    for d in calls:
        w = tree + sum(f.stat().st_size for f in d.iterdir()) + vocab_bytes(d)
        worst = max(worst, w)
        names = sorted({p["cargo"].split("/")[0] for p in m["pieces"] if p["call"] == int(d.name[6:])})
        print(f"  call {d.name[6:]}: {w / MiB:6.2f} MiB carried ({', '.join(names)})")
    need = last_of.get(Q15, 0)
    print(f"calls to carry the kit and the 1.5B: {need}; all cargo: {m['calls']}")
    print(f"heaviest call {worst / MiB:.2f} MiB of the tool's {LIMIT // MiB} MiB")


def vocab_bytes(d: Path) -> int:
    """Bytes a call carries besides the tree and its .ferryNN: call 1's .gpu-vocab."""
    return VOCAB.stat().st_size if d.name == ".ferry01" and VOCAB.exists() else 0


def check(a) -> int:
    tree = tree_weight()
    bad = 0
    for d in sorted(ROOT.glob(".ferry[0-9][0-9]")):
        w = tree + sum(f.stat().st_size for f in d.iterdir()) + vocab_bytes(d)
        ok = w <= LIMIT - MiB // 2
        bad += not ok
        print(f"{d.name}: {w / MiB:6.2f} MiB {'ok' if ok else 'OVER THE LIMIT: re-run cut.py cut'}")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["kit", "cut", "plan", "check"])
    ap.add_argument("--cap", type=float, default=62.0,
                    help="MiB a call carries in all (tree and call 1's .gpu-vocab included; the tool takes 64)")
    ap.add_argument("--slack", type=float, default=0.25, help="MiB left for the tree to grow")
    ap.add_argument("--no-xz", dest="xz", action="store_false", help="carry the model files as they are")
    ap.add_argument("--no-small", dest="small", action="store_false", help="leave out SmolLM2 and Gemma 3 270M")
    a = ap.parse_args()
    return {"kit": kit, "cut": cut, "plan": plan, "check": check}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
