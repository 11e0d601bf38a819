"""hoist_wait_arithmetic: slot addresses and wgmma descriptors computed ahead of each barrier wait."""
from __future__ import annotations

from dgir.ir import Node

from . import Pass


class HoistWaitArithmetic(Pass):
    """Mark the kernel `hoist_waits=True`: the PTX emitter then moves the integer arithmetic that
    follows each mbarrier spin loop and does not depend on the wait (the slot's shared-memory
    addresses, the wgmma descriptors, a TMA's coordinates) in front of the loop
    (emitters/ptx/hoist.py).  ptxas does not move code above a loop, so without it that arithmetic
    sits between the data's arrival and the wgmma it feeds.

    Applied where three math warpgroups share the tensor cores (BLOCK_M 192): each issues one
    wgmma group a K block, a third of the tensor cores' work, so the path from its wait to its
    wgmma shows in the loop's time.  Measured on the H200 (bench/TUNING.md steps 66-68): 12 such
    table kernels 0.986x time (geometric mean; 4096x2112 and 8192x2112 -4..-5% in every run, none
    slower than +0.7%).  With two math warpgroups and one (256x128 and the small-M tiles: 0.991 and
    1.002 over 16 cells in two runs; 128-row tiles: 0.991 over 13 kernels, -3.7% to +1.3%) the
    effect stayed inside the passes' spread, so those kernels keep their code; the decision is
    recorded either way.  `force=True` /
    `False` applies it to every kernel / none (A/B experiments: bench variants `hoist`, `nohoist`).
    """
    name = "hoist_wait_arithmetic"

    def __init__(self, force: bool | None = None):
        self.force = force

    def run(self, kernel: Node) -> Node:
        if self.force is not None:
            return kernel.with_attrs(hoist_waits=self.force)
        math_wgs = (kernel.get("threads") or 0) // 128 - 1      # besides the load role's warpgroup
        if math_wgs >= 3:
            return kernel.with_attrs(hoist_waits=True)
        return kernel.with_attrs(hoist_waits=f"skipped: {math_wgs} math warpgroup{'s' if math_wgs != 1 else ''}")


PASS = HoistWaitArithmetic()
