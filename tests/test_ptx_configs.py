"""ptxas accepts the PTX of every kind of config the fp8_gemm_nt config space produces: a seeded
sample over (BLOCK_M, BLOCK_N, stages, K tails), plus the configs the cost model picks for
DeepGEMM's benchmark shapes.  No spills, no serialised wgmma (C7514), setmaxnreg honoured (C7508)."""
import random
import re

import pytest

from dgir.compiler import compile
from dgir.ops.fp8_gemm import Fp8GemmConfig, choose_config, legal_block_ns, max_stages

rng = random.Random(2026)
SAMPLED = []
for _ in range(12):
    bm = rng.choice([64, 128])
    bn = rng.choice(legal_block_ns(4096))
    k = rng.choice([128, 272, 512, 2048, 7168])
    stages = rng.randint(1, max_stages(bm, bn))
    SAMPLED.append(Fp8GemmConfig(n=rng.choice([bn, 576, 2112, 7168]), k=k, block_m=bm, block_n=bn, stages=stages))
SAMPLED += [Fp8GemmConfig(n=7168, k=7168, block_m=256, block_n=128, stages=3),
            Fp8GemmConfig(n=2112, k=640, block_m=256, block_n=96, stages=3)]
# BLOCK_M 192: three math warpgroups of 152 registers (512 threads start at 128: setmaxnreg grows them)
SAMPLED += [Fp8GemmConfig(n=7168, k=16384, block_m=192, block_n=128, stages=4),
            Fp8GemmConfig(n=7168, k=16384, block_m=192, block_n=96, stages=5, split_k=2),
            Fp8GemmConfig(n=576, k=7168, block_m=192, block_n=72, stages=5, cluster=2, multicast="A")]
SAMPLED += [Fp8GemmConfig(n=7168, k=2048, block_m=256, block_n=128, stages=3, cluster=2, multicast="A"),
            Fp8GemmConfig(n=2112, k=1536, block_m=128, block_n=192, stages=4, cluster=2, multicast="B"),
            Fp8GemmConfig(n=4096, k=1024, block_m=64, block_n=32, stages=8, cluster=4, multicast="A"),
            Fp8GemmConfig(n=32768, k=512, block_m=64, block_n=128, stages=3, ctas_per_sm=2),
            Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=32, stages=8, split_k=2, ctas_per_sm=2)]
# three and four CTAs per SM: 80 and 64 registers a thread from launch, 40 / 120 and 40 / 88 budgets
SAMPLED += [Fp8GemmConfig(n=24576, k=1536, block_m=64, block_n=64, stages=4, ctas_per_sm=3),
            Fp8GemmConfig(n=2112, k=7168, block_m=64, block_n=48, stages=4, split_k=4, split_reduce="cluster",
                          ctas_per_sm=3),
            Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=32, stages=4, split_k=2, ctas_per_sm=4),
            Fp8GemmConfig(n=7168, k=2048, block_m=64, block_n=56, stages=3, ctas_per_sm=4)]
SAMPLED += [Fp8GemmConfig(n=2112, k=7168, block_m=64, block_n=64, stages=8, split_k=4),
            Fp8GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, split_k=7),
            Fp8GemmConfig(n=2112, k=1536, block_m=256, block_n=128, stages=3, split_k=3)]
# more partials in flight (partials=3, 4): up to three wgmma groups pending inside an iteration
SAMPLED += [Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=64, stages=11, partials=3),
            Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=64, stages=11, partials=4),
            Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=32, stages=8, split_k=2, split_reduce="cluster",
                          ctas_per_sm=2, partials=4),
            Fp8GemmConfig(n=7168, k=16384, block_m=128, block_n=64, stages=8, partials=3)]
CHOSEN = [choose_config(m, n, k) for m in (1, 64, 128, 4096) for n, k in
          [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]]
