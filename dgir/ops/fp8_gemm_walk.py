"""fp8_gemm_nt's persistent walk at a given M: the grid a launch gets, the tiles, rounds and walkers it
covers, the workspace it needs, the one scalar argument the host derives from M (the shifted last
block's row), and what the API settles per call for the config it chose (`settle`: tile order, m
tail, early epilogue; each rule with the measurements behind it)."""
from __future__ import annotations

from dataclasses import replace

from ..ir import Node, Op
from .fp8_gemm_config import BLOCK_K, Fp8GemmConfig, ceil_div
from .stream_k import split as stream_k_split

# m_tail="auto": rows of the last m block below which its tile shifts, per BLOCK_M (bench/TUNING.md step 86).
# Shifted / filled times, spec 173 (57 random shapes): blocks of < 32 rows 0.958 (0.78-1.03; 64, 128 and
# 192-row tiles alike), 32 rows or more 0.999; 256-row tiles (spec oob2): 1.01-1.03 at 1-200 rows (the
# zero-filled rows draw less power at the power limit these tiles run at)
SHIFT_TAIL_BELOW = {64: 32, 128: 32, 192: 32, 256: 0}
# Tiles in clusters that share B along M (c2B): the last block's partner waits for its slow loads, so
# the shift pays further up.  256 rows: up to 64 (spec 181, TUNING step 87: 20 rows 0.83-0.91x the
# filled time, 48-60 rows 0.87-1.04x, 112 rows 1.02x; filled 256-row tiles sharing A were 1-4% faster
# than shifted).  128 rows: up to 96 (step 104: 196x7168x16384 with 68 rows 0.89x, spec 242; 16
# random shapes with 32-88 rows 0.984x, 0.847x at 416x11904x8192, at most 1.007x, spec 243)
SHIFT_TAIL_BELOW_B_PAIRS = {128: 96, 256: 64}
# tiles of 192 or 256 rows and at most 64 columns: A's box is most of what a K block loads, and a box
# of A mostly past M loads slowly, so any partial last block shifts (spec 187: 644x2112x7168 192x64
# with 68 rows 35.3 -> 24.8 us, M = 768's full blocks 24.5; 1908x2112x7168 256x64 c2B with 116 rows
# 74.2 -> 56.6, M = 2048 56.8)
NARROW_SHIFT_MAX_BLOCK_N = 64
# where the API settles early_epilogue to "staging" for 256-row tiles (settle_early_epilogue; bench/TUNING.md
# steps 94-95, 96): at any K up to EARLY_STORE_OFF_MAX_M (specs 194, 196: the early store ran 1.06-1.09x slower at
# 512-1024 x 32768 x 512, the early staging alone 0.97-0.98x), and for tiles of at most EARLY_STORE_SHORT_K_BLOCKS
# K blocks up to EARLY_STORE_OFF_SHORT_K_MAX_M (specs 198-200: 1536x32768x512 1.09x, 1792x32768x512 1.03x with the
# store; from M = 2048 a tie or a gain, and at M = 1792, K = 1536-2048 the store gained 1%); and for tiles of at most
# EARLY_STORE_SHORT_K_BLOCKS K blocks at any M where each walker of the persistent grid keeps one m block
# (walkers_keep_their_m_block; specs 204-207, step 97: 2700-2816x32768x512 1.09x with the store, 4096x32768x512 on
# 128 SMs 1.03x, 1792 on 126 SMs 1.12x; the same M on a grid that rotates gains or ties, and at K = 1536-2048 the
# fixed walk costs the store nothing)
EARLY_STORE_OFF_MAX_M = 1024
EARLY_STORE_OFF_SHORT_K_MAX_M = 1792
EARLY_STORE_SHORT_K_BLOCKS = 4
# the K blocks a tile may have for the early epilogue to act (steps 90-93: no gain measured beyond)
EARLY_EPILOGUE_MAX_K_BLOCKS = 16
# half a round to N_FIRST_MAX_ROUNDS rounds of tiles over at most N_FIRST_MAX_N_BLOCKS n blocks: the API walks
# single CTAs N first (settle_walk_order; spec 256 one round, spec 258 1.5-3.9 rounds, spec 261 4.6-14 rounds; at
# 9-16 n blocks no gain, spec 259, and 32 n blocks 5% slower, spec 253).  The rounds bound is the range spec 261
# drew from (4.2-16): longer walks (M past ~65536 at these widths) are untimed
N_FIRST_MAX_N_BLOCKS = 8
N_FIRST_MAX_ROUNDS = 16


