"""stage_first_wave_early (default at K <= 2048): wave 0 of a two-wave tile is staged inside the tile's last K
block, while wave 1's wgmma runs.  On the interpreter the result stays bitwise equal to the lowered
IR (several tiles per CTA, so the staging tile is reused; K of two and five blocks; a cluster), and
the tiles it cannot serve are left alone with the reason recorded."""
import pytest

from dgir.ir import Op
from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
from dgir.passes.stage_first_wave_early import StageFirstWaveEarly
from dgir.pipeline import pipeline, run_pipeline

from dgir_testlib import assert_bitwise_like_lowered
from test_pipeline_interp import _inputs


def _early_pipeline():
    """The default pipeline (the pass runs right after overlap_epilogue)."""
    names = [p.name for p in pipeline("sm90a")]
    assert names[names.index("overlap_epilogue") + 1] == "stage_first_wave_early"
    return pipeline("sm90a")


def _without_it():
    return [p for p in pipeline("sm90a") if p.name != "stage_first_wave_early"]


def _tile_loop(kernel):
    return next(n for n in kernel.walk() if n.op is Op.FOR and n.get("overlap_epilogue"))


CASES = [  # (config, m): 256-row tiles, K blocks 5 and 2, a cluster sharing A, an M tail
    (dict(n=256, k=640, block_m=256, block_n=64, stages=3, num_sms=2), 600),
    (dict(n=128, k=256, block_m=256, block_n=64, stages=2, num_sms=1), 300),
    (dict(n=256, k=384, block_m=256, block_n=64, stages=3, num_sms=2, cluster=2, multicast="A"), 512),
]


@pytest.mark.parametrize("store_early", [False, True, "after_retire"], ids=["staged", "staged+stored", "after_retire"])
@pytest.mark.parametrize("fields,m", CASES)
def test_early_staging_preserves_the_result_bitwise(fields, m, store_early):
    cfg = Fp8GemmConfig(**fields)
    ins = _inputs(cfg, m, cfg.n, cfg.k)
    passes = [StageFirstWaveEarly(store_early=store_early) if p.name == "stage_first_wave_early" else p
              for p in _early_pipeline()]
    kern = run_pipeline(lower(cfg), passes, verify_each=True)
    tloop = _tile_loop(kern)
    assert tloop.get("early_staging") == {
        True: "wave 0 staged and stored during wave 1's last wgmma", False: "wave 0 staged during wave 1's last wgmma",
        "after_retire": "wave 0 staged during wave 1's last wgmma, stored once it retired"}[store_early]
    stores = [i for i, c in enumerate(tloop.body) if c.op is Op.TMA_STORE]
    stage1 = next(i for i, c in enumerate(tloop.body) if c.op is Op.STAGE_OUT and c.get("wave") == 1)
    assert (stores[0] < stage1) == bool(store_early)     # wave 0's store leaves before wave 1 is staged
    if store_early:     # before wave 1's last wgmma retires, or ("after_retire") right after it
        ops = list(tloop.body)
        stage0 = next(i for i, c in enumerate(ops) if c.op is Op.STAGE_OUT and not c.get("wave"))
        retire = next(i for i, c in enumerate(ops) if c.op is Op.WGMMA_WAIT and i > stage0)
        assert (stores[0] > retire) == (store_early == "after_retire")
    # wave 0's staging now sits between the last K block's wave-1 wgmma and its retire
    ops = list(tloop.body)
    stage0 = next(i for i, c in enumerate(ops) if c.op is Op.STAGE_OUT and not c.get("wave"))
    mma1 = max(i for i, c in enumerate(ops[:stage0]) if c.op is Op.WGMMA and c.get("wave") == 1)
    assert any(c.op is Op.WGMMA_WAIT for c in ops[stage0:]) and mma1 < stage0
    assert_bitwise_like_lowered(cfg, kern, ins)


