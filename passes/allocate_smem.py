"""allocate_smem: give every shared-memory buffer and barrier an offset in the dynamic window."""
from __future__ import annotations

from dgir.ir import Node, Op
from dgir.verifier import smem_budget

from . import Pass

BASE_SLACK = 1024        # the kernel rounds the window base up to 1024 bytes (swizzle atoms)


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class AllocateSmem(Pass):
    """Lay out the dynamic shared-memory window: 128B-swizzled rings first, each slot 1024-byte
    aligned (a swizzle atom is 8 rows x 128 B, and wgmma descriptors assume base_offset 0), then the
    other buffers at 128 bytes, then two 8-byte mbarriers (full, empty) per channel stage and two
    (ready, free) per receive buffer of cluster split-K (smem with `exchange`).  Writes
    `offset` and `slot_bytes` on each smem decl, `barriers` (offset of full[0]; empty follows full) on
    each channel and `smem_bytes` on the kernel (launch size, including the alignment slack).
    A layout over the budget (the opt-in limit, or an SM's share with `ctas_per_sm` CTAs) is refused
    here, naming the ring depth, rather than by the driver at the launch.
    """
    name = "allocate_smem"

    def run(self, kernel: Node) -> Node:
        off = 0
        body = []
        # a tile placed inside a ring's slots (`ring`: stage_in_ring_slot) takes no bytes of its own
        smem = sorted((n for n in kernel.body if n.op is Op.SMEM and not n.get("ring")),
                      key=lambda n: -int(n.get("swizzle", 0) or 0))
        placed = {}
        for n in smem:
            align = 1024 if n.get("swizzle") else 128
            slot = _align(n.type.nbytes, align)
            off = _align(off, align)
            placed[n.name] = n.with_attrs(offset=off, slot_bytes=slot)
            off += slot * n.get("stages", 1)
        chans = {}
        off = _align(off, 8)
        for n in kernel.body:
            if n.op is Op.CHANNEL:
                chans[n.name] = n.with_attrs(barriers=off)
                off += 16 * n.get("stages")
        for name, n in list(placed.items()):     # a cluster-exchanged partial: ready and free barriers
            if n.get("exchange"):
                placed[name] = n.with_attrs(barriers=off)
                off += 16
        for n in kernel.body:
            body.append(placed.get(n.name, n) if n.op is Op.SMEM else chans.get(n.name) if n.op is Op.CHANNEL else n)
        total, occ = off + BASE_SLACK, kernel.get("ctas_per_sm") or 1
        limit = smem_budget(occ)
        if total > limit:
            rings = ", ".join(f"%{n.name} {n.get('stages')} x {placed[n.name].get('slot_bytes')} B"
                              for n in smem if n.get("stages", 1) > 1)
            raise ValueError(f"{kernel.name}: shared memory needs {total} B, over the {limit} B a CTA may have "
                             f"({occ} per SM); rings: {rings}: fewer stages fit")
        return kernel.with_body(body).with_attrs(smem_bytes=total)


PASS = AllocateSmem()
