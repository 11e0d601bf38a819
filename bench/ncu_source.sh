#!/usr/bin/env bash
# Per-SASS-instruction warp stall samples of one of our kernels (device call; carry .whl):
#     bash bench/ncu_source.sh M,N,K bm,bn,stages[,cl]  ->  $OUT/ncu_source.csv, $OUT/ncu_warpstate.txt
set -u
source "$(dirname "$0")/device_setup.sh"
[ -n "$NCU" ] || { echo "no ncu"; exit 5; }
cd /tmp
timeout 250 "$NCU" --section SourceCounters --section WarpStateStats --profile-from-start off --launch-skip 1 \
  --launch-count 1 --page source --print-source sass --csv python3 "$R/bench/ncu_one.py" "$1" "$2" \
  > "$OUT/ncu_source.csv" 2> "$OUT/ncu_source.err"; echo "source rc=$?"
timeout 200 "$NCU" --section WarpStateStats --section SchedulerStats --profile-from-start off --launch-skip 1 \
  --launch-count 1 python3 "$R/bench/ncu_one.py" "$1" "$2" > "$OUT/ncu_warpstate.txt" 2>&1; echo "warpstate rc=$?"
timeout 200 "$NCU" --section WarpStateStats --section SchedulerStats --profile-from-start off --launch-skip 1 \
  --launch-count 1 python3 "$R/bench/ncu_one.py" "$1" cublas > "$OUT/ncu_warpstate_cublas.txt" 2>&1; echo "cublas rc=$?"
