"""trace_timeline (the opt-in measuring pass): the timestamps land where the docstring says, in the
order a CTA reaches them, without changing D; and the PTX they lower to assembles."""
import shutil

import pytest
import torch

from dgir.compiler import compile
from dgir.interp import fp8_gemm_inputs, run_kernel
from dgir.ir import Op
from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
from dgir.passes.trace_timeline import EVENTS, PLACEMENT, TraceTimeline
from dgir.pipeline import pipeline, run_pipeline

NAMES = [e[0] for e in EVENTS]
TIMED = [e for e in NAMES if e != PLACEMENT]      # the placement event holds (SM, cluster rank), not times
CLUSTER_ONLY = {"first_published"}          # placed only in kernels that publish partials to a cluster
TMA_STORE_ONLY = {"first_stored", "last_store_free", "last_stored"}   # only where the epilogue is a TMA store


def _absent(kernel) -> set:
    """Milestones a kernel has no place for."""
    return (set() if kernel.find(Op.PARTIAL_PUBLISH) else CLUSTER_ONLY) | \
        (set() if kernel.find(Op.TMA_STORE) else TMA_STORE_ONLY)


def _traced(cfg):
    return run_pipeline(lower(cfg), pipeline("sm90a") + [TraceTimeline()], verify_each=True)


@pytest.mark.parametrize("split_k,tiles,reduce", [(1, 1, "global"), (1, 3, "global"), (2, 2, "global"),
                                                 (2, 2, "cluster")])
def test_milestones_in_order_and_result_unchanged(split_k, tiles, reduce):
    m, n, k, bm, bn = 64, 64 * tiles, 512, 64, 64
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=2, num_sms=split_k if reduce == "cluster" else 1,
                        split_k=split_k, split_reduce=reduce)
    traced, plain = _traced(cfg), run_pipeline(lower(cfg), pipeline("sm90a"))
    ins = fp8_gemm_inputs(m, n, k, seed=3)
    if split_k > 1 and reduce == "global":
        ins["W"] = torch.full((split_k, m, n), float("nan"))
        ins["LOCKS"] = torch.zeros(tiles, dtype=torch.int32)
    ctas = split_k if reduce == "cluster" else 1
    out = run_kernel(traced, {**ins, "TRACE": torch.zeros((ctas, len(EVENTS), 2), dtype=torch.int64)})
    ref = run_kernel(plain, ins)["D"]
    assert torch.equal(out["D"].view(torch.int16), ref.view(torch.int16))
    t = {name: int(out["TRACE"][0, i, 0]) for i, name in enumerate(NAMES)}
    placed = set(NAMES) - _absent(traced)
    assert (CLUSTER_ONLY <= placed) == (reduce == "cluster")
    assert all((t[e] > 0) == (e in placed) for e in TIMED), t     # every placed milestone was recorded
    # every CTA says where it ran: the interpreter runs each on its own "SM", in cluster rank order
    where = out["TRACE"][:, NAMES.index(PLACEMENT)].tolist()
    assert where == [[c, c % split_k if reduce == "cluster" else 0] for c in range(ctas)]
    assert t["load_start"] <= t["first_acquire"] <= t["load_end"]
    assert t["mma_start"] < t["first_full"] < t["first_kloop_end"] <= t["tile_end"] <= t["mma_end"]
    # the first full slot needs the first TMA issued; the math ends after the loads were issued
    assert t["first_acquire"] < t["first_full"]
    if reduce == "cluster":
        assert t["first_kloop_end"] < t["first_published"] < t["tile_end"]
    if "first_stored" in placed:                      # the epilogue follows the K loop
        assert t["first_kloop_end"] < t["first_stored"] <= t["tile_end"]
        assert t["first_kloop_end"] <= t["last_kloop_end"] < t["last_store_free"] < t["last_stored"] <= t["tile_end"]
    if split_k * tiles > 1:                           # "first" keeps the first tile, "last" the last one
        assert t["first_kloop_end"] < t["tile_end"]


