"""Every stage of the sm90a pipeline computes the same D as the lowered IR, on the CPU interpreter,
over a seeded sample of configs (ring depths 1-4 included: a pipelined k-loop needs two slots;
BLOCK_M 256; split-K, whose reduction order is fixed, so even its result is bitwise stable)."""
import random

import pytest
import torch
from dgir_testlib import SM90A_PASSES, bench_module

from dgir.ir import Op
from dgir.interp import calc_diff, fp8_gemm_inputs, fp8_gemm_reference, run_kernel
from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
from dgir.pipeline import pipeline, run_pipeline
from dgir.emitters.ptx import emit_ptx

rng = random.Random(7)
CASES = []
for _ in range(6):
    bm, bn = rng.choice([64, 128]), rng.choice([16, 48, 96, 128, 160])
    CASES.append((rng.choice([1, 17, 70, 130]), rng.choice([bn, 2 * bn + 8 * rng.randint(0, 3)]),
                  rng.choice([128, 272, 640]), bm, bn, rng.randint(1, 4)))
CASES += [(300, 256, 384, 256, 128, 3), (17, 136, 272, 256, 64, 2)]     # BLOCK_M 256: two waves
CASES += [(300, 256, 384, 192, 128, 3), (17, 216, 272, 192, 72, 2)]     # BLOCK_M 192: three warpgroups
CASES += [(64, 704, 256, 64, 176, 2), (100, 704, 256, 128, 176, 2), (70, 1216, 384, 128, 152, 2)]   # 3 B-scale blocks
SPLITS = [(70, 200, 512, 64, 64, 4, 2), (130, 256, 768, 128, 128, 2, 3), (17, 136, 1024, 256, 64, 3, 4),
          (200, 224, 768, 192, 80, 2, 3)]
# clusters of 2 with the shared operand multicast: (m, n, k, bm, bn, stages, multicast); odd m-block
# counts give the B-multicast pair a CTA whose tile lies past M
CLUSTERS = [(256, 256, 512, 128, 64, 2, "A"), (300, 128, 384, 128, 64, 3, "B"), (130, 96, 256, 64, 48, 1, "B"),
            (200, 256, 640, 256, 128, 3, "A"), (70, 160, 384, 64, 80, 4, "A"), (400, 256, 512, 192, 128, 3, "A"),
            (500, 144, 384, 192, 48, 2, "B")]
CLUSTERS4 = [(64, 256, 512, 64, 32, 3, "A"), (330, 96, 384, 64, 32, 2, "B")]   # clusters of 4


def _inputs(cfg, m, n, k):
    ins = fp8_gemm_inputs(m, n, k, seed=m + n + k)
    if cfg.split_k > 1 and not cfg.split_cluster:    # workspace: poisoned partials, zeroed tile counters
        ins["W"] = torch.full((cfg.split_k, m, n), float("nan"))
        ins["LOCKS"] = torch.zeros(-(-m // cfg.block_m) * -(-n // cfg.block_n), dtype=torch.int32)
    return ins


def _check_every_stage(cfg, m, n, k, compared=lambda kern: True):
    """Run every pipeline stage (those `compared` selects) on the interpreter: finite, close to the
    reference, and bitwise equal to the first one, the lowered IR by default (promotion, pipelining,
    multicast and layout change no rounding).  Returns the stages run, (stem, kernel) in order."""
    ins = _inputs(cfg, m, n, k)
    stages_ir = []
    run_pipeline(lower(cfg), pipeline("sm90a"), [lambda ev: stages_ir.append((ev.stem, ev.after))], verify_each=True)
    stages_ir = [(stem, kern) for stem, kern in stages_ir if compared(kern)]
    ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])
    first = None
    for stem, kern in stages_ir:
        out = run_kernel(kern, ins, seed=len(stem))["D"]
        assert torch.isfinite(out).all(), stem
        assert calc_diff(out.double(), ref) < 1e-5, stem
        first = out if first is None else first
        assert torch.equal(out.view(torch.int16), first.view(torch.int16)), stem
    return stages_ir


@pytest.mark.parametrize("m,n,k,bm,bn,stages,split_k", [c + (1,) for c in CASES] + SPLITS)
def test_every_pass_preserves_the_result(m, n, k, bm, bn, stages, split_k):
    _check_every_stage(Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=3, split_k=split_k),
                       m, n, k)


@pytest.mark.parametrize("m,n,k,bm,bn,stages,multicast,cluster", [c + (2,) for c in CLUSTERS] +
                         [c + (4,) for c in CLUSTERS4])
