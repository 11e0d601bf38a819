"""stage_b_scales: the load role fetches each K block's B scales into the ring; the math loop reads smem."""
from __future__ import annotations

from dgir.ir import SCALAR_OPS, DType, Node, Op, Type

from . import Pass


class StageBScales(Pass):
    """Move the B-scale loads of the math k-loop (`load_scale`, one or two global loads per K block
    whose result the promotion needs) to the load role.  The producer copies the K block's B scales
    into a small `sfb_ring` that joins the k-loop's channel (`stage_scale`, before the slot's commit,
    whose arrive publishes them), and the math warpgroups read them with `smem_scalar` after waiting
    for the slot.  The math loop is left without global loads: their latency (an L1 hit or, once per
    32 K blocks, an L2 trip) was exposed right before the FFMAs or between wgmma issues.

    The producer computes the scales' row and column itself: scalar definitions the math role used
    for them are cloned into the load role (the persistent tile loops of both roles compute the same
    tile coordinates).  Kernels without scale loads in a channel-fed k-loop are returned unchanged.

    Applies to tiles of at least MIN_TILE elements only (decision recorded as the kernel attr
    `b_scales`): the producer is one thread that now waits for two global loads per stage, which a
    large tile's K block (about 1 us of tensor work) hides, but a small tile's does not.  Measured on
    the H200 (bench/TUNING.md step 12): 256x128 +2%, 64x32..64x128 tiles at M=128 -10..-25%.
    """
    name = "stage_b_scales"
    ring = "sfb_ring"
    MIN_TILE = 128 * 128

    def __init__(self, async_copy: bool = False, min_tile: int = MIN_TILE, max_k: int | None = None):
        # async_copy: the producer issues cp.async and the slot's full barrier tracks them
        # (cp.async.mbarrier.arrive), so it never waits for the loads; not yet measured on the
        # H200, hence not the default (bench/experiments.py variant "sfb_async").
        # max_k: stage only up to this K (None: any K).  The full runs' ablations read back in
        # bench/TUNING.md step 119 put the staging at ~1% slower than the math loop's own loads at
        # K = 16384 and 2-2.5% faster at K <= 2048 for 256x128 tiles; spec 295 finds the bound
        self.async_copy, self.min_tile, self.max_k = async_copy, min_tile, max_k

    def run(self, kernel: Node) -> Node:
        if any(n.name == self.ring for n in kernel.body) or kernel.get("b_scales"):
            return kernel                                    # already decided
        tile = (kernel.get("block_m") or 0) * (kernel.get("block_n") or 0)
        if tile < self.min_tile:
            return kernel.with_attrs(b_scales=f"in the math loop (tile {tile} < {self.min_tile})")
        k = kernel.get("k") or 0
        if self.max_k is not None and k > self.max_k:
            return kernel.with_attrs(b_scales=f"in the math loop (K {k} > {self.max_k})")
        how = " (cp.async)" if self.async_copy else ""
        return self.stage(kernel).with_attrs(b_scales=f"staged by the load role{how}")

    def stage(self, kernel: Node) -> Node:
        regions = [n for n in kernel.body if n.op is Op.WARPGROUP]
        mma = next((r for r in regions if "mma" in r.get("roles", ())), None)
        load = next((r for r in regions if "load" in r.get("roles", ())), None)
        if mma is None or load is None:
            return kernel
        c_tile, c_loop = _k_loop(mma, lambda c: c.op is Op.LOAD_SCALE)
        if c_loop is None:
            return kernel
        wait = next(c for c in c_loop.body if c.op is Op.WAIT)
        ch = wait.args[0]
        p_tile, p_loop = _k_loop(load, lambda c: c.op is Op.COMMIT and c.args[0] == ch)
        if p_loop is None:
            return kernel
        scales = [c for c in c_loop.body if c.op is Op.LOAD_SCALE]
        commit = next(c for c in p_loop.body if c.op is Op.COMMIT and c.args[0] == ch)

        # the producer's values for each scale's (row, col): reuse identical definitions, clone the rest
        scopes = _Scopes(mma, c_tile, c_loop, load, p_tile, p_loop,
                         {n.name for n in kernel.body if n.op is not Op.WARPGROUP})
        staged = []
        for i, s in enumerate(scales):
            param, row, col = s.args
            staged.append(Node(Op.STAGE_SCALE, "", (ch, commit.args[1], self.ring, param, scopes.resolve(row),
                                                    scopes.resolve(col), i), None,
                               {"role": "load", **({"async": True} if self.async_copy else {})}))

        # consumer: the scale reads follow the wait (the slot holds them from then until the release)
        c_body = []
        for c in c_loop.body:
            if c.op is Op.LOAD_SCALE:
                continue
            c_body.append(c)
            if c is wait:
                c_body += [Node(Op.SMEM_SCALAR, s.name, (self.ring, wait.args[1], i), Type(DType.f32), {"role": s.role})
                           for i, s in enumerate(scales)]
        p_body = []
        for c in p_loop.body:
            if c is commit:
                p_body += scopes.new_inner + staged
            p_body.append(c)
        new_c_loop = c_loop.with_body(c_body)
        new_p_loop = p_loop.with_body(p_body)
        new_p_tile = p_tile.with_body([x for c in p_tile.body
                                       for x in ((scopes.new_outer + [new_p_loop]) if c is p_loop else [c])])
        new_c_tile = c_tile.with_body([new_c_loop if c is c_loop else c for c in c_tile.body])

        chan = next(n for n in kernel.body if n.op is Op.CHANNEL and n.name == ch)
        ring = Node(Op.SMEM, self.ring, (), Type(DType.f32, (len(scales),)), {"stages": chan.get("stages")})
        body = []
        for n in kernel.body:
            if n is chan:
                body += [ring, Node(n.op, n.name, n.args + (self.ring,), n.type, n.attrs)]
            elif n is mma:
                body.append(n.with_body([new_c_tile if c is c_tile else c for c in n.body]))
            elif n is load:
                body.append(n.with_body([new_p_tile if c is p_tile else c for c in n.body]))
            else:
                body.append(n)
        return kernel.with_body(body)


