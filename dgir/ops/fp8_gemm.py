"""fp8_gemm_nt: D[M, N] (bf16) = (A[M, K] * SFA) @ (B[N, K] * SFB)^T, DeepGEMM's SM90 1D2D recipe.

A, B are e4m3 and K-major.  SFA is f32 per (row, 128-wide K block), stored MN-major as
[ceil(K/128), align(M, 4)] (DeepGEMM's TMA-aligned layout) or, with sfa_major="k", read in place as
the [M, ceil(K/128)] row-major tensor quantisation gives; SFB is f32 per 128x128 block of B,
[ceil(N/128), ceil(K/128)].  N, K and the tile config are compiled in; M is read at run time.

The lowered IR states the algorithm, not the Hopper tricks: the mma role issues one
`mma_scaled` per 128-wide K block (acc += (A_blk @ B_blk^T) * sfa[row] * sfb[n block]).  The passes
turn that into tensor-core MMAs into a partial accumulator plus FP32 promotion, pipeline it and
place the promotion FFMAs (passes/promote_scales.py, passes/interleave_ffma.py, ...).
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import asdict, dataclass, replace

from ..builder import Builder
from ..ir import DType, Node, Op, Type
from ..verifier import smem_budget
from . import OpError, Operator, register_operator, stream_k
from .stream_k import split as stream_k_split

BLOCK_K = 128                    # one FP8 scale block along K
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
NUM_SMS = 132                    # H200


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def align(a: int, b: int) -> int:
    return ceil_div(a, b) * b


# the values of Fp8GemmConfig.math_order and the kernel-name suffix of each
MATH_ORDERS = {"together": "", "alternate": "_alt", "pingpong": "_pp"}
# Fp8GemmConfig fields left out of key() at their default
LATE_FIELDS = {"stream_k": False, "promotion": "fp32", "staging": "tile", "m_tail": "fill",
               "early_epilogue": "on", "sfa_major": "mn"}
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


@dataclass(frozen=True)
class Fp8GemmConfig:
    n: int
    k: int
    block_m: int = 128           # 64, 128, 192: 64 rows per math warpgroup; 256: two 64-row waves
                                 # on each of two math warpgroups
    block_n: int = 128           # multiple of 8, wgmma N
    stages: int = 4
    num_sms: int = NUM_SMS
    swizzle_group: int = 16      # m blocks per L2 band of the persistent tile order
    split_k: int = 1             # K slices per output tile, reduced deterministically (fixed order)
    epilogue: str = "tma"        # "tma": bf16 tile staged in shared memory + TMA store; "direct":
                                 # bf16 pairs stored from registers (frees the staging tile for stages)
    cluster: int = 1             # CTAs per cluster (1, 2 or 4): the CTAs of a cluster compute
                                 # neighbouring tiles that share one operand panel
    multicast: str = "A"         # the shared operand: "A" (CTAs group along N, same m block) or "B"
                                 # (along M); the multicast_tma pass loads it once per cluster
    ctas_per_sm: int = 1         # 2: two CTAs share each SM (half the registers and shared memory
                                 # each), so two K-block chains run side by side: for small M, where
                                 # one CTA's serial chain (wait, wgmma, promote) is the bottleneck
    split_reduce: str = "global"  # split-K: "global": FP32 partials in a global workspace, the last
                                 # slice's CTA sums them; "cluster": the split_k slices of a tile run as
                                 # one cluster and sum each other's partials from shared memory (DSMEM)
    math_order: str = "together"  # "alternate": the math warpgroups take turns (in a ring) issuing their wgmma
                                 # groups (order_wgmma_issue pass), so one promotes while the other's
                                 # group runs; "pingpong": the turn passes only when the group retired;
                                 # "together": each issues as soon as its operands are ready
    stream_k: bool = False       # the persistent walk ends in a stream-K region: whole rounds of tiles,
                                 # then the partial round's tiles cut into equal K pieces over every
                                 # walker (summed through a global workspace in a fixed order;
                                 # dgir/ops/stream_k.py; opt-in: slower so far, TUNING.md step 36)
    promotion: str = "fp32"      # "fp32": each K block's wgmma into a fresh partial, promoted into the
                                 # FP32 accumulator by FFMAs (DeepGEMM's two-level accumulation);
                                 # "rescaled" (opt-in): the tensor-core accumulator runs over all of K,
                                 # holding acc / s_k, and is multiplied by s_(k-1) / s_k before each K
                                 # block (passes/rescale_accumulator.py): no partial tile, so a 64x256
                                 # warpgroup tile fits; FP8 tensor-core accumulation over all of K,
                                 # and the scales must be finite and non-zero (TUNING.md step 64)
    staging: str = "tile"        # where the TMA epilogue stages D: "tile": its own shared-memory tile;
                                 # "ring" (opt-in): the ring slot of the tile's last K block, which the
                                 # math warpgroups keep until the TMA store has read it (pass
                                 # stage_in_ring_slot), so the tile's bytes become one more ring stage.
                                 # Fits 64-row tiles, 128x64 and 128x128 (ring_staging_panels)
    m_tail: str = "fill"         # the last m block when BLOCK_M does not divide M: "fill": its tile
                                 # reaches past row M (TMA zero-fills A's and SFA's missing rows, the
                                 # store clips them); "shift": the tile moves up to end at row M, over
                                 # rows of the block before it (to a multiple of 4 rows: at most 3 rows
                                 # past M), so its loads stay (almost) inside A.  Both tiles compute the
                                 # shared rows with the same operands in the same order: the same bits.
                                 # "auto": the kernel decides at run time, shifting a block of fewer than
                                 # SHIFT_TAIL_BELOW rows.  The API settles it for each call's M instead
                                 # (settle_m_tail): its kernels carry the shift only where it acts.
                                 # TUNING.md step 86: a block of a few rows loads slowly
                                 # (577x12416x5632 192x128 +23%, 388x1600x12288 128x64 +28%); zero rows
                                 # draw less power (769x7168x7168 256x128 fills 3% faster)
    early_epilogue: str = "on"   # two-wave tiles (BLOCK_M 256) of 2-16 K blocks: "on": wave 0's staging and
                                 # TMA store run under wave 1's last wgmma (pass stage_first_wave_early);
                                 # "staging": its staging only; "off": the plain epilogue.  The API
                                 # settles it per call (settle_early_epilogue)
    sfa_major: str = "mn"        # how the kernel reads SFA: "mn": [ceil(K/128), align(M, 4)] MN-major, one
                                 # 4-byte scale per row and K block (DeepGEMM's TMA-aligned layout), a TMA
                                 # box per ring stage; "k": the caller's contiguous [M, ceil(K/128)]
                                 # row-major tensor in place, no transpose kernel before the GEMM: each
                                 # math thread loads its rows' scale of the K block itself (ld.global,
                                 # cached in L1, where one 128-byte line holds 32 K blocks of a row).
                                 # TUNING.md step 114 measures it; step 113's first form read 16-byte
                                 # TMA boxes of four K blocks per stage instead (up to 2.6x slower)

    @property
    def math_wgs(self) -> int:
        """Math warpgroups: one per 64 rows up to three (BLOCK_M 192: 512 threads, ~152 registers
        each); BLOCK_M 256 has two, each computing two waves (a third and fourth warpgroup would
        leave 120 registers: not enough for a 64x128 accumulator and its partial)."""
        return 2 if self.block_m == 256 else self.block_m // 64

    @property
    def waves(self) -> int:
        """64-row slices each math warpgroup computes one after another (BLOCK_M 256: two waves,
        sharing one partial accumulator, as DeepGEMM's WAVE_BLOCK_M)."""
        return self.block_m // (64 * self.math_wgs)

    @property
    def threads(self) -> int:
        return 128 * (self.math_wgs + 1)

    @property
    def k_blocks(self) -> int:
        return ceil_div(self.k, BLOCK_K)

    @property
    def n_blocks(self) -> int:
        return ceil_div(self.n, self.block_n)

    def as_dict(self) -> dict:
        """The fields, less those added after the first tables while they hold their default: the
        keys (dump names, caches) and table entries of the configs that existed before them stay
        the same."""
        return {k: v for k, v in asdict(self).items() if not (k in LATE_FIELDS and v == LATE_FIELDS[k])}

    def key(self) -> str:
        return hashlib.sha256(repr(sorted(self.as_dict().items())).encode()).hexdigest()[:8]

    @property
    def k_blocks_per_split(self) -> int:
        return self.k_blocks // self.split_k

    @property
    def split_cluster(self) -> bool:
        """The K slices of a tile form one cluster and reduce over distributed shared memory."""
        return self.split_k > 1 and self.split_reduce == "cluster"

    def kernel_name(self) -> str:
        """The config spelled out (every field but num_sms); from_kernel_name reads it back."""
        split = f"_sk{self.split_k}{'dsm' if self.split_cluster else ''}" if self.split_k > 1 else ""
        cl = f"_c{self.cluster}{self.multicast}" if self.cluster > 1 else ""
        occ = f"_o{self.ctas_per_sm}" if self.ctas_per_sm > 1 else ""
        order = f"_g{self.swizzle_group}" if self.swizzle_group != 16 else ""     # bands of the tile order
        mark = {f: NAME_SUFFIXES[f].get(getattr(self, f), "") for f in NAME_SUFFIXES}
        return (f"fp8_gemm_nt_n{self.n}_k{self.k}_bm{self.block_m}_bn{self.block_n}_s{self.stages}"
                f"{split}{mark['stream_k']}{mark['epilogue']}{cl}{occ}{mark['math_order']}{mark['promotion']}"
                f"{mark['staging']}{order}{mark['m_tail']}{mark['early_epilogue']}{mark['sfa_major']}")

    @staticmethod
    def from_kernel_name(name: str, legacy_m_tail: str = "fill") -> "Fp8GemmConfig | None":
        """The config a kernel name spells (None if it is not one), num_sms left at its default.
        `legacy_m_tail`: what a name without an m_tail suffix meant when it was written (result files
        of the revisions whose default m_tail was "auto", bench/fit_model.py)."""
        g = _KERNEL_NAME.fullmatch(name)
        if g is None:
            return None
        read = {f: {suffix: value for value, suffix in NAME_SUFFIXES[f].items()}.get(g[f] or "", _DEFAULTS[f])
                for f in NAME_SUFFIXES}
        if not g["m_tail"]:
            read["m_tail"] = legacy_m_tail
        return Fp8GemmConfig(n=int(g["n"]), k=int(g["k"]), block_m=int(g["bm"]), block_n=int(g["bn"]),
                             stages=int(g["s"]), split_k=int(g["split_k"] or 1),
                             split_reduce="cluster" if g["dsm"] else "global",
                             cluster=int(g["cluster"] or 1), multicast=g["multicast"] or "A",
                             ctas_per_sm=int(g["occ"] or 1), swizzle_group=int(g["g"] or 16), **read)


# the kernel-name suffix of each value of the fields that take one of a few (a field's default has
# none); "_tfill" is m_tail="fill" as result files of the revisions whose default was "auto" spell it
NAME_SUFFIXES = {
    "stream_k": {True: "_stk"},
    "epilogue": {"direct": "_direct"},
    "math_order": {o: suffix for o, suffix in MATH_ORDERS.items() if suffix},
    "promotion": {"rescaled": "_rs"},
    "staging": {"ring": "_dring"},
    "m_tail": {"shift": "_tsh", "auto": "_tauto"},
    "early_epilogue": {"off": "_late", "staging": "_estg"},
    "sfa_major": {"k": "_sfk"},
}
_DEFAULTS = {f: Fp8GemmConfig.__dataclass_fields__[f].default for f in NAME_SUFFIXES}


def _one_of(field: str, extra: tuple = ()) -> str:
    return f"(?P<{field}>{'|'.join(tuple(NAME_SUFFIXES[field].values()) + extra)})?"


_KERNEL_NAME = re.compile(
    r"fp8_gemm_nt_n(?P<n>\d+)_k(?P<k>\d+)_bm(?P<bm>\d+)_bn(?P<bn>\d+)_s(?P<s>\d+)"
    r"(?:_sk(?P<split_k>\d+)(?P<dsm>dsm)?)?" + _one_of("stream_k") + _one_of("epilogue")
    + r"(?:_c(?P<cluster>\d)(?P<multicast>[AB]))?(?:_o(?P<occ>\d))?" + _one_of("math_order") + _one_of("promotion")
    + _one_of("staging") + r"(?:_g(?P<g>\d+))?" + _one_of("m_tail", ("_tfill",)) + _one_of("early_epilogue")
    + _one_of("sfa_major"))


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


def tail_shift_below(cfg: "Fp8GemmConfig") -> int:
    """Rows of the last m block below which its tile shifts up to end at row M (m_tail): 0 never,
    BLOCK_M whenever it reaches past M."""
    return {"fill": 0, "shift": cfg.block_m}.get(cfg.m_tail, shift_rows(cfg))


def shift_rows(cfg: "Fp8GemmConfig") -> int:
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


def settle(cfg: "Fp8GemmConfig", m: int) -> "Fp8GemmConfig":
    """The kernel a call at M = m runs for a chosen config (dgir.tuning.choose): its tile order,
    m_tail and early epilogue settled for that M, in that order (the order can make a cluster single
    CTAs, which the other two then see)."""
    return settle_early_epilogue(settle_m_tail(settle_walk_order(cfg, m), m), m)


def settle_m_tail(cfg: "Fp8GemmConfig", m: int) -> "Fp8GemmConfig":
    """The API's m_tail for a call at M = m (dgir.tuning.choose): "shift" where the last m block is
    short enough to move (shift_rows, tail_cap), else "fill"; "shift" stays.  A kernel that
    decides at run time ("auto") lengthened the K loop of 64x32768x512's tiles through ptxas's
    scheduling (1.05x, spec 177), so each call's kernel carries the shift only where it acts."""
    if cfg.m_tail == "shift":
        return cfg
    below = shift_rows(cfg)
    moves = bool(below) and tail_cap(m, cfg.block_m, below) != last_m0(m, cfg.block_m)
    return replace(cfg, m_tail="shift" if moves else "fill")


def settle_walk_order(cfg: "Fp8GemmConfig", m: int) -> "Fp8GemmConfig":
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


def settle_early_epilogue(cfg: "Fp8GemmConfig", m: int) -> "Fp8GemmConfig":
    """The API's early_epilogue for a call at M = m (dgir.tuning.choose): "staging" (no early store)
    for 256-row tiles of 2-16 K blocks (where the pass acts) where the early store measured slower
    (early_store_loses); elsewhere the store is a tie or a gain (up to 5.4% with the staging, at
    K = 512 from M = 2048 up)."""
    acts = cfg.block_m == 256 and 2 <= cfg.k_blocks_per_split <= EARLY_EPILOGUE_MAX_K_BLOCKS
    if acts and early_store_loses(m, cfg) and cfg.early_epilogue == "on":
        return replace(cfg, early_epilogue="staging")
    return cfg


def early_store_loses(m: int, cfg: "Fp8GemmConfig") -> str:
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


def walkers_keep_their_m_block(m: int, cfg: "Fp8GemmConfig") -> bool:
    """Each walker of the persistent grid (a CTA, or a cluster) works on one m block for the whole walk:
    the walk's rows fit one band of the tile order, where walked tile t has m block t mod rows, and a
    walker steps t by the walker count, a multiple of the rows; and it walks more than one round.
    E.g. 2816 rows of 256-row tiles (11 m blocks) on 66 clusters, or 4096 (16) on 64."""
    walkers, tiles = walk_walkers(m, cfg)
    rows, band = walk_rows(m, cfg)
    global_split = cfg.split_k > 1 and not cfg.split_cluster     # walks K slices: m block (t // split_k) mod rows
    return (rows <= band and walkers % rows == 0 and tiles > walkers
            and not cfg.stream_k and not global_split)


def walk_rows(m: int, cfg: "Fp8GemmConfig") -> tuple[int, int]:
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


def walk_rounds(m: int, cfg: "Fp8GemmConfig") -> int:
    """Rounds of the persistent walk at M = m: the tiles the walkers cover over the walkers
    (walk_walkers), rounded up.  A measured time scales with it between nearby M
    (dgir.deep_gemm: the measured entries around an M without one)."""
    walkers, tiles = walk_walkers(m, cfg)
    return ceil_div(tiles, max(walkers, 1))


def walk_walkers(m: int, cfg: "Fp8GemmConfig") -> tuple[int, int]:
    """(walkers, tiles) of the persistent walk at M = m: CTAs or clusters, and the tiles they cover
    (cluster tiles with multicast; output tiles for a split-K cluster; every K slice of a global split)."""
    m_blocks = ceil_div(max(m, 1), cfg.block_m)
    grid = persistent_grid(m, cfg.block_m, cfg.n_blocks, cfg.split_k, cfg.num_sms, cfg.cluster, cfg.multicast,
                           cfg.ctas_per_sm, cfg.split_cluster, None, cfg.stream_k)
    if cfg.split_cluster:
        return grid // cfg.split_k, m_blocks * cfg.n_blocks
    if cfg.cluster > 1:
        return grid // cfg.cluster, cluster_tiles(m_blocks, cfg.n_blocks, cfg.cluster, cfg.multicast)
    return grid, m_blocks * cfg.n_blocks * cfg.split_k


def sm_load(m: int, cfg: "Fp8GemmConfig") -> float:
    """What the walk at M = m asks of its busiest SM: `walk_rounds`, or with two CTAs per SM, the CTA
    tiles (every K slice of a split) per SM when that is more, since two CTAs sharing an SM each run
    slower: 192 -> 256 CTAs of a split over a cluster is one round both times, but 1.36x the time
    (224 x 1024 x 4096 against M = 192, spec 163).  dgir.tuning scales a measured time by it."""
    rounds = walk_rounds(m, cfg)
    if cfg.ctas_per_sm == 1:
        return rounds
    return max(rounds, ceil_div(max(m, 1), cfg.block_m) * cfg.n_blocks * cfg.split_k / cfg.num_sms)


def on_fewer_sms(cfg: "Fp8GemmConfig", m: int, sms: int) -> tuple["Fp8GemmConfig | None", str]:
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


# bytes of one row's A scales in a ring stage: SFA MN-major lands one 4-byte scale per row; read K-major
# in place, the math threads load the scales from global memory: no ring space
SFA_ROW_BYTES = {"mn": 4, "k": 0}
# K blocks ahead of the one read at which a K-major SFA read also pulls a row's next 128-byte line into
# L1 (prefetch.global.L1 where that column starts a line), 0: none.  TUNING.md step 114: a prefetch
# with every read made the small-M GEMMs up to 1.8x slower (each went to L2, where every CTA's requests
# meet on the same few lines of the M <= 128 rows); one per line, 12 K blocks ahead, brings the cells
# whose rows start on line boundaries (K = 16384: all rows change lines at once) to the MN-major
# kernel's time and leaves the rest within the runs' noise (geomean over 8 cells 1.021x the MN-major
# call against 1.032x without)
SFA_PREFETCH_K_BLOCKS = 12


def stage_bytes(block_m: int, block_n: int, sfa_major: str = "mn") -> int:
    """A, B, the A scales and (stage_b_scales) the K block's B scales, each 128-byte aligned."""
    return block_m * BLOCK_K + block_n * BLOCK_K + align(block_m * SFA_ROW_BYTES[sfa_major], 128) + 128


MAX_STAGES = 12
# widest BLOCK_N whose wgmma ptxas can compile in the 128 registers of two CTAs per SM (a scan of
# every width: 208 and up fail with the FP32 partial beside the accumulator; without it, 256, the
# only legal width of the rescaled promotion above 128)
TWO_CTA_MAX_BLOCK_N = {"fp32": 200, "rescaled": 128}


def ring_staging_panels(block_m: int, block_n: int) -> list[tuple[str, int]] | None:
    """Where D's bf16 staging tile goes inside one ring slot (staging="ring"): (ring, byte offset in
    its slot) per part, or None when the slot is too small.  A 128B-swizzled staging tile (BLOCK_N a
    multiple of 64) is BLOCK_N / 64 panels of BLOCK_M rows x 128 B, each stored by its own TMA box,
    so the panels need not be adjacent: the B slot (BLOCK_N x 128 B) takes BLOCK_N / BLOCK_M of them,
    the A slot (BLOCK_M x 128 B) one more.  An unswizzled tile is one piece of BLOCK_M x BLOCK_N x 2 B
    in whichever slot holds it.  Both slots are 1024-byte aligned (allocate_smem), as swizzled
    panels must be."""
    a_bytes, b_bytes = block_m * BLOCK_K, block_n * BLOCK_K
    if block_n % 64 == 0:
        panel = block_m * 128
        in_b = min(b_bytes // panel, block_n // 64)
        parts = [("b_ring", i * panel) for i in range(in_b)]
        if block_n // 64 - in_b > a_bytes // panel:
            return None
        return parts + [("a_ring", i * panel) for i in range(block_n // 64 - in_b)]
    tile = block_m * block_n * 2
    if tile <= b_bytes:
        return [("b_ring", 0)]
    if tile <= a_bytes:
        return [("a_ring", 0)]
    return None


def max_stages(block_m: int, block_n: int, staging: bool = True, ctas_per_sm: int = 1, exchange: int = 0,
               sfa_major: str = "mn") -> int:
    """Ring stages that fit the shared memory; staging=False: D's staging tile takes none of it (the
    direct epilogue, split-K, or staging="ring"); exchange=split_k of a split-K over a cluster, whose
    receive buffer takes the staging tile's place."""
    if exchange > 1:
        other = align(exchange_bytes(block_n, exchange, max(1, block_m // 64)), 128) + 2 * exchange * 8
    else:
        other = align(block_m * block_n * 2, 1024) if staging else 0
    fixed = other + 1024 + 2 * 16 * 8   # D staging or the receive buffer, slack, barriers
    # up to 12: deeper rings than 8 measured +2-5% for 64-row tiles at M <= 128 (bench/TUNING.md step 24)
    return min((smem_budget(ctas_per_sm) - fixed) // stage_bytes(block_m, block_n, sfa_major), MAX_STAGES)


def exchange_bytes(block_n: int, split_k: int, math_wgs: int = 1) -> int:
    """The receive buffer of a split-K over a cluster (lower: "partials"): from each of the split_k
    CTAs, this rank's share of each math warpgroup's 64 x block_n fragment, one float2 per pair slot
    and math thread."""
    return split_k * ceil_div(block_n // 4, split_k) * 128 * math_wgs * 2 * 4


def max_stages_for(cfg: "Fp8GemmConfig") -> int:
    """max_stages for the shared memory this config's other buffers take."""
    staging = cfg.split_k == 1 and cfg.epilogue == "tma" and cfg.staging == "tile"
    return max_stages(cfg.block_m, cfg.block_n, staging=staging, ctas_per_sm=cfg.ctas_per_sm,
                      exchange=cfg.split_k if cfg.split_cluster else 0, sfa_major=cfg.sfa_major)


def with_sfa_major(cfg: "Fp8GemmConfig", sfa_major: str) -> "Fp8GemmConfig":
    """`cfg` reading SFA in the other layout, with the same ring: K-major scales take no ring space
    (the stages the MN-major config chose still fit), and back to MN-major the ring keeps at most the
    stages that fit with its A-scale slots."""
    if cfg.sfa_major == sfa_major:
        return cfg
    out = replace(cfg, sfa_major=sfa_major)
    return replace(out, stages=min(cfg.stages, max_stages_for(out)))


def check(m: int, n: int, k: int) -> None:
    for dim, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise OpError(f"fp8_gemm_nt: {dim} must be an int, got {v!r}")
    if m < 0:
        raise OpError(f"fp8_gemm_nt: m must be >= 0, got {m}")
    if n <= 0 or n % 8:
        raise OpError(f"fp8_gemm_nt: n must be a positive multiple of 8 (the bf16 D row must be 16-byte aligned for TMA), got {n}")
    if k <= 0 or k % 16:
        raise OpError(f"fp8_gemm_nt: k must be a positive multiple of 16 (e4m3 rows must be 16-byte aligned for TMA), got {k}")


def legal_block_ns(n: int) -> list[int]:
    """The BLOCK_N the model proposes: wgmma N in steps of 8; above 128 only sizes whose tiles touch at
    most two B-scale blocks (DeepGEMM's rule).  Sizes that reach a third block are legal
    (check_config) but not proposed: 128x176 measured no faster than 128x192 (bench/TUNING.md step 37)."""
    out = []
    for bn in range(16, 193, 8):
        if bn > 128 and not (bn % (bn - 128) == 0 or 128 % (bn - 128) == 0):
            continue
        out.append(bn)
    return out


def b_scale_blocks(block_n: int) -> int:
    """The most 128-row B-scale blocks one N tile touches (tiles start at multiples of block_n, so
    at offsets n0 % 128 that are multiples of gcd(block_n, 128)).  3 for sizes DeepGEMM rejects
    (e.g. 176: a tile at n0 % 128 = 96 covers 32 + 128 + 16 rows): promote then picks from three."""
    g = math.gcd(block_n, 128)
    return max(ceil_div(r + block_n, 128) for r in range(0, 128, g))


def three_warpgroup_spill(block_n: int, split_k: int = 1) -> str:
    """Why ptxas spills a BLOCK_M 192 tile of this width ('' if it does not): at 152 registers per
    thread a 64-row slice holds its accumulator and its partial up to 128 columns; 120 spills
    (20-28 B: its per-group scale selects), and the global split-K partial store's addressing spills
    beyond 96 (20-76 B), and beyond 80 with 3 or 4 slices (4-32 B at 88 and 96; 2, 6, 7, 8 and 12
    slices do not: found by a spec-283 config, bench/TUNING.md step 116).  Measured with ptxas 13.0
    (tests/test_ptx_configs.py)."""
    if block_n > 128:
        return "needs block_n <= 128"
    if block_n == 120:
        return "cannot take block_n=120"
    if split_k > 1 and block_n > 96:
        return "with split_k > 1 needs block_n <= 96"
    if split_k in (3, 4) and block_n > 80:
        return "with split_k 3 or 4 needs block_n <= 80"
    return ""


# split-K over a cluster with tiles wider than this spilled (64x104 and 64x112 slices with two CTAs
# per SM, spec 150) or measured slower (64x96 / 64x128 slices, bench/TUNING.md step 23); the measured
# cluster-split picks are 16-80 wide (64x80 at 128x2560x7168, spec 150)
CLUSTER_SPLIT_MAX_BLOCK_N = 80
# tiles whose K slices may run as one cluster (split_reduce="cluster"): one or two math warpgroups, each
# exchanging its own 64-row fragment (128 rows: bench/TUNING.md step 116, not yet timed)
CLUSTER_SPLIT_BLOCK_MS = (64, 128)


def carry_config(cfg: Fp8GemmConfig, n: int, k: int) -> Fp8GemmConfig | None:
    """`cfg`, measured at another (N', K'), carried over to (n, k) for the same M (bench/TUNING.md
    step 82): the same tile height, occupancy and reduction, with BLOCK_N scaled by n / N' to the
    nearest legal width (the same number of N tiles, so the same CTA count), split_k the nearest
    that divides the K blocks (at most 8 over a cluster), the stages capped by the new tile's
    shared memory, and a multicast cluster dropped where the new tiles do not pair.  None when the
    result is not a valid config or a cluster split gets wider than CLUSTER_SPLIT_MAX_BLOCK_N."""
    want = cfg.block_n * n / cfg.n
    bn = min(legal_block_ns(n), key=lambda b: (abs(b - want), -b))
    nkb = ceil_div(k, BLOCK_K)
    limit = min(8 if cfg.split_cluster else cfg.split_k, nkb)
    sk = min((s for s in range(1, limit + 1) if nkb % s == 0), key=lambda s: (abs(s - cfg.split_k), -s))
    out = replace(cfg, n=n, k=k, block_n=bn, split_k=sk, split_reduce=cfg.split_reduce if sk > 1 else "global")
    out = replace(out, stages=min(out.stages, max_stages_for(out)))
    if out.split_cluster and bn > CLUSTER_SPLIT_MAX_BLOCK_N:
        return None
    for candidate in (out, replace(out, cluster=1, multicast="A")):
        try:
            check_config(candidate)
            return candidate
        except OpError:
            continue
    return None


def check_config(cfg: Fp8GemmConfig) -> None:
    """Reject tile configs the kernel cannot run correctly (never a silently wrong result)."""
    if cfg.block_m not in (64, 128, 192, 256):
        raise OpError(f"fp8_gemm_nt: block_m must be 64, 128, 192 or 256 (64-row slices per math warpgroup), "
                      f"got {cfg.block_m}")
    if cfg.block_m == 256 and cfg.block_n > 128:
        raise OpError(f"fp8_gemm_nt: block_m=256 needs block_n <= 128 (two accumulators per thread), got {cfg.block_n}")
    if cfg.block_m == 192 and (why := three_warpgroup_spill(cfg.block_n, cfg.split_k)):
        raise OpError(f"fp8_gemm_nt: block_m=192 {why} (three math warpgroups get 152 registers each), "
                      f"got block_n={cfg.block_n}, split_k={cfg.split_k}")
    if cfg.block_n % 8 or not 8 <= cfg.block_n <= 256:
        raise OpError(f"fp8_gemm_nt: block_n must be a multiple of 8 in [8, 256] (wgmma N), got {cfg.block_n}")
    if not isinstance(cfg.stages, int) or cfg.stages < 1:
        raise OpError(f"fp8_gemm_nt: stages must be an int >= 1, got {cfg.stages!r}")
    if not isinstance(cfg.swizzle_group, int) or cfg.swizzle_group < 1:
        raise OpError(f"fp8_gemm_nt: swizzle_group (m blocks per band of the tile order) must be an int >= 1, "
                      f"got {cfg.swizzle_group!r}")
    if not isinstance(cfg.num_sms, int) or cfg.num_sms < 1:
        raise OpError(f"fp8_gemm_nt: num_sms must be an int >= 1, got {cfg.num_sms!r}")
    if cfg.epilogue not in ("tma", "direct"):
        raise OpError(f"fp8_gemm_nt: epilogue must be 'tma' or 'direct', got {cfg.epilogue!r}")
    if cfg.split_k < 1 or cfg.k_blocks % cfg.split_k:
        raise OpError(f"fp8_gemm_nt: split_k={cfg.split_k} must divide the {cfg.k_blocks} K blocks of 128")
    if cfg.cluster not in (1, 2, 4):
        raise OpError(f"fp8_gemm_nt: cluster must be 1, 2 or 4 (CTAs sharing one operand panel), got {cfg.cluster}")
    if cfg.cluster > 1:
        if cfg.multicast not in ("A", "B"):
            raise OpError(f"fp8_gemm_nt: multicast must be 'A' or 'B' (the operand the cluster shares), got {cfg.multicast!r}")
        if cfg.split_k > 1:
            raise OpError(f"fp8_gemm_nt: cluster={cfg.cluster} needs split_k=1")
        if cfg.multicast == "A" and cfg.n_blocks % cfg.cluster:
            raise OpError(f"fp8_gemm_nt: cluster={cfg.cluster} with multicast of A groups N tiles, but N={cfg.n} has "
                          f"{cfg.n_blocks} tiles of {cfg.block_n} (not a multiple of {cfg.cluster})")
        rows = cfg.block_m if cfg.multicast == "A" else cfg.block_n
        if rows % (8 * cfg.cluster):
            raise OpError(f"fp8_gemm_nt: multicast of {cfg.multicast} splits its {rows}-row panel in {cfg.cluster} parts "
                          f"that must be whole 8-row swizzle atoms")
        if cfg.num_sms % cfg.cluster:
            raise OpError(f"fp8_gemm_nt: cluster={cfg.cluster} needs num_sms divisible by it, got {cfg.num_sms}")
    if cfg.stream_k:
        if cfg.split_k > 1 or cfg.epilogue != "tma":
            raise OpError("fp8_gemm_nt: stream_k cuts tiles by itself: it needs split_k=1 and the tma epilogue")
    if cfg.split_reduce not in ("global", "cluster"):
        raise OpError(f"fp8_gemm_nt: split_reduce must be 'global' or 'cluster', got {cfg.split_reduce!r}")
    if cfg.split_cluster:
        if cfg.split_k > 8 or cfg.cluster > 1 or cfg.block_m not in CLUSTER_SPLIT_BLOCK_MS:
            raise OpError(f"fp8_gemm_nt: split_reduce='cluster' runs the split_k={cfg.split_k} slices of a tile as "
                          f"one cluster: needs split_k <= 8 (portable cluster size), cluster=1 and block_m in "
                          f"{CLUSTER_SPLIT_BLOCK_MS} (each math warpgroup exchanges its 64-row fragment; a two-wave "
                          f"256-row tile would exchange two per warpgroup)")
    if cfg.math_order not in MATH_ORDERS:
        raise OpError(f"fp8_gemm_nt: math_order must be one of {', '.join(map(repr, MATH_ORDERS))}, "
                      f"got {cfg.math_order!r}")
    if cfg.math_order != "together" and cfg.math_wgs < 2:
        raise OpError(f"fp8_gemm_nt: math_order={cfg.math_order!r} needs two or more math warpgroups (block_m >= 128), "
                      f"got block_m={cfg.block_m}")
    if cfg.early_epilogue not in ("on", "staging", "off"):
        raise OpError(f"fp8_gemm_nt: early_epilogue must be 'on', 'staging' or 'off', got {cfg.early_epilogue!r}")
    if cfg.m_tail not in ("auto", "fill", "shift"):
        raise OpError(f"fp8_gemm_nt: m_tail must be 'auto', 'fill' or 'shift', got {cfg.m_tail!r}")
    if cfg.promotion not in ("fp32", "rescaled"):
        raise OpError(f"fp8_gemm_nt: promotion must be 'fp32' or 'rescaled', got {cfg.promotion!r}")
    if cfg.promotion == "rescaled":
        if cfg.block_n % 128 and 128 % cfg.block_n:
            raise OpError(f"fp8_gemm_nt: promotion='rescaled' keeps one scale per row and 128-column B-scale "
                          f"block: block_n must divide 128 or be a multiple of it, got {cfg.block_n}")
        if cfg.waves > 1 or cfg.stream_k:
            raise OpError("fp8_gemm_nt: promotion='rescaled' needs one 64-row wave per math warpgroup "
                          f"(block_m 64, 128 or 192) and no stream_k, got block_m={cfg.block_m}, "
                          f"stream_k={cfg.stream_k}")
    if cfg.sfa_major not in SFA_ROW_BYTES:
        raise OpError(f"fp8_gemm_nt: sfa_major must be 'mn' or 'k', got {cfg.sfa_major!r}")
    if cfg.staging not in ("tile", "ring"):
        raise OpError(f"fp8_gemm_nt: staging must be 'tile' or 'ring', got {cfg.staging!r}")
    if cfg.staging == "ring":
        if cfg.epilogue != "tma" or cfg.split_k > 1 or cfg.stream_k:
            raise OpError("fp8_gemm_nt: staging='ring' places the TMA epilogue's staging tile in a ring slot: it "
                          f"needs epilogue='tma', split_k=1 and no stream_k, got epilogue={cfg.epilogue!r}, "
                          f"split_k={cfg.split_k}, stream_k={cfg.stream_k}")
        if cfg.stages < 2:
            raise OpError("fp8_gemm_nt: staging='ring' keeps one slot through the epilogue while the next tile "
                          f"fills another: needs stages >= 2, got {cfg.stages}")
        if cfg.waves > 1 or ring_staging_panels(cfg.block_m, cfg.block_n) is None:
            raise OpError(f"fp8_gemm_nt: staging='ring': the {cfg.block_m}x{cfg.block_n} bf16 staging tile does not "
                          f"fit one ring slot ({cfg.block_m} + {cfg.block_n} rows of 128 B); it fits 64-row tiles, "
                          "128x64 and 128x128")
    if cfg.ctas_per_sm not in (1, 2):
        raise OpError(f"fp8_gemm_nt: ctas_per_sm must be 1 or 2, got {cfg.ctas_per_sm}")
    if cfg.ctas_per_sm > 1 and (cfg.cluster > 1 or cfg.block_m > 64):
        raise OpError("fp8_gemm_nt: ctas_per_sm=2 is for block_m=64 without multicast clusters (one math "
                      "warpgroup, half the register file per CTA)")
    widest = TWO_CTA_MAX_BLOCK_N[cfg.promotion]
    if cfg.ctas_per_sm > 1 and cfg.block_n > widest:
        raise OpError(f"fp8_gemm_nt: ctas_per_sm=2 leaves 128 registers per thread, too few for a 64x{cfg.block_n} "
                      f"wgmma with promotion={cfg.promotion!r} (ptxas: insufficient registers); block_n must be "
                      f"<= {widest}, got {cfg.block_n}")


def lower(cfg: Fp8GemmConfig) -> Node:
    """Build the tile IR: one TMA producer warpgroup, `math_wgs` math warpgroups that also store."""
    check_config(cfg)
    BM, BN, S, nkb = cfg.block_m, cfg.block_n, cfg.stages, cfg.k_blocks
    decl = Builder()
    # fit_m=(box axis, alignment): when M < BLOCK_M the box shrinks to align(M, alignment) there, so the
    # TMA does not zero-fill rows past M (measured: mostly out-of-bounds boxes are slow); the kernel's
    # expect_tx follows.  Smem rows past the box keep stale data that only feeds output rows >= M.
    # (clusters are chosen for large M only: their boxes keep the full height)
    CL = cfg.cluster
    fit = (lambda f: f) if CL == 1 else (lambda f: None)
    decl.emit(Op.PARAM, "A", type=Type(DType.e4m3, ("M", cfg.k)), layout="kmajor", box=(BLOCK_K, BM), swizzle=128,
              fit_m=fit((1, 8)))
    decl.emit(Op.PARAM, "B", type=Type(DType.e4m3, (cfg.n, cfg.k)), layout="kmajor", box=(BLOCK_K, BN), swizzle=128)
    if cfg.sfa_major == "k":     # [M, nkb] in place, read by the math threads (a pointer, no tensor map)
        decl.emit(Op.PARAM, "SFA", type=Type(DType.f32, ("M", nkb)), layout="rowmajor")
    else:
        decl.emit(Op.PARAM, "SFA", type=Type(DType.f32, (nkb, "M4")), layout="mn_major", box=(BM, 1), swizzle=0,
                  fit_m=fit((0, 4)))
    decl.emit(Op.PARAM, "SFB", type=Type(DType.f32, (ceil_div(cfg.n, 128), nkb)), layout="rowmajor")
    SK = cfg.split_k
    XC = cfg.split_cluster          # the K slices of a tile are one cluster (DSMEM reduction)
    if SK == 1 and cfg.epilogue == "tma":   # stored through shared memory with TMA
        box, swz = ((64, 64), 128) if BN % 64 == 0 else ((BN, 64), 0)
        decl.emit(Op.PARAM, "D", type=Type(DType.bf16, ("M", cfg.n)), layout="rowmajor", box=box, swizzle=swz)
    else:         # written by the reducing CTA with plain stores
        decl.emit(Op.PARAM, "D", type=Type(DType.bf16, ("M", cfg.n)), layout="rowmajor")
    STK = cfg.stream_k
    if (SK > 1 and not XC) or STK:
        # split-K: FP32 partials per K slice, and one arrival counter per output tile (zero between
        # launches: the CTA that reduces a tile resets its counter).  Stream-K: one tile-sized plane
        # per piece of a cut tile ("PIECES": as many as the launch's split needs, workspace_shapes)
        shape = ("PIECES", BM, BN) if STK else (SK, "M", cfg.n)     # stream-K: compact, per piece
        decl.emit(Op.PARAM, "W", type=Type(DType.f32, shape), layout="rowmajor", workspace=True)
        decl.emit(Op.PARAM, "LOCKS", type=Type(DType.i32, ("TILES",)), layout="rowmajor", workspace=True)
    decl.emit(Op.SMEM, "a_ring", type=Type(DType.e4m3, (BM, BLOCK_K)), stages=S, swizzle=128)
    decl.emit(Op.SMEM, "b_ring", type=Type(DType.e4m3, (BN, BLOCK_K)), stages=S, swizzle=128)
    # the A-scale ring: one scale per row and K block (MN-major SFA only)
    rings = ["a_ring", "b_ring"]
    if cfg.sfa_major == "mn":
        decl.emit(Op.SMEM, "sfa_ring", type=Type(DType.f32, (BM,)), stages=S)
        rings.append("sfa_ring")
    tma_epilogue = cfg.split_k == 1 and cfg.epilogue == "tma"
    # with BLOCK_N a multiple of 64 the staging tile is stored in 128B-swizzled 64-column panels:
    # the accumulator layout then writes it without bank conflicts, and TMA un-swizzles on the way out
    swizzled_d = BN % 64 == 0
    if tma_epilogue:
        decl.emit(Op.SMEM, "d_tile", type=Type(DType.bf16, (BM, BN)), swizzle=128 if swizzled_d else None)
        if STK:   # a cut tile's pieces count in like split-K slices
            decl.emit(Op.SMEM, "split_flag", type=Type(DType.i32, (1,)))
    elif XC:   # the receive buffer: from each of the SK CTAs, this rank's share of the tile's fragment
        # pairs (one float2 per pair slot and thread); ready / free barriers in allocate_smem
        # (its bytes: exchange_bytes, which max_stages_for counts); one thread row per math thread
        slots = ceil_div(BN // 4, SK)
        decl.emit(Op.SMEM, "partials", type=Type(DType.f32, (SK, slots, 128 * cfg.math_wgs, 2)), exchange=SK)
    else:
        decl.emit(Op.SMEM, "split_flag", type=Type(DType.i32, (1,)))   # "this CTA reduces" broadcast
    # a cluster channel: a slot is free again once the consumers of every CTA of the cluster released it
    # (the shared operand is written into both CTAs by one multicast)
    decl.emit(Op.CHANNEL, "ab", *rings, stages=S, consumers=cfg.math_wgs,
              cluster=CL if CL > 1 else None)
    W = cfg.waves
    accs = ["acc"] + [f"acc_w{w}" for w in range(1, W)]
    sfas = ["sfa"] + [f"sfa_w{w}" for w in range(1, W)]
    for name in accs:
        decl.emit(Op.REGS, name, type=Type(DType.f32, (64, BN)))
    for name in sfas:
        decl.emit(Op.REGS, name, type=Type(DType.f32, (64,)))
    # wave w of math warpgroup g owns rows 64 * (w * math_wgs + g) of the tile
    wave = (lambda w: w) if W > 1 else (lambda w: None)

    # the tile grid the persistent loop walks: with clusters, one cluster tile is CL neighbouring tiles
    # (along N when A is shared, along M when B is), and each cluster walks its own cluster tiles
    pair_n = CL > 1 and cfg.multicast == "A"
    pair_m = CL > 1 and cfg.multicast == "B"
    grid_n_blocks = cfg.n_blocks // CL if pair_n else cfg.n_blocks

    def tile_loop(b: Builder, role: str):
        """Persistent tile loop shared by both roles: (walker id, walkers, m blocks of the walked grid,
        tiles this walker takes).  The loop counts this walker's own tiles (li = 0, 1, ...; tile
        t = bid + li * gsz): the ring counter base li * KBS then needs no division per tile (a
        division by the run-time grid size is a MUFU.RCP sequence in SASS; this one runs once)."""
        clustered = CL > 1 or XC
        bid = b.scalar(Op.SREG, "bid", which="cluster_id" if clustered else "block_id")
        gsz = b.scalar(Op.SREG, "gsz", which="cluster_count" if clustered else "grid_size")
        M = b.scalar(Op.DIM, "M", "A", axis=0)
        mblocks = b.scalar(Op.CEILDIV, "m_blocks", M, BM * (CL if pair_m else 1))
        # a cluster of slices walks output tiles; otherwise every K slice is a tile of the walk
        ntiles = b.scalar(Op.MUL, "tiles", mblocks, grid_n_blocks * (1 if XC else SK))
        left = b.scalar(Op.SUB, "tiles_left", ntiles, b.scalar(Op.MIN, "first", bid, ntiles))
        mine = b.scalar(Op.CEILDIV, "my_tiles", left, gsz)
        return bid, gsz, mblocks, mine

    KBS = cfg.k_blocks_per_split

    def tile_coords(b: Builder, li, bid, gsz, mblocks, cap):
        """(ring counter base, m0, n0, output tile, K slice, first K block of the slice) of this
        walker's tile number li."""
        t = b.scalar(Op.ADD, "t", bid, b.scalar(Op.MUL, "t_off", li, gsz))
        base = b.scalar(Op.MUL, "kb_base", li, KBS)
        mn, split, kb0 = t, None, 0
        if XC:       # the CTA's rank in its cluster is its K slice
            split = b.scalar(Op.SREG, "split", which="cluster_rank")
            kb0 = b.scalar(Op.MUL, "kb0", split, KBS)
        elif SK > 1:   # the K slices of one output tile are neighbours in the tile order
            mn = b.scalar(Op.DIV, "mn", t, SK)
            split = b.scalar(Op.MOD, "split", t, SK)
            kb0 = b.scalar(Op.MUL, "kb0", split, KBS)
        m0, n0 = tile_origin(b, mn, mblocks, cap)
        return base, m0, n0, mn, split, kb0

    def tile_origin(b: Builder, mn, mblocks, cap):
        """(m0, n0) of this CTA's output tile in walked tile mn (L2-banded order; a cluster tile is
        CL neighbouring tiles, this CTA's by its rank); `cap`: m_tail_cap's (M, highest m0), or None."""
        # a cluster tile sharing B spans CL m blocks: the band holds swizzle_group m blocks, but at
        # least one cluster row (a band of zero rows would divide by zero in the tile walk)
        group = max(1, cfg.swizzle_group // CL) if pair_m else cfg.swizzle_group
        mb = b.scalar(Op.TILE_M, "mb", mn, mblocks, group=group, n_blocks=grid_n_blocks)
        nb = b.scalar(Op.TILE_N, "nb", mn, mblocks, group=group, n_blocks=grid_n_blocks)
        if CL > 1:   # this CTA's tile of the cluster tile (past M for an odd last m block: loads
            rank = b.scalar(Op.SREG, "rank", which="cluster_rank")     # zero-fill, stores skip it)
            if pair_n:
                nb = b.scalar(Op.ADD, "nb_cta", b.scalar(Op.MUL, "nb_pair", nb, CL), rank)
            else:
                mb = b.scalar(Op.ADD, "mb_cta", b.scalar(Op.MUL, "mb_pair", mb, CL), rank)
        m0 = b.scalar(Op.MUL, "m0", mb, BM)
        n0 = b.scalar(Op.MUL, "n0", nb, BN)
        if cap is not None:    # a tile inside M starts at cap at most: m0 - (m0 < M) * (m0 - min(m0, cap))
            M, m0_cap = cap
            over = b.scalar(Op.SUB, "over_cap", m0, b.scalar(Op.MIN, "m0_capped", m0, m0_cap))
            m0 = b.scalar(Op.SUB, "m0_tail", m0, b.scalar(Op.MUL, "tail_up", over, b.scalar(Op.LT, "inside", m0, M)))
        return m0, n0

    def m_tail_cap(b: Builder):
        """m_tail: (M, the highest m0 a tile inside M may start at: `tail_cap`, computed by the host
        for each launch), or None when the kernel never shifts.  Per tile, m0 is then capped
        (tile_origin); a tile that starts at or past M, the idle half of a last B-sharing pair,
        keeps its place."""
        if not tail_shift_below(cfg):
            return None
        return (b.scalar(Op.DIM, "M_tail", "A", axis=0),
                b.scalar(Op.DIM, "m0_cap", "A", axis=0, derive="m_tail_cap"))

    def walk(b: Builder, role: str):
        """(segments of this walker, coordinates of segment li, K blocks it fills): the tile loop
        of the plain walk (one segment = one tile, or one K slice of a split tile), or the stream-K
        walk."""
        if STK:
            w = stream_k.walk(b, block_rows=BM * (CL if pair_m else 1), grid_n_blocks=grid_n_blocks,
                              k_blocks=KBS, clustered=CL > 1)
            cap = m_tail_cap(b)

            def coords(li):
                base, k_first, k_end, t, full, cut = stream_k.segment(b, li, w, KBS)
                m0, n0 = tile_origin(b, t, w["mblocks"], cap)
                return dict(base=base, m0=m0, n0=n0, mn=t, split=None, kb0=0, k_first=k_first, k_end=k_end,
                            full=full, cut=cut, pieces=w["P"])
            return w["segs"], coords, lambda: w["fills"]
        bid, gsz, mblocks, mine = tile_loop(b, role)
        cap = m_tail_cap(b)

        def coords(li):
            base, m0, n0, mn, split, kb0 = tile_coords(b, li, bid, gsz, mblocks, cap)
            return dict(base=base, m0=m0, n0=n0, mn=mn, split=split, kb0=kb0, k_first=0, k_end=KBS)
        return mine, coords, lambda: b.scalar(Op.MUL, "fills", mine, KBS)

    # --- producer: one elected thread of the last warpgroup issues every TMA load -------------
    b = Builder(role="load")
    mine, coords, fills = walk(b, "load")
    with b.region(Op.FOR, "li", 0, mine, 1) as li:
        c = coords(li)
        base, m0, n0, kb0 = c["base"], c["m0"], c["n0"], c["kb0"]
        with b.region(Op.FOR, "kbl", c["k_first"], c["k_end"], 1) as kbl:
            ctr = b.scalar(Op.ADD, "ctr", base, kbl)
            kb = b.scalar(Op.ADD, "kb", kb0, kbl) if SK > 1 else kbl
            k0 = b.scalar(Op.MUL, "k0", kb, BLOCK_K)
            b.emit(Op.ACQUIRE, "", "ab", ctr)
            b.emit(Op.TMA_LOAD, "", "ab", ctr, "a_ring", "A", k0, m0)
            b.emit(Op.TMA_LOAD, "", "ab", ctr, "b_ring", "B", k0, n0)
            if cfg.sfa_major == "mn":
                b.emit(Op.TMA_LOAD, "", "ab", ctr, "sfa_ring", "SFA", m0, kb)
            b.emit(Op.COMMIT, "", "ab", ctr)
    if CL > 1:
        # the peer CTA arrives on this CTA's empty barriers until it has released its last slot:
        # wait for every release before the CTA may exit
        b.emit(Op.DRAIN, "", "ab", fills())
    producer = Node(Op.WARPGROUP, "", (), None, {"ids": (cfg.math_wgs,), "roles": ("load",)}, b.nodes())

    # --- math warpgroups: block-scaled MMA per K block, then the epilogue (store role) ----------
    b = Builder(role="mma")
    mine, coords, _ = walk(b, "mma")
    # K-major SFA: rows past M (a last m block's) read row M - 1 instead of past the tensor
    sfa_rows = b.scalar(Op.DIM, "sfa_rows", "A", axis=0) if cfg.sfa_major == "k" else None
    # stream-K segments end in one of two epilogues (whole tile or a cut one's piece): the
    # overlap_epilogue rewrite, which assumes one, does not apply
    loop_attrs = {"overlap_epilogue": "skipped: stream-K segments end in two kinds of epilogue"} if STK else {}
    with b.region(Op.FOR, "li", 0, mine, 1, **loop_attrs) as li:
        c = coords(li)
        base, m0, n0, mn, split, kb0 = c["base"], c["m0"], c["n0"], c["mn"], c["split"], c["kb0"]
        # B scales: an N tile may straddle two (or three) 128-row scale blocks of B (when 128 % BN != 0)
        sb_row0 = b.scalar(Op.DIV, "sb_row0", n0, 128)
        sb_rows = [sb_row0, b.scalar(Op.MIN, "sb_row1", b.scalar(Op.ADD, "sb_next", sb_row0, 1), ceil_div(cfg.n, 128) - 1)]
        if b_scale_blocks(BN) > 2:
            sb_rows.append(b.scalar(Op.MIN, "sb_row2", b.scalar(Op.ADD, "sb_next2", sb_row0, 2), ceil_div(cfg.n, 128) - 1))
        for acc in accs:
            b.emit(Op.ZERO, "", acc)
        with b.region(Op.FOR, "kbl", c["k_first"], c["k_end"], 1) as kbl:
            ctr = b.scalar(Op.ADD, "ctr", base, kbl)
            kb = b.scalar(Op.ADD, "kb", kb0, kbl) if SK > 1 else kbl
            sbs = [b.emit(Op.LOAD_SCALE, f"sb{i}", "SFB", row, kb, type=Type(DType.f32)) for i, row in enumerate(sb_rows)]
            if cfg.sfa_major == "k":   # this thread's rows' scales of K block kb from global memory:
                for w, sfa in enumerate(sfas):      # issued before the slot wait, which hides their latency
                    b.emit(Op.LOAD_ROW_SCALES, "", sfa, "SFA", m0, kb, sfa_rows, wave=wave(w),
                           prefetch=SFA_PREFETCH_K_BLOCKS or None)
            b.emit(Op.WAIT, "", "ab", ctr)
            for w, (acc, sfa) in enumerate(zip(accs, sfas)):
                if cfg.sfa_major == "mn":
                    b.emit(Op.SMEM_READ, "", sfa, "sfa_ring", ctr, wave=wave(w))
                b.emit(Op.MMA_SCALED, "", acc, "a_ring", "b_ring", ctr, sfa, *sbs, n0, n=BN, k=BLOCK_K,
                       wave=wave(w))
            b.emit(Op.RELEASE, "", "ab", ctr)
        if XC:
            # cluster split-K: send every CTA of the cluster its share of this slice's partial (once
            # they have read the previous round), then sum this CTA's share over the cluster's
            # partials in rank order (deterministic) into D.  The last round is not freed: after it
            # nothing reaches this CTA's shared memory, so it may exit without waiting for its peers
            b.emit(Op.PARTIAL_RECLAIM, "", "partials", li, role="store")
            b.emit(Op.PARTIAL_PUBLISH, "", "partials", accs[0], li, role="store")
            b.emit(Op.PARTIAL_REDUCE, "", "D", "partials", li, mine, m0, n0, role="store", splits=SK, n=BN)
        elif SK > 1:
            # split-K epilogue: store this slice's FP32 partial, count the slice in; the CTA that
            # brings the count to SK sums the partials in slice order 0..SK-1 (deterministic) into D
            for w, acc in enumerate(accs):
                b.emit(Op.SPLIT_STORE, "", "W", acc, split, m0, n0, role="store", wave=wave(w))
            last = b.emit(Op.SPLIT_ARRIVE, "last", "LOCKS", mn, type=Type(DType.i32), splits=SK, role="store",
                          flag="split_flag")
            with b.region(Op.IF, "", last, role="store"):
                for w in range(W):
                    b.emit(Op.SPLIT_REDUCE, "", "D", "W", m0, n0, role="store", wave=wave(w), splits=SK, n=BN)
                b.emit(Op.SPLIT_RESET, "", "LOCKS", mn, role="store")
        elif STK:
            # stream-K: a whole tile is stored at once.  A cut tile's pieces count in; the walker
            # that completes the count sums the pieces in piece order (the same bits whoever that
            # is: its own piece from its registers, the others' from the workspace) and stores the
            # tile.  A walker that finds the others already in completes it without storing its own
            with b.region(Op.IF, "", c["full"], role="store"):
                _tma_epilogue(b, accs, W, wave, n0, m0)
            with b.region(Op.IF, "", c["full"], negate=True, role="store"):
                (slot0, piece), pieces = c["cut"], c["pieces"]
                lock = mn
                if CL > 1:       # every CTA of a cluster tile has its own output tile and pieces
                    rank = b.scalar(Op.SREG, "lock_rank", which="cluster_rank")
                    lock = b.scalar(Op.ADD, "lock", b.scalar(Op.MUL, "lock_tile", mn, CL), rank)
                    slot0 = b.scalar(Op.ADD, "slot0_cta", b.scalar(Op.MUL, "slot0_cl", slot0, CL),
                                     b.scalar(Op.MUL, "slot0_rank", rank, pieces))
                slot = b.scalar(Op.ADD, "slot", slot0, piece)
                others = b.emit(Op.SPLIT_PEEK, "others_in", "LOCKS", lock, pieces, type=Type(DType.i32),
                                splits=stream_k.MAX_PIECES, role="store", flag="split_flag")
                with b.region(Op.IF, "", others, negate=True, role="store"):
                    for w, acc in enumerate(accs):
                        b.emit(Op.SPLIT_STORE, "", "W", acc, slot, m0, n0, role="store", wave=wave(w), compact=True)
                last = b.emit(Op.SPLIT_ARRIVE, "last", "LOCKS", lock, pieces, others, type=Type(DType.i32),
                              splits=stream_k.MAX_PIECES, role="store", flag="split_flag")
                with b.region(Op.IF, "", last, role="store"):
                    for w, acc in enumerate(accs):
                        b.emit(Op.SPLIT_GATHER, "", acc, "W", pieces, piece, slot0, role="store", wave=wave(w),
                               splits=stream_k.MAX_PIECES)
                    b.emit(Op.SPLIT_RESET, "", "LOCKS", lock, role="store")
                    _tma_epilogue(b, accs, W, wave, n0, m0)
        elif tma_epilogue:
            _tma_epilogue(b, accs, W, wave, n0, m0)
        else:
            for w, acc in enumerate(accs):
                b.emit(Op.STORE_DIRECT, "", "D", acc, m0, n0, role="store", wave=wave(w))
    if tma_epilogue:
        b.emit(Op.TMA_STORE_WAIT, "", read=False, role="store")
    consumers = Node(Op.WARPGROUP, "", (), None,
                     {"ids": tuple(range(cfg.math_wgs)), "roles": ("mma", "store")}, b.nodes())

    attrs = {"op": "fp8_gemm_nt", "n": cfg.n, "k": cfg.k, "block_m": BM, "block_n": BN, "block_k": BLOCK_K,
             "stages": S, "num_sms": cfg.num_sms, "threads": cfg.threads, "config": cfg.key(), "split_k": SK}
    if cfg.ctas_per_sm > 1:
        attrs["ctas_per_sm"] = cfg.ctas_per_sm
    if cfg.math_order != "together":
        attrs["math_order"] = cfg.math_order      # read by the order_wgmma_issue pass
    if CL > 1:
        attrs.update(cluster=CL, multicast=cfg.multicast)
    if XC:
        attrs.update(cluster=SK, split_reduce="cluster")
    if STK:
        attrs["stream_k"] = True
    if cfg.promotion != "fp32":
        attrs["promotion"] = cfg.promotion         # read by the rescale_accumulator pass
    if cfg.staging != "tile":
        attrs["staging"] = cfg.staging             # read by the stage_in_ring_slot pass
    if tail_shift_below(cfg):
        attrs["m_tail_below"] = tail_shift_below(cfg)   # read by launch_scalar (the host's m_tail_cap)
    if cfg.early_epilogue != "on":
        attrs["early_epilogue"] = cfg.early_epilogue    # read by the stage_first_wave_early pass
    return Node(Op.KERNEL, cfg.kernel_name(), (), None, attrs, decl.nodes() + (producer, consumers))


def _tma_epilogue(b: Builder, accs, W, wave, n0, m0) -> None:
    """bf16 D through a shared-memory staging tile and TMA stores (the store role on the math warpgroups)."""
    b.emit(Op.TMA_STORE_WAIT, "", read=True, role="store")
    b.emit(Op.SYNC, "", role="store")
    for w, acc in enumerate(accs):
        b.emit(Op.STAGE_OUT, "", "d_tile", acc, role="store", wave=wave(w))
    b.emit(Op.SYNC, "", fence_async=True, role="store")
    for w in range(W):
        b.emit(Op.TMA_STORE, "", "D", "d_tile", n0, m0, role="store", wave=wave(w))


def choose_config(m: int, n: int, k: int, num_sms: int = NUM_SMS, one_cta_per_sm: bool = False) -> Fp8GemmConfig:
    """The cost model's choice for this shape (dgir/ops/fp8_gemm_model.py, which imports this module);
    `one_cta_per_sm`: for a launch limited to `num_sms` of the device's SMs (deep_gemm.set_num_sms)."""
    from .fp8_gemm_model import choose_config as model_choice
    return model_choice(m, n, k, num_sms, one_cta_per_sm)


register_operator(Operator(
    name="fp8_gemm_nt", dims=("m", "n", "k"), compiled_dims=("n", "k"),
    choose_config=choose_config, lower=lower, check=check,
    doc="D = (A*SFA) @ (B*SFB)^T; e4m3 A[M,K], B[N,K]; f32 scales 1x128 (A) and 128x128 (B); bf16 D."))
