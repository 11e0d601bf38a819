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

    Applied where a CTA issues three or more wgmma groups a K block (one per 64-row slice: BLOCK_M
    192, three math warpgroups; BLOCK_M 256, two warpgroups of two waves).  Then the tensor cores'
    K block is long and the path from each wait to its wgmma shows in the loop's time.  Measured
    on the H200 (bench/TUNING.md steps 66-68, 78): 12 of the table's 192-row kernels 0.986x time
    (geometric mean; 4096x2112 and 8192x2112 -4..-5% in every run); on a 16-SM grid (fixed
    1980 MHz, below the power limit) 256x128 -2.9% and 192x128 -1.4% per clock, and 256x128 at
    full scale 0.992x over seven table kernels (-3.4% at 4096x24576x1536, +2.2% at 8192x32768x512).
    With two groups a K block it stays off: 128x128 is 3.8% slower per clock with it (the 64-row
    small-M tiles: 0.991-1.002 over 16 cells, inside the spread).  The decision is recorded on
    the kernel either way.  `force=True` /
    `False` applies it to every kernel / none (A/B experiments: bench variants `hoist`, `nohoist`).
    """
    name = "hoist_wait_arithmetic"

    def __init__(self, force: bool | None = None):
        self.force = force

    def run(self, kernel: Node) -> Node:
        if self.force is not None:
            return kernel.with_attrs(hoist_waits=self.force)
        groups = (kernel.get("block_m") or 0) // 64      # wgmma groups a K block: one per 64-row slice
        if groups >= 3:
            return kernel.with_attrs(hoist_waits=True)
        return kernel.with_attrs(hoist_waits=f"skipped: {groups} wgmma group{'s' if groups != 1 else ''} a K block")


PASS = HoistWaitArithmetic()
