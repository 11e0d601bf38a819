"""SFA read K-major in place (Fp8GemmConfig.sfa_major="k"): the math threads load their rows' scales
of each K block from the caller's contiguous [M, ceil(K/128)] row-major tensor (through L1), rows past
M clamped to row M - 1.

The variant must compute exactly what the MN-major kernel computes (the same scales feed the same
FFMAs in the same order): bitwise-equal D on the CPU interpreter, over tile kinds, split-K, clusters,
the shifted last m block and K tails; its PTX assembles; with the opt-in on
(deep_gemm.SFA_K_MAJOR_IN_PLACE) the API picks it only for an SFA the kernel can address in place."""
import re
from dataclasses import replace

import pytest
import torch

from dgir import deep_gemm
from dgir.interp import calc_diff, fp8_gemm_inputs, fp8_gemm_reference, run_kernel
from dgir.ops.fp8_gemm import Fp8GemmConfig, OpError, check_config, lower, max_stages_for, stage_bytes, with_sfa_major
from dgir.pipeline import pipeline, run_pipeline

# (m, n, k, config fields): 64/128/192/256-row tiles, K of 3-8 blocks, split-K through the global
# workspace and over a cluster, clusters sharing A and B, a shifted last m block, two CTAs per SM, M
# below one tile (rows past M clamped)
CASES = [
    (70, 96, 640, dict(block_m=64, block_n=48, stages=3)),
    (130, 128, 384, dict(block_m=128, block_n=64, stages=2)),
    (200, 256, 512, dict(block_m=192, block_n=128, stages=3)),
    (300, 256, 384, dict(block_m=256, block_n=128, stages=3)),
    (100, 192, 1024, dict(block_m=64, block_n=64, stages=3, split_k=4)),
    (70, 96, 512, dict(block_m=64, block_n=32, stages=2, split_k=4, split_reduce="cluster")),
    (256, 256, 512, dict(block_m=128, block_n=64, stages=2, cluster=2, multicast="A")),
    (300, 128, 384, dict(block_m=128, block_n=64, stages=3, cluster=2, multicast="B")),
    (77, 128, 512, dict(block_m=64, block_n=64, stages=2, m_tail="shift")),
    (64, 160, 512, dict(block_m=64, block_n=32, stages=3, ctas_per_sm=2)),
    (5, 64, 768, dict(block_m=64, block_n=64, stages=4)),
]


def _k_major_inputs(ins: dict, m: int) -> dict:
    """The same values with SFA [M, KB] row-major (the MN-major inputs' [KB, align(M, 4)] transposed)."""
    out = dict(ins)
    out["SFA"] = ins["SFA"][:, :m].t().contiguous()
    return out


@pytest.mark.parametrize("m,n,k,fields", CASES, ids=[f"{m}x{n}x{k}-{'-'.join(f'{a}{b}' for a, b in f.items())}"
                                                   for m, n, k, f in CASES])
def test_k_major_sfa_gives_the_mn_major_kernels_bits(m, n, k, fields):
    cfg = Fp8GemmConfig(n=n, k=k, num_sms=8, **fields)
    kcfg = replace(cfg, sfa_major="k")
    ins = fp8_gemm_inputs(m, n, k, seed=m + n + k)
    if cfg.split_k > 1 and cfg.split_reduce == "global":
        ins["W"] = torch.full((cfg.split_k, m, n), float("nan"))
        ins["LOCKS"] = torch.zeros(-(-m // cfg.block_m) * -(-n // cfg.block_n), dtype=torch.int32)
    ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])
    mn = run_kernel(run_pipeline(lower(cfg), pipeline("sm90a")), ins, seed=1)["D"]
    kern = run_pipeline(lower(kcfg), pipeline("sm90a"), verify_each=True)
    km = run_kernel(kern, _k_major_inputs(ins, m), seed=2)["D"]
    assert torch.isfinite(km).all() and calc_diff(km.double(), ref) < 1e-5
    assert torch.equal(km.view(torch.int16), mn.view(torch.int16))
    sfa = kern.decl("SFA")
    assert sfa.type.shape == ("M", cfg.k_blocks) and sfa.get("box") is None      # a pointer, no tensor map
    assert "sfa_ring" not in {n.name for n in kern.body}


