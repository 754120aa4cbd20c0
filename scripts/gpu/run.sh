#!/usr/bin/env bash
# The GPU run of issue 69 (before it, issue 42's): the 1.5B Q4_K_M with real weights, fully offloaded,
# 15 minutes of device time, one stage per argument, from the repository root on the device (the
# device tool's `run`; $OUT comes back):
#
#   bash scripts/gpu/run.sh STAGE [STAGE ...] [--dry-run]
#
#   setup    (call 1, carries .ferry01) the kit out of the ferry, the prebuilt CUDA llama-cpp-python
#            unpacked and checked (llama_supports_gpu_offload, ggml's CUDA devices), libcublas.so.13 found
#            for LD_LIBRARY_PATH; in the background: pyriver installed over it, then llama-server built
#            from the kit's sdist (or, when the prebuilt does not load, ../shared/gpu/build.sh's CUDA
#            build from source, then pyriver, then llama-server), and the synthetic 8B of `profile`
#   ferry    (calls 2..N, each carries its .ferryNN) appends this call's pieces; assembles and checks by
#            sha256 each file whose pieces are all there; reports the background jobs
#   derive   the 1.5B's uniform requantizations (q4_0 iq4_nl q3_k_m iq3_s q3_K q2_K) and its q3_K and q2_K
#            rivers, all at once on the machine's cores
#   full     (a) full depth against llama.cpp, decode and prefill (bench --paired: one process, steps
#            alternated), mul_mat and flash attention
#   plane    (d) the speed-fidelity plane: rivers q3_K and q2_K over tau against the uniform files, top-1
#            agreement with the published file; then the exit rules at one point
#   spec     (b) pyriver serve as it starts with no flags (n-gram drafts and the draft store in memory:
#            "pyriver default"), with --no-draft-store and with --no-lossless (plain), against llama-server
#            plain and --spec-type ngram-simple, ngram-mod and ngram-cache; code edits and chat, 1 stream
#   serve    (c) pyriver serve --no-lossless (plain decoding: no drafts, no store) against plain llama-server
#            at 4 and 16 streams (aggregate tok/s, p50/p95 inter-token latency)
#   drafts   (e) River drafts verified at full depth on chat against plain decoding (bench --lossless)
#   counts   (issue 69 item 2) bench --counts on the device: syncs, copies, graph changes, bytes and
#            whether they land in pinned memory per mode (the CPU counts in docs/gpu.md, checked on CUDA)
#   gaps     serve's requests against a traced pyriver serve --no-lossless (scripts/serve_gaps.py): where
#            its long inter-token gaps come from (its p95 was 1.41x and 1.33x llama-server's at 4 and 16
#            streams on 2026-12-04), its prompts in chunks of 64 beside decoding slots (the default) and
#            whole (--prompt-chunk 2048: llama-server's feeding), then over llama.cpp's graph (--engine
#            llama.cpp); each step's graph changes by ggml-cuda's rule; a diagnosis, last in its call
#   profile  (f) a synthetic Llama 3.1 8B shape (F16: bandwidth-bound on the GPU) with the 1.5B's exit
#            profile measured on the H200 (docs/results/gpu/qwen1.5b/plane.json), River against full depth
#            (scripts/gpu/exit_profile.py)
#
# Each stage writes $OUT/<stage>.json and its output into $OUT/call.log (one log for the call's stages:
# a call brings back at most 8 files, so up to 7 stages a call) and stays under STAGE_S seconds (280);
# the stages of one call end within CALL_S seconds (570) of its start, inside the call's timeout_s 600.
# State lives in $GK_STATE (/tmp/gk): a warm machine keeps it between calls; nothing is read from a
# carried folder after the call that carried it.
# --dry-run (or GK_DRY=1): every measuring command printed, its inputs checked, nothing measured.
# GK_CPU=1 (the CPU rehearsal, scripts/gpu/rehearse.sh): no GPU asked for, n_gpu_layers 0, tiny sizes,
# the models named by GK_Q4KM (default: SmolLM2 Q4_1 from the ferry).
set -uo pipefail
DRY=${GK_DRY:-0}
STAGES=()
for x in "$@"; do
  case $x in --dry-run) DRY=1 ;; *) STAGES+=("$x") ;; esac
