#!/bin/bash
# One call on a fresh GPU machine: an older libpyriver against the tree's, on a synthetic model of
# Qwen2.5-Coder-1.5B's shape (Q4_K_M), each against llama.cpp in one process (bench --paired),
# alternated. Run 2026-11-27 for the mask-view fix (docs/gpu.md). Before the call, here:
#   mkdir -p .gpuq .ferry00 && echo /.gpuq/ >> .git/info/exclude
#   git archive --format=tar -o .gpuq/old.tar <older commit>
#   for f in .ferry01/*; do case $f in *qwen2.5*) ;; *) ln -f $f .ferry00/;; esac; done   # the kit only
#   python3 -c 'from pathlib import Path; from gguf import GGUFValueType; from pyriver.tools.gguf_io import KV, Plan, write_plan
#   from pyriver_dev.synth import _tokenizer_kv as t; kv={"general.architecture": KV("qwen2", GGUFValueType.STRING)}
#   kv.update(t("QWEN1.5B.gguf")); write_plan(Path(".gpuq/vocab.gguf"), Plan(kv=kv))'
# The call: command `bash scripts/gpu/compare_libs.sh`, carry [".ferry00", ".gpuq"], timeout_s 170.
T0=$(date +%s); say() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
LAYERS=${LAYERS:-28} EMBD=${EMBD:-1536} FF=${FF:-8960} HEADS=${HEADS:-12} KV=${KV:-2}
if [ "${SKIP_SETUP:-0}" = 0 ]; then
  bash scripts/gpu/run.sh setup > /tmp/setup.out 2>&1; say "setup rc $?"; grep -E "prebuilt|CUDA|FAIL" /tmp/setup.out | head -5
  export PYTHONPATH=/tmp/gk/site PYRIVER_CACHE=/tmp/gk/cache; . /tmp/gk/env.sh
  for i in $(seq 90); do grep -q ok /tmp/gk/bg/pyriver.status 2>/dev/null && break; grep -q FAIL /tmp/gk/bg/pyriver.status 2>/dev/null && { tail -20 /tmp/gk/bg/log; exit 1; }; sleep 1; done
  kill -- -$(cat /tmp/gk/bg/pid) 2>/dev/null; say "pyriver $(cat /tmp/gk/bg/pyriver.status); llama-server build stopped"
  NEW=/tmp/gk/site/pyriver; GGML=/tmp/gk/site/lib/cmake/ggml
fi
rm -rf /tmp/old /tmp/oldsite; mkdir -p /tmp/old && tar -xf .gpuq/old.tar -C /tmp/old
( python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/oldsite --upgrade \
    ${GGML:+--config-settings=cmake.define.ggml_DIR=$GGML} /tmp/old > /tmp/old.out 2>&1; echo "old build rc $?" >> /tmp/old.out ) &
python3 -m pyriver_dev.synth --arch qwen2 --layers $LAYERS --embd $EMBD --heads $HEADS --heads-kv $KV --ff $FF \
  --rope-base 1000000 --rms-eps 1e-6 --dtype f16 --tokenizer-from .gpuq/vocab.gguf --quantize q4_k_m /tmp/q.gguf > /tmp/synth.out 2>&1
say "synth rc $?"; tail -2 /tmp/synth.out
wait; tail -1 /tmp/old.out; ls /tmp/oldsite/pyriver/libpyriver* || tail -20 /tmp/old.out
i=0
for lib in /tmp/oldsite/pyriver $NEW /tmp/oldsite/pyriver $NEW; do
  i=$((i + 1)); say "lib $lib"
  PYRIVER_LIB_DIR=$lib timeout 60 python3 -m pyriver.cli bench /tmp/q.q4_k_m.gguf --paired --n-gpu-layers ${NGL:--1} -t 4 -r 3 \
    --json $OUT/paired-$i-$(echo $lib | cut -d/ -f3).json 2>&1 | grep -E "^llama.cpp |^pyriver |median|equal"
done
say done
