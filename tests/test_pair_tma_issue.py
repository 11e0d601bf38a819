"""pair_tma_issue (opt-in): the load role acquires two ring slots before issuing either slot's TMA
loads.  The result stays bitwise equal to the lowered IR on the interpreter (plain, split-K over a
workspace and over a cluster, multicast), odd trip counts keep a single refill after the loop, and
rings of fewer than three slots are left alone (with two, the interpreter deadlocks)."""
import pytest

from dgir.interp import DeadlockError, run_kernel
from dgir.ir import Op
from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
from dgir.passes.pair_tma_issue import PairTmaIssue
from dgir.pipeline import pipeline, run_pipeline

from dgir_testlib import assert_bitwise_like_lowered
from test_pipeline_interp import _inputs


def _paired_pipeline(pair=None):
    passes = pipeline("sm90a")
    at = [p.name for p in passes].index("allocate_smem")
    return passes[:at] + [pair or PairTmaIssue()] + passes[at:]


def _load_k_loops(kernel):
    return [n for n in kernel.walk() if n.op is Op.FOR and n.role == "load" and n.get("tma_issue")]


CASES = [  # (config, m): K blocks per loop 5 (odd), 2 per slice, 3 per cluster slice (odd), 7
    (dict(n=256, k=640, block_m=128, block_n=128, stages=3, num_sms=4), 300),
    (dict(n=200, k=512, block_m=64, block_n=64, stages=4, num_sms=3, split_k=2), 70),
    (dict(n=96, k=1536, block_m=64, block_n=32, stages=3, num_sms=8, split_k=4, split_reduce="cluster",
          ctas_per_sm=2), 70),
    (dict(n=256, k=896, block_m=128, block_n=64, stages=4, num_sms=8, cluster=2, multicast="A"), 256),
]


@pytest.mark.parametrize("fields,m", CASES)
def test_paired_refills_preserve_the_result_bitwise(fields, m):
    cfg = Fp8GemmConfig(**fields)
    ins = _inputs(cfg, m, cfg.n, cfg.k)
    kern = run_pipeline(lower(cfg), _paired_pipeline(), verify_each=True)
    assert kern.get("tma_issue") == "two slots at a time"
    (loop,) = _load_k_loops(kern)
    assert loop.args[2] == 2
    ops = [c.op for c in loop.body]
    first_load = ops.index(Op.TMA_LOAD)
    assert ops[:first_load].count(Op.ACQUIRE) == 2 and ops.count(Op.COMMIT) == 2
    trips = cfg.k_blocks_per_split
    tail = [n for n in kern.walk() if n.op is Op.ACQUIRE and n.args[1].endswith("_t")]
    assert len(tail) == trips % 2
    assert_bitwise_like_lowered(cfg, kern, ins)


def test_a_two_slot_ring_is_left_alone_because_pairing_it_deadlocks():
    cfg = Fp8GemmConfig(n=128, k=640, block_m=64, block_n=64, stages=2, num_sms=4)
    kern = run_pipeline(lower(cfg), _paired_pipeline(), verify_each=True)
    assert kern.get("tma_issue").startswith("one slot at a time") and not _load_k_loops(kern)
    # what the guard prevents: pair the loop anyway and the interpreter finds the deadlock
    forced = run_pipeline(lower(cfg), _paired_pipeline(PairTmaIssue(min_stages=2)), verify_each=True)
    assert _load_k_loops(forced)
    with pytest.raises(DeadlockError, match="acquire"):
        run_kernel(forced, _inputs(cfg, 70, 128, 640), seed=0)



# slots=4 (step 131): 512 contiguous bytes of each row requested at once; (config, m): K blocks per
# loop 11 (two groups and three single refills), 6 per cluster slice (one group and two), 8 per slice
# of a global split (two groups), 14 with multicast (three groups and two)
FOUR = [
    (dict(n=256, k=1408, block_m=128, block_n=128, stages=5, num_sms=4), 300),
    (dict(n=96, k=3072, block_m=64, block_n=32, stages=6, num_sms=8, split_k=4, split_reduce="cluster",
          ctas_per_sm=2), 70),
    (dict(n=200, k=2048, block_m=64, block_n=64, stages=5, num_sms=3, split_k=2), 70),
    (dict(n=256, k=1792, block_m=128, block_n=64, stages=5, num_sms=8, cluster=2, multicast="A"), 256),
]


@pytest.mark.parametrize("fields,m", FOUR)
def test_refills_four_slots_at_a_time_preserve_the_result_bitwise(fields, m):
    cfg = Fp8GemmConfig(**fields)
    ins = _inputs(cfg, m, cfg.n, cfg.k)
    kern = run_pipeline(lower(cfg), _paired_pipeline(PairTmaIssue(slots=4)), verify_each=True)
    assert kern.get("tma_issue") == "four slots at a time"
    (loop,) = _load_k_loops(kern)
    assert loop.args[2] == 4 and loop.get("tma_issue") == "grouped by 4"
    ops = [c.op for c in loop.body]
    assert ops[:ops.index(Op.TMA_LOAD)].count(Op.ACQUIRE) == 4 and ops.count(Op.COMMIT) == 4
    tail = [n for n in kern.walk() if n.op is Op.ACQUIRE and "_t" in n.args[1]]
    assert len(tail) == cfg.k_blocks_per_split % 4
    assert_bitwise_like_lowered(cfg, kern, ins)


def test_four_slot_refills_need_five_slots_and_deadlock_on_three():
    small = Fp8GemmConfig(n=128, k=1408, block_m=64, block_n=64, stages=4, num_sms=4)
    kern = run_pipeline(lower(small), _paired_pipeline(PairTmaIssue(slots=4)), verify_each=True)
    assert kern.get("tma_issue").startswith("one slot at a time") and not _load_k_loops(kern)
    three = Fp8GemmConfig(n=128, k=1408, block_m=64, block_n=64, stages=3, num_sms=4)
    forced = run_pipeline(lower(three), _paired_pipeline(PairTmaIssue(slots=4, min_stages=3)), verify_each=True)
    assert _load_k_loops(forced)
    with pytest.raises(DeadlockError, match="acquire"):
        run_kernel(forced, _inputs(three, 70, 128, 1408), seed=0)
    with pytest.raises(ValueError, match="slots must be one of"):
        PairTmaIssue(slots=5)
