"""uniform_warpgroup_index: make the warpgroup index provably warp-uniform for ptxas."""
from __future__ import annotations

from dgir.ir import Node

from . import Pass


class UniformWarpgroupIndex(Pass):
    """Mark the kernel `uniform_wg_index=True`: the emitter then broadcasts the warpgroup index
    (tid / 128) from lane 0 with `shfl.sync.idx`, as CUTLASS's canonical_warp_group_idx does.  The
    value does not change, but ptxas can now prove it warp-uniform, and everything derived from it
    (the wgmma descriptors, the ring slot addresses) moves to the uniform datapath: without it
    ptxas builds each descriptor in regular registers and moves four words into uniform registers
    before every wgmma (a 128x128 K loop: 72 -> 5 R2UR, 1048 -> 912 SASS instructions).

    Applied where two or three math warpgroups issue wgmma (BLOCK_M >= 128), whose K loops are
    bound by instruction issue: +7-9% for 128x128 tiles, +2-3% for 256x128 on the H200
    (bench/TUNING.md step 31; BLOCK_M 192 tiles were measured with it, step 41).  With one math warpgroup (64-row tiles, memory-bound at small M) the measured effect
    was within the +-4% noise, so those kernels keep their code; the decision is recorded either
    way.  `force=True` / `False` applies it to every kernel / none (A/B experiments).
    """
    name = "uniform_warpgroup_index"

    def __init__(self, force: bool | None = None):
        self.force = force

    def run(self, kernel: Node) -> Node:
        math_wgs = (kernel.get("threads") or 0) // 128 - 1      # besides the load role's warpgroup
        if self.force is not None:
            return kernel.with_attrs(uniform_wg_index=self.force)
        if math_wgs >= 2:
            return kernel.with_attrs(uniform_wg_index=True)
        return kernel.with_attrs(uniform_wg_index=f"skipped: {math_wgs} math warpgroup")


PASS = UniformWarpgroupIndex()
