#!/usr/bin/env bash
# The GPU issue's device job: `bash .gpu/job.sh STAGE [STAGE...]` from the checkout's root on the
# GPU machine. State lives in /tmp (a warm machine keeps it between calls); logs and results go to
# $OUT (at most 8 files come back: one log per call and one tarball of results).
set -u
G=$(cd "$(dirname "$0")" && pwd)
export SITE=/tmp/site PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export PYRIVER_CACHE=/tmp/pyrcache PYRIVER_SYNTH_DIR=/tmp/synth PYRIVER_LIB_DIR=/tmp/site/pyriver
R=/tmp/results
mkdir -p $R /tmp/ferry $PYRIVER_CACHE/models $SITE
TAG=$(echo "$*" | tr ' ' '_')
exec > >(tee -a "$OUT/log-$TAG.txt") 2>&1
T0=$(date +%s)
step() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
[ -d /usr/local/cuda/bin ] && export PATH=$PATH:/usr/local/cuda/bin
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
if [ -z "${LD_LIBRARY_PATH:-}" ]; then
  d=$(dirname "$(find / -xdev -name libcublas.so.13 -print -quit 2>/dev/null)")
  [ -n "$d" ] && export LD_LIBRARY_PATH=$d
fi
SMOL=$PYRIVER_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA=$PYRIVER_CACHE/models/gemma-3-270m-q4_k_m.gguf
PR="python3 -m pyriver.cli"
NGL=${NGL:---n-gpu-layers -1}

ferry() {   # pieces carried in .ferry*/ are collected; whole files are assembled and checked
  for d in .ferry*; do [ -d "$d" ] && cp -n "$d"/* /tmp/ferry/ 2>/dev/null; done
  ls -la /tmp/ferry
  if [ ! -f $SMOL ] && [ -f /tmp/ferry/smol.00 ] && [ -f /tmp/ferry/smol.01 ] && [ -f /tmp/ferry/smol.02 ]; then
    cat /tmp/ferry/smol.0? > $SMOL.tmp && mv $SMOL.tmp $SMOL
  fi
  if [ ! -f $GEMMA ] && [ -f /tmp/ferry/gemma.03 ]; then
    cat /tmp/ferry/gemma.0? > $GEMMA.tmp && mv $GEMMA.tmp $GEMMA
  fi
  sha256sum $PYRIVER_CACHE/models/*.gguf 2>/dev/null
}

install_pyriver() {
  local h
  h=$(cat native/* pyriver/*.py CMakeLists.txt pyproject.toml | sha1sum | cut -c1-12)
  if [ ! -f $SITE/.pyriver-$h ]; then
    step "pyriver install"
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target $SITE --upgrade \
      --config-settings=cmake.define.ggml_DIR=$SITE/lib/cmake/ggml . && touch $SITE/.pyriver-$h
  fi
}

pack_llama() {   # llama_cpp + ggml's CMake package and headers; lib/*.so become links to llama_cpp/lib
  (cd $SITE && for f in lib/*.so*; do b=$(basename "$f"); [ -f "llama_cpp/lib/$b" ] && ln -sf "../llama_cpp/lib/$b" "$f"; done)
  tar -C $SITE -cf - llama_cpp lib include llama_cpp_python-0.3.36.dist-info | xz -T0 -6 > /tmp/lcp.tar.xz
}

setup() {
  ferry; step "machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
  nproc; free -g | head -2; python3 --version; df -h /tmp | tail -1; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  which nvcc cmake ninja
  python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE $G/wheels/*.whl
  step "background: synthetic models (no native library needed)"
  PYTHONPATH=$PWD:$PYTHONPATH setsid nohup python3 $G/prepare_models.py write > /tmp/bg-write.log 2>&1 < /dev/null &
  echo $! > /tmp/bg-write.pid
  if [ ! -f $SITE/.llama-cuda ] && ls $G/prebuilt/lcp.* >/dev/null 2>&1; then
    step "prebuilt llama-cpp-python (built on the CPU machine for sm_90)"
    cat $G/prebuilt/lcp.* > /tmp/lcp.tar.xz && tar -xJf /tmp/lcp.tar.xz -C $SITE \
      && python3 -c "import llama_cpp; assert llama_cpp.llama_supports_gpu_offload(); print('prebuilt ok')" \
      && touch $SITE/.llama-cuda || { echo "PREBUILT FAILED"; rm -rf $SITE/llama_cpp; }
  fi
  if [ ! -f $SITE/.llama-cuda ]; then
    step "building llama-cpp-python with CUDA here, in the background (survives this call)"
    ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    [ -f .gpusrc/llama_cpp_python-0.3.36-trim.tar.gz ] || { step "NO PREBUILT AND NO SOURCE: carry .gpusrc"; exit 1; }
    rm -rf /tmp/llama_cpp_python-0.3.36 && tar -xzf .gpusrc/llama_cpp_python-0.3.36-trim.tar.gz -C /tmp
    setsid nohup bash -c "CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) CMAKE_ARGS='-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$ARCH -DGGML_RPC=on -DLLAVA_BUILD=OFF' \
      python3 -m pip install -v --no-index --no-deps --no-build-isolation --no-compile --target $SITE /tmp/llama_cpp_python-0.3.36 \
      && touch $SITE/.llama-cuda; touch /tmp/build.done" > /tmp/build.log 2>&1 < /dev/null &
  fi
  ready 420
  while [ ! -f /tmp/testmodels.done ]; do   # a writer that died must not hang the call
    kill -0 "$(cat /tmp/bg-write.pid)" 2>/dev/null || { step "WRITER FAILED"; cat /tmp/bg-write.log; return 1; }
    sleep 2
  done
  gputests "not smol and not 270m and not exit_decision and not host_and_graph and not prefill_exit and not one_ggml" 300
}

ready() {   # wait (at most $1 s) for llama-cpp-python, then install pyriver and start the derived models
  local t=$(( $(date +%s) + $1 ))
  while [ ! -f $SITE/.llama-cuda ] && [ ! -f /tmp/build.done ] && [ $(date +%s) -lt $t ]; do sleep 5; done
  if [ ! -f $SITE/.llama-cuda ]; then
    if [ -f /tmp/build.done ]; then step "BUILD FAILED"; tail -60 /tmp/build.log; exit 1; fi
    step "build still running"; grep -o "\[[0-9]*/[0-9]*\]" /tmp/build.log | tail -1; exit 0
  fi
  if [ -f /tmp/build.done ] && [ ! -f /tmp/packed ]; then
    step "build done: $(grep -c . /tmp/build.log) log lines; packing it for later machines"
    pack_llama && split -b 15M -d /tmp/lcp.tar.xz $OUT/lcp. && touch /tmp/packed
    ls -la /tmp/lcp.tar.xz
  fi
  install_pyriver
  if [ ! -f /tmp/derive.started ] && [ -z "${NO_DERIVE:-}" ]; then
    python3 -c "
