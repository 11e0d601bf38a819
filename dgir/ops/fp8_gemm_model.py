"""The cost model of fp8_gemm_nt: which tile config to run when no measured one applies.

`model_seconds` estimates a config's time as the slowest of its tensor-core work (by rounds of tiles
over the SMs), the serial K-block chain of one CTA, DRAM traffic and L2 -> SM traffic, plus launch
latency and any split-K reduction; `choose_config` takes the least over `candidate_configs`.  The
constants are the H200's; bench/TUNING.md records what the model predicted against what was
measured, and `python bench/fit_model.py` refits the fitted ones (ModelParams) on the committed
measurements.  Measured configs (dgir/tuned, DG_AUTOTUNE=1) take precedence over it (dgir/tuning.py).
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, replace

from .fp8_gemm import (BLOCK_K, NUM_SMS, Fp8GemmConfig, ceil_div, check, cluster_tiles, legal_block_ns,
                       max_stages, three_warpgroup_spill)
from .fp8_gemm_config import PROMOTE_MAX_ARMS, jumps_by_default, straddle_splits
from .fp8_gemm_walk import resident_split_clusters

PEAK_FP8 = 1979e12            # dense e4m3 tensor-core FLOP/s, 132 SMs
HBM_BW = 4.2e12               # copy bandwidth measured in bench/results (bytes read + written per second)
FIRST_FIT_MAX_M = 320         # up to here the first fit's constants (FIRST_FIT) apply, above it REFIT's
# fraction of the tensor-core peak the first fit's math loop reached per (BLOCK_M, BLOCK_N), measured at
# M = 4096 with full waves (bench/TUNING.md step 13): e.g. 256x128 reached 1047 TFLOPS at N=7168, K=16384
FIRST_FIT_EFFICIENCY = ((256, 128, 0.53), (256, 112, 0.44), (256, 96, 0.40), (256, 64, 0.33),
                        (128, 128, 0.485), (128, 160, 0.42), (128, 192, 0.41), (128, 144, 0.385), (128, 112, 0.39),
                        (128, 96, 0.36), (128, 64, 0.30))


@dataclass(frozen=True)
class ModelParams:
    """The constants of `model_seconds`, fitted by bench/fit_model.py.  The defaults are the first
    fit (bench/TUNING.md step 13, 210 measured configs of specs 10-12: geomean error x1.12), which
    FIRST_FIT keeps; REFIT is the refit of step 84, for M > FIRST_FIT_MAX_M."""
    launch: float = 6.4e-6            # launch and the first loads' latency
    kb_latency: float = 0.145e-6      # serial cost of one K block in one CTA (wait, wgmma, promote) ...
    kb_latency_per_col: float = 1.7e-9    # ... growing with BLOCK_N
    tile_overhead: float = 0.46e-6    # per wave of tiles: epilogue, tile switch, pipeline refill
    # the tensor-core time of each round after the first, relative to the first's.  1.0: the tile
    # efficiencies average over the rounds they were fitted at (t / model rises ~4% a round for the
    # large tiles, bench/TUNING.md step 108), but 1.05 with the entries rescaled lost 1.245x at a
    # small shape and no value alone improves the fit (step 109, spec 267)
    later_rounds: float = 1.0
    # power: every kernel above M = 320 runs at the ~690 W limit (spec 273).  A last round that keeps
    # only a fraction f of the SMs busy runs at a higher clock: it takes 1 - partial_round_gain * (1 - f)
    # of a full round's tensor-core time ...
    partial_round_gain: float = 0.0
    partial_round_from: int = 2       # ... in walks of this many rounds or more (1: spec 274, see REFIT)
    split_fixed: float = 4.5e-6       # split-K: counting in and the reducing CTA's pass over the partials
    split_cluster_fixed: float = 1.0e-6   # split-K over a cluster: push, wait for the slowest slice, reduce
                                      # (traces of bench/TUNING.md step 23: ~0.13 + 0.83 us)
    shared_sm_chain: float = 1.08     # a K-block chain is this much slower when two CTAs share the SM
    multicast_gain: float = 0.03      # tensor-core time saved by multicast at long K (less L2 pressure)
    l2_bw: float = 9.0e12             # L2 -> SM bandwidth that the no-promotion ceiling sustains (calibrated)
    # the tensor cores' efficiency (fraction of peak) of a tile: measured entries (BLOCK_M, BLOCK_N, e),
    # else tc_scale * (BLOCK_N / 128) ** tc_narrow_exp below 128 columns (narrow tiles pay more issue and
    # promotion per FLOP) * tc_wide (wider, a multiple of 64) or tc_wide_odd (wider, other widths: their
    # B-scale blocks change inside a 64-column panel) * the BLOCK_M factor * tc_straddle (narrower) or
    # tc_straddle_wide (wider) for tiles that straddle two 128-column B-scale blocks (a scale select
    # per column group)
    tc_table: tuple = FIRST_FIT_EFFICIENCY
    tc_scale: float = 0.485
    tc_narrow_exp: float = 0.6
    # per BLOCK_M, ((block_m, cols), ...): a K block's fixed cost in columns' worth of work, in place
    # of the power law for that height: the rate falls as N / (cols + N) below 128 columns (N = 32 /
    # 64 / 128 took 225 / 268 / 355 cycles a 64-row K block with no loads, ~182 + 1.35 N, where the
    # bare wgmmas and promotion take 116 / 154 / 289: bench/TUNING.md step 118).  Empty: the power law
    tc_narrow_cols: tuple = ()
    tc_wide: float = 0.87
    tc_wide_odd: float = 0.87
    tc_block_m: tuple = ((64, 0.85), (128, 1.0), (192, 1.0), (256, 1.05))
    tc_straddle: float = 0.82        # narrower than 128 (48, 80, 96, 104, 112, 120 ...)
    tc_straddle_wide: float = 0.82   # wider than 128, besides tc_wide / tc_wide_odd
    # the time of a tile promote_scales promotes by indexed jumps (fp8_gemm_config.jumps_by_default,
    # step 121) against the per-group selects its entry or the factors above were fitted on, for
    # tiles narrower than 128 columns (tc_jump) and wider (tc_jump_wide): 1.0 rates the jump kernels
    # as the select ones.  Spec 303 (held out, step 122) rejected 0.93 for both (17 of 32 slower:
    # 104 / 112 in place of 128x128 lost); the wider tiles alone await spec 305
    tc_jump: float = 1.0
    tc_jump_wide: float = 1.0
    # (BLOCK_M, BLOCK_N, e) measured on single-CTA tiles (no split-K, no cluster) only: a split or
    # clustered config of such a tile keeps tc_table's entry or the formula
    single_cta_table: tuple = ()
    # 2-CTA multicast clusters are candidates from this many rounds of tiles over the SMs; below it only
    # where N <= narrow_cluster_max_n and K >= narrow_cluster_min_k, for tiles of at least 128x64
    cluster_min_rounds: float = 2.0
    narrow_cluster_max_n: int = 0
    narrow_cluster_min_k: int = 4096
    # ... and up to this N (above narrow_cluster_max_n), clusters multicasting B only, for tiles of at
    # least 128x128
    narrow_b_cluster_max_n: int = 0
    # ... and 128x128 tiles in clusters multicasting B where they fill one round to at least
    # one_round_b_min_fill of the SMs, N <= one_round_b_max_n and K >= one_round_b_min_k
    one_round_b_max_n: int = 0
    one_round_b_min_k: int = 8192
    one_round_b_min_fill: float = 0.85


# M <= FIRST_FIT_MAX_M: the first fit.  Measured configs decide at M <= 128 (the tuned table, step
# 82's carried configs for unmeasured (N, K)); a refit on all M picked 128-row tiles measured up to
# 1.9x slower at small M (step 45), and the carried-config rule is defined by the kinds of pick this
# model makes.  Up to M = 320 the refit below lost up to 1.63x on held-out shapes with 128-row tiles
# where this fit's 64-row ones ran faster (step 84, spec 159).
FIRST_FIT = ModelParams()
# M > FIRST_FIT_MAX_M: refitted in step 84 on 459 timed configs of the current kernels at M > 128 (specs
# 110-157 and the result run), including three rounds of its own picks timed (specs 155-157).  Tiles
# with 8 or more timed configs have their own efficiency entry, the others the formula.  Geomean
# error x1.092 (the first fit: x1.339); the pick 1.006x the best timed config of its shape on average
# (the first fit: 1.066x); on held-out shapes 0.92-0.94x the first fit's picks' time (specs 158-160).
REFIT = ModelParams(launch=5.085e-6, kb_latency=4.774e-8, kb_latency_per_col=1.6e-9, tile_overhead=2.159e-6,
                    split_fixed=8.255e-6, split_cluster_fixed=1.74e-6, shared_sm_chain=1.026, l2_bw=10.35e12,
                    # 128x48: the formula's 0.404 rated it above 128x64, which ran 0.78-0.90x its
                    # time at four narrow-N shapes (spec 267, bench/TUNING.md step 109); held out
                    # where the entry changes the choice (spec 268, 11 shapes) 0.79-0.99x, but
                    # 1.009x / 1.038x at the two where it moves to 128x40 (a tie)
                    tc_table=((128, 48, 0.36),
                              (64, 64, 0.3723), (64, 128, 0.465), (128, 64, 0.4853), (128, 96, 0.5235),
                              (128, 128, 0.6062), (128, 144, 0.5351), (128, 160, 0.5351), (128, 192, 0.5946),
                              (192, 64, 0.5339), (192, 128, 0.6668), (256, 128, 0.6683)),
                    # (no 128x136 entry: step 120 added one at 0.52 for its select-form kernels, which
                    # another tile beat at 30 of 31 shapes; held out on an H100 it was neutral, 0.990x
                    # over 18 shapes, and the kernel it rated is gone: 128x136 now promotes by jumps and
                    # interleaves, 0.90-0.95x its time; spec 298 re-times it on the H200)
                    tc_scale=0.6062, tc_narrow_exp=0.2566, tc_wide=1.223, tc_wide_odd=0.9787,
                    tc_block_m=((64, 0.675), (128, 1.0), (192, 1.04), (256, 1.158)), tc_straddle=0.8569,
                    tc_straddle_wide=0.902,
                    # a narrow tile's K block has a fixed cost (spec 287), which the power law above
                    # missed: every 128x40 timing ran 5-20% over it.  Rated N / (60 + N) instead
                    # (bench/TUNING.md step 118): on two held-out draws of 16 random shapes where it
                    # changes the API's choice 0.942x and 0.943x the time (specs 288-289; 9 of 32
                    # slower, worst 1.169x), behind cuBLAS 3 -> 1; the model's own picks it made
                    # that no spec had timed were the fastest timed at 25 of 41 (spec 290)
                    tc_narrow_cols=((64, 60.0), (128, 60.0), (192, 60.0), (256, 60.0)),
                    # 192x96 on single CTAs: its timings there ran 0.75-0.84x the formula's time (a
                    # 0.502 rating); at 0.56 held out, 14 changed picks 0.80-1.01x the time (specs
                    # 267-268).  Its clusters keep the formula: with 0.6-0.64 for every config they
                    # lost at 17 of 25 picks (spec 265), and at ~3 rounds against 256x128 at ~1.6
                    # even alone 0.60 loses (1.03-1.07x, spec 267), which 0.56 does not pick
                    single_cta_table=((192, 96, 0.56),),
                    # at the power limit a last round that leaves SMs idle runs at higher clocks:
                    # with two rounds and more the committed timings ran 0.87x the model where the
                    # last round was under a quarter full, 0.95x where it was over three quarters
                    # (a single partial round: no trend).  Held out on 16 random shapes where 0.25
                    # changes the choice (spec 275, bench/TUNING.md step 110): 0.981x the time, 13
                    # faster, worst 1.045x; behind cuBLAS 5 -> 1.  At 0.3 for single rounds too:
                    # 1.179x at 952x448x4608 (spec 274)
                    partial_round_gain=0.25,
                    # narrow N: each of a few n blocks re-reads all of A (M x K), which multicast
                    # halves; clusters below two rounds of tiles took 0.970x the time on 16 random
                    # shapes with N <= 512, K >= 4096 (spec 226, bench/TUNING.md step 103; worst
                    # 1.015x), where for every N and tile they took 1.009x (spec 223, worst 1.104x)
                    narrow_cluster_max_n=512,
                    # one round of 128x128 tiles at long K: each CTA streams its whole K panel once,
                    # all SMs at once, and B multicast halves B's L2 reads; held out on 14 random
                    # shapes at N = 576-1024, K >= 8192 (spec 248, step 104): c2B 0.982x the tile
                    # alone (0.911-1.006x); at K = 7168-7680 1.009x (spec 250), at K <= 5120 it
                    # lost (1.02-1.05x, spec 235), and at N = 1088-3840 it gained nothing where the
                    # pairs stay in one round (1.005x over six, spec 249; where an odd count of m
                    # blocks leaves the pairs two rounds, 1.7-1.8x, which the model counts and does
                    # not pick)
                    one_round_b_max_n=1024)
CLUSTER_ROUNDS = True          # multicast clusters: rounds of cluster tiles (False: of single tiles, before step 85)


# 128 < M <= 192: one 192-row m block holds every row where 128-row tiles need a second, mostly empty
# one.  The first fit has no 192-row measurement (its formula rates 192x64 like 128x64, 0.30-0.32), so
# it kept 128x128 there, measured up to 1.5x slower than 192x64 (spec 157: 160x7680x7680 40.9 us
# against 27.0; spec 214: 176x7552x11776 54.7 against cuBLAS's 43.9).  These entries are the refit's
# 192-row efficiencies relative to its 128x128 (0.881x, 1.100x), scaled to the first fit's 128x128
# (bench/TUNING.md step 102), for single-CTA tiles: with them for every config the model also
# picked 192-row global splits no spec had timed (the chooser then replaced them by carried configs,
# 5% slower than the first fit's picks at 172x3520x10240, spec 216) and 192x64 in clusters of two,
# 0.73-0.99x as fast as the same tile alone at ten shapes (spec 217).  Above M = 192 a 192-row tile
# needs two m blocks and the first fit stands.  192x72, 192x80 and 192x88 (step 103): the first fit's
# formula rated them 0.28-0.32, below 64x128 two per SM, which it then picked although every committed
# shape that timed both ran a 192-row tile 1-18% faster (144x10240x4608 192x80 23.2 us, 64x128 o2
# 28.2); at 0.42, the value that left the least regret over the band's committed timings, held out on
# 16 random shapes (spec 221) they took 0.927x the time (worst 1.060x at 172x10688x1024, 11 us).  192x96
# at 0.44 in place of 192x64 / 192x128: 0.952x the time on 16 more (spec 224, worst 1.035x).
ONE_BLOCK_192_MAX_M = 192
ONE_BLOCK_192 = replace(FIRST_FIT, single_cta_table=((192, 64, 0.427), (192, 128, 0.534), (192, 72, 0.42),
                                                     (192, 80, 0.42), (192, 88, 0.42), (192, 96, 0.44)))


def params_for(m: int) -> ModelParams:
    if m > FIRST_FIT_MAX_M:
        return REFIT
    return ONE_BLOCK_192 if 128 < m <= ONE_BLOCK_192_MAX_M else FIRST_FIT


def tc_efficiency(block_m: int, block_n: int, params: ModelParams = FIRST_FIT, split_k: int = 1,
                  cluster: int = 1) -> float:
    e = _tc_efficiency(block_m, block_n, params, split_k, cluster)
    gain = params.tc_jump_wide if block_n > 128 else params.tc_jump
    if gain != 1.0 and len(straddle_splits(block_n)) > PROMOTE_MAX_ARMS and jumps_by_default(block_m, block_n):
        e /= gain
    return e


def _tc_efficiency(block_m: int, block_n: int, params: ModelParams, split_k: int, cluster: int) -> float:
    single = params.single_cta_table if split_k == 1 and cluster == 1 else ()
    for bm, bn, e in single + params.tc_table:
        if (bm, bn) == (block_m, block_n):
            return e
    P = params
    cols = dict(P.tc_narrow_cols).get(block_m, 0.0)
    if cols and block_n < 128:
        e = P.tc_scale * block_n / 128 * (cols + 128) / (cols + block_n)
    else:
        e = P.tc_scale * min(1.0, block_n / 128) ** P.tc_narrow_exp
    if block_n > 128:
        e *= P.tc_wide if block_n % 64 == 0 else P.tc_wide_odd
    e *= dict(P.tc_block_m)[block_m]
    if 128 % block_n:           # tiles straddling two B-scale blocks pay per-column scale selects
        e *= P.tc_straddle_wide if block_n > 128 else P.tc_straddle
    return e


def model_seconds(m: int, n: int, k: int, block_m: int, block_n: int, num_sms: int = NUM_SMS,
                  split_k: int = 1, cluster: int = 1, multicast: str = "A", ctas_per_sm: int = 1,
                  params: ModelParams | None = None, split_reduce: str = "global") -> float:
    """Modelled kernel time: the slowest of tensor-core work (by waves of tiles), the serial K-block
    chain of one CTA (plus a per-wave tile overhead), DRAM traffic (every byte once, plus split-K
    partials) and L2->SM traffic (each tile reads its A and B panels; a multicast operand once per
    cluster), plus launch latency and the split-K reduction (a global workspace pass, or a push
    through a cluster's distributed shared memory)."""
    P = params or params_for(m)
    m = max(m, 1)
    kb = ceil_div(k, BLOCK_K) // split_k
    tiles = ceil_div(m, block_m) * ceil_div(n, block_n)
    ctas = tiles * split_k
    slots = num_sms * ctas_per_sm
    work, places = ctas, slots                          # what the persistent loop walks, and over how many
    in_cluster = split_k > 1 and split_reduce == "cluster"
    if cluster > 1 and CLUSTER_ROUNDS:   # the walk covers cluster tiles, one per cluster: with B shared
        # along M an odd count of m blocks leaves half of the last pair idle (spec 169: 2372x1856x6144,
        # 192x64 c2B, 13 m blocks, 4 rounds where the tiles alone make 3: 95.8 us, modelled 60.2)
        work = cluster_tiles(ceil_div(m, block_m), ceil_div(n, block_n), cluster, multicast)
        places = max(1, num_sms // cluster)
    if in_cluster:   # a cluster's CTAs share one GPC: the clusters the driver answered resident
        work, places = tiles, max(1, resident_split_clusters(num_sms, split_k, ctas_per_sm))
    waves = ceil_div(work, places)                      # rounds of the persistent loop
    last_fill = (work - (waves - 1) * places) / places
    per_sm = PEAK_FP8 / NUM_SMS * tc_efficiency(block_m, block_n, P, split_k, cluster)
    t_round = ctas_per_sm * 2 * block_m * block_n * kb * BLOCK_K / per_sm
    t_tc = t_round * (waves - (P.partial_round_gain * (1 - last_fill) if waves >= P.partial_round_from else 0.0))
    if P.later_rounds != 1.0:
        t_tc *= (1 + (waves - 1) * P.later_rounds) / waves
    if cluster > 1:
        t_tc *= 1 - P.multicast_gain * min(1.0, k / 7168)
    lat = (P.kb_latency + P.kb_latency_per_col * block_n) * (P.shared_sm_chain if ctas_per_sm > 1 else 1.0)
    t_chain = waves * (kb * lat + P.tile_overhead)
    t_dram = (m * k + n * k + 2 * m * n + (8 * split_k * m * n if split_k > 1 and not in_cluster else 0)) / HBM_BW
    a_rows = block_m / cluster if (cluster > 1 and multicast == "A") else block_m
    b_rows = block_n / cluster if (cluster > 1 and multicast == "B") else block_n
    t_l2 = ctas * kb * BLOCK_K * (a_rows + b_rows) / P.l2_bw
    t_split = 0.0
    if in_cluster:
        t_split = P.split_cluster_fixed
    elif split_k > 1:   # every CTA writes an FP32 partial; the reducing CTA reads all of its tile's
        t_split = P.split_fixed + ceil_div(tiles, num_sms) * (split_k + 1) * block_m * block_n * 4 / (P.l2_bw / num_sms)
    return max(t_tc, t_chain, t_dram, t_l2) + P.launch + t_split


def candidate_configs(m: int, n: int, k: int, num_sms: int = NUM_SMS, params: ModelParams | None = None,
                      one_cta_per_sm: bool = False):
    """Every config the chooser considers: BLOCK_M x legal BLOCK_N x (split-K when the tiles do not
    fill the SMs | 2-CTA clusters multicasting A or B from `cluster_min_rounds` rounds of tiles, and
    below it at narrow N and long K, and B-multicast 128x128 pairs in one full round at long K | two
    CTAs per SM for 64-row tiles), stages from the shared-memory budget.  Split-K over a cluster is not
    a candidate: model_seconds scores it, but with the model's small-M error (x1.2) it picked configs
    measured 20-70% slower (128x4096 bn128 sk4 o2: 30 us vs 19; bench/TUNING.md step 23), and the
    refit (step 84) would pick it, with shallow rings, at 11 of 84 coverage shapes where no such config
    was ever timed; the tuned table chooses it where measured.  `one_cta_per_sm`: no two-CTA-per-SM
    configs (a launch limited to `num_sms` of the device's SMs: two per SM could spread over twice as
    many); clusters only where they divide `num_sms` (whole clusters fill the persistent grid).

    M enters only through the m blocks of each BLOCK_M, so the list is built once per (those blocks,
    N, K, SMs, constants): a new M of a block already seen costs no enumeration (~0.5 ms of a ~1.1 ms
    cold choice off the tuned table, step 125)."""
    P = params or params_for(m)
    m_blocks = tuple(ceil_div(max(m, 1), bm) for bm in CANDIDATE_BLOCK_MS)
    return _candidates(m_blocks, n, k, num_sms, P, one_cta_per_sm)


CANDIDATE_BLOCK_MS = (64, 128, 192, 256)


@functools.lru_cache(maxsize=512)
def _candidates(m_blocks: tuple, n: int, k: int, num_sms: int, P: ModelParams, one_cta_per_sm: bool) -> tuple:
    return tuple(_enumerate(dict(zip(CANDIDATE_BLOCK_MS, m_blocks)), n, k, num_sms, P, one_cta_per_sm))


def _enumerate(m_blocks: dict, n: int, k: int, num_sms: int, P: ModelParams, one_cta_per_sm: bool):
    small_m = m_blocks[64] <= 2                          # M <= 128
    cluster_min_tiles = P.cluster_min_rounds * num_sms
    narrow = n <= P.narrow_cluster_max_n and k >= P.narrow_cluster_min_k
    narrow_b = n <= P.narrow_b_cluster_max_n and k >= P.narrow_cluster_min_k
    one_round_b = n <= P.one_round_b_max_n and k >= P.one_round_b_min_k
    nkb = ceil_div(k, BLOCK_K)
    splits = [s for s in (1, 2, 3, 4, 6, 7, 8) if nkb % s == 0 and nkb // s >= 2] or [1]
    for bm in CANDIDATE_BLOCK_MS:
        for bn in legal_block_ns(n):
            if bm >= 192 and (bn > 128 or small_m):
                continue
            tiles = m_blocks[bm] * ceil_div(n, bn)
            for occ in ((1, 2) if bm == 64 and not one_cta_per_sm else (1,)):
                stages = max_stages(bm, bn, ctas_per_sm=occ)
                if stages < (3 if occ == 1 else 2):
                    continue
                # split-K fills the SMs: one round of split CTAs at most (the 19 shapes a global split
                # won were all one round; 20 timed multi-round ones ran 2.1x the best, step 84)
                for sk in [s for s in splits if s == 1 or tiles * s <= num_sms * occ]:
                    if bm == 192 and three_warpgroup_spill(bn, sk):
                        continue
                    yield Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=num_sms,
                                        split_k=sk, ctas_per_sm=occ)
                    clustered = tiles >= cluster_min_tiles or (narrow and bm >= 128 and bn >= 64)
                    b_only = not clustered and ((narrow_b and bm >= 128 and bn >= 128) or (
                        one_round_b and (bm, bn) == (128, 128) and P.one_round_b_min_fill * num_sms <= tiles <= num_sms))
                    if sk == 1 and occ == 1 and (clustered or b_only) and num_sms % 2 == 0:
                        for mc, rows in (("A", bm), ("B", bn))[b_only:]:
                            cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=num_sms,
                                                cluster=2, multicast=mc)
                            if rows % 16 == 0 and (mc == "B" or cfg.n_blocks % 2 == 0):
                                yield cfg


def config_seconds(m: int, n: int, k: int, cfg: Fp8GemmConfig, params: ModelParams | None = None) -> float:
    return model_seconds(m, n, k, cfg.block_m, cfg.block_n, cfg.num_sms, cfg.split_k, cfg.cluster, cfg.multicast,
                         cfg.ctas_per_sm, params, cfg.split_reduce)


def choose_config(m: int, n: int, k: int, num_sms: int = NUM_SMS, one_cta_per_sm: bool = False) -> Fp8GemmConfig:
    """The candidate with the least modelled time under `params_for(m)` (ties: no split, one CTA per
    SM, no cluster, larger BLOCK_N, then BLOCK_M)."""
    check(m, n, k)
    return least(m, n, k, num_sms, params_for(m), one_cta_per_sm)


def least(m, n, k, num_sms: int, params: ModelParams, one_cta_per_sm: bool = False) -> Fp8GemmConfig:
    return min(candidate_configs(m, n, k, num_sms, params, one_cta_per_sm),
               key=lambda c: (config_seconds(m, n, k, c, params), c.split_k, c.ctas_per_sm, c.cluster, -c.block_n,
                              -c.block_m))
