"""prefetch_to_l2: the load role asks L2 for an operand's boxes further ahead than the ring reaches."""
from __future__ import annotations

from dgir.ir import INDEX_OPS, DType, Node, Op, Type, map_bodies

from . import Pass


class PrefetchToL2(Pass):
    """The load role's K loop issues, besides each K block's TMA loads, an L2-only prefetch of the
    named operands' box `distance` K blocks ahead (`tma_prefetch`: `cp.async.bulk.prefetch.tensor`,
    no shared memory, no barrier); before the loop it prefetches the blocks between the ring's reach
    and that distance.  Every box the CTA loads is prefetched exactly once (the interpreter checks
    this for each CTA: `Machine.prefetch_misses`).

    Why: at small M a CTA streams one B panel, and its ring (S slots) lets only S K blocks be in
    flight; after that each load waits for the math warpgroup to release a slot, so DRAM sees new
    requests at the math loop's pace, one block at a time.  The prefetches put `distance` blocks of
    requests in DRAM's queues regardless of the ring, so the slot's own load later finds its box in
    L2.  Spec 304 (bench/TUNING.md step 122) times it against the default at the issue's small-M cells.

    How: the prefetch's coordinates are the B load's own, recomputed for K block `kbl + distance`:
    the loop body's scalar ops the load's coordinates depend on are cloned with the induction
    variable replaced (names suffixed `_l2` in the loop, `_l2p` in the prologue).  A loop whose
    coordinates depend on anything but scalar arithmetic, or with a step other than 1, is left
    alone.  `hinted=True` copies the load's L2 eviction policy (hint_l2_eviction) onto the prefetch.
    The decision is recorded on the kernel (`l2_prefetch`); idempotent.
    """
    name = "prefetch_to_l2"

    def __init__(self, distance: int = 16, params: tuple = ("B",), hinted: bool = False):
        if distance < 1:
            raise ValueError(f"distance={distance} must be >= 1 K block")
        self.distance, self.params, self.hinted = distance, tuple(params), hinted

    def run(self, kernel: Node) -> Node:
        if any(n.op is Op.TMA_PREFETCH for n in kernel.walk()):
            return kernel
        stages = {n.name: n.get("stages", 1) for n in kernel.body if n.op is Op.CHANNEL}
        done = []

        def rewrite(parent: Node, body: tuple) -> tuple:
            out = []
            for n in body:
                loads = [x for x in n.body if x.op is Op.TMA_LOAD and x.args[3] in self.params] if n.op is Op.FOR else []
                if not loads or n.role != "load" or n.args[2] != 1:
                    out.append(n)
                    continue
                ring = stages[loads[0].args[0]]
                chains = [_coordinate_chain(n, ld) for ld in loads]
                if any(c is None for c in chains):
                    out.append(n)
                    continue
                out.extend(self._prologue(n, loads, chains, ring))
                out.append(n.with_body(self._ahead(n, loads, chains) + n.body))
                done.append(n.name)
            return tuple(out)

        kernel = map_bodies(kernel, rewrite)
        if not done:
            return kernel.with_attrs(l2_prefetch=f"skipped: no load-role K loop of {'/'.join(self.params)} "
                                                 "with scalar coordinates")
        return kernel.with_attrs(l2_prefetch=f"{'/'.join(self.params)} {self.distance} K blocks ahead"
                                             f"{' (hinted)' if self.hinted else ''}")

    def _prefetches(self, loop: Node, loads, chains, var: str, suffix: str, role: str) -> list:
        out = []
        for i, (ld, chain) in enumerate(zip(loads, chains)):
            rename = {loop.name: var}
            sfx = f"{suffix}{i}" if len(loads) > 1 else suffix
            for c in chain:
                if c.name not in rename:
                    rename[c.name] = f"{c.name}{sfx}"
                out.append(Node(c.op, rename[c.name], tuple(rename.get(a, a) if isinstance(a, str) else a
                                                             for a in c.args), c.type, c.attrs))
            coords = tuple(rename.get(a, a) if isinstance(a, str) else a for a in ld.args[4:6])
            attrs = {"role": role}
            if self.hinted and ld.get("l2"):
                attrs.update(l2=ld.get("l2"), l2_if=ld.get("l2_if"))
            out.append(Node(Op.TMA_PREFETCH, "", (ld.args[3],) + coords, None, {k: v for k, v in attrs.items() if v}))
        return out

    def _ahead(self, loop: Node, loads, chains) -> tuple:
        """At the top of iteration kbl: the boxes of K block kbl + distance, if it is in the loop."""
        role, i32 = loop.role, Type(DType.i32)
        var = f"{loop.name}_l2"
        ahead = Node(Op.ADD, var, (loop.name, self.distance), i32, {"role": role})
        inside = Node(Op.LT, f"{var}_in", (var, loop.args[1]), i32, {"role": role})
        guard = Node(Op.IF, "", (inside.name,), None, {"role": role},
                     tuple(self._prefetches(loop, loads, chains, var, "_l2", role)))
        return (ahead, inside, guard)

    def _prologue(self, loop: Node, loads, chains, ring: int) -> list:
        """Before the loop: blocks [start + reach, start + distance), where reach = min(ring, distance):
        the first `ring` blocks' loads go out at once, and the loop's own prefetches start at
        start + distance."""
        reach = min(ring, self.distance)
        if reach >= self.distance:
            return []
        role, i32 = loop.role, Type(DType.i32)
        start, stop = loop.args[0], loop.args[1]
        var = f"{loop.name}_l2p"
        out = []
        if isinstance(start, int) and isinstance(stop, int):
            lo, hi = min(start + reach, stop), min(start + self.distance, stop)
            if hi <= lo:
                return []
        else:
            lo = Node(Op.ADD, f"{var}_lo0", (start, reach), i32, {"role": role})
            hi0 = Node(Op.ADD, f"{var}_hi0", (start, self.distance), i32, {"role": role})
            hi = Node(Op.MIN, f"{var}_hi", (hi0.name, stop), i32, {"role": role})
            lo_c = Node(Op.MIN, f"{var}_lo", (lo.name, hi.name), i32, {"role": role})
            out += [lo, hi0, hi, lo_c]
            lo, hi = lo_c.name, hi.name
        out.append(Node(Op.FOR, var, (lo, hi, 1), None, {"role": role},
                        tuple(self._prefetches(loop, loads, chains, var, "_l2p", role))))
        return out


def _coordinate_chain(loop: Node, load: Node) -> list | None:
    """The ops of `loop`'s body that the load's coordinates depend on, in body order; None when one of
    them is not scalar arithmetic (then the coordinates cannot be recomputed ahead)."""
    defs = {n.name: n for n in loop.body if n.name}
    need, stack = set(), [a for a in load.args[4:6] if isinstance(a, str)]
    while stack:
        x = stack.pop()
        if x in defs and x not in need:
            need.add(x)
            stack.extend(a for a in defs[x].args if isinstance(a, str))
    chain = [n for n in loop.body if n.name in need]
    return chain if all(n.op in INDEX_OPS and not n.body for n in chain) else None


PASS = PrefetchToL2()
