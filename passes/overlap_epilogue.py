"""overlap_epilogue: the next tile's first wgmma runs on the tensor cores during this tile's epilogue."""
from __future__ import annotations

from dataclasses import replace

from dgir.ir import DType, Node, Op, Type

from . import Pass

I32 = Type(DType.i32)


class OverlapEpilogue(Pass):
    """Cross-tile software pipelining of the persistent tile loop of the math warpgroups.

    Without it, each tile ends with the epilogue (convert the FP32 accumulators to bf16, write the
    staging tile, TMA store) while the tensor cores idle, although the load role has already
    filled the next tile's first ring slots.  At K = 512 a 256x128 tile is 4 K blocks and the
    epilogue is ~15% of its time.

    The rewrite, for a k-loop whose K block starts with `wait` and a wave-0 `wgmma` into a partial
    accumulator (`interleave` skipped: one partial, which is free once the last promotion read it):

        prologue:  if (first tile exists) { wait(block 0); wgmma(part, block 0) }  wgmma_wait
        for tile t:
            zero accumulators
            K block 0 without its wait, wave-0 wgmma and their wgmma_wait (done one tile earlier)
            for K blocks 1.. : unchanged
            if (t + step < tiles) { wait(next tile's block 0); wgmma(part, next tile's block 0) }
            epilogue of tile t          <- overlaps the wgmma above
            wgmma_wait                   <- retired inside the iteration: no wgmma is in flight
                                            across the loop's back-edge (ptxas would serialise)

    The next tile's ring counter is recomputed from the loop's own index arithmetic (the ops the
    counter depends on, cloned with the induction variable replaced).  Kernels whose k-loop is
    software-pipelined by interleave_ffma (two partials) and kernels without the TMA epilogue are
    left unchanged; the decision is recorded as `overlap_epilogue` on the tile loop.

    Measured on the H200 (bench/TUNING.md step 15; ablation rows of the full benchmark): +1-4% in
    the first runs, 1072 -> 1192 TFLOPS at 4096x7168x16384 and 1088 -> 1180 at 4096x7168x2048 once
    the slot computation was cheap (step 18).
    """
    name = "overlap_epilogue"

    def run(self, kernel: Node) -> Node:
        body = []
        for r in kernel.body:
            if r.op is Op.WARPGROUP and "mma" in r.get("roles", ()):
                r = r.with_body([x for c in r.body for x in self.rewrite_tile_loop(c)])
            body.append(r)
        return kernel.with_body(body)

    # ------------------------------------------------------------------------------------------
    def rewrite_tile_loop(self, tloop: Node) -> list[Node]:
        if tloop.op is not Op.FOR or tloop.get("overlap_epilogue") is not None:
            return [tloop]
        kloops = [c for c in tloop.body if c.op is Op.FOR]
        if len(kloops) != 1 or not any(c.op is Op.STAGE_OUT for c in tloop.body):
            return [tloop]
        kloop = kloops[0]
        decision = kloop.get("interleave")
        if decision is None:
            return [tloop.with_attrs(overlap_epilogue="skipped: the k-loop has no interleave decision")]
        if not str(decision).startswith("skipped"):
            return [tloop.with_attrs(overlap_epilogue="skipped: the k-loop is software-pipelined")]
        head = self.block_head(kloop)
        if head is None:
            return [tloop.with_attrs(overlap_epilogue="skipped: no wait + wgmma at the top of a K block")]
        ctr_def, wait, mma, mma_wait = head
        start, stop, step = tloop.args
        k_start, k_stop, k_step = kloop.args
        pos = tloop.body.index(kloop)
        before, after = list(tloop.body[:pos]), list(tloop.body[pos + 1:])
        role = {"role": kloop.role}

        def first_block(t_value, suffix: str) -> list[Node]:
            """wait + wave-0 wgmma of K block 0 of the tile whose index is t_value."""
            defs = self.slice(before, ctr_def.args, tloop.name)
            ren = {d.name: d.name + suffix for d in defs}
            ren[tloop.name] = t_value
            ren[kloop.name] = k_start
            ren[ctr_def.name] = ctr_def.name + suffix
            return [self.rename(d, ren) for d in defs + [ctr_def, wait, mma]]

        has_first = Node(Op.LT, f"{tloop.name}_has_first", (start, stop), I32, role)
        prologue = [has_first,
                    Node(Op.IF, "", (has_first.name,), None, role, first_block(start, "_first")),
                    mma_wait]

        moved = (id(wait), id(mma), id(mma_wait))       # by identity: equal-looking ops may repeat
        peeled = self.rename_block([c for c in kloop.body if id(c) not in moved], {kloop.name: k_start}, "_k0")
        rest = replace(kloop.with_attrs(peeled=1), args=(self.plus(k_start, k_step), k_stop, k_step))

        t_next = Node(Op.ADD, f"{tloop.name}_next", (tloop.name, step), I32, role)
        has_next = Node(Op.LT, f"{tloop.name}_has_next", (t_next.name, stop), I32, role)
        issue_next = [t_next, has_next,
                      Node(Op.IF, "", (has_next.name,), None, role, first_block(t_next.name, "_next"))]
        new_body = before + peeled + [rest] + issue_next + after + [mma_wait]
        return prologue + [tloop.with_body(new_body).with_attrs(overlap_epilogue="next tile's first wgmma")]

    # ------------------------------------------------------------------------------------------
    @staticmethod
    def block_head(kloop: Node):
        """(counter def, wait, first wgmma, the wgmma_wait retiring it) when a K block begins with
        the counter, the slot wait and a wgmma that overwrites its partial (scale_d = 0)."""
        body = list(kloop.body)
        waits = [c for c in body if c.op is Op.WAIT]
        mmas = [c for c in body if c.op is Op.WGMMA]
        if len(waits) != 1 or not mmas or mmas[0].get("scale_d", 1) != 0:
            return None
        wait, mma = waits[0], mmas[0]
        ctr = wait.args[1]
        defs = [c for c in body if c.name == ctr and c.op in (Op.ADD,)]
        later = body[body.index(mma) + 1:]
        retire = next((c for c in later if c.op is Op.WGMMA_WAIT), None)
        if not defs or retire is None or retire.get("pending", 0) != 0 or mma.args[3] != ctr:
            return None
        if body.index(defs[0]) > body.index(wait) or body.index(wait) > body.index(mma):
            return None
        # the wgmma may not read values produced between the wait and itself (it moves)
        if any(c.op is Op.WGMMA for c in body[:body.index(mma)]):
            return None
        return defs[0], wait, mma, retire

    @staticmethod
    def slice(nodes: list[Node], wanted, induction: str) -> list[Node]:
        """The scalar ops among `nodes` that the names in `wanted` depend on, in program order."""
        by_name = {n.name: n for n in nodes if n.name}
        need, stack = set(), [a for a in wanted if isinstance(a, str)]
        while stack:
            v = stack.pop()
            if v in need or v not in by_name or v == induction:
                continue
            need.add(v)
            stack.extend(a for a in by_name[v].args if isinstance(a, str))
        return [n for n in nodes if n.name in need]

    @staticmethod
    def rename(n: Node, ren: dict) -> Node:
        """Copy of a leaf op with its arguments and result mapped through `ren` (name -> name or
        literal)."""
        args = tuple(ren.get(a, a) if isinstance(a, str) else a for a in n.args)
        return Node(n.op, ren.get(n.name, n.name) if n.type is not None else n.name, args, n.type, n.attrs, n.body)

    @classmethod
    def rename_block(cls, nodes: list[Node], ren: dict, suffix: str) -> list[Node]:
        """Copies of straight-line ops whose SSA results get `suffix` (uses follow), so the copy can
        sit beside the original block."""
        ren, out = dict(ren), []
        for n in nodes:
            if n.body:
                raise ValueError(f"overlap_epilogue: unexpected region {n.op.value} in a K block")
            if n.name and n.type is not None:
                ren[n.name] = n.name + suffix
            out.append(cls.rename(n, ren))
        return out

    @staticmethod
    def plus(a, b):
        return a + b if isinstance(a, int) and isinstance(b, int) else a


PASS = OverlapEpilogue()
