#!/usr/bin/env bash
# Nsight Compute's speed-of-light, memory, warp-state and scheduler sections for the API's kernel and
# cuBLAS's at each shape (device call; carry .whl, see h200_session.sh):
#     bash bench/ncu_sections.sh M,N,K [M,N,K ...]  ->  $OUT/ncu_sections_<M>x<N>x<K>_{api,cublas}.txt
# ncu flushes the caches before each pass and fixes the clock at base, so the two kernels of a shape
# are compared at the same clock from a cold L2, as the flushing timer sees them.
set -u
source "$(dirname "$0")/device_setup.sh"
[ -n "$NCU" ] || { echo "no ncu"; exit 5; }
cd /tmp
for shape in "$@"; do
  for tag in api cublas; do
    f="$OUT/ncu_sections_${shape//,/x}_${tag}.txt"
    timeout 200 "$NCU" --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --section LaunchStats --profile-from-start off --launch-skip 1 --launch-count 1 \
      python3 "$R/bench/ncu_one.py" "$shape" "$tag" > "$f" 2>&1
    echo "$shape $tag rc=$?"
  done
done
