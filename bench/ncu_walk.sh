#!/usr/bin/env bash
# Memory-side ncu counters of fp8_gemm_nt configs in experiments.py's spec keys (device call; carry .whl,
# see h200_session.sh), with the spread over L2 slices and DRAM channels (.max / .avg of a counter):
#     bash bench/ncu_walk.sh M,N,K:CONFIG ...  ->  $OUT/ncu_walk_<i>.csv  (bench/TUNING.md step 100)
set -u
source "$(dirname "$0")/device_setup.sh"
[ -n "$NCU" ] || { echo "no ncu"; exit 5; }
FULL=sm__cycles_elapsed.max,sm__cycles_active.avg,gpc__cycles_elapsed.avg.per_second,\
dram__bytes_read.sum,dram__bytes_write.sum,dram__bytes.avg,dram__bytes.max,\
lts__t_bytes.sum,lts__t_bytes.avg,lts__t_bytes.max,lts__t_sector_hit_rate.pct,\
l1tex__m_xbar2l1tex_read_bytes.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed
SAFE=sm__cycles_elapsed.avg,lts__t_bytes.sum,dram__bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum
cd /tmp
i=0
for spec in "$@"; do
  shape=${spec%%:*}; cfg=${spec#*:}
  for metrics in "$FULL" "$SAFE"; do
    timeout 150 "$NCU" --metrics "$metrics" --profile-from-start off --launch-skip 1 --launch-count 1 --csv \
      python3 "$R/bench/ncu_one.py" "$shape" "$cfg" > "$OUT/ncu_walk_$i.csv" 2> "$OUT/ncu_walk_$i.err"
    rc=$?; echo "$spec rc=$rc"; [ $rc -eq 0 ] && break
  done
  i=$((i + 1))
done