def test_k_major_sfa_is_read_from_its_column_in_every_k_block():
    """Scales that differ in every K block and row: a kernel reading the wrong column (or a wrong row)
    would be caught by the reference."""
    m, n, k = 130, 128, 1280
    cfg = Fp8GemmConfig(n=n, k=k, block_m=128, block_n=128, stages=3, num_sms=4, sfa_major="k")
    ins = fp8_gemm_inputs(m, n, k, seed=5, scale_exp=12.0)
    ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])
    out = run_kernel(run_pipeline(lower(cfg), pipeline("sm90a")), _k_major_inputs(ins, m))["D"]
    assert calc_diff(out.double(), ref) < 1e-5
    shifted = _k_major_inputs(ins, m)
    shifted["SFA"] = torch.roll(shifted["SFA"], 1, dims=1)        # each K block given its neighbour's scales
    wrong = run_kernel(run_pipeline(lower(cfg), pipeline("sm90a")), shifted)["D"]
    assert calc_diff(wrong.double(), ref) > 1e-2


def test_the_k_major_kernel_assembles_and_names_itself():
    from dgir.toolchain import assemble
    from dgir.emitters.ptx import emit_ptx
    for fields in (dict(block_m=64, block_n=64, stages=12), dict(block_m=256, block_n=128, stages=3, cluster=2),
                   dict(block_m=64, block_n=32, stages=8, ctas_per_sm=2)):
        cfg = with_sfa_major(Fp8GemmConfig(n=7168, k=7168, **fields), "k")
        kern = run_pipeline(lower(cfg), pipeline("sm90a"))
        ptx = emit_ptx(kern)
        res = assemble(ptx)
        assert res.cubin and cfg.kernel_name().endswith("_sfk")
        assert "rows past M read row M - 1" in ptx and re.search(r"@%p\d+ prefetch\.global\.L1 \[%rd\d+\];", ptx)
        assert "+32];      // row + 8" not in ptx      # no A-scale reads from shared memory
        assert kern.get("smem_bytes") <= 232448


@pytest.mark.parametrize("ahead", [0, 4])
def test_the_prefetch_knob_sets_line_prefetches_and_changes_no_result(monkeypatch, ahead):
    """fp8_gemm.SFA_PREFETCH_K_BLOCKS shows as the op's `prefetch` attr and as one predicated
    prefetch.global.L1 per row read (issued where the clamped column starts a 128-byte line), or,
    at 0, as neither; the results are the same bits."""
    from dgir.emitters.ptx import emit_ptx
    from dgir.ops import fp8_gemm
    m, n, k = 70, 96, 640
    cfg = Fp8GemmConfig(n=n, k=k, block_m=64, block_n=48, stages=3, num_sms=8, sfa_major="k")
    ins = _k_major_inputs(fp8_gemm_inputs(m, n, k, seed=3), m)
    plain = run_kernel(run_pipeline(lower(cfg), pipeline("sm90a")), ins)["D"]
    monkeypatch.setattr(fp8_gemm, "SFA_PREFETCH_K_BLOCKS", ahead)
    kern = run_pipeline(lower(cfg), pipeline("sm90a"))
    reads = [x for x in kern.walk() if x.op.value == "load_row_scales"]
    assert reads and all(x.get("prefetch") == (ahead or None) for x in reads)
    ptx = emit_ptx(kern)
    assert len(re.findall(r"@%p\d+ prefetch\.global\.L1", ptx)) == ptx.count("prefetch.global.L1") == (2 * len(reads) if ahead else 0)
    assert torch.equal(run_kernel(kern, ins)["D"].view(torch.int16), plain.view(torch.int16))


