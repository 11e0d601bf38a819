"""prefetch_first_stages (bench variant `entrypf`): the first tile's first K blocks asked of L2 from the
kernel's entry.  The result stays bitwise the lowered IR's; the interpreter checks per CTA that every
prefetched box is one the CTA loads later, once; the PTX issues them from thread 32 before the barrier
set-up and the grid_wait, which the verifier allows for these L2-only prefetches alone."""
import re

import pytest
import torch
from dgir_testlib import interpret_as_launched

from dgir.interp import fp8_gemm_inputs
from dgir.ir import Node, Op
from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
from dgir.passes.prefetch_first_stages import PrefetchFirstStages
from dgir.pipeline import pipeline, run_pipeline
from dgir.toolchain import assemble
from dgir.verifier import VerifyError, verify


def compiled(cfg, pf=None):
    passes = list(pipeline("sm90a"))
    at = [p.name for p in passes].index("multicast_tma") + 1     # where bench/experiments.py puts it
    return run_pipeline(lower(cfg), passes[:at] + [pf or PrefetchFirstStages()] + passes[at:], verify_each=True)


# (m, n, k, config): split-K over a cluster (contiguous and interleaved), a global split, a 2-CTA
# cluster multicasting A (each CTA prefetches the half it loads), several tiles a CTA, two math
# warpgroups with a ragged M, grouped refills
CASES = [(64, 96, 1792, dict(block_m=64, block_n=48, stages=3, split_k=2, split_reduce="cluster", ctas_per_sm=2)),
         (64, 96, 1792, dict(block_m=64, block_n=48, stages=5, split_k=2, split_reduce="cluster",
                             split_order="interleaved")),
         (100, 128, 1024, dict(block_m=64, block_n=64, stages=4, split_k=2)),
         (256, 256, 1152, dict(block_m=128, block_n=64, stages=3, cluster=2, multicast="A")),
         (70, 256, 1024, dict(block_m=64, block_n=64, stages=3, num_sms=2)),
         (130, 112, 1536, dict(block_m=128, block_n=56, stages=5, refill_slots=2))]


@pytest.mark.parametrize("m,n,k,kw", CASES)
def test_entry_prefetches_are_the_ctas_own_first_loads_and_the_result_is_bitwise(m, n, k, kw):
    cfg = Fp8GemmConfig(n=n, k=k, **{"num_sms": 4, **kw})
    kern = compiled(cfg)
    blocks = min(cfg.stages, cfg.k_blocks_per_split)
    assert kern.get("entry_prefetch") == f"A/B of the first tile's first {blocks} K blocks, from the entry"
    (load,) = [r for r in kern.body if r.op is Op.WARPGROUP and r.get("roles") == ("load",)]
    entry = [n for n in load.body if n.get("at") == "entry" and n.op is not Op.PREFETCH_TMAP]
    assert entry and load.body[:len(entry)] == tuple(entry)            # at the top of the load region
    (guard,) = [n for n in entry if n.op is Op.IF]
    assert [n.op for n in guard.body] == [Op.TMA_PREFETCH] * 2 * blocks
    inputs = fp8_gemm_inputs(m, n, k, seed=m + k)
    stats = {}
    out = interpret_as_launched(kern, m, inputs, seed=1, stats=stats)["D"]
    ref = interpret_as_launched(run_pipeline(lower(cfg), pipeline("sm90a")), m, inputs)["D"]
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16))
    assert stats["prefetch_misses"] == []


def test_the_ptx_issues_them_from_thread_32_before_the_barriers_and_the_grid_wait():
    cfg = Fp8GemmConfig(n=576, k=7168, block_m=64, block_n=32, stages=8, split_k=8, split_reduce="cluster",
                        ctas_per_sm=2)
    kern = compiled(cfg)
    assert kern.get("pdl") is True
    from dgir.emitters.ptx import emit_ptx
    ptx = emit_ptx(kern)
    entry = ptx.index("setp.ne.u32 %p0, %r0, 32;")
    first = ptx.index("cp.async.bulk.prefetch.tensor.2d.L2.global")
    assert entry < first < ptx.index("mbarrier.init") < ptx.index("griddepcontrol.wait")
    # A and B of 7 K blocks, once: not emitted again in the load region
    assert len(re.findall(r"cp\.async\.bulk\.prefetch\.tensor", ptx)) == 2 * 7
    assemble(ptx)


def test_only_entry_prefetches_may_precede_the_grid_wait():
    """The verifier's exemption is exactly an at="entry" group of L2 prefetches: the same group with a
    load in it, or a prefetch not marked, is still refused in a PDL kernel."""
    cfg = Fp8GemmConfig(n=256, k=1024, block_m=64, block_n=64, stages=3, num_sms=2)
    kern = compiled(cfg)
    verify(kern)
    (load,) = [r for r in kern.body if r.op is Op.WARPGROUP and r.get("roles") == ("load",)]
    (guard,) = [n for n in load.body if n.op is Op.IF and n.get("at") == "entry"]
    plain = Node(Op.IF, "", guard.args, None, {"role": "load"}, guard.body)
    bad = kern.with_body(tuple(r.with_body(tuple(plain if n is guard else n for n in r.body)) if r is load else r
                               for r in kern.body))
    with pytest.raises(VerifyError, match="before the region's grid_wait"):
        verify(bad)


def test_kernels_of_another_form_are_left_alone():
    cfg = Fp8GemmConfig(n=256, k=1024, block_m=128, block_n=128, stages=3, num_sms=2, stream_k=True)
    kern = compiled(cfg)
    assert kern.get("entry_prefetch").startswith("skipped")
    assert not [n for n in kern.walk() if n.get("at") == "entry" and n.op is not Op.PREFETCH_TMAP]
    with pytest.raises(ValueError, match="blocks must be >= 1"):
        PrefetchFirstStages(blocks=0)
