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

    Applied where a K block's wgmma work is long: a CTA issuing three or more wgmma groups a K block
    (one per 64-row slice: BLOCK_M 192, three math warpgroups; BLOCK_M 256, two warpgroups of two
    waves), or two groups at least 192 columns wide (128x192).  Then the path from each wait to
    its wgmma shows in the loop's time.  Measured on the H200 (bench/TUNING.md steps 66-68, 78, 80):
    12 of the table's 192-row kernels 0.986x time (geometric mean; 4096x2112 and 8192x2112 -4..-5%
    in every run); on a 16-SM grid (fixed 1980 MHz, below the power limit) 256x128 -2.9%, 192x128
    -1.4% and 128x192 -1.7% per clock; at full scale 0.992x over the table's seven 256x128 kernels
    and 0.988x over its five 128x192 ones.  It stays off for 128x128 (3.8% slower per clock with
    it) and the 64-row small-M tiles (0.991-1.002 over 16 cells, inside the spread).  The decision
    is recorded on the kernel either way.  `force=True` /
    `False` applies it to every kernel / none (A/B experiments: bench variants `hoist`, `nohoist`).
    """
    name = "hoist_wait_arithmetic"

    def __init__(self, force: bool | None = None):
        self.force = force

    def run(self, kernel: Node) -> Node:
        if self.force is not None:
            return kernel.with_attrs(hoist_waits=self.force)
        groups = (kernel.get("block_m") or 0) // 64      # wgmma groups a K block: one per 64-row slice
        width = kernel.get("block_n") or 0
        if groups >= 3 or (groups == 2 and width >= 192):
            return kernel.with_attrs(hoist_waits=True)
        return kernel.with_attrs(hoist_waits=f"skipped: {groups} wgmma group{'s' if groups != 1 else ''} "
                                             f"of {width} columns a K block")


PASS = HoistWaitArithmetic()