CONFIGS = SAMPLED + sorted(set(CHOSEN), key=repr)


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.kernel_name().removeprefix("fp8_gemm_nt_") for c in CONFIGS])
def test_ptxas_accepts_without_spills(cfg):
    res = compile("fp8_gemm_nt", m=256, n=cfg.n, k=cfg.k, config=cfg, verify=True)
    r = res.resources
    assert res.cubin[:4] == b"\x7fELF"
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_bytes == 0, r
    assert not [w for w in res.warnings if "C7514" in w or "C7508" in w], res.warnings
    # setmaxnreg is honoured: the entry register count is the 64K file split over the SM's threads
    assert r.registers == min(255, 65536 // (cfg.threads * cfg.ctas_per_sm) // 8 * 8)


@pytest.mark.parametrize("cluster", [1, 2])
def test_expect_tx_counts_exactly_the_tma_bytes(cluster):
    """The full barrier expects the bytes TMA lands and nothing else: the B scales that stage_b_scales
    stores with st.shared are published by the arrive (expecting their 8 bytes hung the GPU)."""
    import re
    cfg = Fp8GemmConfig(n=7168, k=16384, block_m=256, block_n=128, stages=3, cluster=cluster)
    res = compile("fp8_gemm_nt", m=4096, n=7168, k=16384, config=cfg, assemble=False)
    assert "st.shared.f32" in res.ptx                           # the staged B scales are there
    tma = 128 * 128 + (256 * 128 + 256 * 4 if cluster > 1 else 0)   # fit_m boxes (cluster 1) add at run time
    if cluster > 1:
        assert re.search(rf"expect_tx\.shared::cta\.b64 _, \[%r\d+\], {tma};", res.ptx)
    else:
        assert re.search(rf"mov\.u32 %r\d+, {tma};", res.ptx)
    assert f", {tma + 8};" not in res.ptx


def test_persistent_grid_whole_clusters_and_two_ctas_per_sm():
    from dgir.ops.fp8_gemm import persistent_grid
    # plain: one CTA per tile up to one per SM
    assert persistent_grid(4096, 256, 56, 1, 132) == 132 and persistent_grid(64, 64, 33, 4, 132) == 132
    assert persistent_grid(1, 64, 9, 1, 132) == 9
    # clusters of 2 sharing A walk N-pairs; sharing B walk M-pairs (an odd m-block count rounds up)
    assert persistent_grid(4096, 256, 56, 1, 132, cluster=2, multicast="A") == 132
    assert persistent_grid(256, 128, 4, 1, 132, cluster=2, multicast="A") == 2 * (2 * 2)
    assert persistent_grid(300, 128, 3, 1, 132, cluster=2, multicast="B") == 2 * (2 * 3)
    assert persistent_grid(64, 64, 128, 1, 132, cluster=4, multicast="A") == 4 * 32
    # two CTAs per SM: up to 264
    assert persistent_grid(64, 64, 512, 1, 132, ctas_per_sm=2) == 264
    assert persistent_grid(64, 64, 200, 1, 132, ctas_per_sm=2) == 200


def test_async_staged_scales_arrive_through_cp_async_not_expect_tx():
    """cp.async copies of the B scales: tracked by cp.async.mbarrier.arrive before the commit's
    expect_tx arrive, and not counted in the expect_tx bytes."""
    import re
    from dgir.passes.stage_b_scales import StageBScales
    from dgir.pipeline import pipeline
    passes = [StageBScales(async_copy=True, min_tile=0) if p.name == "stage_b_scales" else p for p in pipeline("sm90a")]
    cfg = Fp8GemmConfig(n=7168, k=16384, block_m=256, block_n=128, stages=3, cluster=2)
    ptx = compile("fp8_gemm_nt", m=4096, n=7168, k=16384, config=cfg, passes=passes).ptx
    assert ptx.count("cp.async.ca.shared.global") == 2 and "st.shared.f32" not in ptx
    arrive = ptx.index("cp.async.mbarrier.arrive.shared::cta.b64")
    assert arrive < ptx.index("mbarrier.arrive.expect_tx", arrive)
    assert re.search(r"expect_tx\.shared::cta\.b64 _, \[%r\d+\], 50176;", ptx)     # A + B + SFA only


@pytest.mark.parametrize("fields,match", [
    (dict(block_m=96), "block_m must be 64, 128, 192 or 256"),
    (dict(block_m=256, block_n=192), "block_m=256 needs block_n <= 128"),
    (dict(block_m=192, block_n=144), "block_m=192 needs block_n <= 128"),
    (dict(block_m=64, math_order="alternate"), "needs two or more math warpgroups"),
    (dict(block_m=192, block_n=112, split_k=2), "block_m=192 with split_k > 1 needs block_n <= 96"),
    (dict(block_m=192, block_n=120), "block_m=192 cannot take block_n=120"),
    (dict(block_n=180), "block_n must be a multiple of 8"),
    (dict(split_k=5), "split_k=5 must divide the 8 K blocks"),
    (dict(cluster=3), "cluster must be 1, 2 or 4"),
    (dict(cluster=2, multicast="C"), "multicast must be 'A' or 'B'"),
    (dict(cluster=2, split_k=2), "cluster=2 needs split_k=1"),
    (dict(cluster=2, n=1152, block_n=128), "N=1152 has 9 tiles of 128 \\(not a multiple of 2\\)"),
    (dict(cluster=4, multicast="B", block_n=48), "splits its 48-row panel in 4 parts"),
    (dict(cluster=2, num_sms=131), "needs num_sms divisible by it"),
    (dict(ctas_per_sm=5), "ctas_per_sm must be 1, 2, 3 or 4"),
    (dict(ctas_per_sm=2, block_m=128), "ctas_per_sm=2 is for block_m=64 without multicast clusters"),
    (dict(ctas_per_sm=3, block_m=64, block_n=112), "ctas_per_sm=3 starts each thread with 80 registers, too few .* <= 104"),
    (dict(ctas_per_sm=4, block_m=64, block_n=80), "ctas_per_sm=4 starts each thread with 64 registers, too few .* <= 72"),
    (dict(ctas_per_sm=2, block_m=64, block_n=208), "too few for a 64x208 wgmma .* block_n must be <= 200"),
    (dict(ctas_per_sm=2, block_m=64, block_n=256, promotion="rescaled"), "block_n must be <= 128"),
    (dict(swizzle_group=0), "swizzle_group .* must be an int >= 1"),
    (dict(num_sms=0), "num_sms must be an int >= 1"),
    (dict(stages=2.5), "stages must be an int >= 1"),
    (dict(promotion="fp16"), "promotion must be 'fp32' or 'rescaled'"),
    (dict(promotion="rescaled", block_n=96), "block_n must divide 128 or be a multiple of it, got 96"),
    (dict(promotion="rescaled", block_m=256), "needs one 64-row wave per math warpgroup"),
    (dict(promotion="rescaled", stream_k=True), "needs one 64-row wave per math warpgroup"),
])
def test_illegal_configs_are_rejected_naming_the_field(fields, match):
    from dgir.ops import OpError
    from dgir.ops.fp8_gemm import check_config
    cfg = Fp8GemmConfig(**{"n": 1024, "k": 1024, "block_m": 128, "block_n": 128, "stages": 3, **fields})
    with pytest.raises(OpError, match=match):
        check_config(cfg)


def _sass_ops(res) -> list[str]:
    from dgir import toolchain
    from dgir.runtime import sass
    return [i.opcode for i in sass.parse_sass(toolchain.disassemble(res.cubin), res.name)]


def test_warpgroup_index_is_made_uniform_where_two_math_warpgroups_issue_wgmma():
    """The uniform_warpgroup_index pass marks kernels with two math warpgroups; their PTX broadcasts
    the warpgroup index from lane 0 and ptxas keeps the wgmma descriptors in uniform registers
    instead of moving them there before every wgmma (bench/TUNING.md step 31).  64-row tiles keep
    their PTX, with the decision recorded; force=True / dropping the pass overrides it."""
    from dgir.pipeline import pipeline
    from dgir.passes.uniform_warpgroup_index import UniformWarpgroupIndex
    wide = Fp8GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5)
    narrow = Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=64, stages=10)
    shfl = "shfl.sync.idx.b32"
    res = compile("fp8_gemm_nt", m=512, n=4096, k=7168, config=wide)
    assert res.ir.get("uniform_wg_index") is True and shfl in res.ptx
    small = compile("fp8_gemm_nt", m=128, n=4096, k=7168, config=narrow, assemble=False)
    assert small.ir.get("uniform_wg_index") == "skipped: 1 math warpgroup" and shfl not in small.ptx
    three = Fp8GemmConfig(n=4096, k=7168, block_m=192, block_n=128, stages=4)
    assert compile("fp8_gemm_nt", m=768, n=4096, k=7168, config=three, assemble=False).ir.get("uniform_wg_index") is True
    without = [p for p in pipeline("sm90a") if p.name != "uniform_warpgroup_index"]
    plain = compile("fp8_gemm_nt", m=512, n=4096, k=7168, config=wide, passes=without)
    assert shfl not in plain.ptx
    moves = [sum(op.startswith("R2UR") for op in _sass_ops(r)) for r in (res, plain)]
    assert moves[0] * 4 < moves[1], moves                   # measured 5 against 72
    forced = [UniformWarpgroupIndex(force=True) if p.name == "uniform_warpgroup_index" else p
              for p in pipeline("sm90a")]
    assert shfl in compile("fp8_gemm_nt", m=128, n=4096, k=7168, config=narrow, passes=forced, assemble=False).ptx


