"""schedule_mma's `waits_ahead` (bench variant `waitahead`): the next K block's ring wait is issued
before the current retire.  On the CPU interpreter the result stays bitwise the lowered IR's; the
ring must hold D + 1 slots, and the interpreter shows why: forced onto a ring of D slots the same
order deadlocks."""
import pytest
import torch
from dgir_testlib import assert_bitwise_like_lowered, interpret_as_launched, k_loops

from dgir.interp import fp8_gemm_inputs
from dgir.interp.state import DeadlockError
from dgir.ir import Op
from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
from dgir.passes.interleave_ffma import InterleaveFfma
from dgir.passes.schedule_mma import ScheduleMma
from dgir.pipeline import pipeline, run_pipeline


def compiled(cfg, interleave=None):
    passes = [ScheduleMma(waits_ahead=True) if p.name == "schedule_mma"
              else interleave if (interleave is not None and p.name == "interleave_ffma") else p
              for p in pipeline("sm90a")]
    return run_pipeline(lower(cfg), passes, verify_each=True)


def pipelined_loop(kern):
    loops = [lp for lp in k_loops(kern) if lp.get("pipelined")]
    assert len(loops) == 1
    return loops[0]


# (m, n, k, bm, bn, stages, extra): one and two math warpgroups, a straddling width, a cluster,
# a K that leaves a tail after the unrolled loop, two CTAs per SM
CASES = [(70, 128, 1024, 64, 64, 3, {}), (130, 256, 1280, 128, 128, 4, {}), (64, 208, 896, 64, 104, 5, {}),
         (256, 256, 1152, 128, 64, 3, {"cluster": 2, "multicast": "A"}), (100, 96, 1664, 64, 48, 6, {"ctas_per_sm": 2})]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,extra", CASES)
def test_waits_ahead_keeps_the_result_bitwise(m, n, k, bm, bn, stages, extra):
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=4, **extra)
    kern = compiled(cfg)
    assert pipelined_loop(kern).get("interleave").endswith("next wait ahead")
    assert_bitwise_like_lowered(cfg, kern, fp8_gemm_inputs(m, n, k, seed=m + k), seeds=(1, 2, 3))


def test_the_next_blocks_wait_comes_before_the_current_retire():
    """In the unrolled body: issue 0, issue 1, wait 2, retire 0, issue 2 (the rest), wait 3, retire 1,
    ...: each wait but the first two precedes the wgmma_wait that retires the block two before it."""
    cfg = Fp8GemmConfig(n=128, k=1024, block_m=64, block_n=64, stages=4, num_sms=4)
    ops = [c.op for c in pipelined_loop(compiled(cfg)).body if c.op in (Op.WAIT, Op.WGMMA, Op.WGMMA_WAIT)]
    assert ops == [Op.WAIT, Op.WGMMA, Op.WAIT, Op.WGMMA,
                   Op.WAIT, Op.WGMMA_WAIT, Op.WGMMA,
                   Op.WAIT, Op.WGMMA_WAIT, Op.WGMMA,
                   Op.WGMMA_WAIT, Op.WGMMA_WAIT]
    plain = run_pipeline(lower(cfg), pipeline("sm90a"))
    ops = [c.op for c in pipelined_loop(plain).body if c.op in (Op.WAIT, Op.WGMMA, Op.WGMMA_WAIT)]
    assert ops[4:7] == [Op.WGMMA_WAIT, Op.WAIT, Op.WGMMA]      # the default keeps the wait after the retire


def test_a_ring_of_two_slots_keeps_the_waits_in_order():
    cfg = Fp8GemmConfig(n=128, k=1024, block_m=64, block_n=64, stages=2, num_sms=4)
    loop = pipelined_loop(compiled(cfg))
    assert loop.get("interleave") == "double_buffer x4, waits in order (ahead needs a ring of >= 3 stages)"


def test_forced_onto_two_slots_the_early_wait_deadlocks():
    """Why the pass needs D + 1 slots: block j + 1's slot is refilled only after block j - 1's
    release, which now comes after block j + 1's wait."""
    class Forced(InterleaveFfma):
        """interleave_ffma with its ring-depth guard for waits_ahead removed (test only)."""
        def waits_ahead(self, loop, staged, graph, D):
            return True, ", next wait ahead"
    m, n, k = 64, 64, 1024
    cfg = Fp8GemmConfig(n=n, k=k, block_m=64, block_n=64, stages=2, num_sms=1)
    kern = compiled(cfg, Forced())
    with pytest.raises(DeadlockError):
        interpret_as_launched(kern, m, fp8_gemm_inputs(m, n, k, seed=5))
    # the same ring with the guard: runs, and gives the lowered IR's bits
    ok = compiled(cfg)
    out = interpret_as_launched(ok, m, fp8_gemm_inputs(m, n, k, seed=5))["D"]
    assert torch.isfinite(out).all()
