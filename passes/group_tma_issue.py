"""group_tma_issue: the load role refills several ring slots together (config refill_slots)."""
from __future__ import annotations

from dgir.ir import DType, Node, Op, Type
from dgir.ops.fp8_gemm_config import refill_ring_slots

from . import Pass


class GroupTmaIssue(Pass):
    """For kernels that ask for it (config refill_slots > 1, kernel attr `refill_slots`): unroll the
    load role's K loop by that many slots and acquire them all before issuing any slot's TMA loads:
    the boxes of K blocks k, k+1, ... (adjacent 128-byte column panels of the same rows of A and B)
    leave the SM back to back instead of one consumer K block apart.  Four slots (bench/TUNING.md
    step 131) ask for 512 contiguous bytes of every row at once, the width the fastest copy-only
    kernels read per row and step (bench/memory_floor.py).  `GroupTmaIssue(slots=...)` groups any
    kernel's refills (bench/experiments.py variants `paired` and `quad`).

    Why: at small M the kernels stream B from DRAM, and a memory-only Triton kernel moving the same
    bytes runs fastest with 256-512 contiguous bytes per row per step (bench/memory_floor.py); our
    TMA boxes are 128 bytes wide (the 128B swizzle's limit), so a row's neighbouring panels are
    requested at different times.  The price: the producer waits for the last of its slots, so
    the ring runs about (slots - 1) / 2 stages shallower.  The trip count's remainder keeps its last
    K blocks as single refills after the loop.

    Kernels that do not ask are left as they are (no attr).  The decision is recorded as the kernel
    attr `tma_issue`.  Runs after multicast_tma (it reorders whatever loads the loop holds) and
    before allocate_smem.
    """
    name = "group_tma_issue"
    WORDS = {2: "two", 3: "three", 4: "four"}

    def __init__(self, slots: int | None = None, min_stages: int | None = None):
        if slots is not None and slots not in self.WORDS:
            raise ValueError(f"group_tma_issue: slots must be one of {sorted(self.WORDS)}, got {slots!r}")
        self.slots = slots                # None: the kernel's refill_slots
        self.min_stages = min_stages      # None: refill_ring_slots; lower only to show the deadlock (tests)

    def run(self, kernel: Node) -> Node:
        slots = self.slots or kernel.get("refill_slots") or 1
        if slots == 1 or kernel.get("tma_issue"):
            return kernel
        # the producer commits block p only after slot p+slots-1 is free, while the consumer waiting
        # for block p may hold the blocks of its groups in flight (and a ring-staged epilogue's slot):
        # refill_ring_slots, which check_config asks of a config
        ring_staging = str(kernel.get("staging") or "").startswith("ring")
        min_stages = (refill_ring_slots(slots, kernel.get("partials") or 2, ring_staging)
                      if self.min_stages is None else self.min_stages)
        body, how = [], (f"one slot at a time (no load-role K loop of >= {slots} constant trips over a "
                         f"ring of >= {min_stages} slots)")
        stages = {n.name: n.get("stages") or 1 for n in kernel.body if n.op is Op.CHANNEL}
        for n in kernel.body:
            if n.op is Op.WARPGROUP and "load" in n.get("roles", ()):
                n, grouped = _group_region(n, stages, slots, min_stages)
                if grouped:
                    how = f"{self.WORDS[slots]} slots at a time"
            body.append(n)
        return kernel.with_body(body).with_attrs(tma_issue=how)


def _group_region(region: Node, stages: dict, slots: int, min_stages: int) -> tuple[Node, bool]:
    grouped = False

    def visit(n: Node) -> list[Node]:
        nonlocal grouped
        acquires = [c for c in n.body if c.op is Op.ACQUIRE] if n.op is Op.FOR else []
        if len(acquires) == 1 and stages.get(acquires[0].args[0], 1) >= min_stages:
            out = _group_loop(n, slots)
            grouped |= len(out) > 1 or out[0] is not n
            return out
        return [n.with_body([x for c in n.body for x in visit(c)])] if n.body else [n]

    return region.with_body([x for c in region.body for x in visit(c)]), grouped


def _group_loop(loop: Node, slots: int) -> list[Node]:
    """The loop unrolled by `slots`: every copy's slot acquired (copy j's K block is iv + j, named
    iv_j), then every copy's loads and commit in order; the remainder's blocks one by one after it."""
    start, stop, step = loop.args
    if not all(isinstance(v, int) for v in (start, stop, step)) or step != 1 or stop - start < slots:
        return [loop]
    iv, role = loop.name, loop.role
    groups = (stop - start) // slots
    acquiring, issuing = [], []
    for j in range(slots):
        block = iv if j == 0 else f"{iv}_{j}"
        pre, acquire, post = _split_at_acquire(_copy(loop.body, iv, block, f"p{j}"))
        if j:
            acquiring.append(Node(Op.ADD, block, (iv, j), Type(DType.i32), {"role": role}))
        acquiring += pre + [acquire]
        issuing += post
    kind = "paired" if slots == 2 else f"grouped by {slots}"
    out = [Node(Op.FOR, iv, (start, start + slots * groups, slots), None, {**loop.a, "tma_issue": kind},
                acquiring + issuing)]
    for r in range((stop - start) % slots):   # the remainder: single refills, after the loop
        out += _copy(loop.body, iv, start + slots * groups + r, "t" if r == 0 else f"t{r}")
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


PASS = GroupTmaIssue()
