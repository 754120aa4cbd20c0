#!/usr/bin/env bash
# The CPU rehearsal of the device calls in scripts/gpu/calls.tsv: each call as the device tool runs
# it, in a fresh copy of the repository root (tracked files, untracked ones git does not ignore, and
# that call's carried folder: hard links, no copy of the pieces), with $OUT its own folder, then the
# exact command string. GK_CPU=1: no GPU asked for, n_gpu_layers 0, tiny sizes, and the measuring
# stages run on SmolLM2 Q4_1 (placed in the state beforehand: in the real order the 1.5B is the
# first model to arrive). libcublas.so.13 is a stub here (no cuBLAS on this machine): the prebuilt
# CUDA llama-cpp-python loads, CUDA finds no driver, ggml goes on with the CPU.
#
#   bash scripts/gpu/rehearse.sh FIRST LAST     # calls FIRST..LAST of calls.tsv (default: all)
#   GK_RH=/tmp/gk-rh (state, copies and outputs); logs of each call in $GK_RH/out/callNN/
# Run it under the CPU lock: it returns only when setup's background job (pyriver's install, then
# llama-server's build: about 5 minutes on 2 cores) has ended too, so the lock covers that build.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RH=${GK_RH:-/tmp/gk-rh}
FIRST=${1:-1}; LAST=${2:-999}
mkdir -p "$RH/stub" "$RH/out" "$RH/state/cache/models"
if [ ! -e "$RH/stub/libcublas.so.13" ]; then
  cat > "$RH/stub/cublas.c" <<'EOF'
/* link-and-load stand-in for cuBLAS 13 on a machine without it (the CPU rehearsal only) */
#define F(n) int n(void) { return 1; }
F(cublasCreate_v2) F(cublasDestroy_v2) F(cublasGemmBatchedEx) F(cublasGemmEx) F(cublasGemmStridedBatchedEx)
F(cublasSetMathMode) F(cublasSetStream_v2) F(cublasSetWorkspace_v2) F(cublasSgemmBatched)
F(cublasSgemmStridedBatched) F(cublasSgemm_v2) F(cublasStrsmBatched)
const char *cublasGetStatusString(int s) { (void)s; return "cuBLAS stub"; }
EOF
  printf 'libcublas.so.13 { global: cublas*; local: *; };\n' > "$RH/stub/cublas.map"
  gcc -shared -fPIC -o "$RH/stub/libcublas.so.13" -Wl,-soname,libcublas.so.13 \
    -Wl,--version-script="$RH/stub/cublas.map" "$RH/stub/cublas.c"
  ln -sf libcublas.so.13 "$RH/stub/libcublas.so"
fi
CUDART=$(dirname "$(find /usr/local -name libcudart.so.13 -print -quit 2>/dev/null)")
SMOL=$HOME/.cache/pyriver/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$RH/state/cache/models/rehearse-smollm2-q4_1.gguf" ] || cp "$SMOL" "$RH/state/cache/models/rehearse-smollm2-q4_1.gguf"
export GK_CPU=1 GK_STATE=$RH/state GK_Q4KM=$RH/state/cache/models/rehearse-smollm2-q4_1.gguf
export LD_LIBRARY_PATH=$RH/stub:$CUDART
# run.sh's stages are timed for the device's 16 cores; here 2 shared ones build and measure
export STAGE_S=${STAGE_S:-560} CALL_S=${CALL_S:-1500}

grep -v '^#' "$ROOT/scripts/gpu/calls.tsv" | while IFS=$'\t' read -r n timeout carry cmd; do
  [ "$n" -ge "$FIRST" ] && [ "$n" -le "$LAST" ] || continue
  W=$RH/repo
  rm -rf "$W" && mkdir -p "$W"
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents -P {} "$W"/ 2>/dev/null)
  for c in ${carry//,/ }; do [ "$c" = - ] || cp -al "$ROOT/$c" "$W/$c"; done
  weight=$(du -sb --apparent-size "$W" | cut -f1)
  O=$RH/out/call$(printf %02d "$n"); rm -rf "$O"; mkdir -p "$O"
  t=$(date +%s)
  (cd "$W" && OUT=$O timeout $(( timeout * ${GK_RH_TIMEOUT_X:-3} )) bash -c "$cmd") > "$O/stdout.txt" 2>&1
  rc=$?
  echo "call $n ($cmd; carry $carry, $(( weight / 1048576 )) MiB): rc $rc in $(( $(date +%s) - t )) s; out: $(ls "$O" | tr '\n' ' ')"
done
pid=$(cat "$RH/state/bg/pid" 2>/dev/null)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
  t=$(date +%s)
  while kill -0 "$pid" 2>/dev/null; do sleep 5; done
  echo "setup's background job ended $(( $(date +%s) - t )) s after the last call: $(cd "$RH/state/bg" && grep -H . *.status | tr '\n' ' ')"
fi