def test_descriptor_steps_by_low_word_adds_assemble(monkeypatch):
    """The desc32 A/B knob: the K steps' descriptors from 32-bit adds on the low word (no 64-bit adds)."""
    import dgir.emitters.ptx.mma as mma
    cfg = Fp8GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5)
    monkeypatch.setattr(mma, "DESC_LOW_WORD_STEPS", True)
    res = compile("fp8_gemm_nt", m=512, n=4096, k=7168, config=cfg)
    assert "add.s64" not in res.ptx.split("wgmma.fence")[1].split("wgmma.commit_group")[0]
    assert res.resources.spill_stores == 0 and not [w for w in res.warnings if "C7514" in w]


@pytest.mark.parametrize("split_k,widest", [(1, 128), (2, 96), (3, 80), (4, 80), (6, 96), (8, 96)])
def test_three_warpgroup_widths_that_check_config_accepts_do_not_spill(split_k, widest):
    """BLOCK_M 192 (152 registers per thread): every BLOCK_N that check_config lets through assembles
    without spills (the rejected ones spilled: dgir.ops.fp8_gemm.three_warpgroup_spill)."""
    from dgir.ops import OpError
    from dgir.ops.fp8_gemm import check_config
    accepted = []
    for bn in range(8, 129, 8):
        cfg = Fp8GemmConfig(n=40 * bn, k=3072, block_m=192, block_n=bn, stages=min(4, max_stages(192, bn)),
                            split_k=split_k)
        try:
            check_config(cfg)
        except OpError:
            continue
        accepted.append(bn)
        r = compile("fp8_gemm_nt", m=4096, n=cfg.n, k=cfg.k, config=cfg, verify=True).resources
        assert r.spill_stores == 0 and r.stack_bytes == 0, (bn, r)
    assert accepted[-1] == widest and 120 not in accepted and len(accepted) >= 9