def test_every_pass_preserves_the_result_with_clusters(m, n, k, bm, bn, stages, multicast, cluster):
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=8, cluster=cluster,
                        multicast=multicast)
    final = _check_every_stage(cfg, m, n, k)[-1][1]
    assert any(n.get("multicast") for n in final.find(Op.TMA_LOAD))


def test_split_k_is_deterministic_across_schedules_and_grids():
    """The reducing CTA differs with the grid and the task order; the sum must not."""
    cfg = Fp8GemmConfig(n=192, k=1024, block_m=64, block_n=64, stages=3, num_sms=8, split_k=4)
    ins = _inputs(cfg, 100, 192, 1024)
    kern = run_pipeline(lower(cfg), pipeline("sm90a"))
    outs = [run_kernel(kern, {k: v.clone() for k, v in ins.items()}, grid=g, seed=s)["D"]
            for g, s in ((1, 0), (3, 1), (8, 2), (24, 5))]
    assert all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs)


@pytest.mark.parametrize("m,n,k,bm,bn,stages,partials", [(100, 128, 2048, 64, 64, 8, 3), (64, 96, 1664, 64, 32, 8, 4),
                                                          (200, 192, 1408, 128, 64, 6, 3), (70, 128, 896, 64, 64, 5, 4)])
def test_more_partials_in_flight_preserve_the_result(m, n, k, bm, bn, stages, partials):
    """partials=3 and 4 (2 and 3 K blocks' wgmma in flight while the oldest is promoted): every stage
    bitwise equal to the lowered IR, under several interleavings of the warpgroups."""
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, partials=partials)
    ran = _check_every_stage(cfg, m, n, k)
    assert any(n.get("interleave", "").startswith(f"{partials} buffers") for _, kern in ran for n in kern.walk())


def test_chained_wgmma_keeps_the_value_its_predecessor_retires():
    """Accumulating wgmmas (scale_d=1) issued back to back, retired one at a time: the second must
    add onto the first's result (the interpreter once poisoned it at the third issue)."""
    ablations = bench_module("ablations")
    ScaleAtEnd, pipeline_with = ablations.ScaleAtEnd, ablations.pipeline_with
    from dgir.passes.interleave_ffma import InterleaveFfma

    class ForcePipeline(InterleaveFfma):
        """interleave_ffma without its skip for accumulating loops (to pipeline a wgmma chain)."""
        def pipeline(self, loop, budget, regs, new_decls, wgs=1):
            body = [c.with_attrs(scale_d=0) if c.op.value == "wgmma" else c for c in loop.body]
            out = super().pipeline(loop.with_body(body), budget, regs, new_decls, wgs)
            def restore(n):
                if n.op.value == "wgmma":
                    return n.with_attrs(scale_d=1)
                return n.with_body([restore(c) for c in n.body]) if n.body else n
            return [restore(n) for n in out]

    cfg = Fp8GemmConfig(n=256, k=640, block_m=128, block_n=128, stages=3, num_sms=4)
    ins = fp8_gemm_inputs(300, 256, 640, seed=3)
    ins["SFA"][:] = ins["SFA"][:1].clone()          # scales constant along K: scale-at-end is exact
    ins["SFB"][:] = ins["SFB"][:, :1].clone()
    ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])
    passes = [ForcePipeline() if p.name == "interleave_ffma" else p
              for p in pipeline_with({"promote_scales": ScaleAtEnd()})]
    k = run_pipeline(lower(cfg), passes, verify_each=True)
    assert any(n.get("interleave", "").startswith("double_buffer") for n in k.walk())
    out = run_kernel(k, ins)["D"]
    assert torch.isfinite(out).all() and calc_diff(out.double(), ref) < 1e-5


@pytest.mark.parametrize("m,n,k,bm,bn,stages,cluster", [(130, 192, 640, 64, 96, 3, 1), (300, 256, 512, 256, 128, 2, 2),
                                                        (70, 160, 384, 128, 80, 2, 1)])