def test_one_param_and_a_timestamp_per_event():
    cfg = Fp8GemmConfig(n=256, k=512, block_m=128, block_n=128, stages=3)
    k = _traced(cfg)
    decl = k.decl("TRACE")
    assert decl.type.shape == ("CTAS", len(EVENTS), 2) and list(decl.get("events")) == NAMES
    stamps = k.find(Op.TIMESTAMP)
    assert sorted(s.get("event") for s in stamps) == [i for i, e in enumerate(NAMES) if e not in _absent(k)]
    assert not _absent(k) & TMA_STORE_ONLY            # a TMA-store epilogue: its first store is a milestone
    assert TraceTimeline().run(k) == k                # idempotent


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="needs ptxas")
def test_traced_kernel_assembles():
    cfg = Fp8GemmConfig(n=576, k=7168, block_m=64, block_n=32, stages=8, split_k=7)
    r = compile("fp8_gemm_nt", m=64, n=576, k=7168, config=cfg, passes=pipeline("sm90a") + [TraceTimeline()])
    assert r.ptx.count("%globaltimer") == len(TIMED) - len(_absent(r.ir))
    assert r.ptx.count("%smid") == 1 and r.ptx.count("%cluster_ctarank") == 1
    assert r.resources.spill_stores == 0


def test_kloop_end_follows_the_k_blocks_peeled_after_the_unrolled_loop():
    """7 K blocks: interleave_ffma unrolls the loop by 4 and peels blocks 4-6 after it.  "K loop done"
    must come after their last promote (it once sat at the loop's end, 3 K blocks early)."""
    cfg = Fp8GemmConfig(n=64, k=7 * 128, block_m=64, block_n=64, stages=4)
    traced = _traced(cfg)
    ends = {NAMES.index("first_kloop_end"), NAMES.index("last_kloop_end")}

    def check(body):
        for i, n in enumerate(body):
            if n.op is Op.TIMESTAMP and n.get("event") in ends:
                before = [m.op for m in body[:i] if m.op is not Op.TIMESTAMP]
                assert Op.FOR in before and before[-1] is Op.PROMOTE, before[-6:]
                after = [m.op for m in body[i + 1:]]
                assert Op.PROMOTE not in after and Op.WGMMA not in after
                return 1
            if n.body:
                found = check(n.body)
                if found:
                    return found
        return 0
    mma = next(n for n in traced.body if n.op is Op.WARPGROUP and "mma" in n.get("roles"))
    assert check(mma.body)
    peeled = [n for n in mma.walk() if n.op is Op.PROMOTE]
    assert len(peeled) >= 4                          # the loop body's promotes and the peeled ones
    ins = fp8_gemm_inputs(64, 64, 7 * 128, seed=5)
    out = run_kernel(traced, {**ins, "TRACE": torch.zeros((1, len(EVENTS), 2), dtype=torch.int64)})
    t = {name: int(out["TRACE"][0, i, 0]) for i, name in enumerate(NAMES)}
    assert t["first_full"] < t["first_kloop_end"] < t["first_stored"] <= t["tile_end"]


def test_placement_summary_counts_ctas_per_sm():
    """bench/experiments.timeline's reading of the placement event: the SMs used, and how many SMs ran
    one, two, three... CTAs (two 8-CTA clusters packed two to an SM use 8 SMs, not 16)."""
    import torch
    from dgir_testlib import bench_module
    summary = bench_module("experiments").placement_summary
    assert summary(torch.tensor([0, 0, 1, 5, 5, 5, 7])) == {"sms_used": 4, "sms_by_ctas": {"1": 2, "2": 1, "3": 1}}
    packed = torch.arange(16) // 2
    assert summary(packed) == {"sms_used": 8, "sms_by_ctas": {"2": 8}}