def test_with_sfa_major_keeps_the_stages_that_fit():
    cfg = Fp8GemmConfig(n=7168, k=7168, block_m=64, block_n=64, stages=12)
    k = with_sfa_major(cfg, "k")
    assert k.sfa_major == "k" and k.stages == min(12, max_stages_for(k))
    assert stage_bytes(64, 64) - stage_bytes(64, 64, "k") == 256         # no A-scale slot in the ring
    assert with_sfa_major(k, "k") is k and with_sfa_major(cfg, "mn") is cfg
    assert cfg.key() == Fp8GemmConfig(n=7168, k=7168, block_m=64, block_n=64, stages=12).key()   # keys unchanged
    assert k.key() != replace(k, sfa_major="mn").key()
    with pytest.raises(OpError, match="sfa_major"):
        check_config(replace(cfg, sfa_major="row"))


def _sfa(m, kb, **how):
    if how.get("transposed"):
        return torch.empty(kb, m).t()
    width = how.get("row", kb)
    t = torch.empty(m * width + 4)[how.get("offset", 0):][:m * width].view(m, width)
    return t[:, :kb]


@pytest.mark.parametrize("m,kb,how,expected", [
    (128, 56, {}, True),                      # contiguous, K = 7168
    (64, 4, {}, True),                        # K = 512
    (128, 3, {}, True),                       # K = 384: rows 12 bytes apart
    (128, 14, {"offset": 1}, True),           # 4 bytes off a 16-byte boundary
    (128, 12, {"row": 16}, False),            # padded rows (the kernel's row stride is KB)
    (128, 56, {"transposed": True}, False),   # column-major (the MN-major check's business)
])
def test_the_api_reads_sfa_k_major_only_where_the_kernel_can(m, kb, how, expected, monkeypatch):
    sfa = _sfa(m, kb, **how)
    monkeypatch.setattr(deep_gemm, "SFA_K_MAJOR_IN_PLACE", False)
    assert deep_gemm._sfa_k_major_in_place(sfa) is False
    monkeypatch.setattr(deep_gemm, "SFA_K_MAJOR_IN_PLACE", True)
    assert deep_gemm._sfa_k_major_in_place(sfa) is expected


@pytest.mark.parametrize("m,n,k,expected", [
    (64, 2112, 7168, True), (128, 7168, 16384, True), (512, 4096, 7168, True),     # 64- and 128-row tiles
    (4096, 7168, 16384, False), (2048, 4096, 7168, False), (768, 7168, 16384, False),   # 256 / 192 rows
])
def test_the_api_reads_in_place_only_for_tiles_of_at_most_128_rows(m, n, k, expected, monkeypatch):
    """deep_gemm._k_major_pays: the shape's chosen config (the H200's table) decides; 192- and
    256-row tiles ran 1.02-1.22x the staged call's time read K-major (TUNING.md step 114)."""
    from dgir.runtime import device as rd
    monkeypatch.setattr(rd, "properties", lambda i: rd.DeviceProps(i, "NVIDIA H200", 132, 232448, (9, 0)))
    assert deep_gemm._k_major_pays(m, n, k, torch.device("cuda", 0)) is expected
    monkeypatch.setattr(deep_gemm, "SFA_K_MAJOR_MAX_BLOCK_M", 256)
    assert deep_gemm._k_major_pays(m, n, k, torch.device("cuda", 0)) is True


@pytest.mark.parametrize("fields", [dict(block_m=64, block_n=48, stages=4, split_k=2),
                                    dict(block_m=256, block_n=128, stages=3, cluster=2)])
def test_the_k_major_kernel_round_trips_through_the_text_format_after_every_pass(fields):
    import dgir
    cfg = Fp8GemmConfig(n=2304, k=1024, sfa_major="k", **fields)
    events = []
    run_pipeline(lower(cfg), pipeline("sm90a"), [lambda ev: events.append(ev.after)], verify_each=True)
    assert any(n.op.value == "load_row_scales" for n in events[-1].walk())
    for kernel in events:
        text = dgir.print_ir(kernel)
        assert dgir.parse_ir(text) == kernel and dgir.print_ir(dgir.parse_ir(text)) == text
