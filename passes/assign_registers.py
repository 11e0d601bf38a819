"""assign_registers: per-warpgroup register budgets for setmaxnreg."""
from __future__ import annotations

from dgir.ir import Node, Op
from dgir.verifier import REGISTER_FILE   # 32-bit registers per SM

from . import Pass

PRODUCER_REGS = 40        # the TMA warpgroup needs only addresses and counters


class AssignRegisters(Pass):
    """Give each warpgroup region a `regs` budget (what `setmaxnreg` sets): the load-only region
    shrinks to 40 per thread and the math regions share the rest, rounded down to a multiple of 8
    and capped at 256: 40 / 256 with one math warpgroup, 40 / 232 with two (DeepGEMM's split),
    40 / 152 with three (BLOCK_M 192).  A kernel with `ctas_per_sm` = 2 shares the SM with a second
    CTA: the budgets come from half the register file.  The verifier checks the total against the
    register file's share.
    """
    name = "assign_registers"

    def run(self, kernel: Node) -> Node:
        wgs = [n for n in kernel.body if n.op is Op.WARPGROUP]
        producers = [n for n in wgs if set(n.get("roles", ())) == {"load"}]
        n_prod = sum(len(n.get("ids")) for n in producers)
        n_math = sum(len(n.get("ids")) for n in wgs if n not in producers)
        per_cta = REGISTER_FILE // (kernel.get("ctas_per_sm") or 1)
        math_regs = min(256, (per_cta // 128 - PRODUCER_REGS * n_prod) // max(n_math, 1) // 8 * 8)
        body = []
        for n in kernel.body:
            if n.op is Op.WARPGROUP and n.get("regs") is None:
                n = n.with_attrs(regs=PRODUCER_REGS if n in producers else math_regs)
            body.append(n)
        return kernel.with_body(body)


PASS = AssignRegisters()
