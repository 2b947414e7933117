#!/usr/bin/env bash
# Every GPU check of one Thunder build, in one command. Logs under $OUT (streamed with tee, so a timeout keeps them).
# Usage (device machine, repo root): bash benchmarks/gpu_run.sh 0.2.6|next PARTS
#   PARTS, comma-separated: tests, thunder-suite (Thunder's own test_nvfuser.py, every test inside a scope),
#   examples, cli, search, steps, distributed, tools (benchmarks/bisect_gpu.py and profile_nanogpt.py),
#   compile (benchmarks/compile_once.py: one compile per distinct definition, issue 26),
#   rescue (benchmarks/rescue_gpu.py; RESCUE_ARGS, e.g. "--part llama_bf16 --jobs 2"),
#   defaults (benchmarks/defaults_shared.py: the defaults' first step shared, issue 38; DEFAULTS_ARGS, e.g.
#   "--layers 2,16 --modes shared" or "--profile-row --before-root /tmp/before"),
#   thunder-suite-shared (Thunder's own test_nvfuser.py, every test under default sharing: NVSCOPE_SHARE=all),
#   thunder-suite-torch (the same file plain, then every test under pytest --nv-on-error torch)
# LOG_TAG names the log and the failures file ($OUT/gpu-BUILD-TAG.log, failures-BUILD-TAG.txt), so two calls on one
# build at once (e.g. tests/gpu split in two by TESTS_PATHS) keep theirs apart; TESTS_ARGS adds pytest arguments.
# tests: each failure is written to $OUT/failures-BUILD.txt as it happens (tests/gpu/conftest.py), so a run cut by
# its time limit keeps them. TESTS_PATHS (default tests/gpu) runs some files only: a full run of one build beside the
# other build's took 381-476 s and more (next's was cut at 470 s), near a device call's 600 s: split it if needed.
set -uo pipefail
build="$1"; parts="${2:-tests}"; out="${OUT:-/tmp/nvscope-out}"; mkdir -p "$out"
export NVSCOPE_GPU_THUNDER="$build" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" NCCL_NVLS_ENABLE=0
source .gpu/activate.sh || exit 1
log="$out/gpu-$build${LOG_TAG:+-$LOG_TAG}.log"
site="/tmp/nvscope-site-$build"
step() { echo "== $1 ($build) $(date +%T)" | tee -a "$log"; }
part() { [[ ",$parts," == *",$1,"* ]]; }  # one exact part: thunder-suite is not thunder-suite-shared
if [[ $parts == *tests* ]]; then
  step "pytest ${TESTS_PATHS:-tests/gpu}"
  failures="$out/failures-$build${LOG_TAG:+-$LOG_TAG}.txt"
  : > "$failures"
  NVSCOPE_GPU_FAILURES="$failures" timeout "${TESTS_TIMEOUT:-420}" python -m pytest ${TESTS_PATHS:-tests/gpu} -q -rA -p no:cacheprovider -W ignore::DeprecationWarning \
    ${TESTS_K:+-k "$TESTS_K"} ${TESTS_ARGS:-} 2>&1 | grep -v "^PASSED" | tee -a "$log" | tail -5
fi
if part thunder-suite; then
  step "Thunder's own test_nvfuser.py, each test inside nv_options(enable=[static_fusion_count])"
  (cd /tmp && NVSCOPE_DEV=1 timeout 300 python -m pytest "$site/thunder/tests/test_nvfuser.py" -q -p no:cacheprovider \
    -p nvscope.pytest_plugin --nv-enable static_fusion_count -W ignore::DeprecationWarning 2>&1) | tee -a "$log" | tail -4
fi
if [[ $parts == *examples* ]]; then
  for e in quickstart matmul_codegen train_step plain_model; do
    step "examples/$e.py"
    timeout 120 python "examples/$e.py" 2>&1 | grep -v -i "warn" | tee -a "$log" | tail -40
  done
fi
if [[ $parts == *cli* ]]; then
  for cmd in "doctor" "options" "run --enable fuse_matmul --disable matmul_expr_eval examples/plain_model.py"; do
    step "nvscope $cmd"
    timeout 120 python -m nvscope $cmd 2>&1 | grep -v -i "userwarning\|warnings.warn" | tee -a "$log" | tail -40
  done