def test_async_staged_b_scales_preserve_the_result(m, n, k, bm, bn, stages, cluster):
    """stage_b_scales with cp.async (opt-in): the scale copies land late and the fill waits for them;
    every stage stays bitwise equal to the lowered IR over seeds."""
    from dgir.passes.stage_b_scales import StageBScales
    passes = [StageBScales(async_copy=True, min_tile=0) if p.name == "stage_b_scales" else p for p in pipeline("sm90a")]
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=4, cluster=cluster)
    ins = _inputs(cfg, m, n, k)
    kern = run_pipeline(lower(cfg), passes, verify_each=True)
    assert [c.get("async") for c in kern.find(Op.STAGE_SCALE)] == [True, True]
    ref = run_kernel(lower(cfg), ins, seed=0)["D"]
    for seed in range(3):
        out = run_kernel(kern, ins, seed=seed)["D"]
        assert torch.equal(out.view(torch.int16), ref.view(torch.int16)), seed


# split-K over a cluster (split_reduce="cluster"): (m, n, k, bn, stages, split_k); num_sms small enough
# that each cluster walks several output tiles (rounds of the ready / done barriers)
# (block_m 128: two math warpgroups, each exchanging its own 64-row fragment; M tails inside each)
SPLIT_CLUSTERS = [(70, 96, 512, 64, 32, 2, 4), (130, 200, 768, 64, 64, 3, 3), (17, 64, 1024, 64, 16, 2, 8),
                  (64, 136, 896, 64, 40, 2, 7), (200, 160, 768, 128, 48, 3, 3), (100, 136, 1024, 128, 64, 2, 4),
                  (300, 96, 512, 128, 32, 2, 2),
                  # non-portable cluster sizes (9-16 CTAs): 14 slices of two K blocks, 16 of one
                  (40, 72, 3584, 64, 24, 2, 14), (65, 48, 2048, 64, 16, 1, 16)]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,split_k", SPLIT_CLUSTERS)
def test_every_pass_preserves_the_result_with_cluster_split_k(m, n, k, bm, bn, stages, split_k):
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=2 * split_k, split_k=split_k,
                        split_reduce="cluster")
    final = _check_every_stage(cfg, m, n, k)[-1][1]
    assert final.get("cluster") == split_k and final.find(Op.PARTIAL_REDUCE)
    assert not any(p.name in ("W", "LOCKS") for p in final.find(Op.PARAM))     # no global workspace


def test_cluster_split_k_is_deterministic_and_equals_the_global_reduction():
    """Rank order in the cluster = slice order of the global reduction: the same bits, whatever
    the grid and the task interleaving."""
    base = dict(n=192, k=1024, block_m=64, block_n=64, stages=3, num_sms=8, split_k=4)
    ins = fp8_gemm_inputs(100, 192, 1024, seed=5)
    kern = run_pipeline(lower(Fp8GemmConfig(**base, split_reduce="cluster")), pipeline("sm90a"))
    outs = [run_kernel(kern, {k: v.clone() for k, v in ins.items()}, grid=g, seed=s)["D"]
            for g, s in ((4, 0), (8, 1), (12, 2))]
    cfg = Fp8GemmConfig(**base)
    ref = run_kernel(run_pipeline(lower(cfg), pipeline("sm90a")), _inputs(cfg, 100, 192, 1024) | dict(ins))["D"]
    assert all(torch.equal(o.view(torch.int16), ref.view(torch.int16)) for o in outs)


def test_cluster_split_k_without_reclaim_is_a_race():
    """Dropping the wait for the peers' reads lets a CTA overwrite its partial of round r with round
    r + 1 while a peer may still read it: the interpreter reports it (or the reads see a mixed round)."""
    from dgir.interp import RaceError
    cfg = Fp8GemmConfig(n=512, k=256, block_m=64, block_n=32, stages=4, num_sms=2, split_k=2, split_reduce="cluster")
    kern = run_pipeline(lower(cfg), pipeline("sm90a"))

    def drop(n):
        body = [drop(c) for c in n.body if c.op is not Op.PARTIAL_RECLAIM]
        return n.with_body(body) if n.body else n
    broken = drop(kern)
    assert not broken.find(Op.PARTIAL_RECLAIM)
    ins = fp8_gemm_inputs(64, 512, 256, seed=2)
    with pytest.raises(RaceError, match="partial_publish of round"):
        for seed in range(60):          # some interleavings (3 of the first 20) run a CTA a round ahead
            run_kernel(broken, {k: v.clone() for k, v in ins.items()}, seed=seed)