@pytest.mark.parametrize("block_m", [64, 128])
def test_256_wide_tiles_promote_each_128_column_half_with_its_own_b_scale(block_m):
    """A 256-wide tile starts at a multiple of 256, so its columns 0-127 and 128-255 lie in two
    B-scale blocks: the promotion's FFMAs of the second half must use sfb of the second block
    (they once all used the first one's, a silently wrong result for any config with block_n=256)."""
    import re
    cfg = Fp8GemmConfig(n=512, k=512, block_m=block_m, block_n=256, stages=2)
    ptx = compile("fp8_gemm_nt", m=256, n=512, k=512, config=cfg, assemble=False).ptx
    b_scale_of = {d: sb for d, _, sb in re.findall(r"mul\.f32 (%f\d+), (%f\d+), (%f\d+);", ptx)}
    promote = re.findall(r"fma\.rn\.f32 \S+, \S+, (%f\d+), ", ptx)[:128]       # one K block: 64x256 / 128 threads
    first, second = ({b_scale_of[s] for s in half} for half in (promote[:64], promote[64:]))
    assert len(first) == len(second) == 1 and first != second


@pytest.mark.parametrize("cfg", [Fp8GemmConfig(n=7168, k=16384, block_m=128, block_n=256, stages=3, cluster=2,
                                               multicast="B", promotion="rescaled"),
                                 Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=64, stages=8, split_k=2,
                                               promotion="rescaled")], ids=["128x256_c2B", "64x64_sk2"])
def test_rescaled_promotion_assembles_without_spills_or_division_slow_paths(cfg):
    """No partial tile: a 64x256 warpgroup accumulator fits (the FP32 promotion's spills 432 B).  The
    ratio s_prev / s_k is a reciprocal and a multiply: div.rn.f32 branched to a slow-path subroutine
    four times per K block (spec 121, 5-10% slower)."""
    res = compile("fp8_gemm_nt", m=4096, n=cfg.n, k=cfg.k, config=cfg)
    assert res.name.endswith("_rs")
    assert res.resources.spill_stores == 0 and res.resources.spill_loads == 0
    assert "div.rn" not in res.ptx and "rcp.approx.f32" in res.ptx
    assert "CALL" not in _sass_ops(res)


