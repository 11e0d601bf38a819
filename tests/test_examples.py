"""The example plug-ins in examples/ work as their docstrings say: a scheduling pass written outside
dgir (examples/scale_reads_at_retire.py) compiles, moves what it says it moves, and keeps the result
bit for bit on the CPU interpreter; and the orders a scheduler may get wrong are caught before a GPU
sees them (a use before its definition: PassError; a ring slot read after its release: RaceError)."""
from pathlib import Path

import pytest
from dgir_testlib import assert_bitwise_like_lowered

import dgir
from dgir.cli import load_plugin
from dgir.interp import calc_diff, fp8_gemm_inputs, fp8_gemm_reference, run_kernel
from dgir.interp.machine import RaceError
from dgir.ir import Op
from dgir.ops.fp8_gemm import Fp8GemmConfig
from dgir.passes.schedule_mma import SCALE_READS
from dgir.pipeline import base_pipeline

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "scale_reads_at_retire.py"
M, N, K = 200, 256, 1024        # two m blocks (the last one ragged), two n blocks, 8 K blocks
# 128x128: B scales staged in the ring (smem_scalar); 128x64: read from global memory (load_scale)
CONFIGS = [Fp8GemmConfig(n=N, k=K, block_m=128, block_n=128, stages=4),
           Fp8GemmConfig(n=N, k=K, block_m=128, block_n=64, stages=4)]


@pytest.fixture
def example():
    """The example module, loaded as `--plugin` loads it (which registers its pass); unregistered after."""
    load_plugin(str(EXAMPLE))
    try:
        import sys
        yield sys.modules["dgir_plugin_" + EXAMPLE.stem]
    finally:
        dgir.unregister_all("sm90a")


def k_loop_ops(kernel, ops):
    return [n for n in kernel.walk() if n.op in ops and n.get("role") == "mma"]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.block_m}x{c.block_n}")
def test_the_example_schedule_keeps_the_result_bitwise(example, cfg):
    res = dgir.compile("fp8_gemm_nt", m=M, n=N, k=K, config=cfg, assemble=False, verify=True)
    names = [stem.split("_", 1)[1] for stem, _ in res.stages]
    assert "scale_reads_at_retire" in names and "schedule_mma" not in names
    scheduled = res.stage("scale_reads_at_retire")
    reads = k_loop_ops(scheduled, SCALE_READS)
    assert reads and all(n.get("stage") == 1 for n in reads)
    # the data it wrote is what interleave_ffma built: in the pipelined loop each block's scale reads
    # follow the next block's wgmma and precede the wait that retires their block
    loop = next(n for n in res.stage("interleave_ffma").walk() if n.op is Op.FOR and n.get("pipelined"))
    seq = [n.op for n in loop.body if n.op in SCALE_READS + (Op.WGMMA, Op.WGMMA_WAIT)]
    first_read = next(i for i, op in enumerate(seq) if op in SCALE_READS)
    assert seq[:first_read].count(Op.WGMMA) == 2 and Op.WGMMA_WAIT not in seq[:first_read]
    assert seq[first_read + 1] in SCALE_READS + (Op.WGMMA_WAIT,)
    default = dgir.compile("fp8_gemm_nt", m=M, n=N, k=K, config=cfg, assemble=False, passes=base_pipeline("sm90a"))
    assert "05_schedule_mma" in default.diff("interleave_ffma")
    assert res.ptx != default.ptx
    ins = fp8_gemm_inputs(M, N, K, seed=7)
    assert_bitwise_like_lowered(cfg, res.ir, ins, seeds=(1, 2, 3))
    out = run_kernel(res.ir, ins, seed=4)["D"]
    assert calc_diff(out.double(), fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])) < 1e-5


def with_scheduler(scheduler):
    return [scheduler if p.name == "schedule_mma" else p for p in base_pipeline("sm90a")]


def test_reads_ordered_after_the_release_are_a_race(example):
    """The same pass anchored one op later (the promote, which follows the release): each block's scale
    reads land after its slot went back to the producer.  It compiles (no SSA rule is broken); the
    interpreter, which poisons a released slot and checks who holds it, reports the race."""
    late = type("ReadsAfterRelease", (example.ScaleReadsAtRetire,), {"anchor": Op.PROMOTE,
                                                                     "__doc__": "scale reads after the release"})()
    cfg = CONFIGS[0]
    res = dgir.compile("fp8_gemm_nt", m=M, n=N, k=K, config=cfg, assemble=False, passes=with_scheduler(late))
    with pytest.raises(RaceError, match=r"smem_scalar reads %sfb_ring .* has already released"):
        run_kernel(res.ir, fp8_gemm_inputs(M, N, K, seed=8), seed=1)


def test_a_use_before_its_definition_is_refused(example):
    """Reads ordered after the promote that uses them: interleave_ffma refuses the schedule, naming the
    op and the value, before any code is emitted."""
    class ReadsLast(example.ScaleReadsAtRetire):
        """scale reads after everything else of the block"""
        def reschedule(self, parent, body):
            body = super().reschedule(parent, body)
            last = max((c.get("order") for c in body if c.get("order") is not None), default=0)
            return tuple(c.with_attrs(order=last + 1 + i) if c.op in SCALE_READS else c
                         for i, c in enumerate(body))
    with pytest.raises(dgir.PassError, match=r"interleave_ffma.*promote.*uses %sb0 before"):
        dgir.compile("fp8_gemm_nt", m=M, n=N, k=K, config=CONFIGS[0], assemble=False,
                     passes=with_scheduler(ReadsLast()))