import llama_cpp, pyriver
from pyriver.engine.backends import devices
print('llama-cpp-python', llama_cpp.__version__, 'gpu offload', llama_cpp.llama_supports_gpu_offload())
for d in devices(): print(d)"
    step "background: derived models (after the writer)"
    setsid nohup bash -c "while kill -0 $(cat /tmp/bg-write.pid) 2>/dev/null; do sleep 2; done; python3 $G/prepare_models.py derive" \
      > /tmp/bg-derive.log 2>&1 < /dev/null &
    touch /tmp/derive.started
  fi
}

wait_bg() {   # the background writer must be done before anything is timed
  while pgrep -f prepare_models.py >/dev/null; do sleep 2; done
  step "background done"; cat /tmp/bg-write.log /tmp/bg-derive.log
}

gputests() {   # $1: pytest -k expression
  step "pytest -m gpu --gpu-layers -1 -k '$1'"
  timeout ${2:-480} python3 -m pytest -q -m gpu --gpu-layers -1 -p no:cacheprovider -k "$1" \
    --junitxml=$R/junit-$(echo "$1" | tr -c 'a-z0-9' '_').xml tests/runtime/test_parity.py tests/runtime/test_river.py 2>&1 | tail -40
}

smol() {
  ferry; ready 560
  gputests "smol or exit_decision or host_and_graph or prefill_exit or one_ggml" 300
  step "diagnostic: logits by step shape on CUDA"
  timeout 120 python3 -m pyriver_dev.stepcheck $SMOL --n-gpu-layers -1; timeout 120 python3 -m pyriver_dev.stepcheck $SMOL --n-gpu-layers -1 --flash-attn
  wait_bg
  step "bench SmolLM2 full depth"
  $PR bench $SMOL $NGL -t 4 -r 5 --json $R/bench-smol.json 2>&1 | tail -6
  $PR bench $SMOL $NGL -t 4 -r 5 --flash-attn --json $R/bench-smol-fa.json 2>&1 | tail -6
}

sizes() {   # 1B and 8B full depth vs llama.cpp
  ferry; ready 560; wait_bg
  for m in ${SIZES:-1b-f16 1b-q8_0 8b-f16 8b-q8_0}; do
    step "bench llama-$m"
    $PR bench $PYRIVER_CACHE/synthetic/llama-$m.gguf $NGL -t 4 -r ${REPS:-3} --json $R/bench-$m.json 2>&1 | tail -5
  done
  for m in ${SIZES_FA:-8b-f16 8b-q8_0}; do
    step "bench llama-$m flash attention"
    $PR bench $PYRIVER_CACHE/synthetic/llama-$m.gguf $NGL -t 4 -r ${REPS:-3} --flash-attn --json $R/bench-$m-fa.json 2>&1 | tail -5
  done
}