@pytest.mark.parametrize("cfg", [Fp8GemmConfig(n=576, k=7168, block_m=64, block_n=32, stages=8, split_k=8,
                                               split_reduce="cluster", ctas_per_sm=2),
                                 Fp8GemmConfig(n=7168, k=16384, block_m=256, block_n=128, stages=3, cluster=2)])
def test_load_region_is_laid_out_right_after_the_entry_when_it_falls_through(cfg, monkeypatch):
    """Emitter knob LOAD_REGION_FALLS_THROUGH (bench variant `loadfirst`, TUNING step 65): the
    dispatch falls through into the load region, so ptxas places the producer's code (its first TMA)
    within the first few KB of the kernel, ahead of every wgmma.  By default the region is branched
    to and ptxas lays it out after the math regions."""
    import dgir.emitters.ptx.emit as emit
    from dgir import toolchain
    from dgir.runtime import sass

    def first(pat, res):
        instrs = sass.parse_sass(toolchain.disassemble(res.cubin), res.name)
        return next(i.offset for i in instrs if i.opcode.startswith(pat))

    default = compile("fp8_gemm_nt", m=256, n=cfg.n, k=cfg.k, config=cfg)
    assert first("UTMALDG", default) > first("QGMMA", default)
    monkeypatch.setattr(emit, "LOAD_REGION_FALLS_THROUGH", True)
    res = compile("fp8_gemm_nt", m=256, n=cfg.n, k=cfg.k, config=cfg)
    assert first("UTMALDG", res) < first("QGMMA", res) and first("UTMALDG", res) < 0x1000


def test_persistent_loop_bound_without_division(monkeypatch):
    """Emitter setting LOOP_BOUND_WITHOUT_DIVISION (default; variant `loopdiv` turns it off, step 70): the
    persistent tile loops test i * grid_size < tiles_left instead of i < ceildiv(tiles_left,
    grid_size); the division is then dead and ptxas drops its MUFU.RCP sequence, one per region."""
    import dgir.emitters.ptx.emit as emit
    cfg = Fp8GemmConfig(n=24576, k=1536, block_m=64, block_n=32, stages=8, ctas_per_sm=2)
    assert emit.LOOP_BOUND_WITHOUT_DIVISION                  # the default
    res = compile("fp8_gemm_nt", m=64, n=cfg.n, k=cfg.k, config=cfg)
    monkeypatch.setattr(emit, "LOOP_BOUND_WITHOUT_DIVISION", False)
    plain = compile("fp8_gemm_nt", m=64, n=cfg.n, k=cfg.k, config=cfg)
    rcp = [sum(op.startswith("MUFU") for op in _sass_ops(r)) for r in (plain, res)]
    assert rcp[1] == rcp[0] - 2, rcp
    assert res.resources.spill_stores == 0


@pytest.mark.parametrize("occ,promotion,widest,refused", [(2, "fp32", 200, 208), (2, "rescaled", 128, 256),
                                                          (3, "fp32", 104, 112), (3, "rescaled", 64, 128),
                                                          (4, "fp32", 72, 80), (4, "rescaled", 64, 128)])
def test_the_widest_shared_sm_tile_assembles(occ, promotion, widest, refused):
    """SHARED_SM_MAX_BLOCK_N is where ptxas stops: the widest legal tile at `occ` CTAs per SM
    assembles (it may spill), and check_config refuses the next legal width, on which ptxas fails
    (C7602: one wgmma instruction must fit the launch's registers, 80 at three CTAs, 64 at four)."""
    from dgir.ops import OpError
    from dgir.ops.fp8_gemm import SHARED_SM_MAX_BLOCK_N, check_config
    assert widest == SHARED_SM_MAX_BLOCK_N[occ][promotion] < refused
    cfg = Fp8GemmConfig(n=8 * widest, k=2048, block_m=64, block_n=widest, stages=2, ctas_per_sm=occ, promotion=promotion)
    assert compile("fp8_gemm_nt", m=64, n=cfg.n, k=cfg.k, config=cfg).cubin[:4] == b"\x7fELF"
    with pytest.raises(OpError, match="too few"):
        check_config(Fp8GemmConfig(n=8 * refused, k=2048, block_m=64, block_n=refused, stages=2, ctas_per_sm=occ,
                                   promotion=promotion))