fi
if [[ $parts == *search* ]]; then
  step "benchmarks/search_workloads.py"
  timeout 480 python benchmarks/search_workloads.py --out "$out" ${SEARCH_ARGS:-} 2>&1 | tee -a "$log" | tail -60
fi
if [[ $parts == *steps* ]]; then
  step "benchmarks/thunder_steps.py"
  timeout 420 python benchmarks/thunder_steps.py ${STEPS_ARGS:-} 2>&1 | grep -v Warning | tee -a "$log"
fi
if [[ $parts == *tools* ]]; then
  step "benchmarks/bisect_gpu.py"
  timeout 480 python benchmarks/bisect_gpu.py --out "$out" ${BISECT_ARGS:-} 2>&1 | grep -v Warning | tee -a "$log" | grep "^==\|^total"
  step "benchmarks/profile_nanogpt.py"
  timeout 480 python benchmarks/profile_nanogpt.py --out "$out" ${PROFILE_ARGS:-} 2>&1 | grep -v Warning | tee -a "$log" | grep "^==\|^total"
fi
if [[ $parts == *compile* ]]; then
  step "benchmarks/compile_once.py"
  timeout 540 python benchmarks/compile_once.py --out "$out" ${COMPILE_ARGS:-} 2>&1 | grep -v Warning | tee -a "$log" | tail -12
fi
if [[ $parts == *rescue* ]]; then
  step "benchmarks/rescue_gpu.py"
  timeout "${RESCUE_TIMEOUT:-540}" python benchmarks/rescue_gpu.py --out "$out/rescue-$build" ${RESCUE_ARGS:-} 2>&1 | tee -a "$log" | grep "^=="
fi
if part defaults; then
  step "benchmarks/defaults_shared.py ${DEFAULTS_ARGS:-}"
  timeout "${DEFAULTS_TIMEOUT:-570}" python benchmarks/defaults_shared.py --out "$out/defaults-$build" ${DEFAULTS_ARGS:-} \
    2>&1 | tee -a "$log" | tail -40
fi
if part thunder-suite-shared; then
  step "Thunder's own test_nvfuser.py, every test under default sharing (NVSCOPE_SHARE=all)"
  # A plugin of a few lines, written here: after the run it prints nvscope's shared-definition counters, so the log
  # shows that the fusions ran shared (definitions registered vs adopted), not only that the tests passed.
  cat > "$out/nvscope_share_report.py" <<'PY'
def pytest_terminal_summary(terminalreporter):
    from nvscope._exec import _shared
    seconds, count = _shared.compiling()
    terminalreporter.write_line(f"nvscope default sharing: {_shared.stats()}; {count} new partitions' first runs "
                                f"took {seconds:.1f} s")
PY
  (cd /tmp && NVSCOPE_DEV=1 NVSCOPE_SHARE=all PYTHONPATH="$out:$PYTHONPATH" timeout 300 python -m pytest \
    "$site/thunder/tests/test_nvfuser.py" -q -p no:cacheprovider -p nvscope.pytest_plugin -p nvscope_share_report \
    -W ignore::DeprecationWarning 2>&1) | tee -a "$log" | tail -6
fi
if part thunder-suite-torch; then
  step "Thunder's own test_nvfuser.py, plain, then every test under --nv-on-error torch"
  for flags in "" "--nv-on-error torch"; do
    echo "-- flags: ${flags:-(none)}" | tee -a "$log"
    (cd /tmp && NVSCOPE_DEV=1 timeout 300 python -m pytest "$site/thunder/tests/test_nvfuser.py" -q -rfE \
      -p no:cacheprovider -p nvscope.pytest_plugin $flags -W ignore::DeprecationWarning 2>&1) | tee -a "$log" \
      | grep -E "^(FAILED|ERROR)|passed|failed" | tail -30
  done
fi
if [[ $parts == *distributed* ]]; then
  step "examples/ddp_train.py (2 ranks)"
  timeout 300 python -m torch.distributed.run --nproc-per-node 2 examples/ddp_train.py 2>&1 | tee -a "$log" | tail -30
fi
step "done"
