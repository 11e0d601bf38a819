"""assign_registers: per-warpgroup register budgets for setmaxnreg."""
from __future__ import annotations

from dgir.ir import Node, Op
from dgir.verifier import launch_registers

from . import Pass

PRODUCER_REGS = 40        # the TMA warpgroup needs only addresses and counters


class AssignRegisters(Pass):
    """Give each warpgroup region a `regs` budget (what `setmaxnreg` sets): the load-only region
    shrinks to 40 per thread and the math regions share the rest, rounded down to a multiple of 8
    and capped at 256: 40 / 256 with one math warpgroup, 40 / 232 with two (DeepGEMM's split),
    40 / 152 with three (BLOCK_M 192).  A kernel with `ctas_per_sm` > 1 shares the SM: the budgets
    come from the registers the CTA is launched with (`launch_registers`: 40 / 216 at two CTAs per
    SM, 40 / 120 at three, 40 / 88 at four), since setmaxnreg only moves registers between one CTA's
    warps.  The verifier checks the total against that pool.
    """
    name = "assign_registers"

    def run(self, kernel: Node) -> Node:
        wgs = [n for n in kernel.body if n.op is Op.WARPGROUP]
        producers = [n for n in wgs if set(n.get("roles", ())) == {"load"}]
        n_prod = sum(len(n.get("ids")) for n in producers)
        n_math = sum(len(n.get("ids")) for n in wgs if n not in producers)
        threads = 128 * (n_prod + n_math)
        pool = launch_registers(threads, kernel.get("ctas_per_sm") or 1) * threads   # what the CTA starts with
        math_regs = min(256, (pool // 128 - PRODUCER_REGS * n_prod) // max(n_math, 1) // 8 * 8)
        body = []
        for n in kernel.body:
            if n.op is Op.WARPGROUP and n.get("regs") is None:
                n = n.with_attrs(regs=PRODUCER_REGS if n in producers else math_regs)
            body.append(n)
        return kernel.with_body(body)


PASS = AssignRegisters()