def persistent_grid(m: int, block_m: int, n_blocks: int, split_k: int, num_sms: int, cluster: int = 1,
                    multicast: str = "A", ctas_per_sm: int = 1, split_cluster: bool = False,
                    resident_clusters: int | None = None, stream_k: bool = False) -> int:
    """CTAs of the persistent launch: one per tile up to `ctas_per_sm` per SM; with clusters, whole
    clusters (a cluster walks tiles of the cluster grid, where one cluster tile is `cluster`
    neighbouring tiles along N (multicast of A) or along M (multicast of B)).  With `split_cluster`
    a cluster is the split_k slices of one output tile and walks output tiles, as many clusters as
    are resident at once (`resident_clusters`, from the occupancy query; else the SM slots).  A
    stream-K walk uses every slot, also when there are fewer tiles than slots (it cuts their K)."""
    m_blocks = ceil_div(max(m, 1), block_m)
    if stream_k:
        return cluster * max(1, (num_sms * ctas_per_sm) // cluster)
    if split_cluster:
        slots = resident_clusters or (num_sms * ctas_per_sm) // split_k
        return split_k * max(1, min(m_blocks * n_blocks, slots))
    if cluster == 1:
        return max(1, min(m_blocks * n_blocks * split_k, num_sms * ctas_per_sm))
    return cluster * max(1, min(cluster_tiles(m_blocks, n_blocks, cluster, multicast), num_sms // cluster))


def cluster_tiles(m_blocks: int, n_blocks: int, cluster: int, multicast: str) -> int:
    """Tiles of the grid a persistent walk covers: one cluster tile is `cluster` neighbouring tiles
    along N (multicast of A) or along M (multicast of B)."""
    if cluster == 1:
        return m_blocks * n_blocks
    return m_blocks * (n_blocks // cluster) if multicast == "A" else ceil_div(m_blocks, cluster) * n_blocks


def tail_shift_below(cfg: Fp8GemmConfig) -> int:
    """Rows of the last m block below which its tile shifts up to end at row M (m_tail): 0 never,
    BLOCK_M whenever it reaches past M."""
    return {"fill": 0, "shift": cfg.block_m}.get(cfg.m_tail, shift_rows(cfg))


def shift_rows(cfg: Fp8GemmConfig) -> int:
    """Rows of the last m block below which shifting its tile is the faster kernel (the API's rule,
    settle_m_tail, and m_tail="auto"'s): every partial block for tiles of 192 rows or more and at
    most NARROW_SHIFT_MAX_BLOCK_N columns, SHIFT_TAIL_BELOW_B_PAIRS where a cluster of two shares B
    along M, else SHIFT_TAIL_BELOW by BLOCK_M."""
    if cfg.block_m >= 192 and cfg.block_n <= NARROW_SHIFT_MAX_BLOCK_N:
        return cfg.block_m
    if cfg.cluster > 1 and cfg.multicast == "B" and cfg.block_m in SHIFT_TAIL_BELOW_B_PAIRS:
        return SHIFT_TAIL_BELOW_B_PAIRS[cfg.block_m]
    return SHIFT_TAIL_BELOW.get(cfg.block_m, 0)


def last_m0(m: int, block_m: int) -> int:
    """The first row of the last m block at M = m."""
    return (ceil_div(max(m, 1), block_m) - 1) * block_m


def tail_cap(m: int, block_m: int, below: int) -> int:
    """m_tail at M = m: the highest row a tile inside M may start at.  The last m block's tile moves up
    to end at row M, rounded to a multiple of 4 rows (SFA's box starts at row m0 of its innermost
    dimension, and a TMA box must start on a 16-byte boundary there: 1 to 3 rows may still lie past
    M), not below row 0, and only when fewer than `below` of its rows lie inside M.  Computed by the
    host for each launch (a kernel argument, `launch_scalar`): in the kernel it would lengthen the
    load role's path to its first TMA (spec 175: 64x576x7168 +4%)."""
    last = last_m0(m, block_m)
    up = min((last + block_m - m) // 4 * 4, last) if m - last < below else 0
    return last - up


def settle(cfg: Fp8GemmConfig, m: int) -> Fp8GemmConfig:
    """The kernel a call at M = m runs for a chosen config (dgir.tuning.choose): its tile order,
    m_tail and early epilogue settled for that M, in that order (the order can make a cluster single
    CTAs, which the other two then see)."""
    return settle_early_epilogue(settle_m_tail(settle_walk_order(cfg, m), m), m)


def settle_m_tail(cfg: Fp8GemmConfig, m: int) -> Fp8GemmConfig:
    """The API's m_tail for a call at M = m (dgir.tuning.choose): "shift" where the last m block is
    short enough to move (shift_rows, tail_cap), else "fill"; "shift" stays.  A kernel that
    decides at run time ("auto") lengthened the K loop of 64x32768x512's tiles through ptxas's
    scheduling (1.05x, spec 177), so each call's kernel carries the shift only where it acts."""
    if cfg.m_tail == "shift":
        return cfg
    below = shift_rows(cfg)
    moves = bool(below) and tail_cap(m, cfg.block_m, below) != last_m0(m, cfg.block_m)
    return replace(cfg, m_tail="shift" if moves else "fill")


def settle_walk_order(cfg: Fp8GemmConfig, m: int) -> Fp8GemmConfig:
    """The API's tile order for a call at M = m (dgir.tuning.choose): where single CTAs of the tile
    fill half a round to N_FIRST_MAX_ROUNDS rounds of the SMs over at most N_FIRST_MAX_N_BLOCKS n
    blocks, they walk N first (swizzle_group 1), alone, in place of a multicast cluster.  Launched N
    first, the few CTAs that read one A panel start side by side and stay in step (walker c takes
    tiles c, c + G, ...: in later rounds too, while the tiles cost the same), so L2's request
    coalescer merges their reads (ncu at 5580x384x5632: 3.77M L2 read sectors against 4.52M in the
    M-first order, 4.30M for the B pairs; cuBLAS 2.80M), and the board runs a higher clock at its
    power limit.  Measured against the API's choice before the rule: 0.973x its time over 19
    one-round shapes at N = 256-1024, none slower (0.895-0.998x; spec 256, bench/TUNING.md step 105);
    0.972x over 8 random shapes of 1.5-3.9 rounds, at most 1.011x (spec 258, step 106); 0.981x over 8
    random shapes of 4.6-14 rounds at M 19416-59088, at most 0.993x (spec 261, step 107).  An entry
    with its own order keeps it; split-K, stream-K, 64-row tiles and longer walks keep theirs."""
    tiles = ceil_div(m, cfg.block_m) * cfg.n_blocks
    if (cfg.split_k > 1 or cfg.stream_k or cfg.block_m < 128 or cfg.ctas_per_sm > 1 or cfg.swizzle_group != 16
            or cfg.n_blocks > N_FIRST_MAX_N_BLOCKS
            or not cfg.num_sms // 2 <= tiles <= N_FIRST_MAX_ROUNDS * cfg.num_sms):
        return cfg
    return replace(cfg, cluster=1, multicast="A", swizzle_group=1,
                   m_tail="auto" if cfg.cluster > 1 else cfg.m_tail)    # a pair's tail rule is not a CTA's


def settle_early_epilogue(cfg: Fp8GemmConfig, m: int) -> Fp8GemmConfig:
    """The API's early_epilogue for a call at M = m (dgir.tuning.choose): "staging" (no early store)
    for 256-row tiles of 2-16 K blocks (where the pass acts) where the early store measured slower
    (early_store_loses); elsewhere the store is a tie or a gain (up to 5.4% with the staging, at
    K = 512 from M = 2048 up)."""
    acts = cfg.block_m == 256 and 2 <= cfg.k_blocks_per_split <= EARLY_EPILOGUE_MAX_K_BLOCKS
    if acts and early_store_loses(m, cfg) and cfg.early_epilogue == "on":
        return replace(cfg, early_epilogue="staging")
    return cfg


def early_store_loses(m: int, cfg: Fp8GemmConfig) -> str:
    """Where wave 0's early TMA store measured slower than a late one for a 256-row tile, as the
    reason `dgir choose` reports ("" where it did not): M <= 1024 at any K; for tiles of at most 4 K
    blocks, up to M = 1792, and at any M where each walker keeps one m block
    (walkers_keep_their_m_block: there the store cost 3-12% in every case timed, specs 204-207).
    Below M = 1792 it also loses 1-5% on grids that rotate; what the fixed walk does to the store was
    narrowed, not explained (bench/TUNING.md step 97: every CTA of the walk runs slower, not a few)."""
    short = cfg.k_blocks_per_split <= EARLY_STORE_SHORT_K_BLOCKS
    if m <= EARLY_STORE_OFF_MAX_M or (short and m <= EARLY_STORE_OFF_SHORT_K_MAX_M):
        return "at this M and K"
    if short and walkers_keep_their_m_block(m, cfg):
        return "where each walker of the grid keeps one m block"
    return ""


def walkers_keep_their_m_block(m: int, cfg: Fp8GemmConfig) -> bool:
    """Each walker of the persistent grid (a CTA, or a cluster) works on one m block for the whole walk:
    the walk's rows fit one band of the tile order, where walked tile t has m block t mod rows, and a
    walker steps t by the walker count, a multiple of the rows; and it walks more than one round.
    E.g. 2816 rows of 256-row tiles (11 m blocks) on 66 clusters, or 4096 (16) on 64."""
    walkers, tiles = walk_walkers(m, cfg)
    rows, band = walk_rows(m, cfg)
    global_split = cfg.split_k > 1 and not cfg.split_cluster     # walks K slices: m block (t // split_k) mod rows
    return (rows <= band and walkers % rows == 0 and tiles > walkers
            and not cfg.stream_k and not global_split)


def walk_rows(m: int, cfg: Fp8GemmConfig) -> tuple[int, int]:
    """(rows, band) of the tile order at M = m: the m blocks the walk steps through (pairs of them
    where a cluster of two shares B), and how many of them one band of the L2-friendly order holds."""
    pair_m = cfg.cluster > 1 and cfg.multicast == "B"        # as the walk in lower() pairs tiles
    m_blocks = ceil_div(max(m, 1), cfg.block_m)
    rows = ceil_div(m_blocks, cfg.cluster) if pair_m else m_blocks
    return rows, (max(1, cfg.swizzle_group // cfg.cluster) if pair_m else cfg.swizzle_group)


def launch_scalar(name: str, m: int, attrs: dict) -> int:
    """A u32 kernel argument the host derives from M (Op.DIM with attr derive=name), as the launcher
    and the interpreter compute it."""
    if name == "m_tail_cap":
        return tail_cap(m, attrs["block_m"], attrs["m_tail_below"])
    raise ValueError(f"unknown launch scalar {name!r}")


def walk_rounds(m: int, cfg: Fp8GemmConfig) -> int:
    """Rounds of the persistent walk at M = m: the tiles the walkers cover over the walkers
    (walk_walkers), rounded up.  A measured time scales with it between nearby M
    (dgir.deep_gemm: the measured entries around an M without one)."""
    walkers, tiles = walk_walkers(m, cfg)
    return ceil_div(tiles, max(walkers, 1))


# Clusters of a split over a cluster resident at once, by (SMs, slices, CTAs an SM), as the driver
# answered on an H100 SXM (cuOccupancyMaxActiveClusters; bench/cluster_residency.py,
# raw/cluster_residency_h100_0d153c1.json; bench/TUNING.md step 126; 16 slices: step 127).  A cluster lives in one GPC, so
# the count falls short of num_sms * ctas_per_sm // slices, which the CPU side otherwise assumes, wherever
# a GPC's slots do not divide by the slices: 8 slices at three CTAs an SM hold 45, not 49 (64x2176x7168,
# 46 output tiles, ran 1.19x the two-CTA kernel's time on an H100, spec 315; 44 tiles ran in one round).
# 2-slice clusters fill every slot and are not listed.  The launcher's grid asks the driver per chip;
# this is the CPU side's stand-in for every 132-SM part: the H200 answered the same for every kind
# (raw/cluster_residency_h200_acb271c.json, step 129).
RESIDENT_CLUSTERS_MEASURED = {
    (132, 4, 1): 30, (132, 4, 2): 62, (132, 4, 3): 92, (132, 4, 4): 124,
    (132, 8, 1): 15, (132, 8, 2): 30, (132, 8, 3): 45, (132, 8, 4): 62,
    # non-portable clusters: one per GPC and CTA slot (raw/cluster_residency_h100_9f852f0.json, step 127)
    (132, 16, 1): 7, (132, 16, 2): 14, (132, 16, 3): 21, (132, 16, 4): 28,
    # the other slice counts a split may take (raw/cluster_residency_h100_2d474d1.json, step 132): 3, 5,
    # 6, 7 and 14 fall 6-25% short of the slots too (6 slices, one CTA an SM: 17 clusters, not 22)
    (132, 3, 1): 39, (132, 3, 2): 79, (132, 3, 3): 124, (132, 3, 4): 163,
    (132, 5, 1): 22, (132, 5, 2): 47, (132, 5, 3): 69, (132, 5, 4): 94,
    (132, 6, 1): 17, (132, 6, 2): 39, (132, 6, 3): 62, (132, 6, 4): 79,
    (132, 7, 1): 15, (132, 7, 2): 32, (132, 7, 3): 47, (132, 7, 4): 69,
    (132, 14, 1): 7, (132, 14, 2): 14, (132, 14, 3): 21, (132, 14, 4): 30,
}


def resident_split_clusters(num_sms: int, slices: int, ctas_per_sm: int) -> int:
    """Clusters of `slices` CTAs at `ctas_per_sm` the CPU side counts as resident at once: the measured
    count (RESIDENT_CLUSTERS_MEASURED), else the SM slots over the slices."""
    slots = num_sms * ctas_per_sm // slices
    return min(RESIDENT_CLUSTERS_MEASURED.get((num_sms, slices, ctas_per_sm), slots), slots)


def resident_clusters_estimate(cfg: Fp8GemmConfig) -> int | None:
    """The clusters of `cfg`'s split over a cluster the CPU side counts as resident at once
    (resident_split_clusters); None for a config that is no such split."""
    return resident_split_clusters(cfg.num_sms, cfg.split_k, cfg.ctas_per_sm) if cfg.split_cluster else None


def walk_walkers(m: int, cfg: Fp8GemmConfig) -> tuple[int, int]:
    """(walkers, tiles) of the persistent walk at M = m: CTAs or clusters, and the tiles they cover
    (cluster tiles with multicast; output tiles for a split-K cluster; every K slice of a global split).
    A split over a cluster walks with the clusters measured to be resident (resident_clusters_estimate),
    as the launcher's grid does with the driver's count."""
    m_blocks = ceil_div(max(m, 1), cfg.block_m)
    grid = persistent_grid(m, cfg.block_m, cfg.n_blocks, cfg.split_k, cfg.num_sms, cfg.cluster, cfg.multicast,
                           cfg.ctas_per_sm, cfg.split_cluster, resident_clusters_estimate(cfg), cfg.stream_k)
    if cfg.split_cluster:
        return grid // cfg.split_k, m_blocks * cfg.n_blocks
    if cfg.cluster > 1:
        return grid // cfg.cluster, cluster_tiles(m_blocks, cfg.n_blocks, cfg.cluster, cfg.multicast)
    return grid, m_blocks * cfg.n_blocks * cfg.split_k


def sm_load(m: int, cfg: Fp8GemmConfig) -> float:
    """What the walk at M = m asks of its busiest SM: `walk_rounds`, or with two CTAs per SM, the CTA
    tiles (every K slice of a split) per SM when that is more, since two CTAs sharing an SM each run
    slower: 192 -> 256 CTAs of a split over a cluster is one round both times, but 1.36x the time
    (224 x 1024 x 4096 against M = 192, spec 163).  dgir.tuning scales a measured time by it."""
    rounds = walk_rounds(m, cfg)
    if cfg.ctas_per_sm == 1:
        return rounds
    return max(rounds, ceil_div(max(m, 1), cfg.block_m) * cfg.n_blocks * cfg.split_k / cfg.num_sms)


def on_fewer_sms(cfg: Fp8GemmConfig, m: int, sms: int) -> tuple[Fp8GemmConfig | None, str]:
    """`cfg` (measured on the whole device) for a launch on `sms` of its SMs (deep_gemm.set_num_sms),
    where that changes nothing an SM does: one CTA per SM, whole clusters, and the walk takes as many
    rounds at M = m as on the whole device, so each SM runs the tiles it ran there; else (None, why)."""
    if cfg.ctas_per_sm != 1:
        return None, f"{cfg.ctas_per_sm} CTAs per SM"
    if cfg.stream_k:
        return None, "a stream-K walk"
    width = cfg.split_k if cfg.split_cluster else cfg.cluster
    if sms % width or sms < width:
        return None, f"clusters of {width} CTAs do not divide {sms} SMs"
    fewer = replace(cfg, num_sms=sms)
    before, after = walk_rounds(m, cfg), walk_rounds(m, fewer)
    if after != before:
        return None, f"its walk takes {after} rounds on {sms} SMs, {before} on all"
    return fewer, f"{after} round{'s' * (after != 1)} on either"


def kernel_grid(attrs, m: int) -> int:
    """persistent_grid from a lowered kernel's attributes (launcher, interpreter)."""
    get = attrs.get
    return persistent_grid(m, get("block_m"), ceil_div(get("n"), get("block_n")), get("split_k") or 1,
                           get("num_sms"), get("cluster") or 1, get("multicast") or "A", get("ctas_per_sm") or 1,
                           get("split_reduce") == "cluster", get("resident_clusters"), bool(get("stream_k")))


def workspace_shapes(kernel: Node, m: int, grid: int) -> dict:
    """Shapes of the kernel's workspace params (split-K / stream-K partials, tile counters) for a
    launch with M = m over `grid` CTAs: "PIECES" (stream-K: one BLOCK_M x BLOCK_N plane per piece of
    a cut tile, per CTA of a cluster), "TILES" (counters: every CTA tile a cluster tile may hold,
    also one past an odd last m block) and "M" resolved."""
    get = kernel.get
    C = get("cluster") or 1
    m_blocks, n_blocks = ceil_div(max(m, 1), get("block_m")), ceil_div(get("n"), get("block_n"))
    sizes = {"M": m, "TILES": (m_blocks + C) * n_blocks}
    if get("stream_k"):     # a walker is a CTA or a cluster; a cut tile has one plane per piece and CTA
        tiles = cluster_tiles(m_blocks, n_blocks, C, get("multicast") or "A")
        dp, pieces = stream_k_split(tiles, max(grid // C, 1), ceil_div(get("k"), BLOCK_K))
        sizes["PIECES"] = (tiles - dp) * pieces * C if pieces > 1 else 1
    return {p.name: tuple(sizes.get(d, d) for d in p.type.shape)
            for p in kernel.body if p.op is Op.PARAM and p.get("workspace")}
