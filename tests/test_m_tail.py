"""m_tail="shift": the last m block's tile moves up to end at row M (bench/TUNING.md step 86); "auto"
decides in the kernel at run time; the API settles it per call (settle_m_tail).

On the CPU interpreter, for each kind of walk (plain, two waves, three warpgroups, split-K over a
workspace and over a cluster, clusters sharing A or B, stream-K): every pipeline stage computes the
same bits as the "fill" kernel, and with M >= BLOCK_M no load of SFA, and none of A by more than
the 1-3 rows that keep SFA's box start 16-byte aligned, reaches past row M."""
from dataclasses import replace

import pytest
import torch
from dgir_testlib import interpret_as_launched
from test_pipeline_interp import _check_every_stage

from dgir.emitters.ptx import emit_ptx
from dgir.interp import fp8_gemm_inputs
from dgir.emitters.ptx import kernel_params
from dgir.ops.fp8_gemm import (Fp8GemmConfig, OpError, check_config, launch_scalar, lower, settle_m_tail, tail_cap,
                               tail_shift_below)
from dgir.pipeline import pipeline, run_pipeline

CASES = [   # (m, n, k, config fields)
    (150, 256, 384, dict(block_m=128, block_n=128, stages=3)),           # 22 rows in the last block
    (70, 96, 256, dict(block_m=64, block_n=48, stages=2)),                # straddling B-scale blocks
    (300, 256, 384, dict(block_m=256, block_n=128, stages=3)),            # two waves a warpgroup
    (200, 128, 256, dict(block_m=192, block_n=64, stages=2)),             # three math warpgroups
    (140, 192, 768, dict(block_m=128, block_n=64, stages=2, split_k=3)),  # split-K, global workspace
    (70, 128, 1024, dict(block_m=64, block_n=32, stages=2, split_k=4, split_reduce="cluster")),
    (300, 256, 384, dict(block_m=128, block_n=64, stages=3, cluster=2, multicast="A")),
    (300, 128, 384, dict(block_m=128, block_n=64, stages=3, cluster=2, multicast="B")),   # 3 m blocks:
    (40, 128, 256, dict(block_m=64, block_n=64, stages=2)),               # a pair's CTA past M; M < BM
    (193, 128, 256, dict(block_m=192, block_n=32, stages=2)),             # one row in the last block
    (150, 256, 512, dict(block_m=128, block_n=64, stages=2, stream_k=True)),
]


def _cfg(n, k, fields, tail):
    return Fp8GemmConfig(n=n, k=k, num_sms=3 if "cluster" not in fields else 4, m_tail=tail, **fields)


@pytest.mark.parametrize("m,n,k,fields", CASES)
def test_shifted_tail_gives_the_fill_kernels_bits(m, n, k, fields):
    shifted = _cfg(n, k, fields, "shift")
    if not shifted.stream_k:    # each stage: close to the reference, the same bits as the first
        _check_every_stage(shifted, m, n, k)
    final = run_pipeline(lower(shifted), pipeline("sm90a"))
    ins = fp8_gemm_inputs(m, n, k, seed=m + n + k)
    fill = interpret_as_launched(lower(_cfg(n, k, fields, "fill")), m, ins, seed=1)["D"]
    stats: dict = {}
    out = interpret_as_launched(final, m, ins, seed=2, stats=stats)["D"]
    assert torch.equal(out.view(torch.int16), fill.view(torch.int16))
    if m >= shifted.block_m:
        assert "SFA" not in stats["partial_loads"], stats
        assert ("A" in stats["partial_loads"]) == (m % 4 != 0), stats     # rounded to SFA's 4-row alignment


def test_fill_tail_loads_past_m():
    """The counter the test above relies on sees the fill kernel's last block reach past M."""
    m, n, k, fields = CASES[0]
    stats: dict = {}
    interpret_as_launched(lower(_cfg(n, k, fields, "fill")), m, fp8_gemm_inputs(m, n, k), stats=stats)
    assert stats["partial_loads"].get("A", 0) > 0 and stats["partial_loads"].get("SFA", 0) > 0


def test_shifted_tail_in_the_ptx_and_the_name():
    cfg = Fp8GemmConfig(n=256, k=512, block_m=192, block_n=128, stages=3, m_tail="shift")
    assert cfg.kernel_name().endswith("_tsh")
    assert Fp8GemmConfig(n=256, k=512).key() == Fp8GemmConfig(n=256, k=512, m_tail="fill").key()
    assert Fp8GemmConfig(n=256, k=512, m_tail="auto").kernel_name().endswith("_tauto")
    assert Fp8GemmConfig(n=256, k=512, m_tail="fill").kernel_name().endswith("_s4")
    final = run_pipeline(lower(cfg), pipeline("sm90a"))
    ptx = emit_ptx(final)
    plain = emit_ptx(run_pipeline(lower(Fp8GemmConfig(n=256, k=512, block_m=192, block_n=128, stages=3,
                                                      m_tail="fill")), pipeline("sm90a")))
    # the cap: a signed min against the tile's row, once per role and tile
    assert ptx.count("sub.s32") > plain.count("sub.s32") and ptx.count("min.s32") >= plain.count("min.s32") + 2


