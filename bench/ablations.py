"""Research passes used by the benchmark's ablation rows (also an example of user passes).

Neither computes the block-scaled GEMM correctly for arbitrary scales: they exist to measure what
promote_scales costs and what it buys.
"""
from __future__ import annotations

from dgir.ir import DType, Node, Op, Type, expand_ops
from dgir.passes import Pass
from dgir.passes.interleave_ffma import InterleaveFfma
from dgir.passes.promote_scales import PromoteScales


def accumulating_wgmma(n: Node) -> list[Node]:
    """mma_scaled -> wgmma onto the accumulator (scale_d=1) + wait: no per-block scales."""
    acc, a, b, ctr = n.args[:4]
    attrs = {"n": n.get("n"), "k": n.get("k"), "scale_d": 1, "role": "mma", "wave": n.get("wave")}
    return [Node(Op.WGMMA, "", (acc, a, b, ctr), None, {k: v for k, v in attrs.items() if v is not None}),
            Node(Op.WGMMA_WAIT, "", (), None, {"pending": 0, "role": "mma"})]


def last_block_scales(loop: Node) -> list[Node]:
    """The k-loop's B-scale loads again after it, for its last K block (named `<scale>_end`): what
    the ablations that promote once after the loop read."""
    last = loop.args[1] - 1
    return [Node(Op.LOAD_SCALE, r.name + "_end", tuple(last if a == loop.name else a for a in r.args),
                 Type(DType.f32), {"role": "mma"}) for r in loop.body if r.op is Op.LOAD_SCALE]


class CeilingNoPromotion(Pass):
    """Ablation, not a correct kernel: one FP32 tensor-core accumulator over all of K, unit scales.
    Each `mma_scaled` becomes `wgmma(acc, scale_d=1)` + `wgmma_wait 0`; the scale loads and the
    promotion FFMAs disappear.  Its speed is the ceiling promote_scales is measured against."""
    name = "ceiling_no_promotion"

    def run(self, kernel: Node) -> Node:
        return expand_ops(kernel, lambda n: [] if n.op is Op.LOAD_SCALE else
                          accumulating_wgmma(n) if n.op is Op.MMA_SCALED else [n])


class RescaleCost(Pass):
    """Ablation, not a correct kernel (step 64): what a promotion without the partial accumulator
    would cost.  Each `mma_scaled` becomes `wgmma(acc, scale_d=1)`, `wgmma_wait 0`, then `scale`
    (acc *= sfa[row] * sfb[n block]: one FMUL per accumulator, where promote_scales issues one FFMA
    and needs a second register tile).  A correct kernel of that shape would keep acc / s_k in the
    tensor-core accumulator and multiply by s_(k-1) / s_k before each K block; this ablation has its
    instruction count and register use, not its values."""
    name = "rescale_cost"

    def run(self, kernel: Node) -> Node:
        def rescaled(n: Node) -> list[Node]:
            acc, _, _, _, sfa, *sbs, n0 = n.args
            return accumulating_wgmma(n) + [Node(Op.SCALE, "", (acc, sfa, *sbs, n0), None, {"role": "mma"})]
        return expand_ops(kernel, lambda n: rescaled(n) if n.op is Op.MMA_SCALED else [n])


