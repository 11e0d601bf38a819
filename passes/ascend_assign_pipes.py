"""ascend_assign_pipes: tag every Ascend data-movement / compute op with the AscendC pipe that executes it."""
from __future__ import annotations

from dgir.ir import Node, Op, map_bodies

from . import Pass


class AscendAssignPipes(Pass):
    """Set `pipe` on each op from what it moves and where (ascendc.md §1.5 pipe ownership):
    copy_in GM->L1/UB = MTE2, load_l0 L1->L0A/L0B = MTE1, mmad = M, fixpipe L0C->GM = FIX,
    vfill / vpromote / vcast = V, copy_out UB->GM = MTE3; MX: load_l0_mx (data + e8m0 scales) and
    fill_l1 (InitConstValue on A1/B1) = MTE1, mmad_mx = M (950 only).  Cross-core flags keep the pipe they were
    given.  The sync pass and the emitter read these tags; a copy between positions the target has no
    path for is rejected here (e.g. GM->L0A, which the 950 removed).
    """
    name = "ascend_assign_pipes"

    PIPES = {Op.LOAD_L0: "MTE1", Op.MMAD: "M", Op.FIXPIPE: "FIX", Op.VFILL: "V", Op.VPROMOTE: "V",
             Op.VCAST: "V", Op.COPY_OUT: "MTE3", Op.COPY_IN: "MTE2",
             Op.LOAD_L0_MX: "MTE1", Op.MMAD_MX: "M", Op.FILL_L1: "MTE1"}

    def run(self, kernel: Node) -> Node:
        pos = {n.name: n.get("pos") for n in kernel.body if n.op is Op.LOCAL}
        chip = kernel.get("chip")

        def tag(parent, body):
            out = []
            for n in body:
                p = self.PIPES.get(n.op)
                if n.op is Op.COPY_IN and pos.get(n.args[0]) not in ("L1", "UB"):
                    raise ValueError(f"copy_in to %{n.args[0]} ({pos.get(n.args[0])}): GM is copied only into L1 or UB")
                if n.op in (Op.LOAD_L0, Op.LOAD_L0_MX) and (pos.get(n.args[1]) != "L1"
                                                        or pos.get(n.args[0]) not in ("L0A", "L0B")):
                    raise ValueError(f"{n.op.value} moves L1 -> L0A/L0B, not {pos.get(n.args[1])} -> {pos.get(n.args[0])}")
                if n.op is Op.LOAD_L0_MX and pos.get(n.args[2]) != "L1":
                    raise ValueError(f"load_l0_mx reads its e8m0 scales from L1, not {pos.get(n.args[2])}")
                if n.op is Op.MMAD_MX and chip != "950":
                    raise ValueError("mmad_mx (MmadMx, e8m0 block scales) exists only on the Ascend 950 (arch 3510)")
                if n.op is Op.FILL_L1 and pos.get(n.args[0]) != "L1":
                    raise ValueError(f"fill_l1 initialises L1 only (the 950 has no L0A/L0B fill), not {pos.get(n.args[0])}")
                out.append(n.with_attrs(pipe=p) if p else n)
            return out

        return map_bodies(kernel, tag)


PASS = AscendAssignPipes()
