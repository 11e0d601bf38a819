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
    epilogue (~1400 cycles, bench/TUNING.md step 49) is ~20% of its time.

    The rewrite, for a k-loop whose K block starts with `wait` and a wave-0 `wgmma` into a partial
    accumulator (`interleave` skipped: one partial, which is free once the last promotion read it):

        prologue:  if (first tile exists) { K block 0 of the first tile }
        for tile t:
            K blocks 1.. of tile t
            if (t + step < tiles) {
                K block 0 of the next tile with this tile's epilogue woven in: the stores of the
                accumulator go right after the wgmma issued before the next tile zeroes it, so
                the tensor cores run that wgmma while the warpgroup converts and stores:
                    wait; wgmma(part)                          tensor cores busy ...
                    store wait; sync; stage_out(acc); sync; tma_store    ... while tile t is stored
                    wgmma_wait; release; zero(acc); promote(acc)
            }
            if (no next tile) { epilogue of tile t }
        No wgmma is in flight across the loop's back-edge (ptxas would serialise): each K block
        ends with its wgmma_wait.

    That woven form is `whole_block=True` (opt-in: bench variant `woven`).  The default is the
    shallower form: only the next tile's wait and wave-0 wgmma move before the epilogue, and K
    block 0 stays at the top of the tile.  Measured (bench/TUNING.md step 50): woven, BLOCK_M 256
    tiles (two waves a warpgroup) ran 1-5% slower (spec 87), one-wave tiles within +-3% (spec 88,
    geometric mean 0.4% faster): the tensor cores' idle time during the epilogue is not what the
    epilogue costs these power-limited kernels.  The woven form applies to one-wave tiles and not
    under pingpong turns (the turn is held from a wgmma's issue to its retire, so the other
    warpgroups could not issue during a woven epilogue); other kernels get the shallow form.

    The next tile's scalars (ring counter, scale rows, column offset) are recomputed from the
    loop's own index arithmetic (the ops they depend on, cloned with the induction variable
    replaced).  Kernels whose k-loop is software-pipelined by interleave_ffma (two partials) and
    split-K kernels (their epilogue sums partials) are left unchanged; direct stores
    (epilogue="direct") get the shallow form; the decision is recorded as
    `overlap_epilogue` on the tile loop.

    Measured on the H200 (bench/TUNING.md steps 15, 18, 50): the shallow form +1-4% in the first
    runs, 1072 -> 1192 TFLOPS at 4096x7168x16384 and 1088 -> 1180 at 4096x7168x2048 once the slot
    computation was cheap (step 18).
    """
    name = "overlap_epilogue"
    EPILOGUE_OPS = (Op.TMA_STORE_WAIT, Op.SYNC, Op.STAGE_OUT, Op.TMA_STORE)

    def __init__(self, whole_block: bool = False):
        self.whole_block = whole_block

    def run(self, kernel: Node) -> Node:
        body = []
        for r in kernel.body:
            if r.op is Op.WARPGROUP and "mma" in r.get("roles", ()):
                # pingpong hands the wgmma turn on only once a group retired: a woven epilogue between
                # an issue and its retire would hold the turn (and the other warpgroups' wgmmas) through it
                weave = self.whole_block and kernel.get("math_order") != "pingpong"
                r = r.with_body([x for c in r.body for x in self.rewrite_tile_loop(c, weave)])
            body.append(r)
        return kernel.with_body(body)

    # ------------------------------------------------------------------------------------------
    def rewrite_tile_loop(self, tloop: Node, weave: bool = True) -> list[Node]:
        if tloop.op is not Op.FOR or tloop.get("overlap_epilogue") is not None:
            return [tloop]
        kloops = [c for c in tloop.body if c.op is Op.FOR]
        # the epilogue: staging for TMA stores, or direct stores (the shallow form only, weave_plan)
        if len(kloops) != 1 or not any(c.op in (Op.STAGE_OUT, Op.STORE_DIRECT) for c in tloop.body):
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
        rest = replace(kloop.with_attrs(peeled=1), args=(self.plus(k_start, k_step), k_stop, k_step))
        t_next = Node(Op.ADD, f"{tloop.name}_next", (tloop.name, step), I32, role)
        has_next = Node(Op.LT, f"{tloop.name}_has_next", (t_next.name, stop), I32, role)
        woven = weave and self.weave_plan(before, kloop, after)
        if woven:
            zeros, setup = woven
            last = Node(Op.SUB, f"{tloop.name}_last", (stop, 1), I32, role)
            no_next = Node(Op.LT, f"{tloop.name}_no_next", (last.name, t_next.name), I32, role)
            block0 = lambda t_value, suffix: self.block_zero(setup, zeros, kloop, tloop.name, t_value, suffix)  # noqa: E731
            prologue = [has_first, Node(Op.IF, "", (has_first.name,), None, role, block0(start, "_first"))]
            new_body = setup + [rest, t_next, has_next, last, no_next,
                                Node(Op.IF, "", (has_next.name,), None, role,
                                     self.weave(block0(t_next.name, "_next"), after)),
                                Node(Op.IF, "", (no_next.name,), None, role, after)]
            return prologue + [tloop.with_body(new_body).with_attrs(
                overlap_epilogue="next tile's first K block, epilogue woven in")]
        # the shallow form: K block 0 stays at the top of the tile, without the wait and wave-0 wgmma
        # that the previous iteration (or the prologue) issued
        prologue = [has_first,
                    Node(Op.IF, "", (has_first.name,), None, role, first_block(start, "_first")),
                    mma_wait]
        moved = (id(wait), id(mma), id(mma_wait))       # by identity: equal-looking ops may repeat
        peeled = self.rename_block([c for c in kloop.body if id(c) not in moved], {kloop.name: k_start}, "_k0")
        issue_next = [t_next, has_next,
                      Node(Op.IF, "", (has_next.name,), None, role, first_block(t_next.name, "_next"))]
        new_body = before + peeled + [rest] + issue_next + after + [mma_wait]
        return prologue + [tloop.with_body(new_body).with_attrs(overlap_epilogue="next tile's first wgmma")]

    # ------------------------------------------------------------------------------------------
    def weave_plan(self, before: list[Node], kloop: Node, after: list[Node]):
        """(accumulator zeroing ops, the rest of the tile setup) when the epilogue can be woven into
        the next tile's K block 0: it is only staging and TMA stores, and every accumulator the
        tile zeroes is staged exactly once; else None (the shallow form applies)."""
        zeros = [c for c in before if c.op is Op.ZERO]
        staged = [c.args[1] for c in after if c.op is Op.STAGE_OUT]
        # one accumulator (wave) per warpgroup: with two (BLOCK_M 256) the woven form measured 1-5%
        # slower than the shallow one (spec 87, bench/TUNING.md step 50)
        if len(zeros) != 1 or any(c.op not in self.EPILOGUE_OPS or c.body for c in after):
            return None
        if sorted(staged) != sorted(z.args[0] for z in zeros):
            return None
        if any(c.body for c in kloop.body):
            return None
        return zeros, [c for c in before if c.op is not Op.ZERO]

    def block_zero(self, setup, zeros, kloop, induction, t_value, suffix) -> list[Node]:
        """K block 0 of the tile whose index is t_value: the tile scalars it reads (cloned from the
        setup), then the K block's ops, each accumulator zeroed right before its first use."""
        free = [a for c in kloop.body for a in c.args if isinstance(a, str)]
        defs = self.slice(setup, free, induction)
        ren = {d.name: d.name + suffix for d in defs}
        ren[induction] = t_value
        out = [self.rename(d, ren) for d in defs]
        ren[kloop.name] = kloop.args[0]
        pending = {z.args[0]: z for z in zeros}
        for op in self.rename_block(list(kloop.body), ren, suffix):
            for acc in [a for a in op.args if a in pending]:
                out.append(pending.pop(acc))
            out.append(op)
        return out

    @staticmethod
    def weave(block: list[Node], epilogue: list[Node]) -> list[Node]:
        """The epilogue's ops in the next tile's K block 0: the ops up to the staging of an
        accumulator go right after the wgmma issued before that accumulator is zeroed (so the
        tensor cores run it meanwhile); what follows the last staging goes with it."""
        segments, issues = [[]], []
        for op in block:
            if op.op is Op.WGMMA:
                issues.append(op)
                segments.append([])
            else:
                segments[-1].append(op)
        inserts, rest, last = [[] for _ in segments], list(epilogue), 0
        for j, seg in enumerate(segments):
            for op in seg:
                if op.op is Op.ZERO:
                    k = next(i for i, c in enumerate(rest) if c.op is Op.STAGE_OUT and c.args[1] == op.args[0])
                    inserts[j] += rest[:k + 1]
                    rest, last = rest[k + 1:], j
        inserts[last] += rest
        out = []
        for j, seg in enumerate(segments):
            if j:
                out.append(issues[j - 1])
            out += inserts[j] + seg
        return out

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
