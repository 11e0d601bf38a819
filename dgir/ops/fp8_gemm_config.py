"""fp8_gemm_nt's tile config: the fields (`Fp8GemmConfig`), the kernel name that spells them and reads
back, the shared memory a config's ring may take, and the rules a config must keep (`check_config`:
never a silently wrong result).  The persistent walk a config makes at a given M is in
fp8_gemm_walk.py; the lowering to tile IR in fp8_gemm.py, which re-exports both."""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import asdict, dataclass, replace

from ..verifier import launch_registers, smem_budget
from . import OpError

BLOCK_K = 128                    # one FP8 scale block along K
NUM_SMS = 132                    # H200


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def align(a: int, b: int) -> int:
    return ceil_div(a, b) * b


# the values of Fp8GemmConfig.math_order and the kernel-name suffix of each
MATH_ORDERS = {"together": "", "alternate": "_alt", "pingpong": "_pp"}
# Fp8GemmConfig fields left out of key() at their default
LATE_FIELDS = {"stream_k": False, "promotion": "fp32", "staging": "tile", "m_tail": "fill",
               "early_epilogue": "on", "sfa_major": "mn", "partials": 2, "split_order": "contiguous",
               "refill_slots": 1}
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
                                 # one cluster and sum each other's partials from shared memory (DSMEM);
                                 # up to 16 slices (above 8 a non-portable cluster: slower, step 127)
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

    partials: int = 2            # partial accumulators the math k-loop rotates through (2, 3 or 4): K blocks
                                 # whose wgmma groups are in flight while the oldest is promoted
                                 # (schedule_mma writes it on the loop, interleave_ffma builds it).  2:
                                 # one group in flight.  Built for the small tiles' slow K blocks (spec
                                 # 282: 64x64 at M = 128 ~186 ns a block with no loads at all, ~3x its
                                 # tensor-core time); measured no faster (spec 285: 0.968-1.094x over
                                 # 15 cells, the no-load time unchanged: not the wgmma's latency),
                                 # so the chooser leaves it at 2 (bench/TUNING.md step 117)
    split_order: str = "contiguous"  # which K blocks each split-K slice takes: "contiguous": slice s the
                                 # run s * K/S .. (s+1) * K/S - 1; "interleaved" (opt-in): blocks s, s + S,
                                 # s + 2S, ..., so that at every stage the S slices of a tile together
                                 # read one contiguous S x 128-byte run of each operand row (a DRAM page
                                 # at a time, as one CTA streaming all of K would) instead of S runs
                                 # K/S apart (bench/TUNING.md step 130).  The same partial sums in the
                                 # same reduction order per slice: deterministic either way
    refill_slots: int = 1        # ring slots the load role refills together (1, 2 or 4; pass
                                 # group_tma_issue): it acquires that many free slots, then issues
                                 # their boxes back to back, so 128 x refill_slots contiguous bytes of
                                 # every row of A and B are requested at once (the fastest copy-only
                                 # kernels read 256-512 bytes a row and step); the price, a ring about
                                 # (refill_slots - 1) / 2 slots shallower.  Needs a ring of
                                 # refill_ring_slots (bench/TUNING.md steps 27 and 131)

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
                f"{mark['staging']}{order}{mark['m_tail']}{mark['early_epilogue']}{mark['sfa_major']}{mark['partials']}"
                f"{mark['split_order']}{mark['refill_slots']}")

    @staticmethod
    def from_kernel_name(name: str, legacy_m_tail: str = "fill") -> Fp8GemmConfig | None:
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
    "partials": {3: "_p3", 4: "_p4"},
    "split_order": {"interleaved": "_kil"},
    "refill_slots": {2: "_rf2", 4: "_rf4"},
}
_DEFAULTS = {f: Fp8GemmConfig.__dataclass_fields__[f].default for f in NAME_SUFFIXES}


def _one_of(field: str, extra: tuple = ()) -> str:
    return f"(?P<{field}>{'|'.join(tuple(NAME_SUFFIXES[field].values()) + extra)})?"