@pytest.mark.parametrize("bm", [64, 128, 192])
def test_tail_cap_ends_the_last_tile_at_m(bm):
    """The host's cap for every M up to 5 blocks: a last block of fewer than 32 rows starts at the
    4-aligned row that ends its tile 0-3 rows past M (row 0 when M < BLOCK_M); any other block keeps
    its place."""
    for m in range(1, 5 * bm + 1):
        last = (-(-m // bm) - 1) * bm
        cap = tail_cap(m, bm, 32)
        if m - last >= 32 or m - last == bm:
            assert cap == last, (m, cap)
        elif m < bm:
            assert cap == 0, (m, cap)
        else:
            assert cap % 4 == 0 and m <= cap + bm <= m + 3 and last - bm < cap <= last, (m, cap)
    assert launch_scalar("m_tail_cap", 588, {"block_m": 192, "m_tail_below": 32}) == 396
    with pytest.raises(ValueError, match="unknown launch scalar"):
        launch_scalar("m_tail", 588, {})


def test_the_cap_is_a_kernel_argument():
    """The cap travels as a u32 argument after M (the launcher computes it per launch): the load role's
    path to its first TMA stays as short as the fill kernel's, but for a min and a select."""
    cfg = Fp8GemmConfig(n=576, k=7168, block_m=64, block_n=32, stages=8, split_k=8, split_reduce="cluster",
                        ctas_per_sm=2, m_tail="auto")
    final = run_pipeline(lower(cfg), pipeline("sm90a"))
    assert kernel_params(final)[-2:] == [("dim_M", "dim", "M"), ("dim_m_tail_cap", "derived", "m_tail_cap")]
    assert final.get("m_tail_below") == 32
    ptx = emit_ptx(final)
    assert ".param .u32 dim_m_tail_cap" in ptx and "ld.param.u32" in ptx and "[dim_m_tail_cap]" in ptx
    fill = run_pipeline(lower(Fp8GemmConfig(n=576, k=7168, block_m=64, m_tail="fill")), pipeline("sm90a"))
    assert all(kind != "derived" for _, kind, _ in kernel_params(fill)) and fill.get("m_tail_below") is None


@pytest.mark.parametrize("m,n,k,tail", [(580, 7168, 16384, "shift"), (768, 12416, 5632, "fill"),
                                        (64, 576, 7168, "fill"), (4096, 7168, 16384, "fill"), (65, 4096, 7168, "shift")])
def test_the_api_settles_auto_for_each_m(m, n, k, tail):
    """tuning.choose hands the call a config whose m_tail is settled for its M: the kernel it runs
    carries the cap only where the last block moves (spec 177: a kernel deciding at run time ran
    64x32768x512 1.05x slower)."""
    from dgir import tuning
    cfg = tuning.choose("fp8_gemm_nt", m, n, k, device="NVIDIA H200", sms=132).config
    assert cfg.m_tail == tail
    assert settle_m_tail(replace(cfg, m_tail="auto"), m) == cfg == settle_m_tail(replace(cfg, m_tail="fill"), m)
    final = run_pipeline(lower(cfg), pipeline("sm90a"))
    assert any(kind == "derived" for _, kind, _ in kernel_params(final)) == (tail == "shift")


def test_interpreter_refuses_a_box_off_the_16_byte_grid():
    """The first form of the shift moved SFA's box to row M - BLOCK_M; at M = 577 with 192-row tiles the
    H200 stopped with an illegal instruction.  The interpreter checks the rule since."""
    from dgir.interp.state import InterpError, check_box_start
    sfa = torch.zeros(4, 580)
    check_box_start([388, 1], sfa, "tma_load", "SFA")
    with pytest.raises(InterpError, match="not a multiple of 16"):
        check_box_start([385, 1], sfa, "tma_load", "SFA")


@pytest.mark.parametrize("m,bm,bn,shifts", [(204, 192, 128, True), (240, 192, 128, False), (240, 192, 64, True),
                                            (129, 128, 64, True), (250, 128, 64, False), (257, 256, 128, False),
                                            (100, 64, 64, False), (84, 64, 64, True)])
def test_auto_tail_shifts_blocks_with_few_rows(m, bm, bn, shifts):
    """m_tail="auto": the last block shifts when it holds fewer than shift_rows(config) rows (decided
    by the kernel at run time; any partial block for 192-row tiles of 64 columns): then no load of
    SFA reaches past M; else the fill kernel's loads, and in both cases the fill kernel's bits."""
    n, k = 128, 256
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=2, num_sms=3, m_tail="auto")
    assert (tail_shift_below(cfg) > m % bm) == shifts
    ins = fp8_gemm_inputs(m, n, k, seed=m)
    stats: dict = {}
    out = interpret_as_launched(run_pipeline(lower(cfg), pipeline("sm90a")), m, ins, seed=3, stats=stats)["D"]
    fill = interpret_as_launched(lower(replace(cfg, m_tail="fill")), m, ins, seed=4)["D"]
    assert torch.equal(out.view(torch.int16), fill.view(torch.int16))
    assert ("SFA" in stats["partial_loads"]) != shifts, stats


@pytest.mark.parametrize("m,multicast,tail", [(788, "B", "shift"), (828, "B", "shift"), (880, "B", "fill"),
                                             (788, "A", "fill"), (1044, "B", "shift"), (1024, "B", "fill")])
def test_256_row_tiles_sharing_b_shift_a_last_block_under_64_rows(m, multicast, tail):
    """Spec 181: a 256x128 c2B tile pair whose second block holds 20-60 rows ran 0.83-0.98x as long
    shifted (788x24576x1536 74.0 -> 65.9 us); with A shared the fill stays faster (1-4%)."""
    from dgir.ops.fp8_gemm import shift_rows
    cfg = Fp8GemmConfig(n=24576, k=1536, block_m=256, block_n=128, stages=3, cluster=2, multicast=multicast)
    assert shift_rows(cfg) == (64 if multicast == "B" else 0)
    assert settle_m_tail(cfg, m).m_tail == tail


@pytest.mark.parametrize("m,bm,bn,cluster,tail", [(644, 192, 64, 1, "shift"), (640, 192, 64, 1, "shift"),
                                                  (768, 192, 64, 1, "fill"), (1908, 256, 64, 2, "shift"),
                                                  (644, 192, 128, 1, "fill"), (700, 192, 72, 1, "fill"),
                                                  (680, 128, 64, 1, "fill")])
def test_narrow_tall_tiles_shift_any_partial_last_block(m, bm, bn, cluster, tail):
    """Spec 187: with 64 columns A's box is most of a K block's load, and a box mostly past M loads
    slowly (644x2112x7168 192x64, 68 rows: 35.3 us filled, 24.8 shifted; 1908x2112x7168 256x64 c2B,
    116 rows: 74.2 -> 56.6).  128-row and wider tiles keep their thresholds."""
    cfg = Fp8GemmConfig(n=2112, k=7168, block_m=bm, block_n=bn, stages=4, cluster=cluster,
                        multicast="B" if cluster > 1 else "A")
    assert settle_m_tail(cfg, m).m_tail == tail


@pytest.mark.parametrize("m,multicast,tail", [(196, "B", "shift"), (416, "B", "shift"), (4696, "B", "shift"),
                                             (224, "B", "fill"), (250, "B", "fill"), (196, "A", "fill")])
def test_128_row_tiles_sharing_b_shift_a_last_block_under_96_rows(m, multicast, tail):
    """Specs 242-243 (bench/TUNING.md step 104): a 128x128 c2B pair whose second block holds 68 rows
    ran 0.89x as long shifted (196x7168x16384, 62.4 -> 55.3 us); over 16 random shapes with 32-88
    rows 0.984x (0.847x at 416x11904x8192).  With 96 rows the filled M = 224 ran as M = 256."""
    from dgir.ops.fp8_gemm import shift_rows
    cfg = Fp8GemmConfig(n=7168, k=16384, block_m=128, block_n=128, stages=5, cluster=2, multicast=multicast)
    assert shift_rows(cfg) == (96 if multicast == "B" else 32)
    assert settle_m_tail(cfg, m).m_tail == tail


@pytest.mark.parametrize("bm,m", [(256, 300), (128, 200)])
def test_a_shifted_pair_sharing_b_computes_the_fill_kernels_bits(bm, m):
    """The B-sharing pair of 256- or 128-row tiles with its second tile shifted (it holds 44 / 72 rows):
    the same D bit for bit, and no SFA box past M (interpreter, the launch's grid)."""
    n, k = 256, 256                 # 2 m blocks: the pair (0, 1)
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=128, stages=2, num_sms=4, cluster=2, multicast="B")
    shifted = settle_m_tail(cfg, m)
    assert shifted.m_tail == "shift"
    ins = fp8_gemm_inputs(m, n, k, seed=5)
    stats: dict = {}
    out = interpret_as_launched(run_pipeline(lower(shifted), pipeline("sm90a")), m, ins, seed=3, stats=stats)["D"]
    fill = interpret_as_launched(lower(cfg), m, ins, seed=4)["D"]
    assert torch.equal(out.view(torch.int16), fill.view(torch.int16))
    assert "SFA" not in stats["partial_loads"], stats


def test_bad_m_tail_is_refused():
    with pytest.raises(OpError, match="m_tail must be 'auto', 'fill' or 'shift'"):
        check_config(Fp8GemmConfig(n=256, k=512, m_tail="pad"))
