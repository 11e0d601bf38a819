"""The cost model of fp8_gemm_nt: which tile config to run when no measured one applies.

`model_seconds` estimates a config's time as the slowest of its tensor-core work (by rounds of tiles
over the SMs), the serial K-block chain of one CTA, DRAM traffic and L2 -> SM traffic, plus launch
latency and any split-K reduction; `choose_config` takes the least over `candidate_configs`.  The
constants are the H200's; bench/TUNING.md records what the model predicted against what was
measured, and `python bench/fit_model.py` refits the fitted ones (ModelParams) on the committed
measurements.  Measured configs (dgir/tuned, DG_AUTOTUNE=1) take precedence over it (dgir/tuning.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from .fp8_gemm import (BLOCK_K, NUM_SMS, Fp8GemmConfig, ceil_div, check, legal_block_ns, max_stages,
                       three_warpgroup_spill)

PEAK_FP8 = 1979e12            # dense e4m3 tensor-core FLOP/s, 132 SMs
HBM_BW = 4.2e12               # copy bandwidth measured in bench/results (bytes read + written per second)
L2_BW = 9.0e12                # L2 -> SM bandwidth that the no-promotion ceiling sustains (calibrated)
# fraction of the tensor-core peak our math loop reaches per (BLOCK_M, BLOCK_N), measured on the H200 at
# M = 4096 with full waves (bench/TUNING.md): e.g. 256x128 reached 1047 TFLOPS at N=7168, K=16384
TC_EFFICIENCY = {(256, 128): 0.53, (256, 112): 0.44, (256, 96): 0.40, (256, 64): 0.33,
                 (128, 128): 0.485, (128, 160): 0.42, (128, 192): 0.41, (128, 144): 0.385, (128, 112): 0.39,
                 (128, 96): 0.36, (128, 64): 0.30}


def tc_efficiency(block_m: int, block_n: int) -> float:
    e = TC_EFFICIENCY.get((block_m, block_n))
    if e is None:   # unmeasured: interpolate on BLOCK_N (smaller tiles pay more issue/promotion overhead)
        e = 0.485 * min(1.0, block_n / 128) ** 0.6 * (0.87 if block_n > 128 else 1.0)
        e *= {64: 0.85, 128: 1.0, 192: 1.0, 256: 1.05}[block_m]
        if 128 % block_n:           # tiles straddling two B-scale blocks pay per-column scale selects
            e *= 0.82
    return e


@dataclass(frozen=True)
class ModelParams:
    """The constants of `model_seconds`, fitted by bench/fit_model.py on 210 measured configs
    (bench/results/raw/tune10-12, the default rows of fp8_gemm_nt.json): geomean error x1.12."""
    launch: float = 6.4e-6            # launch and the first loads' latency
    kb_latency: float = 0.145e-6      # serial cost of one K block in one CTA (wait, wgmma, promote) ...
    kb_latency_per_col: float = 1.7e-9    # ... growing with BLOCK_N
    tile_overhead: float = 0.46e-6    # per wave of tiles: epilogue, tile switch, pipeline refill
    split_fixed: float = 4.5e-6       # split-K: counting in and the reducing CTA's pass over the partials
    split_cluster_fixed: float = 1.0e-6   # split-K over a cluster: push, wait for the slowest slice, reduce
                                      # (traces of bench/TUNING.md step 23: ~0.13 + 0.83 us)
    shared_sm_chain: float = 1.08     # a K-block chain is this much slower when two CTAs share the SM
    multicast_gain: float = 0.03      # tensor-core time saved by multicast at long K (less L2 pressure)


MODEL = ModelParams()
GPC_SMS = ((6, 16), (2, 18))   # (GPCs, SMs each) of the H200's 132 SMs, for cluster residency


def model_seconds(m: int, n: int, k: int, block_m: int, block_n: int, num_sms: int = NUM_SMS,
                  split_k: int = 1, cluster: int = 1, multicast: str = "A", ctas_per_sm: int = 1,
                  params: ModelParams = MODEL, split_reduce: str = "global") -> float:
    """Modelled kernel time: the slowest of tensor-core work (by waves of tiles), the serial K-block
    chain of one CTA (plus a per-wave tile overhead), DRAM traffic (every byte once, plus split-K
    partials) and L2->SM traffic (each tile reads its A and B panels; a multicast operand once per
    cluster), plus launch latency and the split-K reduction (a global workspace pass, or a push
    through a cluster's distributed shared memory)."""
    P = params
    m = max(m, 1)
    kb = ceil_div(k, BLOCK_K) // split_k
    tiles = ceil_div(m, block_m) * ceil_div(n, block_n)
    ctas = tiles * split_k
    slots = num_sms * ctas_per_sm
    waves = ceil_div(ctas, slots)                       # rounds of the persistent loop
    in_cluster = split_k > 1 and split_reduce == "cluster"
    if in_cluster:   # a cluster's CTAs share one GPC: whole clusters per GPC, GPCs as on the H200
        resident = sum(count * (sms * ctas_per_sm // split_k) for count, sms in GPC_SMS)
        waves = ceil_div(tiles, max(1, resident))
    per_sm = PEAK_FP8 / NUM_SMS * tc_efficiency(block_m, block_n)
    t_tc = waves * ctas_per_sm * 2 * block_m * block_n * kb * BLOCK_K / per_sm
    if cluster > 1:
        t_tc *= 1 - P.multicast_gain * min(1.0, k / 7168)
    lat = (P.kb_latency + P.kb_latency_per_col * block_n) * (P.shared_sm_chain if ctas_per_sm > 1 else 1.0)
    t_chain = waves * (kb * lat + P.tile_overhead)
    t_dram = (m * k + n * k + 2 * m * n + (8 * split_k * m * n if split_k > 1 and not in_cluster else 0)) / HBM_BW
    a_rows = block_m / cluster if (cluster > 1 and multicast == "A") else block_m
    b_rows = block_n / cluster if (cluster > 1 and multicast == "B") else block_n
    t_l2 = ctas * kb * BLOCK_K * (a_rows + b_rows) / L2_BW
    t_split = 0.0
    if in_cluster:
        t_split = P.split_cluster_fixed
    elif split_k > 1:   # every CTA writes an FP32 partial; the reducing CTA reads all of its tile's
        t_split = P.split_fixed + ceil_div(tiles, num_sms) * (split_k + 1) * block_m * block_n * 4 / (L2_BW / num_sms)
    return max(t_tc, t_chain, t_dram, t_l2) + P.launch + t_split


def candidate_configs(m: int, n: int, k: int, num_sms: int = NUM_SMS):
    """Every config the chooser considers: BLOCK_M x legal BLOCK_N x (split-K when the tiles do not
    fill the SMs | 2-CTA clusters multicasting A or B when there are several waves | two CTAs per SM
    for 64-row tiles), stages from the shared-memory budget.  Split-K over a cluster is not a
    candidate: model_seconds scores it, but with the model's small-M error (x1.2) it picked
    configs measured 20-70% slower (128x4096 bn128 sk4 o2: 30 us vs 19; bench/TUNING.md step 23);
    the tuned table chooses it where measured."""
    nkb = ceil_div(k, BLOCK_K)
    splits = [s for s in (1, 2, 3, 4, 6, 7, 8) if nkb % s == 0 and nkb // s >= 2] or [1]
    for bm in (64, 128, 192, 256):
        for bn in legal_block_ns(n):
            if bm >= 192 and (bn > 128 or m <= 128):
                continue
            tiles = ceil_div(max(m, 1), bm) * ceil_div(n, bn)
            for occ in ((1, 2) if bm == 64 else (1,)):
                stages = max_stages(bm, bn, ctas_per_sm=occ)
                if stages < (3 if occ == 1 else 2):
                    continue
                for sk in (splits if tiles < num_sms * occ else [1]):
                    if bm == 192 and three_warpgroup_spill(bn, sk):
                        continue
                    yield Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=num_sms,
                                        split_k=sk, ctas_per_sm=occ)
                    if sk == 1 and occ == 1 and tiles >= 2 * num_sms:
                        for mc, rows in (("A", bm), ("B", bn)):
                            cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=num_sms,
                                                cluster=2, multicast=mc)
                            if rows % 16 == 0 and (mc == "B" or cfg.n_blocks % 2 == 0):
                                yield cfg


def config_seconds(m: int, n: int, k: int, cfg: Fp8GemmConfig, params: ModelParams = MODEL) -> float:
    return model_seconds(m, n, k, cfg.block_m, cfg.block_n, cfg.num_sms, cfg.split_k, cfg.cluster, cfg.multicast,
                         cfg.ctas_per_sm, params, cfg.split_reduce)


def choose_config(m: int, n: int, k: int, num_sms: int = NUM_SMS) -> Fp8GemmConfig:
    """The candidate with the least modelled time (ties: no split, one CTA per SM, no cluster, larger
    BLOCK_N, then BLOCK_M)."""
    check(m, n, k)
    return min(candidate_configs(m, n, k, num_sms),
               key=lambda c: (config_seconds(m, n, k, c), c.split_k, c.ctas_per_sm, c.cluster, -c.block_n,
                              -c.block_m))
