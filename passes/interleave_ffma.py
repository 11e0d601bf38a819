"""interleave_ffma: overlap the promotion FFMAs of K block i with the wgmma of K block i+1."""
from __future__ import annotations

import networkx as nx

from dgir.ir import SCALAR_OPS, DType, Node, Op, Type

from . import Pass

REGISTER_RESERVE = 40   # addresses, loop counters, scales, descriptors: registers besides the tiles
# ... where the loop's promotion is by indexed jumps (promote `straddle="jump"`): it holds no selected
# scales, and 16 suffice (ptxas 13.0, interleaved: 128x136, 128x144 and its c2A, 192x88 without a
# spill; with per-group selects 128x144 spilled 104 B; bench/TUNING.md step 120)
JUMP_REGISTER_RESERVE = 16


def buffer(tile: str, index: int) -> str:
    """The name of a carried register tile's buffer `index` (0: the tile itself; 1: `part1`, ...)."""
    return tile + (str(index) if index else "")


class InterleaveFfma(Pass):
    """Software-pipeline the math k-loop by the schedule schedule_mma wrote (data on the IR: `stage`
    and `order` on its ops, `partials` and `unroll` on the loop), with the partial accumulator in
    `partials` (D) buffers inside each warpgroup (our choice over alternating warpgroups: it overlaps
    even with one math warpgroup, and needs no cross-warpgroup barrier).

    The k-loop is unrolled by `unroll` (U) blocks.  Inside an iteration, block j + D - 1's wgmma is
    issued into its own partial buffer before block j is retired with `wgmma_wait [pending=D-1]`
    (block j done, the D - 1 younger ones still running), its slot released and its partial promoted:
    those FFMAs run on the CUDA cores while the tensor cores work on the younger blocks.  D = 2 (the
    default) is the double-buffered partial: one block in flight.  The iteration ends by draining
    (pending D-2 .. 0), so no wgmma is in flight across the loop's back-edge: ptxas serialises every
    wgmma of a loop where one is (warning C7514; measured 6% slower on the H200).  Register tiles
    written in stage 0 and read in stage 1 (the partial, the A scales) get D buffers; buffer indices
    are static because the iteration is unrolled; the tail (K is compiled in) is straight-line code.

    Within a stage, ops run in the schedule's `order` (in_schedule_order).

    Register cost: D - 1 more partials, BLOCK_N/2 f32 registers per thread each.  The pass applies only
    when acc + D partials + REGISTER_RESERVE (JUMP_REGISTER_RESERVE where the promotion is by indexed
    jumps) fit the math warpgroups' budget (`regs`, else 232) and the ring holds D stages, and records
    its decision as `interleave` on the loop either way.
    """
    name = "interleave_ffma"
    unroll = 4          # K blocks per loop iteration where the loop does not say (schedule_mma does)
    # With two or more math warpgroups, k-loops of fewer K blocks than this are left alone: the
    # other warpgroups' wgmmas cover a promotion, and overlap_epilogue (which needs a single
    # partial) then hides the next tile's first wgmma behind the epilogue, which pays more when a
    # tile is only a few K blocks (128x32768x512: 13.3 vs 13.7 us, bench/TUNING.md step 52).  One
    # math warpgroup has nobody to cover its promotion: there the pass always applies.
    min_k_blocks = 5
    jump_register_reserve = JUMP_REGISTER_RESERVE
    # a loop whose promotion selects per column group and does not fit only for that (128x136, 128x144,
    # 192x88) is promoted by indexed jumps instead and interleaved (bench/TUNING.md step 120)
    switch_to_jumps = True

    def __init__(self, min_k_blocks: int | None = None, jump_register_reserve: int | None = None,
                 switch_to_jumps: bool | None = None):
        if min_k_blocks is not None:
            self.min_k_blocks = min_k_blocks
        if jump_register_reserve is not None:     # (REGISTER_RESERVE: jumps get no more room than selects)
            self.jump_register_reserve = jump_register_reserve
        if switch_to_jumps is not None:
            self.switch_to_jumps = switch_to_jumps

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
        D = loop.get("partials") or 2           # buffers of each carried tile: D - 1 blocks in flight
        # register tiles carried from stage 0 to stage 1 need a buffer per block in flight
        written0 = {c.args[0] for c in staged
                    if c.get("stage") == 0 and c.op in (Op.WGMMA, Op.SMEM_READ, Op.LOAD_ROW_SCALES)}
        read1 = {a for c in staged if c.get("stage") == 1 for a in c.args}
        carried = sorted(written0 & read1)
        cost = sum(regs[r].type.numel // 128 for r in regs if r in read1 | written0 or r == "acc")
        extra = (D - 1) * sum(regs[r].type.numel // 128 for r in carried)
        if any(c.op is Op.WGMMA and c.get("scale_d", 1) for c in staged):
            # the wgmma accumulates across K blocks: no per-block promotion to overlap
            return [loop.with_attrs(pipelined=None, interleave="skipped: the wgmma accumulates across K blocks")]
        if sum(c.op is Op.WGMMA for c in staged) > 1:
            # waves share one partial: a second buffer per wave would not fit the register file
            return [loop.with_attrs(pipelined=None, interleave="skipped: several waves share the partial")]
        waits = [c.args[0] for c in staged if c.op is Op.WAIT]
        if any(self.stages.get(ch, 1) < D for ch in waits):
            # blocks j+1 .. j+D-1's slots must be filled while block j's is still held
            return [loop.with_attrs(pipelined=None, interleave=f"skipped: needs a ring of >= {D} stages")]
        if not (isinstance(start, int) and isinstance(stop, int) and step == 1):
            return [loop.with_attrs(pipelined=None, interleave="skipped: k loop bounds not static")]
        if wgs > 1 and stop - start < self.min_k_blocks:
            return [loop.with_attrs(pipelined=None, interleave=f"skipped: {stop - start} K blocks < {self.min_k_blocks} "
                                                               f"with {wgs} math warpgroups")]
        forms = {c.get("straddle") for c in loop.body if c.op is Op.PROMOTE}
        reserve = self.jump_register_reserve if "jump" in forms else REGISTER_RESERVE
        switched = ""
        if (cost + extra + reserve > budget and forms == {"selects"} and self.switch_to_jumps
                and cost + extra + self.jump_register_reserve <= budget):
            # the selects' temporaries are what leaves no room: promoted by jumps instead, the loop
            # fits.  Measured (spec 297, on an H100): 128x136 / 128x144 0.90-0.95x the time, 192x88 a tie
            loop = loop.with_body([c.with_attrs(straddle="jump") if c.op is Op.PROMOTE else c for c in loop.body])
            staged = [c for c in loop.body if c.get("stage") is not None]
            reserve, switched = self.jump_register_reserve, " (promotion by jumps: selects leave no room)"
        if cost + extra + reserve > budget:
            return [loop.with_attrs(pipelined=None, interleave=f"skipped: needs {cost + extra + reserve} > {budget} registers")]
        for r in carried:
            for buf in range(1, D):
                new_decls[buffer(r, buf)] = Node(Op.REGS, buffer(r, buf), (), regs[r].type, {})

        graph = self.dependencies(loop)
        kb = loop.name
        n = stop - start
        waits_ahead, ahead_note = self.waits_ahead(loop, staged, graph, D)

        def stage_ops(stage: int, k, buf: int, tag: str, pending: int, issue_tag: str | None = None,
                      part: str = "all") -> list[Node]:
            """Clone the ops of one stage for K block `k` (a name or a literal) using buffer `buf`.
            Stage-1 ops read the values their block's stage-0 instance (`issue_tag`) defined.
            `part`: "ahead" clones only the ops marked `ahead` (and the index arithmetic they need),
            "rest" the others (without the index arithmetic "ahead" already defined)."""
            ops = [c for c in loop.body if c.get("stage") == stage]

            def scalars_for(group):
                needed = set()
                for c in group:
                    needed |= {d for d in nx.ancestors(graph, id(c))}
                return [c for c in loop.body if id(c) in needed and c.op in SCALAR_OPS and c.get("stage") is None]
            scalars = scalars_for(ops)
            rename = {}
            if issue_tag is not None:
                rename.update({c.name: f"{c.name}_{issue_tag}" for c in loop.body if c.get("stage") == 0 and c.name})
            # every name of the stage's instance, including those the other part defines
            rename.update({c.name: f"{c.name}_{tag}" for c in scalars + ops if c.name})
            if part != "all":
                early = [c for c in ops if c.get("ahead")]
                early_scalars = scalars_for(early)
                ops = early if part == "ahead" else [c for c in ops if not c.get("ahead")]
                scalars = early_scalars if part == "ahead" else [c for c in scalars_for(ops) if c not in early_scalars]
            rename[kb] = k
            for r in carried:
                rename[r] = buffer(r, buf)
            out = []
            for c in scalars + ops:
                args = tuple(rename.get(a, a) if isinstance(a, str) else a for a in c.args)
                attrs = {key: v for key, v in c.attrs if key not in ("stage", "order")}
                if c.op is Op.WGMMA_WAIT:
                    attrs["pending"] = pending
                out.append(Node(c.op, rename.get(c.name, c.name), args, c.type, attrs, c.body))
            return out

        role = loop.role
        U = min(loop.get("unroll") or self.unroll, n)

        def group(k0, count, body: list, literal: bool):
            """Blocks k0 .. k0+count-1: issue block j + D - 1 before retiring block j (block j in
            buffer j mod D).  The group ends with nothing in flight, so no wgmma is pending across a
            loop back-edge (ptxas serialises every wgmma otherwise: C7514)."""
            def kname(j):
                if literal:
                    return k0 + j
                if j == 0:
                    return k0
                body.append(Node(Op.ADD, f"{kb}_{j}", (k0, j), Type(DType.i32), {"role": role}))
                return f"{kb}_{j}"
            ks = [kname(j) for j in range(count)]
            tag = f"{k0}" if literal else "l"
            ahead = D - 1

            def retire(r, pending):
                return stage_ops(1, ks[r], r % D, f"r{r}_{tag}", pending, f"i{r}_{tag}")

            def issue(j, part="all"):
                return stage_ops(0, ks[j], j % D, f"i{j}_{tag}", 0, part=part)
            waited = set()      # blocks whose `ahead` ops (their ring wait) were issued early
            for j in range(count):
                body += issue(j, "rest") if j in waited else issue(j)
                if j >= ahead:      # the steady state: D - 1 younger groups stay in flight
                    if waits_ahead and j + 1 < count:
                        # the next block's wait before this retire: its latency overlaps the wgmma
                        # wait rather than following the promotion
                        body += issue(j + 1, "ahead")
                        waited.add(j + 1)
                    body += retire(j - ahead, ahead)
            for r in range(max(0, count - ahead), count):     # drain
                body += retire(r, count - 1 - r)

        out: list[Node] = []
        full = n // U
        if full:
            body: list[Node] = []
            group(kb, U, body, literal=False)
            out.append(Node(Op.FOR, kb, (start, start + full * U, U), None,
                            {"role": role, "interleave": (f"double_buffer x{U}" if D == 2 else f"{D} buffers x{U}") + switched
                                                         + ahead_note,
                             "pipelined": True}, body))
        if n % U:
            group(start + full * U, n % U, out, literal=True)
        return out

    def waits_ahead(self, loop: Node, staged: list, graph: nx.DiGraph, D: int) -> tuple[bool, str]:
        """Whether to issue the next block's `ahead` ops (schedule_mma's `waits_ahead`) before the
        current retire, and the note for the loop's `interleave` attr.  Block j + 1's wait then comes
        before block j - D + 1's release, so the ring must hold D + 1 slots (else it would wait on a
        slot that only that release lets the load role fill: a deadlock); and the early ops may not
        use a value a later stage-0 op defines."""
        early = [c for c in staged if c.get("ahead")]
        if not early:
            return False, ""
        waits = [c.args[0] for c in early if c.op is Op.WAIT]
        if any(self.stages.get(ch, 1) < D + 1 for ch in waits):
            return False, f", waits in order (ahead needs a ring of >= {D + 1} stages)"
        late = {id(c) for c in staged if c.get("stage") == 0 and not c.get("ahead")}
        if any(nx.ancestors(graph, id(c)) & late for c in early):
            return False, ", waits in order (an early op needs a later one)"
        return True, ", next wait ahead"

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