done
[ ${#STAGES[@]} -gt 0 ] || { sed -n 2,40p "$0"; exit 2; }
[ "$DRY" = 1 ] || [ ${#STAGES[@]} -le 7 ] || { echo "at most 7 stages a call (7 JSONs and call.log: the device tool brings back 8 files)"; exit 2; }
: "${OUT:?OUT is not set (the device tool sets it; the rehearsal sets its own)}"
REPO=$PWD
S=${GK_STATE:-/tmp/gk}
CPU=${GK_CPU:-0}
export SITE=$S/site PYRIVER_CACHE=$S/cache PYTHONUNBUFFERED=1
export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH PYRIVER_LIB_DIR=$SITE/pyriver
MODELS=$PYRIVER_CACHE/models
mkdir -p "$S"/{ferry,bg,results,kit} "$MODELS" "$SITE" "$OUT"
[ -f "$S/env.sh" ] && . "$S/env.sh"
V=0.3.36
Q15=$MODELS/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
SMOL=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
Q4KM=${GK_Q4KM:-$([ "$CPU" = 1 ] && echo "$SMOL" || echo "$Q15")}
Q8=${Q4KM%.gguf}.q8_0.gguf
Q8=${Q8/q4_k_m.q8_0/q8_0}
STAGE_S=${STAGE_S:-280}
CALL_END=$(( $(date +%s) + ${CALL_S:-570} ))   # the whole call ends inside the run's timeout_s (600)
NPROC=$(nproc)
if [ "$CPU" = 1 ]; then
  NGL=0; T=${THREADS:-2}
  FULL="--prompt-tokens 32 --gen-tokens 8 -r 1"
  PLANE="--tau 0.95 --min-exit-layer 4 --limit 2 -n 8 -r 1"
  PREDICT="--tau 0.95 --min-exit-layer 4 --limit 2 -n 8 -r 1"
  SPEC="-r 1 --streams 1 --gen-tokens 8 --edit-prompts 1 --chat-prompts 1"
  SERVE="-r 1 --streams 1 4 --gen-tokens 8 --requests-per-stream 1"
  GAPS="--streams 4 --repeats 1 --gen-tokens 8 --requests-per-stream 1"
  DRAFTS="--tau 0.95 --min-exit-layer 4 --draft-max 4 --prompts 1 --gen-tokens 8 -r 1"
  PROFILE="--tokens 16 -r 1"
  COUNTS="-n 8"
else
  NGL=-1; T=${THREADS:-4}
  FULL="-r 5"
  PLANE="--tau 0.95 0.97 0.985 --min-exit-layer 4 --limit 8 -n 48 -r 3"
  PREDICT="--tau 0.97 --min-exit-layer 4 --limit 4 -n 48 -r 3"
  SPEC="-r 2 --streams 1 --gen-tokens 128 --edit-prompts 4 --chat-prompts 4"   # 2 rounds: one was too noisy on 2026-12-04
  SERVE="-r 2 --streams 4 16 --gen-tokens 128 --requests-per-stream 2"
  GAPS="--streams 4 16 --repeats 2 --gen-tokens 128 --requests-per-stream 2"   # serve's requests, traced
  DRAFTS="--tau 0.95 0.97 --min-exit-layer 4 --draft-max 4 8 --prompts 4 --gen-tokens 96 -r 3"
  PROFILE="--tokens 96 -r 3"
  COUNTS="-n 16"
fi
FULL=${GK_FULL:-$FULL}; PLANE=${GK_PLANE:-$PLANE}; PREDICT=${GK_PREDICT:-$PREDICT}; SPEC=${GK_SPEC:-$SPEC}; SERVE=${GK_SERVE:-$SERVE}
GAPS=${GK_GAPS:-$GAPS}
DRAFTS=${GK_DRAFTS:-$DRAFTS}; PROFILE=${GK_PROFILE:-$PROFILE}; COUNTS=${GK_COUNTS:-$COUNTS}
RIVERS="q3_K q2_K"                         # (d): the rivers over the published Q4_K_M
UNIFORM="q4_0 iq4_nl q3_k_m iq3_s"   # (d): llama.cpp's requantizations of the same file (the rivers' own types: the sweep adds q3_K and q2_K).
# iq3_xxs is not among them: llama.cpp 0.3.36 quantizes an IQ3_XXS tensor only with an importance matrix
# (llama-quant.cpp tensor_requires_imatrix; refused on the H200, 2026-12-04, and on the CPU for the 1.5B); iq3_s,
# the i-quant of 3 bits that needs none, stands for it (accepted for the 1.5B on the CPU, 2026-12-05).
DRAFT_RIVER=q3_K                           # (e)
SYNTH=$PYRIVER_CACHE/synthetic             # (f): written in the background from setup on
SYNTH_SIZE=$([ "$CPU" = 1 ] && echo tiny || echo 8b)
PR="python3 -m pyriver.cli"

now() { date +%s; }
T0=$(now)
say() { echo "=== [$(( $(now) - T0 ))s] $*"; }
json() { python3 - "$@"; }   # small JSON writers below

# --- the ferry: pieces in, whole files out ------------------------------------------------------
ferry_collect() {
  local d n=0
  for d in "$REPO"/.ferry[0-9][0-9]; do
    [ -d "$d" ] || continue
    cp "$d/ferry.json" "$S/ferry/ferry.json"
    echo "${d##*/}" >> "$S/ferry/calls.txt"
    for f in "$d"/*; do
      case ${f##*/} in ferry.json) continue ;; esac
      [ -f "$S/ferry/${f##*/}" ] || { cp "$f" "$S/ferry/${f##*/}.part" && mv "$S/ferry/${f##*/}.part" "$S/ferry/${f##*/}"; n=$((n + 1)); }
    done
  done
  say "ferry: $n new pieces"
}

ferry_assemble() {   # every cargo whose pieces are all here and whose file is not yet made
  python3 - "$S" "$PYRIVER_CACHE" <<'PY'
import hashlib, json, os, subprocess, sys, time
S, cache = sys.argv[1], sys.argv[2]
mpath = os.path.join(S, "ferry", "ferry.json")
if not os.path.exists(mpath):
    print("no ferry.json yet"); json.dump({"pieces_here": 0}, open(os.path.join(S, "ferry", "state.json"), "w")); sys.exit(0)
m = json.load(open(mpath))
here = set(os.listdir(os.path.join(S, "ferry")))
state = {"calls": m["calls"], "cargo": {}, "missing_calls": sorted({p["call"] for p in m["pieces"] if p["file"] not in here})}
def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 24):
            h.update(b)
    return h.hexdigest()
bad = 0
for c in m["cargo"]:
    ps = [p for p in m["pieces"] if p["cargo"] == c["name"]]
    dest = os.path.join(S, c["dest"]) if c["dest"].startswith("kit/") else os.path.join(cache, c["dest"])
    st = {"pieces": len(ps), "here": sum(p["file"] in here for p in ps), "dest": dest}
    mark = os.path.join(S, "ferry", "checked", c["name"].replace("/", "__"))
    if os.path.exists(dest) and os.path.exists(mark):
        st["ok"] = True
    elif st["here"] == len(ps):
        t = time.time()
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        tmp = dest + ".tmp"
        cat = subprocess.Popen(["cat"] + [os.path.join(S, "ferry", p["file"]) for p in ps], stdout=subprocess.PIPE)
        with open(tmp, "wb") as out:
            if c["xz"]:
                subprocess.run(["xz", "-dc", "-T0"], stdin=cat.stdout, stdout=out, check=True)
            else:
                subprocess.run(["cat"], stdin=cat.stdout, stdout=out, check=True)
        cat.wait()
        want = c.get("sha256") or c["carry_sha256"]
        got = sha(tmp)
        st["ok"] = got == want
        st["sha256"] = got
        st["seconds"] = round(time.time() - t, 1)
        if st["ok"]:
            os.replace(tmp, dest)
            os.makedirs(os.path.dirname(mark), exist_ok=True)
            open(mark, "w").write(got)
            if not c["dest"].startswith("kit/"):   # the pieces of a model are no longer needed
                for p in ps:
                    os.remove(os.path.join(S, "ferry", p["file"]))
        else:
            bad += 1
            print(f"SHA256 MISMATCH {c['name']}: {got} != {want}")
    state["cargo"][c["name"]] = st
    if not c["dest"].startswith("kit/"):
        print(f"{c['name']:<45} {st['here']}/{st['pieces']} pieces" + (f"  assembled, sha256 {'ok' if st.get('ok') else 'BAD'}" if 'ok' in st else ""))
json.dump(state, open(os.path.join(S, "ferry", "state.json"), "w"), indent=1)
sys.exit(1 if bad else 0)
PY
}

bg_status() {
  local f
  for f in "$S"/bg/*.status; do [ -f "$f" ] && echo "background ${f##*/}: $(cat "$f")"; done
  [ -f "$S/bg/log" ] && { echo "--- background log (tail)"; tail -5 "$S/bg/log"; }
}

