"""The Ascend 910B (arch 2201) pipeline, in order.  Dump 00 is the lowered IR; no FP8 on this chip,
so there is no promotion pass (fp8 operators are rejected before lowering)."""
from .. import ascend_allocate_buffers, ascend_assign_pipes, ascend_insert_sync

PIPELINE = [
    # units: every op gets the AscendC pipe that runs it (MTE2, MTE1, M, FIX)
    ascend_assign_pipes.PASS,
    # sync: SetFlag/WaitFlag pairs between the pipes that write and read each buffer
    ascend_insert_sync.PASS,
    # layout last: offsets in L1/L0A/L0B/L0C, checked against the 910B's capacities (L0C 128 KB)
    ascend_allocate_buffers.PASS,
]
