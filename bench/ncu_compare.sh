#!/usr/bin/env bash
# ncu counters of our kernel(s) and cuBLAS's on one shape (device call; carry .whl, see h200_session.sh):
#     bash bench/ncu_compare.sh M,N,K CONFIG [CONFIG ...]  ->  $OUT/ncu_<M>x<N>x<K>_<config>.csv (and _cublas)
# CONFIG as bench/ncu_one.py takes it: bm,bn,stages[,cl], `api` (the API's choice) or experiments
# spec keys.  NCU_METRICS replaces the default list (ncu also takes regex:<pattern> entries there).
set -u
source "$(dirname "$0")/device_setup.sh"
[ -n "$NCU" ] || { echo "no ncu"; exit 5; }
METRICS=${NCU_METRICS:-sm__cycles_elapsed.avg,gpc__cycles_elapsed.avg.per_second,sm__inst_executed.sum,\
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,\
sm__sass_thread_inst_executed_op_ffma_pred_on.sum,lts__t_bytes.sum,dram__bytes.sum,\
smsp__inst_executed_op_branch.sum,sm__warps_active.avg.pct_of_peak_sustained_active,\
l1tex__m_xbar2l1tex_read_bytes.sum,smsp__average_warp_latency_issue_stalled_barrier,\
smsp__inst_executed_pipe_uniform.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
l1tex__throughput.avg.pct_of_peak_sustained_elapsed}
shape=$1; shift
cd /tmp
for tag in "$@" cublas; do
  f="$OUT/ncu_${shape//,/x}_${tag//[,=]/_}"
  timeout 240 "$NCU" --metrics "$METRICS" --profile-from-start off --launch-skip 1 --launch-count 1 --csv \
    python3 "$R/bench/ncu_one.py" "$shape" "$tag" > "$f.csv" 2> "$f.err"
  echo "$shape $tag rc=$?"; tail -3 "$f.err"
done