def test_cluster_split_k_freeing_the_last_round_arrives_on_exited_ctas():
    """The last round is not freed because a peer may already have exited: a kernel whose reduce
    believes every round has a successor arrives on an exited CTA in some interleaving."""
    from dgir.interp import RaceError
    cfg = Fp8GemmConfig(n=256, k=256, block_m=64, block_n=32, stages=2, num_sms=2, split_k=2, split_reduce="cluster")
    kern = run_pipeline(lower(cfg), pipeline("sm90a"))

    def never_last(n):
        if n.op is Op.PARTIAL_REDUCE:
            return n.__class__(n.op, n.name, n.args[:3] + (1 << 20,) + n.args[4:], n.type, n.attrs, n.body)
        return n.with_body([never_last(c) for c in n.body]) if n.body else n
    broken = never_last(kern)
    ins = fp8_gemm_inputs(64, 256, 256, seed=4)
    run_kernel(kern, {k: v.clone() for k, v in ins.items()}, seed=0)         # the real kernel is fine
    with pytest.raises(RaceError, match="has exited"):
        for seed in range(60):
            run_kernel(broken, {k: v.clone() for k, v in ins.items()}, seed=seed)


@pytest.mark.parametrize("arms,jump,form", [(4, False, "selects"), (8, False, "arms"), (4, True, "jump")])
def test_three_scale_blocks_by_arms_by_selects_and_by_jumps(arms, jump, form):
    """A 176-wide tile crosses up to two B-scale boundaries (8 possible first crossings): promote_scales
    writes the promotion's form on each promote (branch arms where max_arms >= 8, else per-group
    selects or, asked for, indexed jumps), the PTX has it, and the interpreter gives the reference
    for every tile offset."""
    from dgir.ops.fp8_gemm import b_scale_blocks
    from dgir.passes.promote_scales import PromoteScales
    assert b_scale_blocks(176) == 3 and b_scale_blocks(192) == 2 and b_scale_blocks(64) == 1
    cfg = Fp8GemmConfig(n=1408, k=256, block_m=128, block_n=176, stages=2, num_sms=4)
    passes = [PromoteScales(jump=jump, max_arms=arms) if p.name == "promote_scales" else p for p in pipeline("sm90a")]
    kern = run_pipeline(lower(cfg), passes)
    assert {n.get("straddle") for n in kern.walk() if n.op is Op.PROMOTE} == {form}
    assert kern.get("straddle_promotion").startswith(f"{form}: 8 columns")
    ptx = emit_ptx(kern)
    assert ("promote_split" in ptx.lower()) == (form == "arms") and ("brx.idx" in ptx) == (form == "jump")
    assert ptx.count("fma.rn.f32") >= 88
    ins = fp8_gemm_inputs(130, 1408, 256, seed=11)
    out = run_kernel(kern, ins)["D"]
    assert calc_diff(out.double(), fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])) < 1e-5


# promotion="rescaled" (opt-in): the tensor-core accumulator runs over all of K, rescaled by
# s_(k-1) / s_k; its rounding differs from the FFMA promotion, so the stages are compared with each
# other from rescale_accumulator on, and with the reference.  (m, n, k, bm, bn, stages, split_k,
# split_reduce, cluster, multicast)
RESCALED = [(300, 512, 640, 128, 256, 3, 1, "global", 2, "B"), (130, 512, 384, 128, 256, 2, 1, "global", 2, "A"),
            (70, 256, 1024, 64, 64, 3, 2, "global", 1, "A"), (70, 256, 1024, 64, 64, 3, 4, "cluster", 1, "A"),
            (130, 384, 512, 192, 128, 3, 1, "global", 1, "A"), (17, 96, 272, 64, 32, 2, 1, "global", 1, "A")]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,split_k,split_reduce,cluster,multicast", RESCALED)
def test_rescaled_promotion_matches_the_reference_at_every_stage(m, n, k, bm, bn, stages, split_k, split_reduce,
                                                                 cluster, multicast):
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=4, split_k=split_k,
                        split_reduce=split_reduce, cluster=cluster, multicast=multicast, promotion="rescaled")
    rescaled = _check_every_stage(cfg, m, n, k, compared=lambda kern: any(n.op is Op.RESCALE for n in kern.walk()))
    assert len(rescaled) == len(SM90A_PASSES)          # every stage from promote_scales on
    assert not any(n.op is Op.PROMOTE for _, kern in rescaled for n in kern.walk())


def test_rescaled_promotion_with_a_zero_scale_is_loud_not_wrong():
    """s / s_k with s_k = 0 is inf: the rows whose A scale is zero come out inf or NaN, never a finite
    wrong value (the option's documented precondition); every other row is still right."""
    cfg = Fp8GemmConfig(n=256, k=512, block_m=128, block_n=256, stages=2, num_sms=2, promotion="rescaled")
    ins = _inputs(cfg, 128, 256, 512)
    ins["SFA"][1, 5] = 0.0                           # row 5, K block 1
    out = run_kernel(run_pipeline(lower(cfg), pipeline("sm90a")), ins)["D"]
    ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])
    assert not torch.isfinite(out[5]).any()
    rows = [r for r in range(128) if r != 5]
    assert torch.isfinite(out[rows]).all() and calc_diff(out[rows].double(), ref[rows]) < 1e-5