@pytest.mark.parametrize("fields,why", [
    (dict(n=256, k=512, block_m=128, block_n=128, stages=3), "not a two-wave tile"),
    (dict(n=256, k=640, block_m=128, block_n=128, stages=3), "did not take its shallow form"),   # interleaved
    (dict(n=256, k=128, block_m=256, block_n=64, stages=3), "no K block after block 0"),
    (dict(n=256, k=2176, block_m=256, block_n=64, stages=3), "17 K blocks a tile > 16"),
])
def test_tiles_it_cannot_serve_are_left_alone(fields, why):
    cfg = Fp8GemmConfig(**fields)
    plain = run_pipeline(lower(cfg), _without_it())
    kern = run_pipeline(lower(cfg), _early_pipeline(), verify_each=True)
    assert why in _tile_loop(kern).get("early_staging")
    assert [c.op for c in _tile_loop(kern).body] == [c.op for c in _tile_loop(plain).body]


def test_running_it_twice_changes_nothing():
    cfg = Fp8GemmConfig(n=256, k=640, block_m=256, block_n=64, stages=3, num_sms=2)
    once = run_pipeline(lower(cfg), _early_pipeline())
    assert StageFirstWaveEarly().run(once) == once


def test_early_epilogue_off_in_the_config_leaves_the_tile_alone():
    cfg = Fp8GemmConfig(n=256, k=640, block_m=256, block_n=64, stages=3, early_epilogue="off")
    kern = run_pipeline(lower(cfg), _early_pipeline(), verify_each=True)
    assert kern.get("early_staging") == "skipped: early_epilogue='off' in the config"
    assert cfg.kernel_name().endswith("_late")
    # the default ("on") leaves the config's key as it was before the field existed
    assert "early_epilogue" not in Fp8GemmConfig(n=256, k=640).as_dict()


@pytest.mark.parametrize("m,bm,k,expected", [(512, 256, 512, "staging"), (1024, 256, 2048, "staging"), (1025, 256, 512, "staging"),
                                             (1792, 256, 512, "staging"), (1793, 256, 512, "on"), (1280, 256, 640, "on"),
                                             (1536, 256, 1536, "on"), (4096, 256, 512, "on"), (512, 128, 512, "on"),
                                             (512, 256, 7168, "on"),      # 56 K blocks: the pass does not act
                                             (2560, 256, 512, "on"), (3072, 256, 512, "staging"),  # 12 m blocks: 132 CTAs keep theirs
                                             (3072, 256, 1536, "on")])
def test_the_api_keeps_the_store_late_for_256_row_tiles_at_small_m(m, bm, k, expected):
    """specs 194, 196 (bench/TUNING.md steps 94-95): at M = 512-1024 the early store ran 6-9% slower;
    specs 198-200 (step 96): at K = 512 up to M = 1792 too (1536x32768x512 1.09x), not at K >= 1536;
    specs 204-207 (step 97): at K = 512 wherever each CTA of the walk keeps its m block."""
    from dgir.ops.fp8_gemm import settle_early_epilogue
    cfg = Fp8GemmConfig(n=32768, k=k, block_m=bm, block_n=128, stages=3)
    assert settle_early_epilogue(cfg, m).early_epilogue == expected


@pytest.mark.parametrize("m,cluster,multicast,sms,expected", [
    (2816, 2, "A", 132, "staging"),   # 11 m blocks, 66 clusters: spec 206 1.09x with the store
    (2816, 2, "A", 130, "on"),        # 65 clusters step the m block by 10 a round
    (2700, 2, "A", 132, "staging"), (2900, 2, "A", 132, "on"), (4096, 2, "A", 132, "on"),
    (4096, 2, "A", 128, "staging"),   # 64 clusters over 16 m blocks: spec 205 1.03x with the store
    (8192, 2, "A", 128, "on"),        # two bands: the walkers change band (spec 206: the store 0.99x)
    (3072, 2, "B", 132, "staging"),   # 6 rows of B-sharing pairs on 66 clusters
    (3584, 2, "B", 132, "on")])
