"""Split-K over a cluster (split_reduce="cluster"): config rules, the launch grid, and the PTX (the
interpreter checks of the protocol are in test_pipeline_interp.py; the H200 run in test_gpu_fp8.py)."""
import re
import shutil

import pytest
from dgir_testlib import bench_module

from dgir.compiler import compile
from dgir.ops.fp8_gemm import Fp8GemmConfig, OpError, check_config, persistent_grid


@pytest.mark.parametrize("kw,msg", [
    (dict(split_reduce="dsmem"), "split_reduce must be 'global' or 'cluster'"),
    (dict(split_k=28), "split_k <= 16"),    # sm_90's largest cluster
    (dict(block_m=256), "block_m in (64, 128)"),
    (dict(block_m=192), "block_m in (64, 128)"),
    (dict(cluster=2), "needs split_k=1"),     # multicast clusters and split-K do not mix
])
def test_bad_cluster_split_configs_are_rejected(kw, msg):
    base = dict(n=576, k=7168, block_m=64, block_n=32, stages=4, split_k=7, split_reduce="cluster")
    with pytest.raises(OpError, match=re.escape(msg)):
        check_config(Fp8GemmConfig(**{**base, **kw}))


def test_grid_is_whole_clusters_of_slices_never_more_than_resident():
    # 64x576 with BN 32: 18 output tiles, 7 slices each
    assert persistent_grid(64, 64, 18, 7, 132, ctas_per_sm=2, split_cluster=True) == 7 * 18
    assert persistent_grid(64, 64, 18, 7, 132, ctas_per_sm=1, split_cluster=True) == 7 * 18
    assert persistent_grid(64, 64, 18, 7, 132, ctas_per_sm=2, split_cluster=True, resident_clusters=12) == 7 * 12
    assert persistent_grid(1, 64, 1, 4, 132, split_cluster=True) == 4


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="needs ptxas")
@pytest.mark.parametrize("bm,bn,sk,stages,occ", [(64, 32, 7, 8, 1), (64, 32, 7, 6, 2), (64, 64, 4, 8, 1), (64, 64, 8, 8, 1),
                                                (64, 128, 8, 6, 1), (128, 48, 8, 8, 1), (128, 64, 4, 7, 1), (128, 128, 4, 4, 1),
                                                (64, 32, 14, 4, 3), (64, 64, 14, 4, 2), (128, 32, 14, 4, 1)])
def test_cluster_split_ptx_assembles_without_spills(bm, bn, sk, stages, occ):
    """Two math warpgroups (128-row tiles) each push and reduce their own 64-row fragment: the PTX
    holds one copy of the exchange, indexed by the warpgroup."""
    cfg = Fp8GemmConfig(n=576, k=7168, block_m=bm, block_n=bn, stages=stages, split_k=sk, split_reduce="cluster",
                        ctas_per_sm=occ)
    r = compile("fp8_gemm_nt", m=64, n=576, k=7168, config=cfg)
    assert r.resources.spill_stores == 0 and r.resources.spill_loads == 0
    assert f".reqnctapercluster {sk}, 1, 1" in r.ptx
    pairs = bn // 4
    assert r.ptx.count("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32") == pairs   # one push per pair
    assert r.ptx.count("ld.shared.v2.f32") == sk * -(-pairs // sk)          # S local reads per pair slot
    assert "ld.shared::cluster" not in r.ptx                                # the reducer reads its own smem
    assert "W" not in {p.name for p in r.ir.body if p.op.value == "param"}   # no global workspace
    assert r.name.endswith(f"_sk{sk}dsm" + (f"_o{occ}" if occ > 1 else ""))


def test_kernel_name_round_trips_through_the_measured_config_parser():
    config_of = bench_module("fit_model").config_of
    cfg = Fp8GemmConfig(n=576, k=7168, block_m=64, block_n=32, stages=6, split_k=7, split_reduce="cluster", ctas_per_sm=2)
    assert config_of(cfg.kernel_name()) == cfg
    assert config_of(Fp8GemmConfig(n=576, k=7168, block_m=64, block_n=32, stages=6, split_k=7).kernel_name()).split_reduce == "global"