checks_smol() {   # item 4 on SmolLM2: the cost of exit checks, chunks, carry, prediction
  ferry; ready 560; wait_bg
  step "overhead SmolLM2"
  $PR bench $SMOL $NGL -t 4 --overhead -r 5 --chunks 1 2 4 8 16 32 --carry both --json $R/overhead-smol.json 2>&1 | tail -14
  step "inprocess SmolLM2"
  $PR bench $SMOL $NGL -t 4 --inprocess -r 3 --river q4_0 --tau 0.975 0.985 --chunks 2 4 8 32 --carry both --predict both \
    --json $R/inprocess-smol.json 2>&1 | tail -34
}

checks_8b() {   # item 4 on the synthetic 8B
  ferry; ready 560; wait_bg
  step "overhead 8B q8_0"
  $PR bench $PYRIVER_CACHE/synthetic/llama-8b-q8_0.gguf $NGL -t 4 --overhead -r 3 --chunks 2 4 8 16 32 --carry both \
    --json $R/overhead-8b.json 2>&1 | tail -12
}

checks() { checks_smol; checks_8b; }

systems() {
  ferry; ready 560; wait_bg
  for dt in f16 q8_0; do
    step "systems 8b $dt"
    $PR bench --systems --systems-size 8b --systems-dtype $dt $NGL -t 4 --inprocess -r 5 --gen-tokens 128 \
      --json $R/systems-8b-$dt.json 2>&1 | tail -8
  done
}

real_smol() {   # item 5 on SmolLM2 Q8_0: similarity exits, speed and fidelity
  ferry; ready 560
  step "sweep SmolLM2 Q8_0"
  SQ8=$(python3 -c "from pyriver.tools.quantize import requantized; print(requantized('$SMOL', 'q8_0'))")
  $PR sweep $SQ8 $NGL --river q4_0 --tau 0.97 0.98 0.985 0.99 --min-exit-layer 4 --limit 8 -n 48 -r 3 \
    --json $R/sweep-smol-q8_0.json --markdown $R/sweep-smol-q8_0.md 2>&1 | tail -14
}

real_gemma() {   # Gemma 3 270M on CUDA: parity, invariants, similarity exits
  ferry; ready 560
  gputests "270m" 300
  timeout 120 python3 -m pyriver_dev.stepcheck $GEMMA --n-gpu-layers -1
  step "sweep Gemma 3 270M"
  $PR sweep $GEMMA $NGL --river q3_K --tau 0.95 0.97 0.985 --min-exit-layer 4 --limit 8 -n 48 -r 3 \
    --json $R/sweep-gemma.json --markdown $R/sweep-gemma.md 2>&1 | tail -12
}

lossless() {   # issue 15 on the GPU: lossless vs full depth, lossy River and llama.cpp (synthetic 1B files)
  wait_bg
  for m in ${LOSSLESS:-1b-f16 1b-q8_0}; do
    step "lossless llama-$m"
    $PR bench $PYRIVER_CACHE/synthetic/llama-$m.gguf --lossless $NGL -t 4 -r 3 --prompts 4 --gen-tokens 64 \
      --tau 0.95 --min-exit-layer 4 --draft-max 2 4 8 --json $R/lossless-$m.json 2>&1 | tail -14
  done
}

lossless_smol() {   # issue 15 on the GPU, SmolLM2
  ferry; ready 560
  $PR bench $SMOL --lossless $NGL -t 4 -r 3 --prompts 4 --gen-tokens 64 --tau 0.975 --draft-max 2 4 \
    --json $R/lossless-smol.json 2>&1 | tail -10
}

fusion() {   # the 8B F16 decode gap: GPU kernel time per token with ggml-cuda's fusion on and off
  PREP_SIZES=8b PYTHONPATH=$PWD:$PYTHONPATH python3 $G/prepare_models.py write 2>&1 | tail -2
  for f in 0 1; do for e in llama pyriver; do
    GGML_CUDA_DISABLE_FUSION=$f timeout 100 python3 $G/diag_prof.py $PYRIVER_CACHE/synthetic/llama-8b-f16.gguf $e 0 2>&1 \
      | grep -A5 "fa=0" | sed "s/^/fusion-off=$f /"
  done; done
}

idle() { ferry; ready 560; }

quick() {   # full-depth decode/prefill vs llama.cpp on the 1B synthetic files
  while kill -0 $(cat /tmp/bg-write.pid) 2>/dev/null; do sleep 2; done; cat /tmp/bg-write.log
  for m in 1b-q8_0 1b-f16; do
    step "bench llama-$m"
    $PR bench $PYRIVER_CACHE/synthetic/llama-$m.gguf $NGL -t 4 -r 3 --json $R/bench2-$m.json 2>&1 | tail -4
    step "bench llama-$m flash attention"
    $PR bench $PYRIVER_CACHE/synthetic/llama-$m.gguf $NGL -t 4 -r 3 --flash-attn --json $R/bench2-$m-fa.json 2>&1 | tail -4
  done
}

for s in "$@"; do
  "$s"
done
step "end"
tar -C $R -czf $OUT/results-$TAG.tgz . 2>/dev/null
ls -la $OUT