# numbered specs left without a result for good: spec 15 (step 12 committed the results of specs 13, 14 and 16)
SUPERSEDED_SPECS = {15}


def _queued_spec_lines() -> list[str]:
    """The lines of the specs queued for a device session: bench/specs/tuneN.txt without a committed
    result (bench/results/raw/tuneN_exp.json, or tuneN_h100_exp.json for a spec run on an H100).
    Specs can run out of order (an H100 call runs what the H100 can decide), so it is each spec's
    own result that counts, not the newest number."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "bench"
    number = lambda p: int(re.fullmatch(r"tune(\d+)(?:_h100)?(?:_exp)?", p.stem)[1])          # noqa: E731
    done = {number(p) for p in (root / "results" / "raw").glob("tune*_exp.json")
            if re.fullmatch(r"tune\d+(_h100)?_exp", p.stem)}
    queued = [p for p in (root / "specs").glob("tune*.txt") if re.fullmatch(r"tune\d+", p.stem)
              and number(p) not in done | SUPERSEDED_SPECS]
    return sorted({line for p in queued for line in p.read_text().split()})


def test_every_config_of_the_queued_specs_assembles_without_spills():
    """A spec line whose config cannot be built costs device time to find out (and a config over the
    shared-memory budget only failed at the launch before step 116): every explicit config of the
    queued specs passes check_config, lays out its shared memory and assembles without spills."""
    from dgir_testlib import bench_module
    from dgir.ops.fp8_gemm import check_config
    spec_config = bench_module("experiments").spec_config
    lines = _queued_spec_lines()
    if not lines:
        pytest.skip("no spec is queued (every numbered spec has its result)")
    built = {}
    for line in lines:
        shape, keys, _ = (line.split(":") + ["", ""])[:3]       # "m,n,k:config:variant", as experiments.run_one
        m, n, k = map(int, shape.split(","))
        cfg = spec_config(n, k, keys, 132)
        if cfg is None or cfg.kernel_name() in built:
            continue                          # the API's config or cuBLAS: chosen on the device
        check_config(cfg)
        res = compile("fp8_gemm_nt", m=m, n=n, k=k, config=cfg)
        assert res.resources.spill_stores == 0 and res.resources.spill_loads == 0, line
        built[cfg.kernel_name()] = line
    assert len(built) > 0


def test_every_variant_of_the_queued_specs_exists():
    """A queued spec line naming a variant experiments.py does not know fails on the device, after
    the lease's start: each variant (before its +sass / +trace suffixes) is one of VARIANTS."""
    from dgir_testlib import bench_module
    variants = bench_module("experiments").VARIANTS
    lines = _queued_spec_lines()
    if not lines:
        pytest.skip("no spec is queued (every numbered spec has its result)")
    named = {(line.split(":") + ["", ""])[2].split("+")[0] or "default" for line in lines}
    assert named <= set(variants), named - set(variants)


def test_the_wgmma_rate_probe_times_every_wgmma_it_issues():
    """bench/wgmma_rate_probe.py's kernels (bench/TUNING.md step 118): each assembles without spills
    or serialisation, and ptxas keeps every K block's four e4m3 wgmmas.  Its first version let the
    accumulators of all but the last group die; ptxas then replaced those groups with a 64x8x16
    HGMMA placeholder and the probe reported rates above the tensor cores' peak."""
    from dgir import toolchain
    from dgir_testlib import bench_module
    probe = bench_module("wgmma_rate_probe")
    for v in probe.VARIANTS:
        # every form at N = 32 and 128, the width sweep's odd widths (step 120), and at N = 64 the
        # forms that build dgir's descriptors each K block
        if (v[0] not in (32, 128, 136, 152) and not (v[0] == 64 and v[2] in ("promote_desc", "promote_all"))
                or (v[1] == "rs" and v[3] != 2)):
            continue
        res = toolchain.assemble(probe.probe_ptx(*v))
        assert res.resources.spill_stores == 0 and not res.warnings, (v, res.warnings)
        sass = toolchain.disassemble(res.cubin, ("-c",))
        assert "HGMMA" not in sass, v
        gmma = len(re.findall(r"QGMMA\.64x\d+x32", sass))
        assert gmma and gmma % 4 == 0, (v, gmma)


