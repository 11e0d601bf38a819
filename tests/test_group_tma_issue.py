"""group_tma_issue: the load role acquires several ring slots (config refill_slots, or forced with
GroupTmaIssue(slots=...)) before issuing any of their TMA loads.  The result stays bitwise equal to the
lowered IR on the interpreter (plain, split-K over a workspace and over a cluster, multicast), the trip
count's remainder keeps single refills after the loop, rings too shallow for the group are left alone
(one slot fewer deadlocks on the interpreter), and kernels that do not ask are not touched."""
import pytest

from dgir.interp import DeadlockError, run_kernel
from dgir.ir import Op
from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
from dgir.passes.group_tma_issue import GroupTmaIssue
from dgir.pipeline import pipeline, run_pipeline

from dgir_testlib import assert_bitwise_like_lowered
from test_pipeline_interp import _inputs


def _paired_pipeline(pair=None):
    """The sm90a pipeline with its group_tma_issue forcing `pair` (default: two slots) on every kernel."""
    return [pair or GroupTmaIssue(slots=2) if p.name == "group_tma_issue" else p for p in pipeline("sm90a")]


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
    forced = run_pipeline(lower(cfg), _paired_pipeline(GroupTmaIssue(slots=2, min_stages=2)), verify_each=True)
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
    kern = run_pipeline(lower(cfg), _paired_pipeline(GroupTmaIssue(slots=4)), verify_each=True)
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
    kern = run_pipeline(lower(small), _paired_pipeline(GroupTmaIssue(slots=4)), verify_each=True)
    assert kern.get("tma_issue").startswith("one slot at a time") and not _load_k_loops(kern)
    three = Fp8GemmConfig(n=128, k=1408, block_m=64, block_n=64, stages=3, num_sms=4)
    forced = run_pipeline(lower(three), _paired_pipeline(GroupTmaIssue(slots=4, min_stages=3)), verify_each=True)
    assert _load_k_loops(forced)
    with pytest.raises(DeadlockError, match="acquire"):
        run_kernel(forced, _inputs(three, 70, 128, 1408), seed=0)
    with pytest.raises(ValueError, match="slots must be one of"):
        GroupTmaIssue(slots=5)


def test_the_config_asks_for_grouped_refills_and_other_kernels_are_not_touched():
    """refill_slots is a config field: the default pipeline groups that config's refills (kernel name
    `_rf4`, read back from the name), check_config refuses a ring of refill_slots slots or fewer and
    other values, and a kernel that does not ask leaves the pass with the same IR and PTX."""
    from dataclasses import replace
    from dgir.compiler import compile
    from dgir.ops.fp8_gemm import OpError, check_config
    cfg = Fp8GemmConfig(n=256, k=1408, block_m=128, block_n=128, stages=5, num_sms=4, refill_slots=4)
    check_config(cfg)
    assert cfg.kernel_name().endswith("_rf4") and Fp8GemmConfig.from_kernel_name(cfg.kernel_name()) == replace(
        cfg, num_sms=Fp8GemmConfig.__dataclass_fields__["num_sms"].default)
    kern = run_pipeline(lower(cfg), pipeline("sm90a"), verify_each=True)
    assert kern.get("tma_issue") == "four slots at a time"
    assert_bitwise_like_lowered(cfg, kern, _inputs(cfg, 300, cfg.n, cfg.k))
    with pytest.raises(OpError, match="refill_slots=4 needs stages >= 5"):
        check_config(replace(cfg, stages=4))
    with pytest.raises(OpError, match="must be 1, 2 or 4"):
        check_config(replace(cfg, refill_slots=3))
    plain = replace(cfg, refill_slots=1)
    assert plain.key() == Fp8GemmConfig(n=256, k=1408, block_m=128, block_n=128, stages=5, num_sms=4).key()
    without = [p for p in pipeline("sm90a") if p.name != "group_tma_issue"]
    a = compile("fp8_gemm_nt", m=300, n=plain.n, k=plain.k, config=plain, assemble=False)
    b = compile("fp8_gemm_nt", m=300, n=plain.n, k=plain.k, config=plain, passes=without, assemble=False)
    assert a.ir == b.ir and a.ptx == b.ptx and a.ir.get("tma_issue") is None


def test_the_slots_a_group_needs_count_the_partials_in_flight():
    """With three partials the math role holds two blocks while it waits for the next, so two slots
    refilled together need a ring of four (the config fuzz found the three-slot deadlock: 17x96x640,
    64x32, two CTAs an SM); the pass leaves such a ring alone, check_config refuses the config, and
    forced, the interpreter deadlocks."""
    from dataclasses import replace
    from dgir.ops.fp8_gemm import OpError, check_config
    from dgir.ops.fp8_gemm_config import refill_ring_slots
    assert [refill_ring_slots(2, p) for p in (2, 3, 4)] == [3, 4, 5] and refill_ring_slots(4, 2, True) == 6
    three = Fp8GemmConfig(n=96, k=640, block_m=64, block_n=32, stages=3, num_sms=1, ctas_per_sm=2, partials=3)
    with pytest.raises(OpError, match="needs stages >= 4"):
        check_config(replace(three, refill_slots=2))
    kern = run_pipeline(lower(three), _paired_pipeline(GroupTmaIssue(slots=2)), verify_each=True)
    assert kern.get("tma_issue").startswith("one slot at a time") and not _load_k_loops(kern)
    forced = run_pipeline(lower(three), _paired_pipeline(GroupTmaIssue(slots=2, min_stages=3)), verify_each=True)
    with pytest.raises(DeadlockError, match="acquire"):
        run_kernel(forced, _inputs(three, 17, 96, 640), seed=0)
    four = replace(three, stages=4, refill_slots=2)
    check_config(four)
    kern = run_pipeline(lower(four), pipeline("sm90a"), verify_each=True)
    assert kern.get("tma_issue") == "two slots at a time"
    assert_bitwise_like_lowered(four, kern, _inputs(four, 17, 96, 640))
