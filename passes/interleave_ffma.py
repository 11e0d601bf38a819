"""interleave_ffma: overlap the promotion FFMAs of K block i with the wgmma of K block i+1."""
from __future__ import annotations

import networkx as nx

from dgir.ir import SCALAR_OPS, DType, Node, Op, Type

from . import Pass

REGISTER_RESERVE = 40   # addresses, loop counters, scales, descriptors: registers besides the tiles


class InterleaveFfma(Pass):
    """Software-pipeline the math k-loop by the `stage` attrs that schedule_mma wrote, with a
    DOUBLE-BUFFERED partial accumulator inside each warpgroup (our choice over alternating
    warpgroups: it overlaps even with one math warpgroup, and needs no cross-warpgroup barrier).

    The k-loop is unrolled by `unroll` (U) blocks.  Inside an iteration, block j+1's wgmma is issued
    into the other partial buffer before block j is retired with `wgmma_wait [pending=1]` (block j
    done, j+1 still running), its slot released and its partial promoted: those FFMAs run on the
    CUDA cores while the tensor cores work on block j+1.  Only the last block of an iteration is
    retired with pending=0, so no wgmma is in flight across the loop's back-edge: ptxas serialises
    every wgmma of a loop where one is (warning C7514; measured 6% slower on the H200).  Register
    tiles written in stage 0 and read in stage 1 (the partial, the A scales) get a second buffer;
    buffer indices are static because the iteration is unrolled; the tail (K is compiled in) is
    straight-line code.

    Within a stage, ops run in the schedule's `order` (in_schedule_order).

    Register cost: one more partial, BLOCK_N/2 f32 registers per thread.  The pass applies only when
    acc + 2 partials + REGISTER_RESERVE fit the math warpgroups' budget (`regs`, else 232), and
    records its decision as `interleave` on the loop either way.
    """
    name = "interleave_ffma"
    unroll = 4          # K blocks per loop iteration: FFMAs of all but the last one overlap a wgmma
    # With two or more math warpgroups, k-loops of fewer K blocks than this are left alone: the
    # other warpgroups' wgmmas cover a promotion, and overlap_epilogue (which needs a single
    # partial) then hides the next tile's first wgmma behind the epilogue, which pays more when a
    # tile is only a few K blocks (128x32768x512: 13.3 vs 13.7 us, bench/TUNING.md step 52).  One
    # math warpgroup has nobody to cover its promotion: there the pass always applies.
    min_k_blocks = 5

    def __init__(self, min_k_blocks: int | None = None):
        if min_k_blocks is not None:
            self.min_k_blocks = min_k_blocks

    def run(self, kernel: Node) -> Node:
        regs = {n.name: n for n in kernel.body if n.op is Op.REGS}
        self.stages = {n.name: n.get("stages") for n in kernel.body if n.op is Op.CHANNEL}
        new_decls: dict[str, Node] = {}

        def visit(n: Node, budget: int, wgs: int) -> list[Node]:
            if n.op is Op.WARPGROUP:
                budget, wgs = n.get("regs", 232), len(n.get("ids", (0,)))
            if n.op is Op.FOR and n.get("pipelined") is False and any(c.get("stage") is not None for c in n.body):
                return self.pipeline(n, budget, regs, new_decls, wgs)
            if not n.body:
                return [n]
            return [n.with_body([x for c in n.body for x in visit(c, budget, wgs)])]

        body = [x for c in kernel.body for x in visit(c, 232, 1)]
        decls = [n for n in body if n.op in (Op.PARAM, Op.SMEM, Op.REGS, Op.CHANNEL)]
        rest = [n for n in body if n not in decls]
        return kernel.with_body(decls + list(new_decls.values()) + rest)

    # ------------------------------------------------------------------------------------------
    def pipeline(self, loop: Node, budget: int, regs: dict, new_decls: dict, wgs: int = 1) -> list[Node]:
        loop = self.in_schedule_order(loop)
        start, stop, step = loop.args
        staged = [c for c in loop.body if c.get("stage") is not None]
        # register tiles carried from stage 0 to stage 1 need a second buffer
        written0 = {c.args[0] for c in staged
                    if c.get("stage") == 0 and c.op in (Op.WGMMA, Op.SMEM_READ, Op.LOAD_ROW_SCALES)}
        read1 = {a for c in staged if c.get("stage") == 1 for a in c.args}
        carried = sorted(written0 & read1)
        cost = sum(regs[r].type.numel // 128 for r in regs if r in read1 | written0 or r == "acc")
        extra = sum(regs[r].type.numel // 128 for r in carried)
        if any(c.op is Op.WGMMA and c.get("scale_d", 1) for c in staged):
            # the wgmma accumulates across K blocks: no per-block promotion to overlap
            return [loop.with_attrs(pipelined=None, interleave="skipped: the wgmma accumulates across K blocks")]
        if sum(c.op is Op.WGMMA for c in staged) > 1:
            # waves share one partial: a second buffer per wave would not fit the register file
            return [loop.with_attrs(pipelined=None, interleave="skipped: several waves share the partial")]
        waits = [c.args[0] for c in staged if c.op is Op.WAIT]
        if any(self.stages.get(ch, 1) < 2 for ch in waits):
            # block j+1's slot must be filled while block j's is still held: one stage deadlocks
            return [loop.with_attrs(pipelined=None, interleave="skipped: needs a ring of >= 2 stages")]
        if not (isinstance(start, int) and isinstance(stop, int) and step == 1):
            return [loop.with_attrs(pipelined=None, interleave="skipped: k loop bounds not static")]
        if wgs > 1 and stop - start < self.min_k_blocks:
            return [loop.with_attrs(pipelined=None, interleave=f"skipped: {stop - start} K blocks < {self.min_k_blocks} "
                                                               f"with {wgs} math warpgroups")]
        if cost + extra + REGISTER_RESERVE > budget:
            return [loop.with_attrs(pipelined=None,
                                    interleave=f"skipped: needs {cost + extra + REGISTER_RESERVE} > {budget} registers")]
        for r in carried:
            new_decls[r + "1"] = Node(Op.REGS, r + "1", (), regs[r].type, {})

        graph = self.dependencies(loop)
        kb = loop.name
        n = stop - start

        def stage_ops(stage: int, k, buf: int, tag: str, pending: int, issue_tag: str | None = None) -> list[Node]:
            """Clone the ops of one stage for K block `k` (a name or a literal) using buffer `buf`.
            Stage-1 ops read the values their block's stage-0 instance (`issue_tag`) defined."""
            ops = [c for c in loop.body if c.get("stage") == stage]
            needed = set()
            for c in ops:
                needed |= {d for d in nx.ancestors(graph, id(c))}
            scalars = [c for c in loop.body if id(c) in needed and c.op in SCALAR_OPS and c.get("stage") is None]
            rename = {}
            if issue_tag is not None:
                rename.update({c.name: f"{c.name}_{issue_tag}" for c in loop.body if c.get("stage") == 0 and c.name})
            rename.update({c.name: f"{c.name}_{tag}" for c in scalars + ops if c.name})
            rename[kb] = k
            for r in carried:
                rename[r] = r + ("1" if buf else "")
            out = []
            for c in scalars + ops:
                args = tuple(rename.get(a, a) if isinstance(a, str) else a for a in c.args)
                attrs = {key: v for key, v in c.attrs if key not in ("stage", "order")}
                if c.op is Op.WGMMA_WAIT:
                    attrs["pending"] = pending
                out.append(Node(c.op, rename.get(c.name, c.name), args, c.type, attrs, c.body))
            return out

        role = loop.role
        U = min(self.unroll, n)

        def group(k0, count, body: list, literal: bool):
            """Blocks k0 .. k0+count-1: issue block j+1 before retiring block j (buffers alternate).
            The group ends with nothing in flight, so no wgmma is pending across a loop back-edge
            (ptxas serialises every wgmma otherwise: C7514)."""
            def kname(j):
                if literal:
                    return k0 + j
                if j == 0:
                    return k0
                body.append(Node(Op.ADD, f"{kb}_{j}", (k0, j), Type(DType.i32), {"role": role}))
                return f"{kb}_{j}"
            ks = [kname(j) for j in range(count)]
            tag = f"{k0}" if literal else "l"
            body += stage_ops(0, ks[0], 0, f"i0_{tag}", 0)
            for j in range(1, count):
                body += stage_ops(0, ks[j], j % 2, f"i{j}_{tag}", 0)
                body += stage_ops(1, ks[j - 1], (j - 1) % 2, f"r{j - 1}_{tag}", 1, f"i{j - 1}_{tag}")
            body += stage_ops(1, ks[-1], (count - 1) % 2, f"r{count - 1}_{tag}", 0, f"i{count - 1}_{tag}")

        out: list[Node] = []
        full = n // U
        if full:
            body: list[Node] = []
            group(kb, U, body, literal=False)
            out.append(Node(Op.FOR, kb, (start, start + full * U, U), None,
                            {"role": role, "interleave": f"double_buffer x{U}", "pipelined": True}, body))
        if n % U:
            group(start + full * U, n % U, out, literal=True)
        return out

    @staticmethod
    def in_schedule_order(loop: Node) -> Node:
        """The loop with its staged ops in the schedule's `order` (ties: body position), over the
        positions staged ops hold; unstaged ops (index arithmetic) stay in place.  Each stage's ops
        are then materialised in that order, and so is a loop the pass leaves unpipelined.  An order
        that uses a value before the op defining it is refused here; one that breaks the channel
        protocol (a slot read after its release) the interpreter reports as a race."""
        body = list(loop.body)
        held = [i for i, c in enumerate(body) if c.get("stage") is not None]
        ordered = sorted(held, key=lambda i: (body[i].get("order", i), i))
        if ordered == held:
            return loop
        new = list(body)
        for i, j in zip(held, ordered):
            new[i] = body[j]
        in_loop, defined = {c.name for c in new if c.name}, set()
        for c in new:
            late = [a for a in c.args if isinstance(a, str) and a in in_loop and a not in defined]
            if late:
                raise ValueError(f"schedule order: {c.op.value} (order={c.get('order')}) uses %{late[0]} before "
                                 f"the op that defines it in loop %{loop.name}")
            if c.name:
                defined.add(c.name)
        return loop.with_body(new)

    @staticmethod
    def dependencies(loop: Node) -> nx.DiGraph:
        """Def-use graph of the loop body (node ids), through SSA names."""
        g = nx.DiGraph()
        defs = {}
        for c in loop.body:
            g.add_node(id(c))
            for a in c.args:
                if isinstance(a, str) and a in defs:
                    g.add_edge(defs[a], id(c))
            if c.name and c.op in SCALAR_OPS:
                defs[c.name] = id(c)
        return g


PASS = InterleaveFfma()
