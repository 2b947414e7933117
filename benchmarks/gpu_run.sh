#!/usr/bin/env bash
# The whole H200 session in one command per Thunder build: tests, benchmark, examples, CLI. Logs under $OUT.
# Usage (device machine, repo root): bash benchmarks/gpu_run.sh 0.2.6|next [tests,bench,examples,cli]
set -uo pipefail
build="$1"; parts="${2:-tests,bench,examples,cli}"; out="${OUT:-/tmp/nvscope-out}"; mkdir -p "$out"
export NVSCOPE_GPU_THUNDER="$build" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
source .gpu/activate.sh
log="$out/gpu-$build.log"
if [[ $parts == *tests* ]]; then
  echo "== pytest tests/gpu ($build)" | tee -a "$log"
  timeout 300 python -m pytest tests/gpu -q -rA -p no:cacheprovider -W ignore::DeprecationWarning 2>&1 \
    | grep -v "^PASSED" | tee -a "$log" | tail -4
fi
if [[ $parts == *bench* ]]; then
  echo "== benchmarks/thunder_steps.py ($build)" | tee -a "$log"
  timeout 240 python benchmarks/thunder_steps.py 2>&1 | grep -v Warning | tee -a "$log"
fi
if [[ $parts == *examples* ]]; then
  for e in quickstart matmul_codegen train_step plain_model; do
    echo "== examples/$e.py ($build)" | tee -a "$log"
    timeout 120 python "examples/$e.py" 2>&1 | grep -v -i "warn" | tee -a "$log" | tail -40
  done
fi
if [[ $parts == *cli* ]]; then
  for cmd in "doctor" "options" "run --enable fuse_matmul --disable matmul_expr_eval examples/plain_model.py"; do
    echo "== nvscope $cmd ($build)" | tee -a "$log"
    timeout 120 python -m nvscope $cmd 2>&1 | grep -v -i "userwarning\|warnings.warn" | tee -a "$log" | tail -40
  done
fi
