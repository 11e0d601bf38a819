"""stage_in_ring_slot: D's staging tile lives in the ring slot of each tile's last K block."""
from __future__ import annotations

from dataclasses import replace

from dgir.ir import DType, Node, Op, Type

from . import Pass

I32 = Type(DType.i32)
MATH_SYNC = "math"       # sync [across="math"]: one named barrier over every math warpgroup of the CTA


class StageInRingSlot(Pass):
    """For kernels that ask for it (config staging="ring", kernel attr `staging`): the TMA
    epilogue's bf16 staging tile takes no shared memory of its own, so a 128x128 tile's 32 KB
    becomes one more ring stage (cuBLAS's 128x128 FP8 kernel runs six).

    Where it goes instead: the ring slot that held the tile's last K block.  Once every math
    warpgroup has retired its last wgmma that slot's A and B bytes are dead, and the load role
    cannot refill it until the consumers release it.  So the math warpgroups keep that one slot:

        k-loop:    release(ab, ctr, keep=d_slot)     every K block but the last is released as before
        epilogue:  sync [across="math"]              every warpgroup's last wgmma read of the slot retired
                   stage_out(d_tile, acc, d_slot)    the staging panels at their offsets in the slot
                   sync [fence_async]; tma_store(D, d_tile, n0, m0, d_slot)
                   tma_store_wait [read]; sync       the TMA engine has read the staging bytes ...
                   release(ab, d_slot)               ... so the load role may refill the slot

    where d_slot = kb_base + K blocks - 1 is the counter of the tile's last K block.  The previous
    tile's store needs no wait before the staging writes any more (its slot was released only after
    its read).  Which bytes of the slot hold which staging panel is `ring_staging_panels`
    (dgir/ops/fp8_gemm.py), recorded as `panels` on the staging tile's declaration; allocate_smem
    gives the tile no offset.  The load role runs ahead by the other stages meanwhile, so the ring
    must have two or more (check_config).

    The cost: the deferred release holds one slot through the epilogue, and each warpgroup's store
    leader waits for its store's read before the next tile (a 16-32 KB read of shared memory).
    """
    name = "stage_in_ring_slot"

    def run(self, kernel: Node) -> Node:
        if kernel.get("staging") != "ring":
            return kernel
        from dgir.ops.fp8_gemm import ring_staging_panels
        panels = ring_staging_panels(kernel.get("block_m"), kernel.get("block_n"))
        if panels is None:
            raise ValueError(f"{self.name}: a {kernel.get('block_m')}x{kernel.get('block_n')} staging tile "
                             "does not fit one ring slot")
        body, staged = [], {}
        for r in kernel.body:
            if r.op is Op.WARPGROUP and "store" in r.get("roles", ()):
                r = r.with_body([self.rewrite_tile_loop(c, staged, len(r.get("ids", ()))) for c in r.body])
            body.append(r)
        if not staged:
            raise ValueError(f"{self.name}: no tile loop with a TMA epilogue to rewrite")
        out = []
        for n in body:
            if n.op is Op.SMEM and n.name in staged:
                n = n.with_attrs(ring=staged[n.name], panels=tuple(panels))
            out.append(n)
        return kernel.with_body(out).with_attrs(staging="ring slot of each tile's last K block")

    # ------------------------------------------------------------------------------------------
    def rewrite_tile_loop(self, tloop: Node, staged: dict, math_wgs: int) -> Node:
        if tloop.op is not Op.FOR or not any(c.op is Op.STAGE_OUT for c in tloop.body):
            if tloop.op is Op.FOR and any(c.op is Op.STAGE_OUT for c in tloop.walk()):
                raise ValueError(f"{self.name}: the epilogue is not at the tile loop's top level (woven form?)")
            return tloop
        first_wait = next(c for c in tloop.walk() if c.op is Op.WAIT)
        channel, ctr = first_wait.args[:2]
        defs = {c.name: c for c in tloop.walk() if c.name and c.op is not Op.FOR}
        ctr_def = defs.get(ctr)
        base = defs.get(ctr_def.args[0]) if ctr_def is not None and ctr_def.op is Op.ADD else None
        if base is None or base.op is not Op.MUL or base.args[0] != tloop.name or not isinstance(base.args[1], int):
            raise ValueError(f"{self.name}: the ring counter of a K block is not kb_base + k with "
                             f"kb_base = tile * K blocks")
        role = {"role": "mma"}
        d_slot = Node(Op.ADD, "d_slot", (base.name, base.args[1] - 1), I32, role)
        body, epilogue_seen = [], False
        for c in tloop.body:
            if c is base:
                body += [c, d_slot]
            elif c.op is Op.TMA_STORE_WAIT and c.get("read") and not epilogue_seen:
                continue                       # the previous tile's staging slot was read before its release
            elif c.op is Op.SYNC and not c.get("fence_async") and not epilogue_seen:
                epilogue_seen = True
                body.append(c.with_attrs(across=MATH_SYNC) if math_wgs > 1 else c)
            elif c.op is Op.STAGE_OUT:
                staged[c.args[0]] = channel
                body.append(replace(c, args=c.args + (d_slot.name,)))
            elif c.op is Op.TMA_STORE:
                body.append(replace(c, args=c.args + (d_slot.name,)))
            else:
                body.append(self.keep_last(c, d_slot.name))
        last_store = max(i for i, c in enumerate(body) if c.op is Op.TMA_STORE)
        store = {"role": "store"}
        body[last_store + 1:last_store + 1] = [
            Node(Op.TMA_STORE_WAIT, "", (), None, {"read": True, **store}),
            Node(Op.SYNC, "", (), None, store),
            Node(Op.RELEASE, "", (channel, d_slot.name), None, role)]
        return tloop.with_body(body).with_attrs(staging_slot=d_slot.name)

    @classmethod
    def keep_last(cls, n: Node, d_slot: str) -> Node:
        """Every K block's release, with the last block's counter to keep (the epilogue releases it)."""
        if n.op is Op.RELEASE:
            return replace(n, args=n.args + (d_slot,))
        if n.body:
            return n.with_body([cls.keep_last(c, d_slot) for c in n.body])
        return n


PASS = StageInRingSlot()