def _k_loop(region: Node, marks) -> tuple[Node | None, Node | None]:
    """(tile loop, k loop) of a warpgroup region: the FOR directly in a FOR whose body has a `marks` op."""
    for tile in (c for c in region.body if c.op is Op.FOR):
        for k in (c for c in tile.body if c.op is Op.FOR):
            if any(marks(c) for c in k.body):
                return tile, k
    return None, None


class _Scopes:
    """Scalar definitions of the math role (region, tile loop, k loop) and of the load role, to give
    the load role each value the math role computed (cloning what the load role lacks)."""

    def __init__(self, mma, c_tile, c_loop, load, p_tile, p_loop, decls: set):
        def defs(nodes):
            return {c.name: c for c in nodes if c.op in SCALAR_OPS and c.name}
        self.c = [(defs(mma.body), 0), (defs(c_tile.body), 1), (defs(c_loop.body), 2)]
        self.p_defs = {**defs(load.body), **defs(p_tile.body), **defs(p_loop.body)}
        self.p_ivs = {c_tile.name: p_tile.name, c_loop.name: p_loop.name}   # induction variables
        self.inner = {p_loop.name} | set(defs(p_loop.body))                  # values of the k loop
        self.new_outer: list[Node] = []      # clones placed before the producer's k loop
        self.new_inner: list[Node] = []      # clones placed in the producer's k loop
        self.mapped: dict[str, str] = {d: d for d in decls}    # params and buffers keep their names

    def resolve(self, a):
        """The producer-side name (or literal) holding math-role value `a`."""
        if not isinstance(a, str):
            return a
        if a in self.p_ivs:
            return self.p_ivs[a]
        if a in self.mapped:
            return self.mapped[a]
        node, level = next(((d[a], lv) for d, lv in self.c if a in d), (None, None))
        if node is None:
            raise ValueError(f"stage_b_scales: %{a} is not a scalar of the math role")
        args = tuple(self.resolve(x) for x in node.args)
        mine = self.p_defs.get(a)
        same = mine is not None and mine.op is node.op and mine.args == args and \
            {k: v for k, v in mine.attrs if k != "role"} == {k: v for k, v in node.attrs if k != "role"}
        if same:                                     # the load role computes this value already
            self.mapped[a] = a
            return a
        name = a if a not in self.p_defs else f"{a}_sfb"
        clone = Node(node.op, name, args, node.type, {**node.a, "role": "load"})
        self.p_defs[name] = clone
        if level == 2 or any(isinstance(x, str) and x in self.inner for x in args):
            self.new_inner.append(clone)             # it reads a k-loop value: it lives in the k loop
            self.inner.add(name)
        else:
            self.new_outer.append(clone)
        self.mapped[a] = name
        return name


PASS = StageBScales()
