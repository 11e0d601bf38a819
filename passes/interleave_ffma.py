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

    Iteration i issues the wgmma of block i+1 into the other partial buffer, then waits with
    `wgmma_wait [pending=1]` (block i done, i+1 still running), releases slot i and promotes block i:
    the FFMAs run on the CUDA cores while the tensor cores work on block i+1.  Register tiles written
    in stage 0 and read in stage 1 (the partial, the A scales) get a second buffer; the loop is
    unrolled by two so every buffer index is static (registers cannot be indexed at run time),
    with a statically peeled tail (K is compiled in).

    Register cost: one more partial, BLOCK_N/2 f32 registers per thread.  The pass applies only when
    acc + 2 partials + REGISTER_RESERVE fit the math warpgroups' budget (`regs`, else 232), and
    records its decision as `interleave` on the loop either way.
    """
    name = "interleave_ffma"

    def run(self, kernel: Node) -> Node:
        regs = {n.name: n for n in kernel.body if n.op is Op.REGS}
        new_decls: dict[str, Node] = {}

        def visit(n: Node, budget: int) -> list[Node]:
            if n.op is Op.WARPGROUP:
                budget = n.get("regs", 232)
            if n.op is Op.FOR and n.get("pipelined") is False and any(c.get("stage") is not None for c in n.body):
                return self.pipeline(n, budget, regs, new_decls)
            if not n.body:
                return [n]
            return [n.with_body([x for c in n.body for x in visit(c, budget)])]

        body = [x for c in kernel.body for x in visit(c, 232)]
        decls = [n for n in body if n.op in (Op.PARAM, Op.SMEM, Op.REGS, Op.CHANNEL)]
        rest = [n for n in body if n not in decls]
        return kernel.with_body(decls + list(new_decls.values()) + rest)

    # ------------------------------------------------------------------------------------------
    def pipeline(self, loop: Node, budget: int, regs: dict, new_decls: dict) -> list[Node]:
        start, stop, step = loop.args
        staged = [c for c in loop.body if c.get("stage") is not None]
        # register tiles carried from stage 0 to stage 1 need a second buffer
        written0 = {c.args[0] for c in staged if c.get("stage") == 0 and c.op in (Op.WGMMA, Op.SMEM_READ)}
        read1 = {a for c in staged if c.get("stage") == 1 for a in c.args}
        carried = sorted(written0 & read1)
        cost = sum(regs[r].type.numel // 128 for r in regs if r in read1 | written0 or r == "acc")
        extra = sum(regs[r].type.numel // 128 for r in carried)
        if not (isinstance(start, int) and isinstance(stop, int) and step == 1):
            return [loop.with_attrs(pipelined=None, interleave="skipped: k loop bounds not static")]
        if cost + extra + REGISTER_RESERVE > budget:
            return [loop.with_attrs(pipelined=None,
                                    interleave=f"skipped: needs {cost + extra + REGISTER_RESERVE} > {budget} registers")]
        for r in carried:
            new_decls[r + "1"] = Node(Op.REGS, r + "1", (), regs[r].type, {})

        graph = self.dependencies(loop)
        kb = loop.name
        n = stop - start

        def stage_ops(stage: int, k, buf: int, tag: str, pending: int) -> list[Node]:
            """Clone the ops of one stage for K block `k` (a name or a literal) using buffer `buf`."""
            ops = [c for c in loop.body if c.get("stage") == stage]
            needed = set()
            for c in ops:
                needed |= {d for d in nx.ancestors(graph, id(c))}
            scalars = [c for c in loop.body if id(c) in needed and c.op in SCALAR_OPS and c.get("stage") is None]
            rename = {c.name: f"{c.name}_{tag}" for c in scalars + ops if c.name}
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
        out = stage_ops(0, start, 0, "p", 0)                 # prologue: issue block 0 into buffer 0
        pairs = (n - 1) // 2
        if pairs:
            body = []
            for j, (cur, nxt) in enumerate(((0, 1), (1, 0))):
                kcur = kb if j == 0 else f"{kb}_1"
                if j == 1:
                    body.append(Node(Op.ADD, kcur, (kb, 1), Type(DType.i32), {"role": role}))
                knext = f"{kb}_n{j}"
                body.append(Node(Op.ADD, knext, (kb, j + 1), Type(DType.i32), {"role": role}))
                body += stage_ops(0, knext, nxt, f"i{j}", 0)
                body += stage_ops(1, kcur, cur, f"r{j}", 1)
            out.append(Node(Op.FOR, kb, (start, start + 2 * pairs, 2), None,
                            {"role": role, "interleave": "double_buffer", "pipelined": True}, body))
        k = start + 2 * pairs
        if (n - 1) % 2:
            out += stage_ops(0, k + 1, 1, "ti", 0) + stage_ops(1, k, 0, "tr", 1)
            out += stage_ops(1, k + 1, 1, "tl", 0)
        else:
            out += stage_ops(1, k, 0, "tl", 0)
        return out

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