# --- setup -------------------------------------------------------------------------------------
find_lib() {   # the folder holding $1, or nothing
  local d
  for d in ${LD_LIBRARY_PATH//:/ } /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
    [ -e "$d/$1" ] && { echo "$d"; return; }
  done
  d=$(python3 -c "import glob,site,sys; ps=[p for s in site.getsitepackages() for p in glob.glob(s+'/nvidia/*/lib/$1')]; print(ps[0].rsplit('/',1)[0] if ps else '')" 2>/dev/null)
  [ -n "$d" ] && { echo "$d"; return; }
  d=$(find / -xdev -name "$1" -print -quit 2>/dev/null)
  [ -n "$d" ] && dirname "$d"
}

gpu_check() {   # prints a JSON line: offload flag and ggml's devices (ctypes on the unpacked libggml)
  python3 - <<'PY'
import ctypes, json, os, sys
r = {}
try:
    import llama_cpp
    r["llama_cpp"] = llama_cpp.__version__
    r["llama_supports_gpu_offload"] = bool(llama_cpp.llama_supports_gpu_offload())
    g = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml.so"))
    g.ggml_backend_dev_count.restype = ctypes.c_size_t
    g.ggml_backend_dev_get.restype = ctypes.c_void_p
    g.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for f in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(g, f).restype = ctypes.c_char_p
        getattr(g, f).argtypes = [ctypes.c_void_p]
    r["devices"] = [(g.ggml_backend_dev_name(g.ggml_backend_dev_get(i)).decode() + ": "
                     + g.ggml_backend_dev_description(g.ggml_backend_dev_get(i)).decode())
                    for i in range(g.ggml_backend_dev_count())]
    r["cuda"] = any(d.startswith("CUDA") for d in r["devices"])
except Exception as e:   # noqa: BLE001
    r["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(r))
PY
}

bg_install() {   # background (setsid): pyriver over the CUDA llama-cpp-python, then llama-server
  cat > "$S/bg/job.sh" <<EOF
set -uo pipefail
export SITE=$SITE PYTHONPATH=$SITE PATH=$SITE/bin:\$PATH PYRIVER_CACHE=$PYRIVER_CACHE LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
export CMAKE_BUILD_PARALLEL_LEVEL=$NPROC
t=\$(date +%s)
if [ "\${1:-}" = source ]; then
  echo "building llama-cpp-python with CUDA from source (../shared/gpu/build.sh)" > $S/bg/llama-cpp.status
  rm -rf $SITE/llama_cpp $SITE/lib $SITE/include $SITE/llama_cpp_python-*.dist-info
  (cd $S/src && SITE=$SITE bash $S/kit/build.sh) && echo "ok \$(( \$(date +%s) - t )) s" > $S/bg/llama-cpp.status \\
    || { echo "FAILED after \$(( \$(date +%s) - t )) s" > $S/bg/llama-cpp.status; exit 1; }
fi
echo "installing" > $S/bg/pyriver.status
if python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target $SITE --upgrade \\
     --config-settings=cmake.define.ggml_DIR=$SITE/lib/cmake/ggml $S/src; then
  echo "ok \$(( \$(date +%s) - t )) s" > $S/bg/pyriver.status
  # (f)'s synthetic model and river, written while the ferry runs (nothing is measured yet)
  echo "writing" > $S/bg/synth.status
  ( ts=\$(date +%s); python3 $S/src/scripts/gpu/exit_profile.py --dir $SYNTH --write --size $SYNTH_SIZE --vocab $S/vocab.gguf \
      > $S/bg/synth.log 2>&1 && echo "ok \$(( \$(date +%s) - ts )) s" > $S/bg/synth.status \
      || echo "FAILED after \$(( \$(date +%s) - ts )) s: \$(tail -1 $S/bg/synth.log)" > $S/bg/synth.status ) &
else
  echo "FAILED after \$(( \$(date +%s) - t )) s" > $S/bg/pyriver.status; exit 1
fi
t=\$(date +%s)
echo "building" > $S/bg/llama-server.status
mkdir -p $PYRIVER_CACHE/llama-server/$V && tar -xzf $S/kit/llama_cpp_python-$V-trim.tar.gz -C $PYRIVER_CACHE/llama-server/$V
# The system's compiler: CMake took /opt/gcc's g++ on the H200 (2026-11-27), which linked a libstdc++ newer than the
# loader's, and llama-server exited 127 (undefined symbol _ZNSt8ios_base4Init11_S_refcountE).
if CC=\$( [ -x /usr/bin/gcc ] && echo /usr/bin/gcc || echo \${CC:-cc}) CXX=\$( [ -x /usr/bin/g++ ] && echo /usr/bin/g++ || echo \${CXX:-c++}) \
   python3 -c "from pyriver.tools.llama_server import ensure; print(ensure($NPROC))"; then
  echo "ok \$(( \$(date +%s) - t )) s" > $S/bg/llama-server.status
else
  echo "FAILED after \$(( \$(date +%s) - t )) s" > $S/bg/llama-server.status
fi
EOF
  rm -rf "$S/src" && mkdir -p "$S/src"
  tar --exclude='./.ferry[0-9][0-9]' --exclude=./.git --exclude=./build --exclude='./build-*' -cf - . | tar -xf - -C "$S/src"
  # from the state folder: the call's copy of the tree may be gone before the job ends (the next call's
  # copy replaces it; the rehearsal's pip, started in the removed folder, failed "No such file or directory")
  (cd "$S" && exec setsid nohup bash "$S/bg/job.sh" "$@" > "$S/bg/log" 2>&1 < /dev/null) &
  echo $! > "$S/bg/pid"
}

setup() {
  ferry_collect; ferry_assemble
  cp "$REPO/.gpu-vocab/vocab.gguf" "$S/vocab.gguf" 2>/dev/null || echo "no .gpu-vocab/vocab.gguf: (f)'s synthetic model takes pyriver's default model's tokenizer"
  say "machine"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$S/gpu.txt"
  echo "cores $NPROC; $(free -g | awk '/Mem/{print $2}') GiB; python $(python3 -c 'import sys; print(sys.version.split()[0])'); $(df -h /tmp | tail -1)"
  local cub cud
  cub=$(find_lib libcublas.so.13); cud=$(find_lib libcudart.so.13)
  export LD_LIBRARY_PATH=$(echo "$cub:$cud:${LD_LIBRARY_PATH:-}" | tr ':' '\n' | awk 'NF && !s[$0]++' | paste -sd:)
  echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$S/env.sh"
  echo "libcublas.so.13 in: ${cub:-NOT FOUND}; libcudart.so.13 in: ${cud:-NOT FOUND}"
  say "prebuilt llama-cpp-python (CUDA, sm_90)"
  local ok=1 why=""
  if ! (cd "$S/kit/prebuilt" && grep ' lcp\.0[0-9]$' SHA256SUMS | sha256sum -c --quiet); then
    ok=0; why="prebuilt pieces: sha256 mismatch"
  elif ! cat "$S"/kit/prebuilt/lcp.* | tar -xJ -C "$SITE"; then
    ok=0; why="prebuilt: tar failed"
  fi
  local w
  for w in "$S"/kit/wheels/*.whl; do   # one by one: a wheel that does not fit this Python is named, the others go in
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" --upgrade "$w" > "$S/pip.log" 2>&1 \
      || echo "wheel not installed: ${w##*/}: $(grep -m1 ERROR "$S/pip.log")"
  done
  local chk; chk=$(gpu_check); echo "$chk"
  if [ $ok = 1 ]; then
    if echo "$chk" | grep -q '"error"'; then ok=0; why="import llama_cpp failed: $(echo "$chk" | python3 -c 'import json,sys; print(json.load(sys.stdin)["error"])')"
    elif [ "$CPU" != 1 ] && ! echo "$chk" | grep -q '"cuda": true'; then ok=0; why="no CUDA device in ggml's list"
    fi
  fi
  if [ $ok = 1 ]; then
    say "prebuilt OK; background: pyriver install, then llama-server build ($NPROC jobs)"
    bg_install
  elif [ "$CPU" = 1 ]; then
    echo "PREBUILT FAILED: $why (CPU rehearsal: no fallback build here)"
  else
    echo "PREBUILT FAILED: $why; falling back to ../shared/gpu/build.sh (CUDA build from the kit's sdist, in the background)"
    bg_install source
  fi
  json "$OUT/setup.json" "$S" "$ok" "$why" "$chk" "$LD_LIBRARY_PATH" "$(( $(now) - T0 ))" <<'PY'
import json, os, sys
out, S, ok, why, chk, ldp, secs = sys.argv[1:]
gpu = open(os.path.join(S, "gpu.txt")).read().strip() if os.path.exists(os.path.join(S, "gpu.txt")) else None
json.dump({"stage": "setup", "gpu": gpu, "prebuilt_ok": ok == "1", "prebuilt_failure": why or None,
           "check": json.loads(chk), "LD_LIBRARY_PATH": ldp, "seconds": int(secs),
           "ferry": json.load(open(os.path.join(S, "ferry", "state.json")))}, open(out, "w"), indent=1)
PY
}

ferry() {
  local last; last=$(cat "$S/ferry/last_end" 2>/dev/null || echo 0)
  [ "$last" != 0 ] && echo "since the last call's end: $(( T0 - last )) s (transfer + turn-around)"
  ferry_collect
  ferry_assemble; local rc=$?
  bg_status
  json "$OUT/ferry.json" "$S" "$rc" "$(( $(now) - T0 ))" "$([ "$last" = 0 ] && echo -1 || echo $(( T0 - last )))" <<'PY'
import glob, json, os, sys
out, S, rc, secs, gap = sys.argv[1:]
bg = {os.path.basename(f)[:-7]: open(f).read().strip() for f in glob.glob(os.path.join(S, "bg", "*.status"))}
json.dump({"stage": "ferry", "ok": rc == "0", "seconds": int(secs), "gap_since_last_call_s": int(gap),
           "calls_seen": open(os.path.join(S, "ferry", "calls.txt")).read().split(), "background": bg,
           "ferry": json.load(open(os.path.join(S, "ferry", "state.json")))}, open(out, "w"), indent=1)
PY
  return $rc
}

# --- measuring ---------------------------------------------------------------------------------
DEADLINE=0
run_cmd() {   # NAME CMD...: run (or print) under the stage's deadline; output to the log
  local name=$1; shift
  local left=$(( DEADLINE - $(now) ))
  say "$name: $*"
  if [ "$DRY" = 1 ]; then   # the device's arguments checked by pyriver's own parser (the rehearsal runs smaller ones)
    if [ "$1 $2 $3" = "python3 -m pyriver.cli" ]; then
      shift 3
      python3 -c "import importlib, sys; from pyriver.cli import TOOLS
importlib.import_module(TOOLS[sys.argv[1]][0]).parser().parse_args(sys.argv[2:])" "$@" > /dev/null \
        || echo "BAD ARGUMENTS $name" | tee -a "$S/results/failed"
    elif [ "$1" = python3 ] && [ "${2##*/}" = serve_gaps.py ]; then   # its own check: its arguments and the server's flags
      SERVE_GAPS_CHECK=1 "$@" > /dev/null || echo "BAD ARGUMENTS $name" | tee -a "$S/results/failed"
    fi
    return 0
  fi
  if [ $left -le 5 ]; then echo "SKIPPED $name: stage time used up"; echo "$name skipped" >> "$S/results/skipped"; return 0; fi
  timeout --kill-after=10 $left "$@"
  local rc=$?
  [ $rc = 0 ] || echo "FAILED $name (rc $rc)" | tee -a "$S/results/failed"
  return 0
}

wait_for() {   # STATUS-FILE SECONDS: wait for a background job's "ok"
  local f=$S/bg/$1.status end=$(( $(now) + $2 ))
  while [ $(now) -lt $end ]; do
    grep -q '^ok' "$f" 2>/dev/null && return 0
    grep -q '^FAILED' "$f" 2>/dev/null && { echo "$1: $(cat "$f")"; tail -20 "$S/bg/log"; return 1; }
    sleep 2
  done
  echo "$1: not ready after $2 s ($(cat "$f" 2>/dev/null))"; return 1
}

need() {   # files a stage reads
  local f ok=0
  for f in "$@"; do [ -f "$f" ] || { echo "MISSING $f"; ok=1; }; done
  return $ok
}

stage_begin() {
  DEADLINE=$(( $(now) + STAGE_S ))
  [ $DEADLINE -gt $CALL_END ] && DEADLINE=$CALL_END
  rm -rf "$S/results/$1" && mkdir -p "$S/results/$1"
  rm -f "$S/results/failed" "$S/results/skipped"
  R=$S/results/$1
}

stage_end() {   # STAGE: one JSON of the stage's JSON files, the failures, the seconds
  json "$OUT/$1.json" "$1" "$R" "$S" "$(( $(now) - T0 ))" "$DRY" <<'PY'
import glob, json, os, sys
out, stage, R, S, secs, dry = sys.argv[1:]
res = {}
for f in sorted(glob.glob(os.path.join(R, "*.json"))):
    try:
        res[os.path.basename(f)[:-5]] = json.load(open(f))
    except ValueError as e:
        res[os.path.basename(f)[:-5]] = {"unreadable": str(e)}
for f in sorted(glob.glob(os.path.join(R, "*.jsonl"))):   # JSON lines (bench --counts)
    try:
        res[os.path.basename(f)] = [json.loads(x) for x in open(f) if x.strip()]
    except ValueError as e:
        res[os.path.basename(f)] = {"unreadable": str(e)}
for f in sorted(glob.glob(os.path.join(R, "*.md"))):
    res[os.path.basename(f)] = open(f).read()
lines = lambda n: open(os.path.join(S, "results", n)).read().split("\n")[:-1] if os.path.exists(os.path.join(S, "results", n)) else []
json.dump({"stage": stage, "dry_run": dry == "1", "seconds": int(secs), "failed": lines("failed"),
           "skipped": lines("skipped"), "results": res}, open(out, "w"), indent=1)
PY
  say "$1 done"
}

derive() {
  stage_begin derive
  if [ "$DRY" != 1 ]; then
    need "$Q4KM" || return 1
    wait_for pyriver 240 || return 1
  fi
  local jobs=() f
  for f in $UNIFORM $RIVERS; do   # the rivers' types: the sweep's uniform points of them
    jobs+=("uniform-$f|from pyriver.tools.quantize import requantized; print(requantized('$Q4KM', '$f'))")
  done
  for f in $RIVERS; do
    jobs+=("river-$f|from pyriver import Llama; l = Llama('$Q4KM', n_ctx=64, river='$f', river_force=True, verbose=False); print(l.river_path); l.close()")
  done
  local pids=() j
  for j in "${jobs[@]}"; do
    local name=${j%%|*} code=${j#*|}
    say "derive $name: python3 -c \"$code\""
    if [ "$DRY" = 1 ]; then python3 -c "import ast; ast.parse('''$code''')" || echo "BAD CODE $name"; continue; fi
    ( s=$(now); timeout $(( DEADLINE - $(now) )) python3 -c "$code" > "$R/$name.txt" 2>&1; rc=$?
      echo "{\"job\": \"$name\", \"rc\": $rc, \"seconds\": $(( $(now) - s ))}" > "$R/$name.json"
      [ $rc = 0 ] || echo "FAILED derive $name (rc $rc)" >> "$S/results/failed" ) &
    pids+=($!)
  done
  for j in "${pids[@]}"; do wait "$j"; done
  [ "$DRY" = 1 ] || { ls -la "$MODELS" "$PYRIVER_CACHE/requantized" 2>/dev/null; tail -n 3 "$R"/*.txt; }
  stage_end derive
}

gate_models() {   # the measuring stages need pyriver and the derived files
  [ "$DRY" = 1 ] && return 0
  wait_for pyriver 120 || return 1
  need "$@"
}

full() {
  stage_begin full
  gate_models "$Q4KM" || { stage_end full; return 1; }
  local m tag
  for m in "$Q4KM"; do
    tag=$(basename "$m" .gguf | tr 'A-Z' 'a-z' | sed 's/.*[.-]\(q[0-9a-z_]*\)$/\1/')
    run_cmd "full $tag" $PR bench "$m" --paired --n-gpu-layers $NGL -t $T $FULL --json "$R/paired-$tag.json"
    run_cmd "full $tag flash" $PR bench "$m" --paired --flash-attn --n-gpu-layers $NGL -t $T $FULL --json "$R/paired-$tag-fa.json"
  done
  stage_end full
}

plane() {
  stage_begin plane
  gate_models "$Q4KM" || { stage_end plane; return 1; }
  run_cmd "sweep" $PR sweep "$Q4KM" --n-gpu-layers $NGL -t $T --river $RIVERS --river-force $PLANE \
    --uniform $UNIFORM --json "$R/sweep.json" --markdown "$R/sweep.md"
  # the predictive exit (issue 43) at one river point, if the stage has time left (skipped otherwise)
  run_cmd "sweep exit rules" $PR sweep "$Q4KM" --n-gpu-layers $NGL -t $T --river $DRAFT_RIVER --river-force $PREDICT \
    --exit-rule checked predicted guarded --json "$R/sweep-exit-rules.json" --markdown "$R/sweep-exit-rules.md"
  stage_end plane
}

llama_server_ok() {
  [ "$DRY" = 1 ] && return 0
  wait_for llama-server 60
}

spec() {
  stage_begin spec
  gate_models "$Q4KM" || { stage_end spec; return 1; }
  if llama_server_ok; then
    run_cmd "spec-serve" $PR bench "$Q4KM" --spec-serve --n-gpu-layers $NGL -t $T $SPEC \
      --llama-spec-types ngram-simple ngram-mod ngram-cache --json "$R/spec-serve.json"
  else
    echo "DROPPED spec: no llama-server (its --spec-type drafting has no stand-in)" | tee -a "$S/results/skipped"
  fi
  stage_end spec
}

serve() {
  stage_begin serve
  gate_models "$Q4KM" || { stage_end serve; return 1; }
  if llama_server_ok; then
    run_cmd "serve" $PR bench "$Q4KM" --serve --competitor --chat --n-gpu-layers $NGL -t $T $SERVE --json "$R/serve.json"
  else
    echo "no llama-server: pyriver serve alone" | tee -a "$S/results/skipped"
    run_cmd "serve (pyriver alone)" $PR bench "$Q4KM" --serve --chat --n-gpu-layers $NGL -t $T $SERVE --json "$R/serve.json"
  fi
  stage_end serve
}

gaps() {
  stage_begin gaps
  gate_models "$Q4KM" || { stage_end gaps; return 1; }
  local ngl=(); [ "$NGL" = 0 ] || ngl=(--n-gpu-layers $NGL)
  run_cmd "serve gaps" python3 "$REPO/scripts/serve_gaps.py" "$Q4KM" $GAPS --json "$R/chunked.json" \
    -- --no-lossless --ctx 1024 --threads $T -fa off "${ngl[@]}"
  run_cmd "serve gaps, whole prompts" python3 "$REPO/scripts/serve_gaps.py" "$Q4KM" $GAPS --json "$R/whole-prompts.json" \
    -- --no-lossless --ctx 1024 --threads $T -fa off --prompt-chunk 2048 "${ngl[@]}"
  # the same scheduler over llama.cpp's own graph (the engine seam's other side): the server's part of the
  # gaps against the graphs'
  run_cmd "serve gaps, llama.cpp engine" python3 "$REPO/scripts/serve_gaps.py" "$Q4KM" $GAPS --json "$R/llamacpp-engine.json" \
    -- --no-lossless --ctx 1024 --threads $T -fa off --engine llama.cpp "${ngl[@]}"
  stage_end gaps
}

drafts() {   # (e) River drafts, full depth verifying, on chat; plain decoding and llama.cpp beside them
  stage_begin drafts
  gate_models "$Q4KM" || { stage_end drafts; return 1; }
  run_cmd "lossless river" $PR bench "$Q4KM" --lossless --draft river --prompt-set chat --river $DRAFT_RIVER --river-force \
    --fixed-k --n-gpu-layers $NGL -t $T $DRAFTS --json "$R/lossless-river-chat.json"
  stage_end drafts
}

profile() {   # (f) River on a bandwidth-bound shape with the 1.5B's exit profile
  stage_begin profile
  if [ "$DRY" != 1 ]; then wait_for synth $(( STAGE_S / 2 )) || { stage_end profile; return 1; }; fi
  run_cmd "exit profile" python3 "$REPO/scripts/gpu/exit_profile.py" --dir "$SYNTH" --size $SYNTH_SIZE --n-gpu-layers $NGL -t $T $PROFILE \
    --profile "$REPO/docs/results/gpu/qwen1.5b/plane.json" --json "$R/exit-profile.json"
  stage_end profile
}

counts() {   # issue 69 item 2: the counts of docs/gpu.md on the device (the q3_K river that derive made)
  stage_begin counts
  gate_models "$Q4KM" || { stage_end counts; return 1; }
  run_cmd "counts" $PR bench "$Q4KM" --counts $COUNTS --river $DRAFT_RIVER --river-force --n-gpu-layers $NGL -t $T \
    --json "$R/counts.jsonl"
  stage_end counts
}

status() { bg_status; cat "$S/ferry/state.json" 2>/dev/null | head -40; }

rc=0
for st in "${STAGES[@]}"; do
  case $st in
    setup|ferry|derive|full|plane|spec|serve|gaps|drafts|profile|counts|status) ;;
    *) echo "unknown stage $st"; exit 2 ;;
  esac
  T0=$(now)
  "$st" 2>&1 | tee -a "$OUT/call.log" || rc=1
done
date +%s > "$S/ferry/last_end"
exit $rc
