"""Ascend lowerings (targets ascend950 / ascend910b) of the GEMM operators, in the same tile IR.

    bf16_gemm_nt   D[M, N] (bf16) = A[M, K] @ B[N, K]^T, bf16 inputs           950 and 910B
    fp8_gemm_nt    D = (A * SFA) @ (B * SFB)^T, e4m3 inputs, DeepSeek scales    950 only (no FP8 Cube on 910B)
    m_grouped_fp8_gemm_nt_contiguous   the same per row group g = MI[row]     950 only
                   SFA f32 [M, ceil(K/128)] (one per row and 128-wide K block, row-major),
                   SFB f32 [ceil(N/128), ceil(K/128)] (one per 128x128 block of B)
    mx_fp8_gemm_nt D = sum_k (A * 2^(SFA-127)) (B * 2^(SFB-127)), OCP MX: e4m3 A [M, K], B [N, K]   950 only
    mx_fp4_gemm_nt the same with e2m1 A, B packed two per byte (low nibble first), K even           950 only
                   SFA ue8m0 [M, 2*ceil(K/64)], SFB ue8m0 [N, 2*ceil(K/64)]: one scale per row and 32-wide K
                   block, stored in pairs (the 950's 16 x 2 scale fractal covers 64 K; CATLASS's MxScaleA
                   (m, ceil(k/64), 2)); when ceil(K/32) is odd the last column is padding (any finite e8m0).
                   Any K >= 1: the cube zero-fills K past the end (ND->Nz pads to 32 B; fill_l1 pads fp8
                   tiles to the 64-element MmadMx granule), so a partial last block is exact.

A kernel is the same Node tree as on Hopper: declarations, then one region per execution unit.  On
Ascend a `warpgroup` region is the program of one core type: `unit="aic"` (the cube core: MTE2, MTE1,
M and FIX pipes) or `unit="aiv"` (the vector cores, two per AIC on a MIX 1:2 launch).  On-chip buffers
are `local` declarations with `pos` L1 / L0A / L0B / L0C / UB.  The lowered IR states the algorithm per
output tile (BM x BN) and K block (BK):

    copy_in   A/B K-slices GM -> L1 (ND -> Nz)                 role load   (MTE2)
    load_l0   L1 -> L0A / L0B                                 role load   (MTE1)
    mmad      L0C (+)= L0A @ L0B^T (fp32)                     role mma    (M)
    fixpipe   L0C -> D (fp32 -> bf16)                         role store  (FIX)

The MX operators stay on the cube (AIC only): `copy_in` also brings the tile's e8m0 scale pairs to L1
(DN -> Nz, 16 x 2 scale fractals), `load_l0_mx` moves data and scales to L0A/L0B and their MX slots, and
`mmad_mx` (MmadMx) applies the scales inside the MMA, so no vector promotion is needed.
fp8_gemm_nt issues `mmad_scaled` instead (one per 128-wide K block: acc += A_blk B_blk^T * sfa * sfb);
passes/ascend_promote_scales.py turns it into the 950's cube -> vector promotion (Fixpipe of each
partial to a GM workspace, cross-core flags, vector-core acc += part * sfa * sfb).  Pipes, the
SetFlag/WaitFlag synchronisation and buffer offsets are added by the other Ascend passes.
Tiles are chosen with the Ascend cost MODEL (emitters/ascendc/costmodel.py) among the tilings the
emitted kernel implements (single-buffered L1/L0/L0C).
"""
from __future__ import annotations

import dataclasses
import hashlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from ..builder import Builder
from ..ir import DType, Node, Op, Type
from . import OPERATORS, OpError, Operator, register_operator
from . import fp8_gemm  # noqa: F401  (registers fp8_gemm_nt first: the Ascend lowering is added to it)