@pytest.mark.parametrize("bm", [128, 256])
def test_detached_promotion_ablation_keeps_the_wgmma_stream(bm):
    """bench/ablations.py DetachedPromotion (TUNING step 74): every K block's promote moves onto a
    shadow tile no wgmma writes (one per wave), the wgmmas accumulate; the shadow stays zero, so with
    unit scales the kernel still computes the product, and the whole pipeline verifies and runs clean."""
    ablations = bench_module("ablations")
    cfg = Fp8GemmConfig(n=256, k=640, block_m=bm, block_n=128, stages=3, num_sms=4)
    kern = run_pipeline(lower(cfg), ablations.pipeline_with({"promote_scales": ablations.DetachedPromotion()}),
                        verify_each=True)
    loop = next(n for n in kern.walk() if n.op is Op.FOR and any(c.op is Op.WGMMA for c in n.body))
    promotes = [c for c in loop.body if c.op is Op.PROMOTE]
    assert len(promotes) == bm // 128 and all(p.args[:2] == ("shadow", "shadow") for p in promotes)
    assert all(c.get("scale_d") == 1 for c in loop.body if c.op is Op.WGMMA)
    ins = fp8_gemm_inputs(200, 256, 640, seed=4)
    ins["SFA"][:] = 1.0
    ins["SFB"][:] = 1.0
    ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])
    out = run_kernel(kern, ins)["D"]
    assert torch.isfinite(out).all() and calc_diff(out.double(), ref) < 1e-5


# split_order="interleaved": slice s takes K blocks s, s + S, s + 2S, ... (both reductions; a 128x128
# split whose B scales the load role stages; a cluster walking several rounds): every pass keeps the
# result, and it is the reference's; the slices' partials differ from the contiguous split's, so the
# bits may too, but each run of one kernel gives the same bits
INTERLEAVED = [(70, 96, 512, 64, 32, 2, 4, "cluster"), (130, 200, 768, 128, 64, 3, 3, "global"),
               (100, 256, 1024, 128, 128, 2, 2, "global"), (17, 64, 1024, 64, 16, 2, 8, "cluster")]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,split_k,reduce", INTERLEAVED)
def test_interleaved_split_k_preserves_the_result(m, n, k, bm, bn, stages, split_k, reduce):
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=2 * split_k, split_k=split_k,
                        split_reduce=reduce, split_order="interleaved")
    final = _check_every_stage(cfg, m, n, k)[-1][1]
    if bm * bn >= 16384:
        assert final.get("b_scales", "").startswith("staged by the load role")
    # the K blocks a slice's loads and scales name: s, s + S, ... (the TMA coordinates, read back from
    # a run that records them would need the emitter; the interpreter's result against the reference
    # above is the check that every block is summed exactly once)
    ins = _inputs(cfg, m, n, k)
    outs = [run_kernel(final, {key: v.clone() for key, v in ins.items()}, seed=s)["D"] for s in range(2)]
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


@pytest.mark.parametrize("order,slice_of_block1", [("contiguous", 0), ("interleaved", 1)])
def test_split_order_decides_which_slice_sums_a_k_block(order, slice_of_block1):
    """With A non-zero in K block 1 only, the global split's workspace shows which slice summed it: the
    first (blocks 0-3 of 8) when contiguous, the second (blocks 1, 3, 5, 7) when interleaved."""
    m, n, k = 64, 64, 1024
    cfg = Fp8GemmConfig(n=n, k=k, block_m=64, block_n=64, stages=2, num_sms=2, split_k=2, split_order=order)
    kern = run_pipeline(lower(cfg), pipeline("sm90a"))
    ins = _inputs(cfg, m, n, k)
    A = ins["A"].float()
    A[:, :128] = 0
    A[:, 256:] = 0
    ins["A"] = A.to(ins["A"].dtype)
    out = run_kernel(kern, ins)
    W = out["W"]
    assert W[slice_of_block1].abs().sum() > 0 and W[1 - slice_of_block1].abs().sum() == 0
    ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])
    assert calc_diff(out["D"].double(), ref) < 1e-5
