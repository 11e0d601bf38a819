"""promote_scales: block-scaled MMA -> tensor-core MMA into a fresh partial + FP32 promotion."""
from __future__ import annotations

from dgir.ir import Node, Op, Type
from dgir.ops.fp8_gemm_config import (JUMP_BLOCK_M, JUMP_MIN_BLOCK_N, PROMOTE_MAX_ARMS, jumps_by_default,
                                      straddle_splits)

from . import Pass
from .rescale_accumulator import RescaleAccumulator


class PromoteScales(Pass):
    """Turn each `mma_scaled` (acc += A_blk @ B_blk^T * sfa[row] * sfb[col]) into Hopper's two-level
    accumulation, as DeepGEMM does: per 128-wide K block, `wgmma` into a fresh partial accumulator
    (scale_d = 0), wait for it, release the ring slot, then `promote` it into the FP32 accumulator
    with CUDA-core FFMAs: acc += part * (sfa[row] * sfb[n block]).  FP8 tensor-core accumulation is
    not exact FP32 (about 2^-6 relative per K=32 step on the H200), so the partial must not live
    longer than one scale block.  A tile that straddles 128-row B-scale blocks keeps each block's
    B scale (sb0, sb1 and, for sizes that can touch three, sb2); `promote` picks per column.
    Declares the partial register tile `part`; with several waves (BLOCK_M 256) the waves share it,
    so a wave's promote precedes the next wgmma.

    How a straddling tile picks its B scale per column is this pass's decision, written on each
    `promote` as `straddle` (and why, on the kernel as `straddle_promotion`), which the emitter reads:
      arms     one branch arm per column the crossing can take (at most `max_arms`), each with every
               column group's scale fixed;
      selects  a compare and two selects per 8-column group, at run time;
      jump     straight runs of FFMAs entered by an indexed jump at the crossing, every scale fixed,
               the code at most twice the FFMAs (bench/TUNING.md steps 120-121).
    Beyond `max_arms` split columns the tile jumps where that was measured to pay (`jump=None`, the
    default: at least JUMP_MIN_BLOCK_N columns on 128 or 192 rows), and selects elsewhere;
    `jump=True` / `False` makes every such tile jump / select (bench variants `jump`, `nojump`).

    Kernels compiled with the opt-in `promotion="rescaled"` get the other algorithm instead
    (passes/rescale_accumulator.py): no partial, the tensor-core accumulator runs over all of K and
    is rescaled by s_(k-1) / s_k before each K block.
    """
    name = "promote_scales"
    # more columns than this where the crossing can be: no branch arms (fp8_gemm_config.PROMOTE_MAX_ARMS)
    max_arms = PROMOTE_MAX_ARMS
    # the default rule (jump=None): fp8_gemm_config.jumps_by_default, where spec 300 measured the
    # jumps faster (>= 104 columns on 128 or 192 rows).  128x136 / 128x144 / 192x88 jump anyway where
    # interleave_ffma's switch needs it (spec 299 on the H200: the selects 1.06-1.10x the time).

    def __init__(self, jump: bool | None = None, max_arms: int | None = None):
        self.jump = jump
        if max_arms is not None:
            self.max_arms = max_arms

    def straddle(self, block_n: int, block_m: int | None = None) -> tuple[str | None, str]:
        """(the promote's `straddle` form, or None for a tile inside one B-scale block; why).
        `block_m` matters to the default rule only (None: as for 128 rows)."""
        splits = straddle_splits(block_n)
        if not splits:
            return None, ""
        where = f"{len(splits)} column{'s' if len(splits) > 1 else ''} where a tile can cross a B-scale block"
        if len(splits) <= self.max_arms:
            return "arms", f"arms: {where}"
        jump = self.jump
        if jump is None:
            jump = jumps_by_default(block_m or 128, block_n)
            rule = (f", >= {JUMP_MIN_BLOCK_N} columns on {block_m or 128} rows" if jump else
                    f", jumps only from {JUMP_MIN_BLOCK_N} columns on {' or '.join(map(str, JUMP_BLOCK_M))} rows")
        else:
            rule = ""
        if jump:
            return "jump", f"jump: {where} (> {self.max_arms} arms{rule})"
        return "selects", f"selects: {where} (> {self.max_arms} arms{rule})"

    def run(self, kernel: Node) -> Node:
        if kernel.get("promotion") == "rescaled":
            return RescaleAccumulator().run(kernel)
        part_type = None
        form, why = self.straddle(kernel.get("block_n") or 128, kernel.get("block_m"))

        def rewrite(body):
            nonlocal part_type
            out, pending = [], []   # promotes waiting for the release of their ring slot
            for n in body:
                if n.body:
                    n = n.with_body(rewrite(n.body))
                if n.op is Op.MMA_SCALED:
                    acc, a_ring, b_ring, ctr, sfa, *sbs, n0 = n.args
                    part_type = kernel.decl(acc).type
                    # one partial serves every wave: promote the previous one before it is reused
                    out.extend(p for _, p in pending)
                    pending.clear()
                    attrs = {"n": n.get("n"), "k": n.get("k"), "scale_d": 0, "role": n.role, "wave": n.get("wave")}
                    out.append(Node(Op.WGMMA, "", ("part", a_ring, b_ring, ctr), None,
                                    {k: v for k, v in attrs.items() if v is not None}))
                    out.append(Node(Op.WGMMA_WAIT, "", (), None, {"pending": 0, "role": n.role}))
                    pending.append((ctr, Node(Op.PROMOTE, "", (acc, "part", sfa, *sbs, n0), None,
                                              {"role": n.role, **({"straddle": form} if form else {})})))
                    continue
                out.append(n)
                if n.op is Op.RELEASE:
                    # promote after the slot is handed back: the FFMAs need only registers
                    for ctr, p in [x for x in pending if x[0] == n.args[1]]:
                        out.append(p)
                        pending.remove((ctr, p))
            out.extend(p for _, p in pending)
            return out

        body = rewrite(kernel.body)
        if part_type is None:
            return kernel
        decls = [n for n in body if n.op in (Op.PARAM, Op.SMEM, Op.REGS, Op.CHANNEL)]
        rest = [n for n in body if n not in decls]
        part = Node(Op.REGS, "part", (), Type(part_type.dtype, part_type.shape), {})
        kernel = kernel.with_body(decls + [part] + rest)
        return kernel.with_attrs(straddle_promotion=why) if form else kernel


PASS = PromoteScales()