ASCEND_TARGETS = {"ascend950": "950", "ascend910b": "910b"}
FP8_BLOCK = 128                   # DeepSeek scale block along K (and along N for B)
GROUP_ALIGN = 128                 # m-grouped contiguous layout: each group's rows padded to a multiple of this
UINT16_MAX = 65535
MX_BLOCK = 32                     # OCP MX: one e8m0 scale per 32 K elements
MX_MMAD_K = 64                    # MmadMx takes K in multiples of 64 (one 16 x 2 scale fractal)
MX_DTYPES = {"mxfp8": "fp8", "mxfp4": "fp4"}       # in_dtype -> cost-model dtype (with mx=True)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def chip_of(target: str) -> str:
    if target not in ASCEND_TARGETS:
        raise OpError(f"unknown Ascend target {target!r}; known: {', '.join(ASCEND_TARGETS)}")
    return ASCEND_TARGETS[target]


def _costmodel():
    from ..emitters.ascendc import costmodel
    return costmodel


@dataclass(frozen=True)
class AscendGemmConfig:
    op: str
    chip: str                     # "950" | "910b"
    n: int
    k: int
    in_dtype: str                 # "bf16" | "fp8"
    block_m: int
    block_n: int
    block_k: int
    cores: int                    # AI cores (AICs) the kernel may be launched on
    groups: int = 0               # m-grouped (contiguous layout): number of B matrices; 0 = plain GEMM
    model_us: float = 0.0         # cost MODEL of the shape the config was chosen for (not a measurement)
    model_util: float = 0.0

    @property
    def k_blocks(self) -> int:
        return ceil_div(self.k, self.block_k)

    @property
    def n_blocks(self) -> int:
        return ceil_div(self.n, self.block_n)

    @property
    def scaled(self) -> bool:
        return self.in_dtype == "fp8"

    @property
    def mx(self) -> bool:
        return self.in_dtype in MX_DTYPES

    def key(self) -> str:
        d = {k: v for k, v in asdict(self).items() if not k.startswith("model_")}
        return hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:8]

    def kernel_name(self) -> str:
        g = f"_g{self.groups}" if self.groups else ""
        return f"{self.op}_{self.chip}{g}_n{self.n}_k{self.k}_bm{self.block_m}_bn{self.block_n}_bk{self.block_k}"