class DetachedPromotion(Pass):
    """Ablation, not a correct kernel (bench/TUNING.md step 74): the promotion's FFMAs and scale
    reads without their dependence on the wgmma.  Each `mma_scaled` becomes `wgmma(acc, scale_d=1)`,
    then `promote(shadow, shadow, scales)` (the same FFMAs, on a tile no wgmma writes, issued while
    the group runs), then `wgmma_wait 0`; after the k-loop the shadow is promoted into acc once, so
    that it stays live.  Between ceiling_no_promotion (the same wgmma stream, no FFMAs) and the real
    kernel (the FFMAs after the wait, before the next group), it splits what promote_scales costs
    into the FFMAs' own cost (issue slots, register-file ports, energy) and their place on the path
    from one group to the next."""
    name = "detached_promotion"

    def run(self, kernel: Node) -> Node:
        shadow = []
        form = PromoteScales().straddle(kernel.get("block_n") or 128, kernel.get("block_m"))[0]  # the default's form
        how = {"role": "mma", **({"straddle": form} if form else {})}

        def rewrite(body):
            out = []
            for n in body:
                if n.op is Op.FOR and any(c.op is Op.MMA_SCALED for c in n.body):
                    out.append(Node(Op.ZERO, "", ("shadow",), None, {"role": "mma"}))
                    out.append(n.with_body(rewrite(n.body)))
                    out += last_block_scales(n)
                    acc, _, _, _, sfa, *sbs, n0 = next(c for c in n.body if c.op is Op.MMA_SCALED).args
                    out.append(Node(Op.PROMOTE, "", (acc, "shadow", sfa, *(sb + "_end" for sb in sbs), n0), None,
                                    dict(how)))
                    continue
                if n.body:
                    n = n.with_body(rewrite(n.body))
                if n.op is Op.MMA_SCALED:
                    acc, _, _, _, sfa, *sbs, n0 = n.args
                    shadow.append(kernel.decl(acc).type)
                    wgmma, wait = accumulating_wgmma(n)
                    out += [wgmma, Node(Op.PROMOTE, "", ("shadow", "shadow", sfa, *sbs, n0), None, dict(how)), wait]
                    continue
                out.append(n)
            return out

        body = rewrite(kernel.body)
        if not shadow:
            return kernel
        decls = [n for n in body if n.op in (Op.PARAM, Op.SMEM, Op.REGS, Op.CHANNEL)]
        rest = [n for n in body if n not in decls]
        return kernel.with_body(decls + [Node(Op.REGS, "shadow", (), Type(shadow[0].dtype, shadow[0].shape), {})] + rest)


class ScaleAtEnd(Pass):
    """Ablation: accumulate all of K in the tensor-core accumulator and apply the scales once, after
    the k-loop, using the last K block's scales.  Exact only when scales do not vary along K; with
    per-block scales it shows what the per-128-K promotion buys in accuracy."""
    name = "scale_at_end"

    def run(self, kernel: Node) -> Node:
        def rewrite(body):
            out = []
            for n in body:
                if n.op is Op.FOR and any(c.op is Op.MMA_SCALED for c in n.body):
                    out.append(n.with_body(rewrite(n.body)))
                    out += last_block_scales(n)
                    for mma in (c for c in n.body if c.op is Op.MMA_SCALED):   # every wave's accumulator
                        acc, _, _, _, sfa, *sbs, n0 = mma.args
                        out.append(Node(Op.SCALE, "", (acc, sfa, *(sb + "_end" for sb in sbs), n0), None, {"role": "mma"}))
                    continue
                if n.body:
                    n = n.with_body(rewrite(n.body))
                if n.op is Op.MMA_SCALED:
                    out += accumulating_wgmma(n)
                    continue
                out.append(n)
            return out
        return kernel.with_body(rewrite(kernel.body))


def pipeline_with(replace: dict | None = None, drop: tuple = (), after: dict | None = None) -> list:
    """The sm90a pipeline with passes replaced (name -> pass), dropped, or added after one (name -> pass)."""
    from dgir.pipeline import pipeline
    out = []
    for p in pipeline("sm90a"):
        if p.name in drop:
            continue
        out.append((replace or {}).get(p.name, p))
        if p.name in (after or {}):
            out.append(after[p.name])
    return out


class UnitBScales(Pass):
    """Ablation, not a correct kernel: the per-K-block B-scale loads (ld.global in the k-loop, whose
    latency can stall the warp between wgmma issues) become the constant 1.0.  Measures what those
    loads cost."""
    name = "unit_b_scales"

    def run(self, kernel: Node) -> Node:
        one = lambda n: Node(Op.CONST, n.name, (), Type(DType.f32), {"value": 0x3F800000, "role": n.role})  # noqa: E731
        return expand_ops(kernel, lambda n: [one(n) if n.op is Op.LOAD_SCALE else n])


class InterleaveUnroll8(InterleaveFfma):
    """interleave_ffma with 8 K blocks per loop iteration (the default pass: 4): half as many
    pipeline drains at the loop back-edge, twice the code."""
    unroll = 8


