"""schedule_mma: assign each op of the math k-loop to a software-pipeline stage (data only)."""
from __future__ import annotations

from dgir.ir import Node, Op

from . import Pass

# Rough issue-to-use latencies (cycles) on sm_90; recorded for schedulers and for `dgir schedule`.
LATENCY = {Op.WAIT: 0, Op.SMEM_READ: 30, Op.WGMMA: 512, Op.WGMMA_WAIT: 0, Op.RELEASE: 0,
           Op.PROMOTE: 64, Op.RESCALE: 64, Op.LOAD_SCALE: 400, Op.SMEM_SCALAR: 30,
           Op.LOAD_ROW_SCALES: 40}      # an L1 hit: a row's 128-byte line serves 32 K blocks
SCALE_READS = (Op.LOAD_SCALE, Op.SMEM_SCALAR)
# stage 0 starts tensor-core work: B-scale reads issue with the wgmma so their latency hides behind it
# (the promote reads them); with promotion "rescaled" the wgmma needs the rescale
ISSUE = SCALE_READS + (Op.LOAD_ROW_SCALES, Op.WAIT, Op.SMEM_READ, Op.RESCALE, Op.WGMMA)
RETIRE = (Op.WGMMA_WAIT, Op.RELEASE, Op.PROMOTE)             # finish it on the CUDA cores


class ScheduleMma(Pass):
    """The default scheduler of the math k-loop.  It writes schedule *data* only: `stage` (0 = issue:
    load the B scales (and K-major A scales), wait for the ring slot, read the A scales, issue the
    wgmma; 1 = retire: wait for the wgmma, release the slot, promote; B-scale loads move to stage 1 when the tile straddles
    two B-scale blocks, whose extra live scales would spill), `order` (position within the loop body,
    which interleave_ffma keeps within each stage: a scheduler reorders ops by writing it) and
    `latency` on each op of any k-loop that issues a wgmma; on the loop, `partials` (the partial
    accumulators it rotates through: K blocks in flight + 1, the kernel's `partials`, default 2) and
    `unroll` (K blocks per iteration: 4 for two partials, 4 more for each further one, so that each
    iteration still has blocks in the steady state between filling and draining the groups in flight).
    With `waits_ahead`, the stage-0 ops up to and including the ring wait (the B-scale loads from global
    memory and the wait for the slot: nothing that reads the slot) are also marked `ahead=1`: the
    next block's wait is then issued before the current block's retire (interleave_ffma), so its
    latency overlaps the wgmma wait instead of sitting between the promotion and the next wgmma.
    Scalar index ops get no stage: the materialising pass recomputes them where they are needed.
    interleave_ffma reads these attrs; a researcher replaces this pass to try another schedule
    without touching the lowering.
    """
    name = "schedule_mma"
    # off: spec 301 on the H200 (21 cells, ABBA) gave 19 ties and 2 slower (512x4096x7168 128x128
    # 1.052; 64x144 1.121, where ptxas spills), the one-warpgroup tiles it was for 0.98-1.03
    # (bench/TUNING.md step 121); bench variant `waitahead`
    waits_ahead = False

    def __init__(self, waits_ahead: bool | None = None):
        if waits_ahead is not None:
            self.waits_ahead = waits_ahead

    def run(self, kernel: Node) -> Node:
        bn = kernel.get("block_n") or 128
        partials = kernel.get("partials") or 2
        loop_schedule = {"pipelined": False, "partials": partials, "unroll": 4 * (partials - 1)}
        # a tile straddling two B-scale blocks keeps two scales and four products per block alive:
        # loading them early would push the math warpgroups past their budget (ptxas spills)
        issue = ISSUE if 128 % bn == 0 else tuple(o for o in ISSUE if o not in SCALE_READS)

        def visit(n: Node) -> Node:
            if n.op is Op.FOR and any(c.op is Op.WGMMA for c in n.body):
                body = []
                ahead = self.waits_ahead and any(c.op is Op.WAIT for c in n.body)
                for i, c in enumerate(n.body):
                    stage = 0 if c.op in issue else 1 if c.op in RETIRE + ISSUE else None
                    if stage is not None:
                        extra = {"ahead": 1} if ahead and stage == 0 else {}
                        c = c.with_attrs(stage=stage, order=i, latency=LATENCY[c.op], **extra)
                    if c.op is Op.WAIT:
                        ahead = False       # what follows the wait reads the slot
                    body.append(c)
                return n.with_body(body).with_attrs(**loop_schedule)
            return n.with_body(visit(c) for c in n.body) if n.body else n

        return visit(kernel)


PASS = ScheduleMma()