_KERNEL_NAME = re.compile(
    r"fp8_gemm_nt_n(?P<n>\d+)_k(?P<k>\d+)_bm(?P<bm>\d+)_bn(?P<bn>\d+)_s(?P<s>\d+)"
    r"(?:_sk(?P<split_k>\d+)(?P<dsm>dsm)?)?" + _one_of("stream_k") + _one_of("epilogue")
    + r"(?:_c(?P<cluster>\d)(?P<multicast>[AB]))?(?:_o(?P<occ>\d))?" + _one_of("math_order") + _one_of("promotion")
    + _one_of("staging") + r"(?:_g(?P<g>\d+))?" + _one_of("m_tail", ("_tfill",)) + _one_of("early_epilogue")
    + _one_of("sfa_major") + _one_of("partials") + _one_of("split_order") + _one_of("refill_slots"))


# bytes of one row's A scales in a ring stage: SFA MN-major lands one 4-byte scale per row; read K-major
# in place, the math threads load the scales from global memory: no ring space
SFA_ROW_BYTES = {"mn": 4, "k": 0}


def stage_bytes(block_m: int, block_n: int, sfa_major: str = "mn") -> int:
    """A, B, the A scales and (stage_b_scales) the K block's B scales, each 128-byte aligned."""
    return block_m * BLOCK_K + block_n * BLOCK_K + align(block_m * SFA_ROW_BYTES[sfa_major], 128) + 128


MAX_STAGES = 12
# widest BLOCK_N whose wgmma ptxas can compile when `ctas_per_sm` CTAs share the register file (a
# scan of every width).  Two CTAs (128 registers at launch, 216 for the math warpgroup): 208 and up
# fail with the FP32 partial beside the accumulator; without it, 256, the only legal width of the
# rescaled promotion above 128.  Three CTAs (80 registers at launch, 120 after setmaxnreg): 104 (it
# spills; 96 does not), 112 fails; rescaled 64.  Four (64 at launch, 88 after): 72 (it spills), 80
# fails; rescaled 64.  ptxas allocates the math region's values up to its setmaxnreg budget (without
# the setmaxnreg the same kernels spill more), but one wgmma instruction must fit the launch's count
# (C7602 "Insufficient registers (80)").  TUNING.md step 123's scan.
SHARED_SM_MAX_BLOCK_N = {2: {"fp32": 200, "rescaled": 128},
                         3: {"fp32": 104, "rescaled": 64},
                         4: {"fp32": 72, "rescaled": 64}}


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


def max_stages_for(cfg: Fp8GemmConfig) -> int:
    """max_stages for the shared memory this config's other buffers take."""
    staging = cfg.split_k == 1 and cfg.epilogue == "tma" and cfg.staging == "tile"
    return max_stages(cfg.block_m, cfg.block_n, staging=staging, ctas_per_sm=cfg.ctas_per_sm,
                      exchange=cfg.split_k if cfg.split_cluster else 0, sfa_major=cfg.sfa_major)


def with_sfa_major(cfg: Fp8GemmConfig, sfa_major: str) -> Fp8GemmConfig:
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


def straddle_splits(block_n: int) -> list[int]:
    """Where an N tile can cross a 128-row B-scale block: the column 128 - (n0 % 128), for the values
    n0 % 128 takes (multiples of gcd(BLOCK_N, 128)) that fall inside the tile; [] if no tile straddles.
    A tile that reaches a third block crosses it 128 columns later."""
    if block_n % 128 == 0 or 128 % block_n == 0:
        return []
    g = math.gcd(block_n, 128)
    return sorted({128 - r for r in range(0, 128, g) if 128 - r < block_n})


# promote_scales writes one branch arm per column where a tile can cross a B-scale block up to this
# many (bench/TUNING.md: per-group selects cost 128x192 tiles 20% of their speed, step 12; 8 arms tied
# the selects at 128x144, step 37; 16 arms of 84 FFMAs lost to the instruction cache at 64x168, step 40)
PROMOTE_MAX_ARMS = 4
# Beyond them it promotes by indexed jumps where it would otherwise select per column group: at least
# JUMP_MIN_BLOCK_N columns on JUMP_BLOCK_M rows.
# Spec 300 on the H200 (jumps / selects, ABBA): 128x104 0.952 / 0.955, 128x112 0.928 / 0.916, 128x120
# 0.936 / 0.929, 192x112 0.937 / 0.928; not below 104 columns, one math warpgroup or 256 rows
# (bench/TUNING.md step 121).
JUMP_MIN_BLOCK_N = 104
JUMP_BLOCK_M = (128, 192)