@dataclass(frozen=True)
class AscendGemm:
    """The Ascend side of one operator: which chips have it, its shape limits, tiles and lowering."""
    op: str
    in_dtype: str
    chips: tuple
    grouped: bool = False

    def check(self, chip: str, m, n, k, groups=None, **extra) -> None:
        name = self.op
        if self.grouped:
            if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
                raise OpError(f"{name}: --groups must be an int >= 1, got {groups!r}")
        elif groups is not None:
            extra["groups"] = groups
        for dim, v in (("m", m), ("n", n), ("k", k)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise OpError(f"{name}: {dim} must be an int, got {v!r}")
        if extra:
            raise OpError(f"{name} takes dimensions m, n, k; unknown {', '.join(extra)}")
        if chip not in self.chips:
            target = "ascend910b" if chip == "910b" else "ascend950"
            mx = (" with e8m0 block scales (MmadMx and the L0A/L0B MX scale buffers exist only on arch 3510)"
                  if self.in_dtype in MX_DTYPES else "")
            raise OpError(f"{name} is not supported on {target}: its {self.in_dtype.upper()} inputs{mx} need the "
                          f"arch-3510 Cube (Ascend 950); the 910B (arch 2201) Cube takes only bf16/fp16/int8 "
                          f"(use bf16_gemm_nt there)")
        if m < 1:
            raise OpError(f"{name}: m must be >= 1, got {m}")
        if n < 1 or k < 1:
            raise OpError(f"{name}: n and k must be >= 1, got n={n}, k={k}")
        if m > 2**31 - 1 or n > 2**31 - 1:
            raise OpError(f"{name}: m and n must be < 2^31 (the kernel's tile loop uses 32-bit rows)")
        if self.in_dtype == "mxfp4" and k % 2:
            raise OpError(f"{name}: k={k} must be even: e2m1 values are packed two per byte (low nibble first), "
                          f"so every row of A and B must start on a byte")
        if chip == "910b" and k > UINT16_MAX:
            raise OpError(f"{name}: k={k} exceeds 65535, the largest GM row pitch of the 910B's GM->L1 ND->Nz copy "
                          f"(Nd2NzParams.srcDValue is uint16 on arch 2201)")
        if chip == "910b" and n > UINT16_MAX:
            raise OpError(f"{name}: n={n} exceeds 65535, the largest D row pitch a 910B Fixpipe takes here")

    def candidates(self, chip: str):
        cm = _costmodel()
        c = cm.get_chip(chip)
        dtype, mx = cost_dtype(self.in_dtype)
        for cfg in cm.candidate_configs(dtype, c, mx=mx):
            if (cfg.l1_stages, cfg.l0_stages, cfg.l0c_stages) != (1, 1, 1):
                continue                      # the emitted kernel is single-buffered: model what it does
            if mx and (cfg.base_k % MX_MMAD_K or cfg.base_m // 16 > 255 or cfg.base_n // 16 > 255):
                continue                      # whole scale fractals per K block; LoadData2DMxParams steps are uint8
            if self.in_dtype == "fp8":
                # one partial per 128-wide K block; an N tile inside one 128-row B-scale block;
                # each of the two AIVs takes BM/2 rows; UB holds acc + part (f32) + out (bf16) halves
                if cfg.base_k != FP8_BLOCK or FP8_BLOCK % cfg.base_n or cfg.base_m % 32:
                    continue
                if (cfg.base_m // 2) * cfg.base_n * (4 + 4 + 2) > c.ub:
                    continue
                if self.grouped and GROUP_ALIGN % cfg.base_m:
                    continue          # an M tile must not straddle two groups (rows are 128-aligned per group)
            yield cfg

    def choose_config(self, chip: str, m: int, n: int, k: int, groups: int | None = None) -> AscendGemmConfig:
        self.check(chip, m, n, k, groups)
        cm = _costmodel()
        c = cm.get_chip(chip)
        best = None
        dtype, mx = cost_dtype(self.in_dtype)
        for cfg in self.candidates(chip):
            r = cm.estimate(max(m, 1), n, k, dtype, c, cfg, "bf16", mx=mx)
            key = (round(r.time_us, 4), sum(cm.footprint(cfg, dtype, mx).values()))
            if best is None or key < best[0]:
                best = (key, cfg, r)
        if best is None:
            raise OpError(f"{self.op}: no legal tile config on {c.name}")
        _, cfg, r = best
        return AscendGemmConfig(op=self.op, chip=chip, n=n, k=k, in_dtype=self.in_dtype, block_m=cfg.base_m,
                                block_n=cfg.base_n, block_k=cfg.base_k, cores=c.aic, groups=groups or 0,
                                model_us=r.time_us, model_util=r.utilization)

    def lower(self, cfg: AscendGemmConfig) -> Node:
        return lower(cfg)


def cost_dtype(in_dtype: str):
    """(cost-model dtype, mx) of an operator's in_dtype."""
    return (MX_DTYPES[in_dtype], True) if in_dtype in MX_DTYPES else (in_dtype, False)


def mx_scale_cols(k: int) -> int:
    """Columns of an MX scale tensor: ceil(K/32) rounded up to whole pairs (16 x 2 scale fractals)."""
    return 2 * ceil_div(k, MX_MMAD_K)


def _tile_coords(b: Builder, cfg: AscendGemmConfig, t: str, M: str):
    """Tile index -> (m0, n0, rows, cols): row-major over (m block, n block); tails clipped."""
    BM, BN = cfg.block_m, cfg.block_n
    mb = b.scalar(Op.DIV, "mb", t, cfg.n_blocks)
    nb = b.scalar(Op.MOD, "nb", t, cfg.n_blocks)
    m0 = b.scalar(Op.MUL, "m0", mb, BM)
    n0 = b.scalar(Op.MUL, "n0", nb, BN)
    rows = b.scalar(Op.MIN, "rows", b.scalar(Op.SUB, "m_left", M, m0), BM)
    cols = b.scalar(Op.MIN, "cols", b.scalar(Op.SUB, "n_left", cfg.n, n0), BN)
    return m0, n0, rows, cols


def tile_group(b: Builder, cfg: AscendGemmConfig, m0: str):
    """m-grouped: the tile's group g = MI[m0] (-1: padding rows, the tile is skipped) -> (g, valid)."""
    g = b.emit(Op.GM_READ, "g", "MI", m0, type=Type(DType.i32))
    return g, b.scalar(Op.LT, "valid", -1, g)


def tile_loop_header(b: Builder, cfg: AscendGemmConfig, core: str):
    """Scalars every region starts with: its AIC index, the AIC count, M and the tile count."""
    bid = b.scalar(Op.SREG, "bid", which=core)
    gsz = b.scalar(Op.SREG, "gsz", which="grid_size")
    M = b.scalar(Op.DIM, "M", "A", axis=0)
    mblocks = b.scalar(Op.CEILDIV, "m_blocks", M, cfg.block_m)
    tiles = b.scalar(Op.MUL, "tiles", mblocks, cfg.n_blocks)
    return bid, gsz, M, tiles


@contextmanager
def _maybe_group(b: Builder, cfg: AscendGemmConfig, m0: str, n0: str):
    """Yield (B row of the tile's N block, SFB row).  m-grouped: both offset by the tile's group, and the
    rest of the tile sits inside `if valid` (padding rows, group -1, are skipped)."""
    sb_n = b.scalar(Op.DIV, "sb_n", n0, FP8_BLOCK) if cfg.scaled else None
    if not cfg.groups:
        yield n0, sb_n
        return
    g, valid = tile_group(b, cfg, m0)
    with b.region(Op.IF, "", valid):
        b_row = b.scalar(Op.ADD, "b_row", b.scalar(Op.MUL, "g_rows", g, cfg.n), n0)
        sb_row = b.scalar(Op.ADD, "sb_row", b.scalar(Op.MUL, "g_sb", g, ceil_div(cfg.n, FP8_BLOCK)), sb_n)
        yield b_row, sb_row


def lower(cfg: AscendGemmConfig) -> Node:
    if cfg.mx:
        return lower_mx(cfg)
    BM, BN, BK = cfg.block_m, cfg.block_n, cfg.block_k
    dt = DType.e4m3 if cfg.in_dtype == "fp8" else DType.bf16
    kb_total = ceil_div(cfg.k, FP8_BLOCK)
    decl = Builder()
    decl.emit(Op.PARAM, "A", type=Type(dt, ("M", cfg.k)), layout="kmajor")
    if cfg.scaled:
        decl.emit(Op.PARAM, "SFA", type=Type(DType.f32, ("M", kb_total)), layout="rowmajor")
    G = max(cfg.groups, 1)
    decl.emit(Op.PARAM, "B", type=Type(dt, (G * cfg.n, cfg.k)), layout="kmajor")
    if cfg.scaled:
        decl.emit(Op.PARAM, "SFB", type=Type(DType.f32, (G * ceil_div(cfg.n, FP8_BLOCK), kb_total)), layout="rowmajor")
    if cfg.groups:
        decl.emit(Op.PARAM, "MI", type=Type(DType.i32, ("M",)), layout="rowmajor")
    decl.emit(Op.PARAM, "D", type=Type(DType.bf16, ("M", cfg.n)), layout="rowmajor", output=True)
    decl.emit(Op.LOCAL, "a_l1", type=Type(dt, (BM, BK)), pos="L1")
    decl.emit(Op.LOCAL, "b_l1", type=Type(dt, (BN, BK)), pos="L1")
    decl.emit(Op.LOCAL, "a_l0", type=Type(dt, (BM, BK)), pos="L0A")
    decl.emit(Op.LOCAL, "b_l0", type=Type(dt, (BN, BK)), pos="L0B")
    decl.emit(Op.LOCAL, "acc", type=Type(DType.f32, (BM, BN)), pos="L0C")

    b = Builder(role="load")
    bid, gsz, M, tiles = tile_loop_header(b, cfg, "block_id")
    with b.region(Op.FOR, "t", bid, tiles, gsz) as t:
        m0, n0, rows, cols = _tile_coords(b, cfg, t, M)
        with _maybe_group(b, cfg, m0, n0) as (b_row, sb_row):
            with b.region(Op.FOR, "kb", 0, cfg.k_blocks, 1) as kb:
                k0 = b.scalar(Op.MUL, "k0", kb, BK)
                kl = b.scalar(Op.MIN, "kl", b.scalar(Op.SUB, "k_left", cfg.k, k0), BK)
                first = b.scalar(Op.LT, "first", kb, 1)
                b.emit(Op.COPY_IN, "", "a_l1", "A", m0, k0, rows, kl, nd2nz=True)
                b.emit(Op.COPY_IN, "", "b_l1", "B", b_row, k0, cols, kl, nd2nz=True)
                b.emit(Op.LOAD_L0, "", "a_l0", "a_l1", rows, kl)
                b.emit(Op.LOAD_L0, "", "b_l0", "b_l1", cols, kl)
                if cfg.scaled:
                    b.emit(Op.MMAD_SCALED, "", "acc", "a_l0", "b_l0", rows, cols, kl, first, kb, m0, sb_row,
                           sfa="SFA", sfb="SFB", role="mma")
                else:
                    b.emit(Op.MMAD, "", "acc", "a_l0", "b_l0", rows, cols, kl, first, role="mma")
            b.emit(Op.FIXPIPE, "", "D", "acc", m0, n0, rows, cols, role="store")
    cube = Node(Op.WARPGROUP, "", (), None, {"ids": (0,), "roles": ("load", "mma", "store"), "unit": "aic"},
                b.nodes())
    attrs = {"op": cfg.op, "target": "ascend950" if cfg.chip == "950" else "ascend910b", "chip": cfg.chip,
             "n": cfg.n, "k": cfg.k, "in_dtype": cfg.in_dtype, "block_m": BM, "block_n": BN, "block_k": BK,
             "cores": cfg.cores, "config": cfg.key()}
    if cfg.groups:
        attrs["groups"] = cfg.groups
    return Node(Op.KERNEL, cfg.kernel_name(), (), None, attrs, decl.nodes() + (cube,))


def _kernel_attrs(cfg: AscendGemmConfig) -> dict:
    attrs = {"op": cfg.op, "target": "ascend950" if cfg.chip == "950" else "ascend910b", "chip": cfg.chip,
             "n": cfg.n, "k": cfg.k, "in_dtype": cfg.in_dtype, "block_m": cfg.block_m, "block_n": cfg.block_n,
             "block_k": cfg.block_k, "cores": cfg.cores, "config": cfg.key()}
    if cfg.groups:
        attrs["groups"] = cfg.groups
    return attrs


def mx_fill_cols(cfg: AscendGemmConfig):
    """fp8 MX: (first column, count) of the last K block that neither ND->Nz (which pads to 32 elements)
    nor the data covers but MmadMx reads (it takes K in multiples of 64); None when nothing is missing."""
    if cfg.in_dtype != "mxfp8":
        return None                   # e2m1: 32 B = 64 elements, ND->Nz already pads to the MmadMx granule
    kl_last = cfg.k - (cfg.k_blocks - 1) * cfg.block_k
    padded = ceil_div(kl_last, 32) * 32
    return (padded, 32) if padded % MX_MMAD_K else None


def lower_mx(cfg: AscendGemmConfig) -> Node:
    """OCP MX GEMM on the 950 cube: per (tile, K block) copy data + scale pairs to L1, load both to L0,
    one MmadMx that applies the scales; the accumulator leaves through Fixpipe as for bf16."""
    if cfg.chip != "950":
        raise OpError(f"{cfg.op}: MmadMx (e8m0 block scales) exists only on the Ascend 950 (arch 3510)")
    BM, BN, BK = cfg.block_m, cfg.block_n, cfg.block_k
    dt = DType.e4m3 if cfg.in_dtype == "mxfp8" else DType.e2m1
    ks = mx_scale_cols(cfg.k)
    decl = Builder()
    decl.emit(Op.PARAM, "A", type=Type(dt, ("M", cfg.k)), layout="kmajor")
    decl.emit(Op.PARAM, "SFA", type=Type(DType.ue8m0, ("M", ks)), layout="rowmajor")
    decl.emit(Op.PARAM, "B", type=Type(dt, (cfg.n, cfg.k)), layout="kmajor")
    decl.emit(Op.PARAM, "SFB", type=Type(DType.ue8m0, (cfg.n, ks)), layout="rowmajor")
    decl.emit(Op.PARAM, "D", type=Type(DType.bf16, ("M", cfg.n)), layout="rowmajor", output=True)
    decl.emit(Op.LOCAL, "a_l1", type=Type(dt, (BM, BK)), pos="L1")
    decl.emit(Op.LOCAL, "b_l1", type=Type(dt, (BN, BK)), pos="L1")
    decl.emit(Op.LOCAL, "sfa_l1", type=Type(DType.ue8m0, (BM, BK // MX_BLOCK)), pos="L1")
    decl.emit(Op.LOCAL, "sfb_l1", type=Type(DType.ue8m0, (BN, BK // MX_BLOCK)), pos="L1")
    decl.emit(Op.LOCAL, "a_l0", type=Type(dt, (BM, BK)), pos="L0A")
    decl.emit(Op.LOCAL, "b_l0", type=Type(dt, (BN, BK)), pos="L0B")
    decl.emit(Op.LOCAL, "acc", type=Type(DType.f32, (BM, BN)), pos="L0C")
    fill = mx_fill_cols(cfg)

    b = Builder(role="load")
    bid, gsz, M, tiles = tile_loop_header(b, cfg, "block_id")
    with b.region(Op.FOR, "t", bid, tiles, gsz) as t:
        m0, n0, rows, cols = _tile_coords(b, cfg, t, M)
        with b.region(Op.FOR, "kb", 0, cfg.k_blocks, 1) as kb:
            k0 = b.scalar(Op.MUL, "k0", kb, BK)
            kl = b.scalar(Op.MIN, "kl", b.scalar(Op.SUB, "k_left", cfg.k, k0), BK)
            first = b.scalar(Op.LT, "first", kb, 1)
            s0 = b.scalar(Op.MUL, "s0", kb, BK // MX_BLOCK)
            sl = b.scalar(Op.CEILDIV, "sl", kl, MX_BLOCK)
            b.emit(Op.COPY_IN, "", "a_l1", "A", m0, k0, rows, kl, nd2nz=True)
            b.emit(Op.COPY_IN, "", "b_l1", "B", n0, k0, cols, kl, nd2nz=True)
            b.emit(Op.COPY_IN, "", "sfa_l1", "SFA", m0, s0, rows, sl, mx_scales=True)
            b.emit(Op.COPY_IN, "", "sfb_l1", "SFB", n0, s0, cols, sl, mx_scales=True)
            if fill is not None:
                def zero_tail():
                    b.emit(Op.FILL_L1, "", "a_l1", rows, fill[0], fill[1])
                    b.emit(Op.FILL_L1, "", "b_l1", cols, fill[0], fill[1])
                if cfg.k_blocks == 1:
                    zero_tail()
                else:
                    with b.region(Op.IF, "", b.scalar(Op.LT, "last", cfg.k_blocks - 2, kb)):
                        zero_tail()
            b.emit(Op.LOAD_L0_MX, "", "a_l0", "a_l1", "sfa_l1", rows, kl)
            b.emit(Op.LOAD_L0_MX, "", "b_l0", "b_l1", "sfb_l1", cols, kl)
            b.emit(Op.MMAD_MX, "", "acc", "a_l0", "b_l0", rows, cols, kl, first, role="mma")
        b.emit(Op.FIXPIPE, "", "D", "acc", m0, n0, rows, cols, role="store")
    cube = Node(Op.WARPGROUP, "", (), None, {"ids": (0,), "roles": ("load", "mma", "store"), "unit": "aic"},
                b.nodes())
    return Node(Op.KERNEL, cfg.kernel_name(), (), None, _kernel_attrs(cfg), decl.nodes() + (cube,))


BF16 = AscendGemm("bf16_gemm_nt", "bf16", ("950", "910b"))
FP8 = AscendGemm("fp8_gemm_nt", "fp8", ("950",))
GROUPED_FP8 = AscendGemm("m_grouped_fp8_gemm_nt_contiguous", "fp8", ("950",), grouped=True)


MX_FP8 = AscendGemm("mx_fp8_gemm_nt", "mxfp8", ("950",))
MX_FP4 = AscendGemm("mx_fp4_gemm_nt", "mxfp4", ("950",))


def _no_sm90a_op(op):
    raise OpError(f"{op} has no sm90a lowering yet (targets: ascend950, ascend910b)")


def _no_sm90a(**dims):
    _no_sm90a_op("bf16_gemm_nt")


register_operator(Operator(
    name="bf16_gemm_nt", dims=("m", "n", "k"), compiled_dims=("n", "k"),
    choose_config=_no_sm90a, lower=None, check=lambda **d: None, ascend=BF16,
    doc="D = A @ B^T; bf16 A[M,K], B[N,K]; bf16 D.  Ascend targets only."))
OPERATORS["fp8_gemm_nt"] = dataclasses.replace(OPERATORS["fp8_gemm_nt"], ascend=FP8)
register_operator(Operator(
    name="m_grouped_fp8_gemm_nt_contiguous", dims=("m", "n", "k", "groups"), compiled_dims=("n", "k", "groups"),
    choose_config=lambda **d: _no_sm90a_op("m_grouped_fp8_gemm_nt_contiguous"), lower=None, check=lambda **d: None,
    ascend=GROUPED_FP8,
    doc="D[r] = (A[r]*SFA[r]) @ (B[g]*SFB[g])^T with g = MI[r] (-1: padding row, skipped); rows of a group are "
        "contiguous and padded to 128; e4m3 A[M,K], B[G*N,K]; f32 SFA [M, K/128], SFB [G*N/128, K/128]; bf16 D. "
        "Ascend 950 only."))
register_operator(Operator(
    name="mx_fp8_gemm_nt", dims=("m", "n", "k"), compiled_dims=("n", "k"),
    choose_config=lambda **d: _no_sm90a_op("mx_fp8_gemm_nt"), lower=None, check=lambda **d: None, ascend=MX_FP8,
    doc="OCP MX FP8: D = sum_k (A*2^(SFA-127)) (B*2^(SFB-127)); e4m3 A[M,K], B[N,K]; ue8m0 SFA [M, 2*ceil(K/64)], "
        "SFB [N, 2*ceil(K/64)] (one scale per 32 K, stored in pairs); bf16 D.  Ascend 950 only (MmadMx)."))
register_operator(Operator(
    name="mx_fp4_gemm_nt", dims=("m", "n", "k"), compiled_dims=("n", "k"),
    choose_config=lambda **d: _no_sm90a_op("mx_fp4_gemm_nt"), lower=None, check=lambda **d: None, ascend=MX_FP4,
    doc="OCP MX FP4: as mx_fp8_gemm_nt with e2m1 A, B packed two per byte (low nibble first, K even).  "
        "Ascend 950 only (MmadMx)."))
