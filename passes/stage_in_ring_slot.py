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

        tile li:  K blocks, each released as before (release(ab, ctr, keep=d_slot)) but the last
                  ... after the tile's first wgmma issue (the previous store has long been read):
                  if li > 0: tma_store_wait [read]; sync; release(ab, kb_base - 1)
                  epilogue: sync [across="math"]         every warpgroup's last wgmma of the slot retired
                            stage_out(d_tile, acc, d_slot)   the staging panels at their offsets in the slot
                            sync [fence_async]; tma_store(D, d_tile, n0, m0, d_slot)
        after the loop:     tma_store_wait [read]; sync; release(ab, tiles * K blocks - 1)

    where d_slot = kb_base + K blocks - 1 is the counter of the tile's last K block.  The release
    waits for the TMA engine to have read the staging bytes; placed right after the store it
    stalled each warpgroup for the read (spec 147: 5-8% slower at 2-7 tiles per CTA), so it moves
    into the next tile, after its first wgmma issue and before any wait that could need the slot
    (with two stages the next K block's).  In the shallow overlap_epilogue form that first wgmma
    was issued before the epilogue, so the release goes ahead of the k-loop.  The load role may run
    ahead by the other stages meanwhile (two or more: check_config).  Which bytes of the slot hold
    which staging panel is `ring_staging_panels` (dgir/ops/fp8_gemm.py), recorded as `panels` on the
    staging tile's declaration; allocate_smem gives the tile no offset.
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
                r = r.with_body([x for c in r.body for x in self.rewrite_tile_loop(c, staged, len(r.get("ids", ())))])
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
    def rewrite_tile_loop(self, tloop: Node, staged: dict, math_wgs: int) -> list[Node]:
        if tloop.op is not Op.FOR or not any(c.op is Op.STAGE_OUT for c in tloop.body):
            if tloop.op is Op.FOR and any(c.op is Op.STAGE_OUT for c in tloop.walk()):
                raise ValueError(f"{self.name}: the epilogue is not at the tile loop's top level (woven form?)")
            return [tloop]
        first_wait = next(c for c in tloop.walk() if c.op is Op.WAIT)
        channel, ctr = first_wait.args[:2]
        defs = {c.name: c for c in tloop.walk() if c.name and c.op is not Op.FOR}
        ctr_def = defs.get(ctr)
        base = defs.get(ctr_def.args[0]) if ctr_def is not None and ctr_def.op is Op.ADD else None
        if base is None or base.op is not Op.MUL or base.args[0] != tloop.name or not isinstance(base.args[1], int):
            raise ValueError(f"{self.name}: the ring counter of a K block is not kb_base + k with "
                             f"kb_base = tile * K blocks")
        kbs = base.args[1]
        mma, store = {"role": "mma"}, {"role": "store"}
        d_slot = Node(Op.ADD, "d_slot", (base.name, kbs - 1), I32, mma)
        body, epilogue_seen = [], False
        for c in tloop.body:
            if c is base:
                body += [c, d_slot]
            elif c.op is Op.TMA_STORE_WAIT and c.get("read") and not epilogue_seen:
                continue                       # the previous tile's staging slot was read before its release
            elif c.op is Op.SYNC and not c.get("fence_async") and not epilogue_seen:
                epilogue_seen = True
                body.append(c.with_attrs(across=MATH_SYNC) if math_wgs > 1 else c)
            elif c.op in (Op.STAGE_OUT, Op.TMA_STORE):
                if c.op is Op.STAGE_OUT:
                    staged[c.args[0]] = channel
                body.append(replace(c, args=c.args + (d_slot.name,)))
            else:
                body.append(self.keep_last(c, d_slot.name))

        def release(counter_ops: list[Node], counter: str) -> list[Node]:
            """Wait until this warpgroup's store has read the staging tile, then free its slot."""
            return counter_ops + [Node(Op.TMA_STORE_WAIT, "", (), None, {"read": True, **store}),
                                  Node(Op.SYNC, "", (), None, store),
                                  Node(Op.RELEASE, "", (channel, counter), None, mma)]

        has_prev = Node(Op.LT, "d_has_prev", (0, tloop.name), I32, mma)
        prev = Node(Op.SUB, "d_prev", (base.name, 1), I32, mma)
        body = self.place_previous_release(tloop, body, [has_prev, Node(Op.IF, "", (has_prev.name,), None, mma,
                                                                        release([prev], prev.name))])
        tiles = tloop.args[1]
        fills = Node(Op.MUL, "d_fills", (tiles, kbs), I32, mma)
        last = Node(Op.SUB, "d_last", (fills.name, 1), I32, mma)
        any_tile = Node(Op.LT, "d_any_tile", (0, tiles), I32, mma)
        final = [any_tile, Node(Op.IF, "", (any_tile.name,), None, mma, release([fills, last], last.name))]
        return [tloop.with_body(body).with_attrs(staging_slot=d_slot.name)] + final

    def place_previous_release(self, tloop: Node, body: list[Node], ops: list[Node]) -> list[Node]:
        """`ops` (the previous tile's deferred release) after this tile's first wgmma issue: at the
        k-loop's head in the shallow overlap form (that wgmma went out before the last epilogue),
        else right after the first wgmma of the tile, inside the k-loop's first iteration."""
        kloops = [i for i, c in enumerate(body) if c.op is Op.FOR]
        if str(tloop.get("overlap_epilogue", "")).startswith("next tile's first wgmma") and kloops:
            return body[:kloops[0]] + ops + body[kloops[0]:]
        for i, c in enumerate(body):
            if c.op is Op.WGMMA:
                return body[:i + 1] + ops + body[i + 1:]
            if c.op is Op.FOR and any(x.op is Op.WGMMA for x in c.body):
                start, stop, step = c.args
                if not (isinstance(start, int) and isinstance(stop, int) and start < stop):
                    continue                   # a k-loop that may not run: the wgmma after it
                j = next(j for j, x in enumerate(c.body) if x.op is Op.WGMMA)
                first = Node(Op.LT, f"{c.name}_first", (c.name, start + 1), I32, {"role": "mma"})
                guarded = [first, Node(Op.IF, "", (first.name,), None, {"role": "mma"}, ops)]
                return body[:i] + [c.with_body(list(c.body[:j + 1]) + guarded + list(c.body[j + 1:]))] + body[i + 1:]
        raise ValueError(f"{self.name}: no wgmma in the tile loop to place the staging slot's release after")

    @classmethod
    def keep_last(cls, n: Node, d_slot: str) -> Node:
        """Every K block's release, with the last block's counter to keep (the epilogue releases it)."""
        if n.op is Op.RELEASE:
            return replace(n, args=n.args + (d_slot,))
        if n.body:
            return n.with_body([cls.keep_last(c, d_slot) for c in n.body])
        return n


PASS = StageInRingSlot()
