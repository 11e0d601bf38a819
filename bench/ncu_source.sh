#!/usr/bin/env bash
# Per-SASS-instruction warp stall samples of one of our kernels (device call; carry .whl):
#     bash bench/ncu_source.sh M,N,K bm,bn,stages[,cl]  ->  $OUT/ncu_source.csv, $OUT/ncu_warpstate.txt
set -u
OUT=${OUT:-/tmp/out}
R=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$R"/.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site PATH=$PATH:/usr/local/cuda/bin
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
cd /tmp
timeout 250 "$NCU" --section SourceCounters --section WarpStateStats --profile-from-start off --launch-skip 1 \
  --launch-count 1 --page source --print-source sass --csv python3 "$R/bench/ncu_one.py" "$1" "$2" \
  > "$OUT/ncu_source.csv" 2> "$OUT/ncu_source.err"; echo "source rc=$?"
timeout 200 "$NCU" --section WarpStateStats --section SchedulerStats --profile-from-start off --launch-skip 1 \
  --launch-count 1 python3 "$R/bench/ncu_one.py" "$1" "$2" > "$OUT/ncu_warpstate.txt" 2>&1; echo "warpstate rc=$?"
timeout 200 "$NCU" --section WarpStateStats --section SchedulerStats --profile-from-start off --launch-skip 1 \
  --launch-count 1 python3 "$R/bench/ncu_one.py" "$1" cublas > "$OUT/ncu_warpstate_cublas.txt" 2>&1; echo "cublas rc=$?"
