"""A scheduling pass written outside dgir, the way a researcher would try one: it replaces the default
scheduler of the math k-loop (passes/schedule_mma.py) and leaves every other pass as it is.

The schedule is data on the IR.  schedule_mma writes a `stage` (0: issue, beside the wgmma; 1: retire,
with the promotion) and an `order` on each op of the k-loop; interleave_ffma reads them and builds the
software pipeline (block j+1's stage 0 runs before block j's stage 1), keeping each stage's ops in
`order`.  This pass writes different data, nothing else: each K block's B-scale reads (`smem_scalar`
from the ring, or `load_scale` from global memory) move from the issue stage into the retire stage,
ordered just ahead of the `wgmma_wait`.  The trade it is there to measure: the scales are no longer live
while the next block's wgmma is issued (fewer registers), but their latency now sits in front of the
promotion.

    dgir compile fp8_gemm_nt --m 2048 --n 1024 --k 1024 --plugin examples/scale_reads_at_retire.py \\
        --config block_m=128,block_n=128,stages=5 --dump-dir dumps
    dgir diff dumps/<kernel> scale_reads_at_retire     # the stage / order data it rewrote
    dgir diff dumps/<kernel> interleave_ffma           # where the reads landed in the pipelined loop

Orders that break the IR are caught before the GPU: a value used before the op defining it is refused
by interleave_ffma (a PassError naming it), and a ring slot read after its release is a RaceError on
the CPU interpreter (tests/test_examples.py shows both).
"""
import dgir
from dgir.ir import Op, map_bodies
from dgir.passes.schedule_mma import SCALE_READS, ScheduleMma


class ScaleReadsAtRetire(dgir.Pass):
    """The default k-loop schedule (schedule_mma) with each K block's B-scale reads moved from the issue
    stage to the retire stage, ordered just ahead of the wgmma_wait (so before the slot's release)."""
    name = "scale_reads_at_retire"
    anchor = Op.WGMMA_WAIT     # the op the reads are ordered in front of

    def run(self, kernel):
        return map_bodies(ScheduleMma().run(kernel), self.reschedule)

    def reschedule(self, parent, body):
        if parent.op is not Op.FOR or parent.get("pipelined") is not False:
            return body                                   # not a k-loop schedule_mma scheduled
        staged = sorted((c for c in body if c.get("stage") is not None), key=lambda c: c.get("order"))
        reads = [c for c in staged if c.op in SCALE_READS]
        rest = [c for c in staged if c.op not in SCALE_READS]
        at = next(i for i, c in enumerate(rest) if c.op is self.anchor)
        order = {id(c): i for i, c in enumerate(rest[:at] + reads + rest[at:])}
        return tuple(c.with_attrs(order=order[id(c)], stage=1 if c.op in SCALE_READS else c.get("stage"))
                     if id(c) in order else c for c in body)


dgir.register_pass(ScaleReadsAtRetire(), "sm90a", replace="schedule_mma")
