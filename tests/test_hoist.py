"""emitters/ptx/hoist.py: integer arithmetic after a barrier's spin loop moves in front of it, and
nothing that depends on the wait (or that a staying line needs unchanged) moves."""
from dgir.compiler import compile
from dgir.emitters.ptx.hoist import hoist_above_waits
from dgir.ops.fp8_gemm import Fp8GemmConfig
from dgir.pipeline import pipeline

SNIPPET = """\
  add.u32 %r1, %r0, 4;
WAIT_7:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r1], %r2;
  @!%p3 bra WAIT_7;
  mad.lo.u32 %r5, %r4, 128, %r0;
  ld.shared.f32 %f1, [%r5];
  mul.lo.u32 %r6, %r9, 3;
  add.u32 %r5, %r0, 8;
  cvt.rn.f32.u32 %f2, %r6;
  add.u32 %r10, %r6, 1;
  mov.b32 %r11, %f1;
  add.u32 %r12, %r11, 1;
  add.u32 %r2, %r0, 1;
  @%p1 add.u32 %r13, %r0, 1;
  ld.shared.v2.u32 {%r15, %r16}, [%r0];
  add.u32 %r17, %r16, 1;
  mov.u64 %rd3, %globaltimer;
  mov.u64 %rd4, %clock64;
  mov.u32 %r18, %cluster_ctarank;
  wgmma.fence.sync.aligned;
  add.u32 %r14, %r0, 1;""".splitlines()


def test_moves_independent_integer_arithmetic_in_front_of_the_spin_loop():
    out = hoist_above_waits(SNIPPET)
    label = out.index("WAIT_7:")
    before, after = out[:label], out[label:]
    assert before == ["  add.u32 %r1, %r0, 4;", "  mad.lo.u32 %r5, %r4, 128, %r0;",
                      "  mul.lo.u32 %r6, %r9, 3;", "  add.u32 %r10, %r6, 1;",
                      "  mov.u32 %r18, %cluster_ctarank;",   # a constant special register moves
                      "  add.u32 %r14, %r0, 1;"]
    assert after == [
        "WAIT_7:",
        "  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r1], %r2;",
        "  @!%p3 bra WAIT_7;",
        "  ld.shared.f32 %f1, [%r5];",
        "  add.u32 %r5, %r0, 8;",                # rewrites a register the load (staying) reads
        "  cvt.rn.f32.u32 %f2, %r6;",             # not integer arithmetic
        "  mov.b32 %r11, %f1;",                   # reads what the wait guards
        "  add.u32 %r12, %r11, 1;",               # ... and so does this
        "  add.u32 %r2, %r0, 1;",                 # rewrites the wait's parity register
        "  @%p1 add.u32 %r13, %r0, 1;",           # predicated
        "  ld.shared.v2.u32 {%r15, %r16}, [%r0];",
        "  add.u32 %r17, %r16, 1;",               # reads the second register of a vector load
        "  mov.u64 %rd3, %globaltimer;",          # a timer: read where it stands
        "  mov.u64 %rd4, %clock64;",
        "  wgmma.fence.sync.aligned;"]
    assert sorted(out) == sorted(SNIPPET)


def test_arithmetic_moves_past_consecutive_waits_but_not_past_a_wgmma():
    lines = """\
WAIT_1:
  mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], %r2;
  @!%p1 bra WAIT_1;
WAIT_2:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], %r4;
  @!%p2 bra WAIT_2;
  add.u32 %r5, %r0, 1;
  wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%f0}, %rd0, %rd1, 0, 1, 1;
  add.u32 %r6, %r0, 1;""".splitlines()
    assert hoist_above_waits(lines) == [lines[6]] + lines[:6] + lines[7:]


def _with_hoist(force):
    from dgir.passes.hoist_wait_arithmetic import HoistWaitArithmetic
    return [HoistWaitArithmetic(force=force) if p.name == "hoist_wait_arithmetic" else p for p in pipeline("sm90a")]


def test_the_wgmma_descriptors_of_a_real_kernel_are_built_before_the_full_barrier_wait():
    """Hoisted, no integer arithmetic is left between a math loop's full-barrier spin and its
    first wgmma (the scale reads stay after the wait); without it, the descriptors are built there."""
    cfg = Fp8GemmConfig(n=7168, k=16384, block_m=256, block_n=128, stages=3, cluster=2, multicast="A")

    def arithmetic_after_waits(ptx):
        """integer ops between a wait loop and a wgmma that follows it in the same block"""
        lines, count = ptx.splitlines(), 0
        for i, line in enumerate(lines):
            if line.strip().startswith("@!") and " bra WAIT_" in line:
                ops = 0
                for nxt in lines[i + 1:]:
                    if "wgmma.mma_async" in nxt:
                        count += ops
                    if "wgmma.mma_async" in nxt or nxt.strip().endswith(":") or " bra " in nxt:
                        break
                    ops += nxt.strip().split(".")[0] in ("add", "mul", "mad", "shr", "and", "or")
        return count

    plain = compile("fp8_gemm_nt", m=4096, n=7168, k=16384, config=cfg, passes=_with_hoist(False), assemble=False)
    hoisted = compile("fp8_gemm_nt", m=4096, n=7168, k=16384, config=cfg, passes=_with_hoist(True))
    assert arithmetic_after_waits(plain.ptx) > 40
    assert arithmetic_after_waits(hoisted.ptx) == 0
    assert sorted(plain.ptx.splitlines()) == sorted(hoisted.ptx.splitlines())     # the same lines, reordered


def test_the_pass_hoists_long_k_blocks_and_records_why_not_otherwise():
    """Default pipeline: BLOCK_M 192 and 256 kernels (three and four wgmma groups a K block) and
    128x192 (two groups of 192 columns) are marked and their PTX is the hoisted form; 128x128 and
    64-row tiles keep their code, with the reason on the kernel."""
    for m, cfg in [(4096, Fp8GemmConfig(n=2112, k=7168, block_m=192, block_n=128, stages=4, cluster=2, multicast="B")),
                   (4096, Fp8GemmConfig(n=7168, k=2048, block_m=256, block_n=128, stages=3, cluster=2, multicast="A")),
                   (3072, Fp8GemmConfig(n=2112, k=7168, block_m=128, block_n=192, stages=4, cluster=2, multicast="B"))]:
        res = compile("fp8_gemm_nt", m=m, n=cfg.n, k=cfg.k, config=cfg, assemble=False)
        assert res.ir.get("hoist_waits") is True
        assert res.ptx == compile("fp8_gemm_nt", m=m, n=cfg.n, k=cfg.k, config=cfg, passes=_with_hoist(True),
                                  assemble=False).ptx
    for cfg, why in [(Fp8GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5), "skipped: 2 wgmma groups of 128 columns a K block"),
                     (Fp8GemmConfig(n=576, k=7168, block_m=64, block_n=32, stages=8), "skipped: 1 wgmma group of 32 columns a K block")]:
        res = compile("fp8_gemm_nt", m=128, n=cfg.n, k=cfg.k, config=cfg, assemble=False)
        assert res.ir.get("hoist_waits") == why
        assert res.ptx == compile("fp8_gemm_nt", m=128, n=cfg.n, k=cfg.k, config=cfg, passes=_with_hoist(False),
                                  assemble=False).ptx
