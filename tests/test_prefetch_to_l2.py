"""prefetch_to_l2 (bench variants `l2pf*`): the load role prefetches B's boxes to L2 ahead of the ring.
The result stays bitwise the lowered IR's, and the interpreter checks the pass's contract per CTA:
each prefetched box is one the CTA loads later, prefetched once, and only the first min(ring,
distance) blocks of each K loop go without a prefetch."""
import pytest
import torch
from dgir_testlib import interpret_as_launched

from dgir.emitters.ptx import emit_ptx
from dgir.interp import fp8_gemm_inputs
from dgir.ir import Op
from dgir.ops.fp8_gemm import Fp8GemmConfig, kernel_grid, lower
from dgir.parser import parse_ir
from dgir.passes.prefetch_to_l2 import PrefetchToL2
from dgir.pipeline import pipeline, run_pipeline
from dgir.printer import print_ir
from dgir.toolchain import assemble


def compiled(cfg, pf):
    passes = list(pipeline("sm90a"))
    at = [p.name for p in passes].index("hint_l2_eviction") + 1
    return run_pipeline(lower(cfg), passes[:at] + [pf] + passes[at:], verify_each=True)


# (m, n, k, config): split-K over a cluster with two CTAs an SM, one warpgroup over several tiles,
# a 2-CTA cluster multicasting B (each CTA prefetches its own half), a ragged M, two math warpgroups
CASES = [(64, 96, 1792, dict(block_m=64, block_n=48, stages=3, split_k=2, split_reduce="cluster", ctas_per_sm=2)),
         (128, 128, 2048, dict(block_m=64, block_n=64, stages=4)),
         (256, 256, 1152, dict(block_m=128, block_n=64, stages=3, cluster=2, multicast="B")),
         (70, 128, 1024, dict(block_m=64, block_n=64, stages=3)),
         (130, 112, 1536, dict(block_m=128, block_n=56, stages=5))]


@pytest.mark.parametrize("distance", [1, 3, 6, 1 << 16])
@pytest.mark.parametrize("m,n,k,kw", CASES)
def test_prefetches_are_the_ctas_own_later_loads_and_the_result_is_bitwise(m, n, k, kw, distance):
    cfg = Fp8GemmConfig(n=n, k=k, num_sms=4, **kw)
    kern = compiled(cfg, PrefetchToL2(distance=distance))
    assert kern.get("l2_prefetch").startswith(f"B {distance} K blocks ahead")
    inputs = fp8_gemm_inputs(m, n, k, seed=m + distance)
    stats = {}
    out = interpret_as_launched(kern, m, inputs, seed=distance, stats=stats)["D"]
    ref = interpret_as_launched(run_pipeline(lower(cfg), pipeline("sm90a")), m, inputs)["D"]
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16))
    assert stats["prefetch_misses"] == []
    # tiles x the blocks each K loop loads at once, unprefetched: min(ring, distance, K blocks a slice)
    grid = kernel_grid(dict(kern.attrs), m)
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n) * cfg.split_k
    if cfg.cluster > 1:            # each CTA of a multicast pair loads (and prefetches) its own half
        assert grid % cfg.cluster == 0
    per_loop = min(cfg.stages, distance, k // 128 // cfg.split_k)
    assert stats["unprefetched_loads"] == tiles * per_loop


def test_a_prefetch_of_a_box_the_cta_never_loads_is_reported():
    """The interpreter's check can fail: shift every prefetch one K block further (past the loop's
    last block for the final one) and the misses name the CTA and the box."""
    cfg = Fp8GemmConfig(n=128, k=1024, block_m=64, block_n=64, stages=3, num_sms=2)
    kern = compiled(cfg, PrefetchToL2(distance=4))
    text = print_ir(kern).replace("%kbl_l2 = add(%kbl, 4)", "%kbl_l2 = add(%kbl, 5)")
    text = text.replace("%kbl_l2_in = lt(%kbl_l2, 8)", "%kbl_l2_in = lt(%kbl_l2, 9)")
    broken = parse_ir(text)
    assert broken != kern
    stats = {}
    interpret_as_launched(broken, 64, fp8_gemm_inputs(64, 128, 1024, seed=1), stats=stats)
    assert any("prefetched, never loaded" in x for x in stats["prefetch_misses"])


def test_the_ptx_prefetches_through_the_tensor_map_and_assembles():
    cfg = Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=64, stages=11)
    for hinted in (False, True):
        kern = compiled(cfg, PrefetchToL2(distance=16, hinted=hinted))
        ptx = emit_ptx(kern)
        lines = [x.strip() for x in ptx.splitlines() if "cp.async.bulk.prefetch.tensor.2d.L2.global" in x]
        # the loop's prefetch and the prologue's (hinted: each as the predicated pair of forms)
        assert len(lines) == (4 if hinted else 2)
        assert sum(".L2::cache_hint" in x for x in lines) == (2 if hinted else 0)
        res = assemble(ptx, "sm_90a")
        assert res.resources.spill_stores == 0 and not any("error" in w for w in res.warnings)


def test_the_dump_round_trips_and_the_pass_is_idempotent():
    cfg = Fp8GemmConfig(n=2112, k=7168, block_m=64, block_n=48, stages=6, split_k=4, split_reduce="cluster", ctas_per_sm=2)
    pf = PrefetchToL2(distance=8)
    kern = compiled(cfg, pf)
    assert parse_ir(print_ir(kern)) == kern
    assert pf.run(kern) == kern
    assert sum(n.op is Op.TMA_PREFETCH for n in kern.walk()) == 2


def test_a_distance_below_one_block_is_rejected():
    with pytest.raises(ValueError, match="distance=0 must be >= 1 K block"):
        PrefetchToL2(distance=0)
