"""The Ascend 950 (arch 3510) pipeline, in order.  The lowered IR (dgir/ops/ascend_gemm.py) is dump 00;
each pass below writes one numbered dump; the AscendC emitter (emitters/ascendc) reads the last."""
from .. import ascend_allocate_buffers, ascend_assign_pipes, ascend_insert_sync, ascend_promote_scales

PIPELINE = [
    # math: mmad_scaled -> per-128-K partial in L0C, Fixpipe to a GM workspace, cube->vector
    # cross-core flags, vector-core FP32 promotion and bf16 store (no-op for bf16 GEMMs)
    ascend_promote_scales.PASS,
    # units: every op gets the AscendC pipe that runs it (MTE2, MTE1, M, FIX, V, MTE3)
    ascend_assign_pipes.PASS,
    # sync: SetFlag/WaitFlag pairs between the pipes that write and read each buffer
    ascend_insert_sync.PASS,
    # layout last: offsets in L1/L0A/L0B/L0C/UB, checked against the 950's capacities
    ascend_allocate_buffers.PASS,
]