def jumps_by_default(block_m: int, block_n: int) -> bool:
    """Whether promote_scales' default rule takes a selecting tile of this size to indexed jumps."""
    return block_n >= JUMP_MIN_BLOCK_N and block_m in JUMP_BLOCK_M


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
# sm_90 clusters: 8 CTAs portable, 16 once the function allows non-portable sizes (the launcher does,
# runtime/driver.allow_non_portable_clusters); more slices give each CTA a shorter K chain
PORTABLE_CLUSTER_SIZE, MAX_CLUSTER_SIZE = 8, 16


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


def refill_ring_slots(refill_slots: int, partials: int = 2, ring_staging: bool = False) -> int:
    """The ring slots a load role that refills `refill_slots` together needs to never deadlock: it
    commits K block p only once slots p .. p + refill_slots - 1 are free, while the math role, waiting
    for block p, may still hold the blocks whose wgmma groups are in flight (partials - 1) and, with
    D staged in a ring slot, the previous tile's last slot until its store has read it (the
    interpreter deadlocks one slot below: tests/test_group_tma_issue.py)."""
    return refill_slots + partials - 1 + (1 if ring_staging else 0)


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
        if cfg.split_k > MAX_CLUSTER_SIZE or cfg.cluster > 1 or cfg.block_m not in CLUSTER_SPLIT_BLOCK_MS:
            raise OpError(f"fp8_gemm_nt: split_reduce='cluster' runs the split_k={cfg.split_k} slices of a tile as "
                          f"one cluster: needs split_k <= {MAX_CLUSTER_SIZE} (sm_90's largest cluster; above "
                          f"{PORTABLE_CLUSTER_SIZE} the launcher allows non-portable sizes), cluster=1 and block_m in "
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
    if cfg.partials not in (2, 3, 4):
        raise OpError(f"fp8_gemm_nt: partials (partial accumulators the k-loop rotates) must be 2, 3 or 4, "
                      f"got {cfg.partials!r}")
    if cfg.split_order not in ("contiguous", "interleaved"):
        raise OpError(f"fp8_gemm_nt: split_order must be 'contiguous' or 'interleaved', got {cfg.split_order!r}")
    if cfg.split_order == "interleaved" and cfg.split_k == 1:
        raise OpError("fp8_gemm_nt: split_order='interleaved' orders the K blocks of split-K slices: it needs "
                      "split_k > 1")
    if cfg.refill_slots not in (1, 2, 4):
        raise OpError(f"fp8_gemm_nt: refill_slots (ring slots the load role refills together) must be 1, 2 or 4, "
                      f"got {cfg.refill_slots!r}")
    need = refill_ring_slots(cfg.refill_slots, cfg.partials, cfg.staging == "ring")
    if cfg.refill_slots > 1 and cfg.stages < need:
        raise OpError(f"fp8_gemm_nt: refill_slots={cfg.refill_slots} needs stages >= {need} (the load role waits for "
                      f"{cfg.refill_slots} free slots while the math role holds up to {need - cfg.refill_slots} of the "
                      f"others: partials={cfg.partials}, staging={cfg.staging!r}; fewer deadlock), got stages={cfg.stages}")
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
    if cfg.ctas_per_sm not in (1, 2, 3, 4):
        raise OpError(f"fp8_gemm_nt: ctas_per_sm must be 1, 2, 3 or 4, got {cfg.ctas_per_sm}")
    if cfg.ctas_per_sm > 1 and (cfg.cluster > 1 or cfg.block_m > 64):
        raise OpError(f"fp8_gemm_nt: ctas_per_sm={cfg.ctas_per_sm} is for block_m=64 without multicast clusters "
                      f"(one math warpgroup, 1/{cfg.ctas_per_sm} of the register file per CTA)")
    if cfg.ctas_per_sm > 1:
        widest = SHARED_SM_MAX_BLOCK_N[cfg.ctas_per_sm][cfg.promotion]
        regs = launch_registers(cfg.threads, cfg.ctas_per_sm)
        if cfg.block_n > widest:
            raise OpError(f"fp8_gemm_nt: ctas_per_sm={cfg.ctas_per_sm} starts each thread with {regs} registers, "
                          f"too few for a 64x{cfg.block_n} wgmma with promotion={cfg.promotion!r} (ptxas: "
                          f"insufficient registers); block_n must be <= {widest}, got {cfg.block_n}")
