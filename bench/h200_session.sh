#!/usr/bin/env bash
# One device call on the lent H200 (no network): install the carried wheels, run the GPU tests, the
# full benchmark and optional tuning experiments, everything bounded by timeouts and unbuffered so
# that a hang still leaves its output under $OUT.
#
# Here (dgir's wheel and lark's in .whl/, which git ignores):
#     bash bench/device_wheels.sh
# There (carry .whl; $OUT is the folder that comes back):
#     DGIR_GIT_REV=<commit> [REQUIRE_GPU=H200] bash bench/h200_session.sh [tests|bench|repeat|exp SPECFILE|floor|residency|probe|flush]...
# Default: tests then bench.  Results: $OUT/pytest_gpu.txt, $OUT/fp8_gemm_nt.json, $OUT/bench_log.txt,
# $OUT/<specfile stem>_exp.json (bench/specs/tuneN.txt -> tuneN_exp.json, the name bench/results/raw keeps).
set -u -o pipefail
# the device copy's git metadata can be stale (a run once recorded the session's first commit)
: "${DGIR_GIT_REV:?set DGIR_GIT_REV=<commit the wheel was built from>}"
# REQUIRE_GPU=H200: stop at once (exit 3) on any other card.  A call for the H200 kind may come as an
# H100 (steps 121-123); where only the H200's timings count, that saves the call's device time
if [ -n "${REQUIRE_GPU:-}" ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  case "$gpu" in *"$REQUIRE_GPU"*) ;; *) echo "the card is $gpu, not $REQUIRE_GPU: stop"; exit 3 ;; esac
fi
source "$(dirname "$0")/device_setup.sh"
[ $# -eq 0 ] && set -- tests bench
full_run() {   # the full benchmark (bench/fp8_gemm_nt.py) into $OUT/$1, its log into $OUT/$2
  timeout "${BENCH_TIMEOUT:-300}" python3 "$R/bench/fp8_gemm_nt.py" --out "$OUT/$1" > "$OUT/$2" 2>&1
  echo "full run rc=$?"; tail -1 "$OUT/$2" | cut -c1-300
}
while [ $# -gt 0 ]; do
  case "$1" in
    tests)   # from outside the repository, so that the installed dgir is the one imported
      (cd /tmp && timeout "${TESTS_TIMEOUT:-240}" python3 -m pytest -m gpu -p no:cacheprovider --rootdir="$R" "$R/tests" \
        2>&1 | tee "$OUT/pytest_gpu.txt" | tail -5) || { echo "gpu tests failed or timed out"; exit 4; } ;;
    bench)
      full_run fp8_gemm_nt.json bench_log.txt ;;
    repeat)  # the full run again on the same lease, to its own file: the spread between two runs of one
             # table (the first run stays the result; which is kept is decided before either is seen)
      full_run fp8_gemm_nt_repeat.json bench_log_repeat.txt ;;
    exp)
      spec=$2; shift
      timeout "${EXP_TIMEOUT:-240}" python3 "$R/bench/experiments.py" --out "$OUT/$(basename "$spec" .txt)_exp.json" \
        ${EXP_ARGS:-} $(cat "$R/$spec") 2>&1 | cut -c1-200 ;;
    floor)   # the memory floor of the small-M cells, B plain and evict-first (bench/memory_floor.py)
      timeout "${FLOOR_TIMEOUT:-300}" python3 "$R/bench/memory_floor.py" --out "$OUT/memory_floor.json" 2>&1 | tail -3 | cut -c1-300 ;;
    residency)   # resident clusters per cluster kernel, the driver's answer (bench/cluster_residency.py)
      timeout "${RESIDENCY_TIMEOUT:-120}" python3 "$R/bench/cluster_residency.py" --out "$OUT/cluster_residency.json" 2>&1 | tail -2 | cut -c1-300 ;;
    probe)   # the bare wgmma rate and dgir's loop around it (bench/wgmma_rate_probe.py)
      timeout "${PROBE_TIMEOUT:-120}" python3 "$R/bench/wgmma_rate_probe.py" --out "$OUT/wgmma_rate.json" ${PROBE_ARGS:-} 2>&1 | tail -1 | cut -c1-200 ;;
    flush)   # what the timer's writing flush costs (dirty L2) against a reading one (bench/flush_probe.py)
      timeout "${FLUSH_TIMEOUT:-120}" python3 "$R/bench/flush_probe.py" --out "$OUT/flush_probe.json" 2>&1 | tail -8 | cut -c1-300 ;;
    *) echo "unknown step $1"; exit 2 ;;
  esac
  shift
done
