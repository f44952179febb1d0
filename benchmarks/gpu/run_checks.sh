#!/usr/bin/env bash
# The GPU checks, on a lent GPU machine (the device tool), from the repository root, with `carry: [".whl"]`:
#
#     STEPS="cuda quickstart lanes compare" bash benchmarks/gpu/run_checks.sh
#
# Installs the wheels benchmarks/gpu/fetch_wheels.sh put in .whl/ into /tmp/site, builds the C++ lane allocator
# in place, then runs each step in STEPS under its own time limit (STEP_TIMEOUT_S, default 240 s), with its log in
# $OUT/<step>.log (the device tool brings $OUT back); TIMEOUT_<STEP> (for example TIMEOUT_SUITE=300) overrides the
# limit for one step. A step that fails or times out does not stop the others; the
# exit code is the number of steps that failed. The device tool brings back at most 8 files from $OUT, so at the
# end the logs are packed into $OUT/logs.tgz (PACK_LOGS=0 leaves them as they are). Steps:
#   info        nvidia-smi, torch's view of the GPU, the versions in use
#   cuda        the GPU tests: tests/test_allocator_cuda.py and tests/test_host.py
#   suite       the whole suite with the GPU present (pytest -n $SUITE_WORKERS, default 8; -v, so that a run its
#               limit stops still names the tests that failed: ~2,200 tests need about 300 s at -n 12)
#   quickstart  the README's main job, examples/quickstart.py (its models on the GPU)
#   lanes       benchmarks/lanes.py --device cuda (lanes against serial and one process per trial)
#   compare     benchmarks/compare.py --sweep digits --device cuda --tools $COMPARE_TOOLS, $COMPARE_RUNS times
#               (default fluidsalus,fluidsalus_optuna,optuna, twice: the second run tells a slow machine from
#               first-run costs)
#   gpumem      benchmarks/gpu_memory.py (device memory outside torch's allocator)
#   actorstart  benchmarks/gpu/actor_start.py (the steps of a GPU device actor's start, against a CPU one's)
#   tests       python3 -m pytest on the test paths or node ids in $TESTS (one re-check, without the whole suite)
#   longsweep   benchmarks/long_sweep.py --trials 100 --step-s 0.005 --no-pruning (the driver's round trips when
#               many lanes share the GPU device: does a trial's report hide behind its neighbours' steps?)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu_checks}
mkdir -p "$OUT"
STEPS=${STEPS:-"info cuda quickstart lanes compare"}
STEP_TIMEOUT_S=${STEP_TIMEOUT_S:-240}
COMPARE_TOOLS=${COMPARE_TOOLS:-fluidsalus,fluidsalus_optuna,optuna}
COMPARE_RUNS=${COMPARE_RUNS:-2}
SUITE_WORKERS=${SUITE_WORKERS:-8}
export PYTHONUNBUFFERED=1

if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/install.log" 2>&1 || { echo "installing the wheels failed: $OUT/install.log" >&2; exit 100; }
  export PYTHONPATH=/tmp/site:$PWD
else
  echo "no wheels in .whl/: run benchmarks/gpu/fetch_wheels.sh here first, and carry .whl" >&2
  export PYTHONPATH=$PWD
fi
export PATH=/tmp/site/bin:$PATH
python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || echo "the lane allocator did not build: $OUT/build.log"

step_command() {
  case "$1" in
    info) echo 'nvidia-smi; python3 -c "import torch, ray, optuna, fluidsalus; print(torch.__version__,
          torch.cuda.get_device_name(0), ray.__version__, optuna.__version__)"' ;;
    cuda) echo "python3 -m pytest -q -rs -p no:cacheprovider tests/test_allocator_cuda.py tests/test_host.py" ;;
    suite) echo "python3 -m pytest -v -rfE -p no:cacheprovider -n $SUITE_WORKERS tests" ;;
    quickstart) echo "python3 examples/quickstart.py" ;;
    lanes) echo "python3 benchmarks/lanes.py --device cuda" ;;
    compare) echo "for i in \$(seq $COMPARE_RUNS); do python3 benchmarks/compare.py --sweep digits --device cuda \
                   --tools $COMPARE_TOOLS; done" ;;
    gpumem) echo "python3 benchmarks/gpu_memory.py" ;;
    actorstart) echo "python3 benchmarks/gpu/actor_start.py --repeats 3" ;;
    tests) echo "python3 -m pytest -q -rs -p no:cacheprovider ${TESTS:?set TESTS to the tests to run}" ;;
    longsweep) echo "python3 benchmarks/long_sweep.py --trials 100 --step-s 0.005 --no-pruning" ;;
    *) return 1 ;;
  esac
}

failed=0
for step in $STEPS; do
  if ! command=$(step_command "$step"); then
    echo "unknown step $step" >&2; failed=$((failed + 1)); continue
  fi
  limit_var="TIMEOUT_${step^^}"
  start=$(date +%s)
  timeout "${!limit_var:-$STEP_TIMEOUT_S}" bash -c "$command" > "$OUT/$step.log" 2>&1
  rc=$?
  echo "step $step: exit $rc in $(( $(date +%s) - start )) s (log $OUT/$step.log)"
  tail -5 "$OUT/$step.log"
  [[ $rc -eq 0 ]] || failed=$((failed + 1))
done
if [[ "${PACK_LOGS:-1}" == "1" ]]; then
  (cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
fi
exit "$failed"
