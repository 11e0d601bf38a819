"""prefetch_first_stages: the first tile's first K blocks asked of L2 from the kernel's entry."""
from __future__ import annotations

from dgir.ir import INDEX_OPS, SCALAR_OPS, DType, Node, Op, Type

from . import Pass


class _NotScalar(Exception):
    """A coordinate depends on something other than index arithmetic."""


class PrefetchFirstStages(Pass):
    """Add, marked `at="entry"`, an L2-only prefetch (`tma_prefetch`) of each box the load role's
    first `blocks` K blocks of its first tile will load (default: as many as its ring holds), with
    the index arithmetic that names them.  The emitter issues them from one thread of the first math
    warpgroup at the kernel's entry, while thread 0 initialises the barriers, so the data's round
    trip starts before the barrier set-up, the CTA / cluster barrier, the register reallocation and
    the load role's own walk (the load role's first acquire comes ~0.3 us after its start at small M,
    bench/TUNING.md step 131); the ring's loads of the same boxes then find them in L2 or in flight.

    An L2 prefetch writes nothing the kernel reads, so it may come before the grid_wait of
    programmatic dependent launch: every write of the previous kernel lands in L2, where a line
    prefetched earlier is updated, and the loads, after the wait, read L2.  The verifier allows
    exactly these (`at="entry"` prefetches) before the wait.

    Opt-in (bench/experiments.py variant `entrypf`, after multicast_tma: the loads are in their final
    form, and group_tma_issue has not unrolled the K loop yet).  Needs the load region's usual form:
    scalar index arithmetic, one persistent tile loop, inside it a K loop of constant trip count and
    step 1; other kernels are left alone.  The decision is recorded as the kernel attr
    `entry_prefetch`.
    """
    name = "prefetch_first_stages"

    def __init__(self, blocks: int | None = None, params: tuple = ("A", "B")):
        if blocks is not None and blocks < 1:
            raise ValueError(f"prefetch_first_stages: blocks must be >= 1, got {blocks!r}")
        self.blocks, self.params = blocks, tuple(params)

    def run(self, kernel: Node) -> Node:
        if kernel.get("entry_prefetch"):
            return kernel
        stages = {n.name: n.get("stages") or 1 for n in kernel.body if n.op is Op.CHANNEL}
        body, how = [], ("skipped: no load region of one tile loop around a constant-trip K loop "
                         "with scalar coordinates")
        for r in kernel.body:
            if r.op is Op.WARPGROUP and set(r.get("roles", ())) == {"load"} and how.startswith("skipped"):
                entry, blocks = self._entry(r, stages)
                if entry:
                    r = r.with_body(tuple(entry) + tuple(r.body))
                    how = f"{'/'.join(self.params)} of the first tile's first {blocks} K blocks, from the entry"
            body.append(r)
        return kernel.with_body(body).with_attrs(entry_prefetch=how)

    def _entry(self, region: Node, stages: dict) -> tuple[list, int]:
        """The entry's ops (scalars, the guard and its prefetches) and the K blocks they cover."""
        tiles = [n for n in region.body if n.op is Op.FOR]
        if len(tiles) != 1:
            return [], 0
        tile = tiles[0]
        kloops = [n for n in tile.body if n.op is Op.FOR]
        if len(kloops) != 1 or not all(isinstance(a, int) for a in kloops[0].args) or kloops[0].args[2] != 1:
            return [], 0
        kloop = kloops[0]
        loads = [n for n in kloop.body if n.op is Op.TMA_LOAD and n.args[3] in self.params]
        if not loads:
            return [], 0
        start, stop, _ = kloop.args
        ring = stages.get(loads[0].args[0], 1)
        blocks = min(self.blocks or ring, ring, stop - start)
        scalars = lambda body: {n.name: n for n in body if n.name and n.op in SCALAR_OPS}  # noqa: E731
        before = scalars(region.body[:list(region.body).index(tile)])
        in_tile, in_k = scalars(tile.body), scalars(kloop.body)
        role, out, made = region.role or "load", [], {}

        def value(name, j: int):
            """`name`'s value at the first tile and K block `start + j`, as an entry name or literal."""
            if not isinstance(name, str):
                return name
            if name == tile.name:
                return value(tile.args[0], j)
            if name == kloop.name:
                return start + j
            for scope, key, new in ((in_k, (j, name), f"{name}_pf{j}"), (in_tile, ("tile", name), f"{name}_pf"),
                                    (before, ("region", name), f"{name}_pf")):
                if name in scope:
                    break
            else:
                return name                    # a parameter or declaration: the same at the entry
            if key not in made:
                n = scope[name]
                if n.op not in INDEX_OPS or n.body:
                    raise _NotScalar(name)
                args = tuple(value(a, j) for a in n.args)
                out.append(Node(n.op, new, args, n.type, {**n.a, "at": "entry"}))
                made[key] = new
            return made[key]

        try:
            first, last = value(tile.args[0], 0), value(tile.args[1], 0)
            prefetches = [Node(Op.TMA_PREFETCH, "", (ld.args[3],) + tuple(value(c, j) for c in ld.args[4:6]), None,
                               {"role": role}) for j in range(blocks) for ld in loads]
        except _NotScalar:
            return [], 0
        any_tile = Node(Op.LT, f"{tile.name}_pf_any", (first, last), Type(DType.i32), {"role": role, "at": "entry"})
        out += [any_tile, Node(Op.IF, "", (any_tile.name,), None, {"role": role, "at": "entry"}, tuple(prefetches))]
        return out, blocks


PASS = PrefetchFirstStages()