def test_the_store_stays_late_where_each_walker_keeps_its_m_block(m, cluster, multicast, sms, expected):
    from dgir.ops.fp8_gemm import settle_early_epilogue
    cfg = Fp8GemmConfig(n=32768, k=512, block_m=256, block_n=128, stages=3, cluster=cluster, multicast=multicast,
                        num_sms=sms)
    assert settle_early_epilogue(cfg, m).early_epilogue == expected


@pytest.mark.parametrize("m,n,cluster,multicast,sms", [(m, n, c, mc, s) for m in (700, 1536, 2816, 3000, 4096, 8192)
                                                       for n in (1024, 32768) for c, mc in ((1, "A"), (2, "A"), (2, "B"))
                                                       for s in (128, 130, 132)])
def test_walkers_keep_their_m_block_is_what_the_walk_does(m, n, cluster, multicast, sms):
    """The rule against the walk itself: walker w's tiles are w, w + W, w + 2W, ... of the banded
    tile order, whose m block the interpreter's TILE_M gives (band of G rows, m = first + t mod rows)."""
    from dgir.ops.fp8_gemm import walk_walkers, walkers_keep_their_m_block
    cfg = Fp8GemmConfig(n=n, k=512, block_m=256, block_n=128, stages=3, cluster=cluster, multicast=multicast,
                        num_sms=sms)
    walkers, tiles = walk_walkers(m, cfg)
    pair_m = cluster > 1 and multicast == "B"
    rows_total = -(-m // (256 * (cluster if pair_m else 1)))
    group = 16 // cluster if pair_m else 16
    n_blocks = tiles // rows_total

    def tile_m(t):
        first = t // (group * n_blocks) * group
        return first + t % (group * n_blocks) % min(group, rows_total - first)
    kept = all(len({tile_m(t) for t in range(w, tiles, walkers)}) == 1 for w in range(walkers))
    assert walkers_keep_their_m_block(m, cfg) == (kept and tiles > walkers)


def test_the_api_choice_carries_the_settled_early_epilogue():
    from dgir.tuning import choose
    c = choose("fp8_gemm_nt", 768, 32768, 512, "NVIDIA H200", 132)
    assert c.config.block_m == 256 and c.config.early_epilogue == "staging"
    c = choose("fp8_gemm_nt", 4096, 32768, 512, "NVIDIA H200", 132)
    assert c.config.block_m == 256 and c.config.early_epilogue == "on"


def test_the_choice_trace_names_the_kept_m_block():
    """2816 rows are 11 m blocks of 256, and the API's 66 clusters step the walk by 66: `dgir choose`
    says why the store stays late there, and at 4096 (16 m blocks) it stays early."""
    from dgir.tuning import choose
    trace = []
    c = choose("fp8_gemm_nt", 2816, 32768, 512, "NVIDIA H200", 132, trace=trace)
    assert c.config.block_m == 256 and c.config.early_epilogue == "staging"
    assert any("where each walker of the grid keeps one m block" in line for line in trace), trace
    assert "walk: 66 clusters over 1408 tiles (22 rounds), 11 rows of m blocks in bands of 16; each walker keeps " \
           "one m block" in trace, trace
    for m, sms in ((1536, 128), (1024, 132)):    # 6 m blocks on 128 CTAs rotate; 4 on 132 are kept, but
        trace = []                                # M <= 1024 is the reason given
        c = choose("fp8_gemm_nt", m, 32768, 512, "NVIDIA H200", sms, trace=trace)
        assert c.config.early_epilogue == "staging"
        assert any("at this M and K" in line for line in trace), trace


def test_early_epilogue_staging_moves_the_staging_but_not_the_store():
    cfg = Fp8GemmConfig(n=256, k=640, block_m=256, block_n=64, stages=3, early_epilogue="staging")
    kern = run_pipeline(lower(cfg), _early_pipeline(), verify_each=True)
    tloop = _tile_loop(kern)
    assert tloop.get("early_staging") == "wave 0 staged during wave 1's last wgmma"
    assert cfg.kernel_name().endswith("_estg")
