"""rescale_accumulator: promotion="rescaled" - the tensor-core accumulator runs over all of K."""
from __future__ import annotations

from dgir.ir import DType, Node, Op, Type

from . import Pass


class RescaleAccumulator(Pass):
    """For kernels compiled with `promotion="rescaled"` (opt-in), turn each `mma_scaled` into a
    wgmma that accumulates onto the accumulator itself, keeping it divided by the current scale:

        zero(acc); zero(s)                          s[row, b] = 0: the first rescale is a no-op
        for k:  rescale(acc, s, sfa, sb.., n0)      s_k = sfa[row] * sfb[b];  acc *= s / s_k;  s = s_k
                wgmma(acc += A_k @ B_k^T)           acc = (sum_j<=k s_j P_j) / s_k
        apply_scale(acc, s)                         acc *= s_last:  sum_k s_k P_k

    against promote_scales' `wgmma(part = A_k @ B_k^T); acc += part * s_k`.  The FP32 work per K
    block is the same (one multiply per accumulator instead of one FFMA, plus one division per row
    and 128-column B-scale block), but there is no partial tile: a warpgroup's 64x256 accumulator
    (128 registers a thread) fits where accumulator and partial (256) do not, and the 128x256 tile's
    m64n256 wgmma reads each A panel from shared memory once instead of twice.  Measured before
    building it (bench/TUNING.md step 64, ablation rescale_cost): +5-6% at M = 4096, power-limited.

    What it gives up, and why it is opt-in: DeepGEMM's two-level accumulation keeps each 128-wide
    K block's sum in the FP8 tensor core's accumulator only until it is promoted; here the running
    sum stays there for all of K, so its limited accumulation precision applies to the whole sum
    (bench/fp8_gemm_nt.py's accuracy rows).  The scales must be finite and non-zero (a zero scale
    makes s / s_k infinite: the output turns NaN or inf, never silently wrong values).

    Kernels without the attribute are returned unchanged; check_config admits the option only for
    tiles with one 64-row wave per math warpgroup whose columns never straddle a B-scale block.
    promote_scales runs this pass for such kernels (so the dump numbering stays the same); it can
    also stand in for promote_scales in a pipeline of one's own.
    """
    name = "rescale_accumulator"

    def run(self, kernel: Node) -> Node:
        if kernel.get("promotion") != "rescaled":
            return kernel
        blocks = max(1, kernel.get("block_n") // 128)
        accs = sorted({n.args[0] for n in kernel.walk() if n.op is Op.MMA_SCALED})
        scale_of = {acc: f"s_{acc}" for acc in accs}

        def rewrite(body):
            out = []
            for n in body:
                if n.op is Op.FOR and any(c.op is Op.MMA_SCALED for c in n.body):
                    out.append(n.with_body(x for c in n.body for x in _k_block(c, scale_of)))
                    out.extend(Node(Op.APPLY_SCALE, "", (acc, scale_of[acc]), None, {"role": "mma"})
                               for acc in dict.fromkeys(c.args[0] for c in n.body if c.op is Op.MMA_SCALED))
                    continue
                out.append(n.with_body(rewrite(n.body)) if n.body else n)
                if n.op is Op.ZERO and n.args[0] in scale_of:       # a tile starts: its scale too
                    out.append(Node(Op.ZERO, "", (scale_of[n.args[0]],), None, {"role": n.role}))
            return out

        body = rewrite(kernel.body)
        decls = [n for n in body if n.op in (Op.PARAM, Op.SMEM, Op.REGS, Op.CHANNEL)]
        rest = [n for n in body if n not in decls]
        tiles = [Node(Op.REGS, s, (), Type(DType.f32, (64, blocks)), {"scales": True}) for s in scale_of.values()]
        return kernel.with_body(decls + tiles + rest)


def _k_block(n: Node, scale_of: dict) -> list[Node]:
    if n.op is not Op.MMA_SCALED:
        return [n]
    acc, a_ring, b_ring, ctr, sfa, *sbs, n0 = n.args
    attrs = {"n": n.get("n"), "k": n.get("k"), "scale_d": 1, "role": n.role, "wave": n.get("wave")}
    return [Node(Op.RESCALE, "", (acc, scale_of[acc], sfa, *sbs[:2], n0), None, {"role": n.role}),
            Node(Op.WGMMA, "", (acc, a_ring, b_ring, ctr), None, {k: v for k, v in attrs.items() if v is not None}),
            Node(Op.WGMMA_WAIT, "", (), None, {"pending": 0, "role": n.role})]

