"""Stream-K walk (Fp8GemmConfig.stream_k): whole rounds of tiles, then the partial round's tiles cut
into P equal K pieces walked piece-major; cut tiles are summed in piece order by whichever walker
completes them.  Checked on the CPU interpreter: every pass keeps the result, the sum has the same
bits whoever gathers (seeded task interleavings), the host's workspace sizing agrees with the
kernel's own arithmetic, and the tile counters are left at zero for the next launch."""
import pytest
import torch

from dgir_testlib import interpret_as_launched
from dgir.interp import calc_diff, fp8_gemm_inputs, fp8_gemm_reference
from dgir.ir import Op
from dgir.ops import OpError
from dgir.ops import stream_k
from dgir.ops.fp8_gemm import Fp8GemmConfig, check_config, kernel_grid, lower
from dgir.pipeline import pipeline, run_pipeline

# (m, n, k, block_m, block_n, stages, num_sms, cluster, multicast, pieces the partial round is cut in)
CASES = [
    (130, 256, 1024, 64, 64, 3, 5, 1, "A", 2),       # 12 tiles on 5 walkers: 2 left, cut in 2
    (64, 128, 1024, 64, 64, 2, 5, 1, "A", 2),        # fewer tiles than walkers
    (300, 256, 1024, 256, 128, 3, 3, 1, "A", 2),     # BLOCK_M 256: two waves per warpgroup
    (640, 320, 1024, 128, 64, 3, 6, 1, "A", 4),
    (70, 200, 512, 64, 48, 4, 7, 1, "A", 2),         # M and N not multiples of the tile
    (384, 512, 2048, 128, 128, 3, 8, 2, "A", 2),     # clusters of 2 sharing A
    (640, 256, 1024, 128, 64, 3, 10, 2, "B", 2),     # sharing B, odd m blocks: a CTA past M
    (600, 256, 1024, 128, 64, 3, 5, 1, "A", 1),      # whole rounds only: nothing is cut
]


def _run(kern, m, n, k, seed=0, ins=None):
    ins = ins or fp8_gemm_inputs(m, n, k, seed=m + n + k)
    return ins, interpret_as_launched(kern, m, ins, seed)


@pytest.mark.parametrize("m,n,k,bm,bn,stages,sms,cluster,mc,pieces", CASES)
def test_stream_k_is_exact_through_every_pass(m, n, k, bm, bn, stages, sms, cluster, mc, pieces):
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=sms, cluster=cluster,
                        multicast=mc, stream_k=True)
    stages_ir = []
    run_pipeline(lower(cfg), pipeline("sm90a"), [lambda ev: stages_ir.append(ev.after)], verify_each=True)
    walkers = kernel_grid(dict(stages_ir[-1].attrs), m) // cluster
    tiles = -(-m // (bm * (cluster if mc == "B" else 1))) * (-(-n // bn) // (cluster if mc == "A" else 1))
    assert stream_k.split(tiles, walkers, -(-k // 128))[1] == pieces
    ref, first = None, None
    for kern in (stages_ir[0], stages_ir[-1]):
        ins, out = _run(kern, m, n, k)
        D = out["D"]
        ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"]) if ref is None else ref
        assert torch.isfinite(D).all() and calc_diff(D.double(), ref) < 1e-5
        assert int(out["LOCKS"].abs().sum()) == 0                     # ready for the next launch
        written = int((~torch.isnan(out["W"])).sum())
        assert (written > 0) == (pieces > 1)                          # cut tiles went through the workspace
        first = D if first is None else first
        assert torch.equal(D.view(torch.int16), first.view(torch.int16))   # passes change no rounding
    assert stages_ir[-1].get("stream_k") is True


def test_stream_k_sum_has_the_same_bits_whoever_gathers():
    """Seeded interleavings change which walker completes a cut tile (and whether it finds the other
    pieces already in and skips storing its own); the bits must not change."""
    cfg = Fp8GemmConfig(n=320, k=1024, block_m=128, block_n=64, stages=3, num_sms=6, stream_k=True)
    kern = run_pipeline(lower(cfg), pipeline("sm90a"))
    ins = fp8_gemm_inputs(640, 320, 1024, seed=9)
    outs = [_run(kern, 640, 320, 1024, seed=s, ins=ins)[1]["D"] for s in range(6)]
    assert all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs)


def test_stream_k_piece_choice():
    """P: a divisor of the K blocks with pieces of >= 2 blocks, the fewest rounds of pieces per tile."""
    assert stream_k.piece_counts(56) == [2, 4, 7, 8]
    assert stream_k.piece_counts(5) == []                 # no equal cut: whole tiles only
    assert stream_k.split(176, 66, 56) == (132, 4)        # 44 tiles left: 3 rounds of quarter tiles
    assert stream_k.split(132, 66, 56) == (132, 1)        # whole rounds
    assert stream_k.split(112, 132, 128) == (0, 1)        # one partial round that no cut shortens


def test_stream_k_config_rules():
    with pytest.raises(OpError, match="stream_k"):
        check_config(Fp8GemmConfig(n=256, k=1024, split_k=2, stream_k=True))
    with pytest.raises(OpError, match="stream_k"):
        check_config(Fp8GemmConfig(n=256, k=1024, epilogue="direct", stream_k=True))
    # the default config's key and name do not mention the new field (caches and dumps unchanged)
    plain = Fp8GemmConfig(n=256, k=1024)
    assert "stream_k" not in plain.as_dict() and "_stk" not in plain.kernel_name()
    assert Fp8GemmConfig(n=256, k=1024, stream_k=True).key() != plain.key()


def test_stream_k_kernel_assembles_without_spills():
    """The gathering epilogue keeps the accumulators live beside a chunk of loaded pieces."""
    pytest.importorskip("dgir.toolchain")
    from dgir.compiler import compile
    from dgir.toolchain import ToolchainError
    cfg = Fp8GemmConfig(n=2112, k=7168, block_m=128, block_n=192, stages=4, cluster=2, multicast="B",
                        stream_k=True)
    try:
        res = compile("fp8_gemm_nt", m=4096, n=2112, k=7168, config=cfg)
    except ToolchainError as e:
        pytest.skip(f"no ptxas: {e}")
    assert res.resources.spill_stores == 0 and res.resources.spill_loads == 0
    assert res.ir.find(Op.SPLIT_GATHER) and res.ir.find(Op.SPLIT_PEEK)


@pytest.mark.parametrize("order", ["alternate", "pingpong"])
def test_stream_k_with_turn_taking_warpgroups(order):
    """The math warpgroups' turn barriers stay balanced over segments of different lengths."""
    cfg = Fp8GemmConfig(n=320, k=1024, block_m=128, block_n=64, stages=3, num_sms=6, stream_k=True, math_order=order)
    kern = run_pipeline(lower(cfg), pipeline("sm90a"), verify_each=True)
    assert kern.find(Op.TURN)
    ins, out = _run(kern, 640, 320, 1024, seed=1)
    ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])
    assert calc_diff(out["D"].double(), ref) < 1e-5 and int((~torch.isnan(out["W"])).sum()) > 0
