"""multicast_tma: load the operand a cluster shares once, half by each CTA, multicast to both."""
from __future__ import annotations

from dgir.ir import DType, Node, Op, Type, expand_ops

from . import Pass


class MulticastTma(Pass):
    """In a kernel whose CTAs are grouped in clusters that compute neighbouring tiles (kernel attrs
    `cluster` = C and `multicast` = the shared param, e.g. A when the pair walks along N), every CTA
    would read the same panel of the shared operand from L2.  Instead each CTA loads 1/C of the
    panel's rows (part p = its cluster rank) and multicasts the box to all C CTAs: the slot fills
    from C boxes that land at rows p * box, and each CTA's full barrier still expects the whole slot
    (the peers' boxes complete bytes on it).  L2 -> SM traffic of the shared operand drops by C.

    The box of the param shrinks to box_rows / C.  Correct only in a cluster channel (the slot must
    be released by the consumers of every receiving CTA before the next multicast into it), which the
    verifier checks.  Kernels without a `cluster` attr are returned unchanged.
    """
    name = "multicast_tma"

    def run(self, kernel: Node) -> Node:
        C, shared = kernel.get("cluster") or 1, kernel.get("multicast")
        if C == 1 or shared is None:
            return kernel
        param = kernel.decl(shared)
        if any(n.get("multicast") for n in kernel.find(Op.TMA_LOAD)):
            return kernel                         # already applied
        box = tuple(param.get("box"))
        if box[1] % C:
            raise ValueError(f"multicast_tma: box rows {box[1]} of %{shared} do not split in {C}")
        part_rows = box[1] // C
        i32 = Type(DType.i32)

        def split(n: Node) -> list[Node]:
            if not (n.op is Op.TMA_LOAD and n.args[3] == shared):
                return [n]
            ch, ctr, ring, p, c0, c1 = n.args
            role = {"role": n.role}
            # this CTA's rows of the panel: c1 + rank * part_rows
            return [Node(Op.SREG, "mc_part", (), i32, {"which": "cluster_rank", **role}),
                    Node(Op.MUL, "mc_rows", ("mc_part", part_rows), i32, role),
                    Node(Op.ADD, "mc_c1", (c1, "mc_rows"), i32, role),
                    Node(Op.TMA_LOAD, "", (ch, ctr, ring, p, c0, "mc_c1", "mc_part"), None, {**n.a, "multicast": C})]

        body = [param.with_attrs(box=(box[0], part_rows)) if n is param else n for n in kernel.body]
        return expand_ops(kernel.with_body(body), split)


PASS = MulticastTma()