def _never_taken(kernel: Node, drop) -> Node:
    """Wrap the math warpgroups' ops that `drop` selects in `if (M < 0)`: never taken, but ptxas
    cannot know it, so what those ops read (the promoted accumulators) stays computed."""
    i32 = Type(DType.i32)

    def wrap(body):
        out = []
        for n in body:
            if drop(n):
                out.append(Node(Op.IF, "", ("abl_never",), None, {"role": n.role}, (n,)))
            else:
                out.append(n.with_body(wrap(n.body)) if n.body else n)
        return out

    body = []
    for r in kernel.body:
        if r.op is Op.WARPGROUP and "mma" in r.get("roles", ()):
            guard = [Node(Op.DIM, "abl_M", ("A",), i32, {"axis": 0, "role": "mma"}),
                     Node(Op.LT, "abl_never", ("abl_M", 0), i32, {"role": "mma"})]
            r = r.with_body(guard + wrap(r.body))
        body.append(r)
    return kernel.with_body(body)


class NoStageOut(Pass):
    """Ablation, not a correct kernel: the epilogue does not convert and write the accumulators into
    the staging tile (its syncs and TMA store of the stale tile stay; the accumulators are still
    computed: the staging sits behind a branch that is never taken).  How much faster this runs
    bounds what hiding the staging behind the next tile's math can buy, power limit included."""
    name = "no_stage_out"

    def run(self, kernel: Node) -> Node:
        return _never_taken(kernel, lambda n: n.op is Op.STAGE_OUT)


class NoEpilogue(Pass):
    """Ablation, not a correct kernel: every store-role op of the math warpgroups (staging, its
    syncs, the TMA store and its waits) sits behind a branch that is never taken: D is never
    written.  The bound for an epilogue that costs the math nothing."""
    name = "no_epilogue"

    def run(self, kernel: Node) -> Node:
        return _never_taken(kernel, lambda n: n.role == "store" and not n.body)


class NoWork(Pass):
    """Ablation, not a correct kernel: every warpgroup region is emptied, so the kernel is its
    prologue alone (barrier set-up, the cluster barrier) under the same launch: grid, cluster shape,
    threads and, unless `smem_bytes` is given, the same dynamic shared memory.  Timed like a GEMM it
    shows what the launch configuration itself costs under the benchmark's timer, against a
    one-element torch kernel (variant `floor`).  With `smem_bytes` the shared buffers and channels
    go too (their barriers would lie past the smaller allocation), so the prologue initialises
    nothing."""
    name = "no_work"

    def __init__(self, smem_bytes: int | None = None):
        self.smem_bytes = smem_bytes

    def run(self, kernel: Node) -> Node:
        body = [n.with_body([]) if n.op is Op.WARPGROUP else n for n in kernel.body]
        if self.smem_bytes is None:
            return kernel.with_body(body)
        body = [n for n in body if n.op not in (Op.SMEM, Op.CHANNEL)]
        return kernel.with_body(body).with_attrs(smem_bytes=self.smem_bytes)


class HintStores(Pass):
    """Experiment (step 62): D's TMA stores carry an L2 eviction policy (default evict_first), so the
    output stream, written once, gives its lines up before A's and B's, which the round's other tiles
    still read.  At M = 4096 and K = 512, D is 268 MB against 19 MB of operands."""
    name = "hint_stores"

    def __init__(self, policy: str = "evict_first"):
        self.policy = policy

    def run(self, kernel: Node) -> Node:
        return expand_ops(kernel, lambda n: [n.with_attrs(l2=self.policy) if n.op is Op.TMA_STORE else n])


class DropOperandLoads(Pass):
    """Ablation, not a correct kernel: the load role stops loading the named operands (`params`,
    e.g. ("A",)); their ring slots keep whatever shared memory held, the slot's expect_tx counts only
    the boxes still loaded, and every wgmma, promotion and store runs as before.  At M <= 128 every
    CTA reads all of A from L2 per N tile (1.3-2x B's DRAM bytes in the issue's small-M cells, TUNING
    step 115): timed beside the default ("noA", "noB", "noAB"), it splits a cell's time into what each
    operand's traffic costs and what is left (startup, math, epilogue)."""
    name = "drop_operand_loads"

    def __init__(self, params=("A",)):
        self.params = tuple(params)

    def run(self, kernel: Node) -> Node:
        return expand_ops(kernel, lambda n: [] if n.op is Op.TMA_LOAD and n.args[3] in self.params else [n])
