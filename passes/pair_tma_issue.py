"""pair_tma_issue: the load role refills ring slots two at a time."""
from __future__ import annotations

from dgir.ir import DType, Node, Op, Type

from . import Pass


class PairTmaIssue(Pass):
    """Unroll the load role's K loop by two and acquire both slots before issuing either slot's
    TMA loads: the boxes of K blocks k and k+1 (adjacent 128-byte column panels of the same rows
    of A and B) leave the SM back to back instead of one consumer K block apart.

    Why: at small M the kernels stream B from DRAM, and a memory-only Triton kernel moving the same
    bytes runs fastest with 256-512 contiguous bytes per row per step (bench/memory_floor.py); our
    TMA boxes are 128 bytes wide (the 128B swizzle's limit), so a row's neighbouring panels are
    requested at different times.  The price: the producer waits for the later of two slots, so
    the ring runs about one stage shallower.  A trip count that is odd keeps its last K block as a
    single refill after the loop.

    Opt-in (not in the default pipeline: bench/experiments.py variant `paired`); the decision is
    recorded as the kernel attr `tma_issue`.  Runs after multicast_tma (it reorders whatever loads
    the loop holds) and before allocate_smem.
    """
    name = "pair_tma_issue"
    MIN_STAGES = 3

    def __init__(self, min_stages: int = MIN_STAGES):
        self.min_stages = min_stages      # lower only to show the deadlock (tests)

    def run(self, kernel: Node) -> Node:
        if kernel.get("tma_issue"):
            return kernel
        body, how = [], (f"one slot at a time (no load-role K loop of >= 2 constant trips over a ring of "
                         f">= {self.min_stages} slots)")
        stages = {n.name: n.get("stages") or 1 for n in kernel.body if n.op is Op.CHANNEL}
        for n in kernel.body:
            if n.op is Op.WARPGROUP and "load" in n.get("roles", ()):
                n, paired = _pair_region(n, stages, self.min_stages)
                if paired:
                    how = "two slots at a time"
            body.append(n)
        return kernel.with_body(body).with_attrs(tma_issue=how)


def _pair_region(region: Node, stages: dict, min_stages: int) -> tuple[Node, bool]:
    paired = False

    def visit(n: Node) -> list[Node]:
        nonlocal paired
        acquires = [c for c in n.body if c.op is Op.ACQUIRE] if n.op is Op.FOR else []
        # the producer now commits block p only after slot p+1 is free, i.e. after block p+1-S
        # was released; a consumer waiting for block p may hold block p-1 (the interleaved loop
        # retires a block after the next one's wait), so S - 1 >= 2 slots must be left: S >= 3
        # (the interpreter showed the S = 2 deadlock)
        if len(acquires) == 1 and stages.get(acquires[0].args[0], 1) >= min_stages:
            out = _pair_loop(n)
            paired |= len(out) > 1 or out[0] is not n
            return out
        return [n.with_body([x for c in n.body for x in visit(c)])] if n.body else [n]

    return region.with_body([x for c in region.body for x in visit(c)]), paired


def _pair_loop(loop: Node) -> list[Node]:
    start, stop, step = loop.args
    if not all(isinstance(v, int) for v in (start, stop, step)) or step != 1 or stop - start < 2:
        return [loop]
    iv, role = loop.name, loop.role
    pairs = (stop - start) // 2
    second = f"{iv}_1"
    first_copy = _copy(loop.body, iv, iv, "p0")
    second_copy = _copy(loop.body, iv, second, "p1")
    pre0, acq0, post0 = _split_at_acquire(first_copy)
    pre1, acq1, post1 = _split_at_acquire(second_copy)
    body = (pre0 + [acq0, Node(Op.ADD, second, (iv, 1), Type(DType.i32), {"role": role})] + pre1 + [acq1]
            + post0 + post1)
    out = [Node(Op.FOR, iv, (start, start + 2 * pairs, 2), None, {**loop.a, "tma_issue": "paired"}, body)]
    if (stop - start) % 2:                       # the odd last K block: one refill, after the loop
        out += _copy(loop.body, iv, start + 2 * pairs, "t")
    return out


def _split_at_acquire(ops: list[Node]):
    i = next(j for j, c in enumerate(ops) if c.op is Op.ACQUIRE)
    return ops[:i], ops[i], ops[i + 1:]


def _copy(ops, iv: str, value, tag: str) -> list[Node]:
    """The loop body with the induction variable replaced by `value` and every name it defines
    suffixed with `tag` (nested bodies included)."""
    defined = {c.name for op in ops for c in op.walk() if c.name and c.op is not Op.FOR}
    rename = {name: f"{name}_{tag}" for name in defined}
    rename[iv] = value

    def sub(n: Node) -> Node:
        args = tuple(rename.get(a, a) if isinstance(a, str) else a for a in n.args)
        name = rename.get(n.name, n.name) if n.op is not Op.FOR else n.name
        return Node(n.op, name, args, n.type, n.attrs, tuple(sub(c) for c in n.body))

    return [sub(c) for c in ops]


PASS = PairTmaIssue()