def test_a_narrow_tiles_fixed_cost_in_the_cost_model():
    """ModelParams.tc_narrow_cols (step 118): below 128 columns a tile's rate falls as N / (c + N),
    the 128-column rating unchanged, per BLOCK_M; heights without an entry keep the power law."""
    from dataclasses import replace
    from dgir.ops.fp8_gemm_model import REFIT, tc_efficiency
    base = replace(REFIT, tc_table=(), single_cta_table=(), tc_narrow_cols=())
    cols = replace(base, tc_narrow_cols=((128, 60.0),))
    assert tc_efficiency(128, 128, cols) == tc_efficiency(128, 128, base)
    assert tc_efficiency(128, 256, cols) == tc_efficiency(128, 256, base)
    e = {n: tc_efficiency(128, n, cols) / tc_efficiency(128, 128, cols) for n in (32, 64, 96)}
    assert abs(e[64] - 64 / 128 * 188 / 124) < 1e-12        # N / 128 * (c + 128) / (c + N), c = 60
    assert e[32] < e[64] < 1.0
    assert tc_efficiency(128, 40, cols) < tc_efficiency(128, 40, base)       # the power law flatters narrow tiles
    assert tc_efficiency(64, 40, cols) == tc_efficiency(64, 40, base)        # no entry for 64 rows


def test_compact_wgmma_descriptors_drop_only_the_no_op_mask_and_the_unused_offset(monkeypatch):
    """emitters/ptx/mma.DESC_COMPACT (variant `desccompact`, step 118): the descriptor's low word is
    the shared address >> 4 alone.  The 14-bit mask it drops is a no-op for every address a kernel
    can have (the H200's 227 KB of dynamic shared memory plus the 1024-byte alignment pad, >> 4, fits
    in 14 bits), and the leading-byte offset (1 before, 0 now) is unused by 128B-swizzled K-major
    operands; every other line of the PTX is unchanged."""
    from dgir.emitters.ptx import mma
    assert (227 * 1024 + 1023) >> 4 < 1 << 14
    cfg = Fp8GemmConfig(n=448, k=9728, block_m=128, block_n=64, stages=8)
    plain = compile("fp8_gemm_nt", m=1200, n=448, k=9728, config=cfg, assemble=False).ptx
    monkeypatch.setattr(mma, "DESC_COMPACT", True)
    compact = compile("fp8_gemm_nt", m=1200, n=448, k=9728, config=cfg).ptx
    dropped = [line for line in plain.splitlines() if line not in compact.splitlines()]
    assert dropped and all(re.search(r"(and\.b32 %r\d+, %r\d+, 16383|or\.b32 %r\d+, %r\d+, 65536);", d) for d in dropped)
    assert len(plain.splitlines()) - len(compact.splitlines()) == len(dropped)


def test_the_cluster_residency_probe_builds_every_kind_it_asks_about():
    """bench/cluster_residency.py (queued for the H200, step 125) asks the driver about split clusters
    of every slice count a split may take (2-8, and the non-portable 14 and 16) at one to four CTAs an
    SM and the 2-CTA multicast clusters: each of those
    kernels passes check_config and assembles without spills, so the device call spends no time
    finding a config that cannot be built; the shipped tables' cluster entries are among its cases."""
    from dgir_testlib import bench_module
    from dgir.ops.fp8_gemm import check_config
    probe = bench_module("cluster_residency")
    kinds = probe.kinds()
    assert {(c.split_k if c.split_cluster else c.cluster, c.ctas_per_sm) for _, c in kinds} >= \
        {(sk, occ) for sk in (2, 3, 4, 5, 6, 7, 8, 14, 16) for occ in (1, 2, 3, 4)} | {(2, 1)}
    for m, cfg in kinds:
        check_config(cfg)
        res = compile("fp8_gemm_nt", m=m, n=cfg.n, k=cfg.k, config=cfg)
        assert res.resources.spill_stores == 0 and res.resources.spill_loads == 0, cfg.kernel_name()
    shipped = {cfg.kernel_name() for _, cfg in probe.shipped()}
    assert "fp8_gemm_nt_n576_k7168_bm64_bn32_s5_sk8dsm_o3" in shipped
