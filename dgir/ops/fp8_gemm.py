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

from ..builder import Builder
from ..ir import DType, Node, Op, Type
from . import Operator, register_operator, stream_k

# the config and the walk are their own modules; this one, the operator's, re-exports them
from .fp8_gemm_config import *  # noqa: F403
from .fp8_gemm_config import (
    BLOCK_K,
    NUM_SMS,
    Fp8GemmConfig,
    b_scale_blocks,
    ceil_div,
    check,
    check_config,
)
from .fp8_gemm_walk import *  # noqa: F403
from .fp8_gemm_walk import tail_shift_below

# K blocks ahead of the one read at which a K-major SFA read also pulls a row's next 128-byte line into
# L1 (prefetch.global.L1 where that column starts a line), 0: none.  TUNING.md step 114: a prefetch
# with every read made the small-M GEMMs up to 1.8x slower (each went to L2, where every CTA's requests
# meet on the same few lines of the M <= 128 rows); one per line, 12 K blocks ahead, brings the cells
# whose rows start on line boundaries (K = 16384: all rows change lines at once) to the MN-major
# kernel's time and leaves the rest within the runs' noise (geomean over 8 cells 1.021x the MN-major
# call against 1.032x without)
SFA_PREFETCH_K_BLOCKS = 12


def lower(cfg: Fp8GemmConfig) -> Node:
    """Build the tile IR: one TMA producer warpgroup, `math_wgs` math warpgroups that also store."""
    check_config(cfg)
    decls = _declarations(cfg)
    walk = _TileWalk(cfg)
    producer = Node(Op.WARPGROUP, "", (), None, {"ids": (cfg.math_wgs,), "roles": ("load",)}, _load_role(cfg, walk))
    consumers = Node(Op.WARPGROUP, "", (), None, {"ids": tuple(range(cfg.math_wgs)), "roles": ("mma", "store")},
                     _math_role(cfg, walk))
    return Node(Op.KERNEL, cfg.kernel_name(), (), None, _kernel_attrs(cfg), decls + (producer, consumers))


def _tma_stores_d(cfg: Fp8GemmConfig) -> bool:
    """D leaves through a shared-memory staging tile and TMA stores (else plain stores: the direct
    epilogue, or the CTA that reduces a split tile)."""
    return cfg.split_k == 1 and cfg.epilogue == "tma"


def _register_tiles(cfg: Fp8GemmConfig) -> tuple[list[str], list[str]]:
    """(accumulators, A-scale vectors): one of each per 64-row wave of a math warpgroup."""
    return (["acc"] + [f"acc_w{w}" for w in range(1, cfg.waves)],
            ["sfa"] + [f"sfa_w{w}" for w in range(1, cfg.waves)])


def _wave(cfg: Fp8GemmConfig):
    """The `wave` attr of an op on wave w: wave w of math warpgroup g owns rows 64 * (w * math_wgs + g)
    of the tile (None where each warpgroup has one wave)."""
    return (lambda w: w) if cfg.waves > 1 else (lambda w: None)


def _declarations(cfg: Fp8GemmConfig) -> tuple:
    """The kernel's params (tensors, with their TMA boxes), shared-memory buffers, the operand channel
    and the register tiles."""
    BM, BN, S, nkb, SK, XC, CL = (cfg.block_m, cfg.block_n, cfg.stages, cfg.k_blocks, cfg.split_k,
                                  cfg.split_cluster, cfg.cluster)
    decl = Builder()
    # fit_m=(box axis, alignment): when M < BLOCK_M the box shrinks to align(M, alignment) there, so the
    # TMA does not zero-fill rows past M (measured: mostly out-of-bounds boxes are slow); the kernel's
    # expect_tx follows.  Smem rows past the box keep stale data that only feeds output rows >= M.
    # (clusters are chosen for large M only: their boxes keep the full height)
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
    if _tma_stores_d(cfg):   # stored through shared memory with TMA
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
    if _tma_stores_d(cfg):
        # with BLOCK_N a multiple of 64 the staging tile is stored in 128B-swizzled 64-column panels:
        # the accumulator layout then writes it without bank conflicts, and TMA un-swizzles on the way out
        decl.emit(Op.SMEM, "d_tile", type=Type(DType.bf16, (BM, BN)), swizzle=128 if BN % 64 == 0 else None)
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
    accs, sfas = _register_tiles(cfg)
    for name in accs:
        decl.emit(Op.REGS, name, type=Type(DType.f32, (64, BN)))
    for name in sfas:
        decl.emit(Op.REGS, name, type=Type(DType.f32, (64,)))
    return decl.nodes()


class _TileWalk:
    """The persistent tile walk both roles run, as IR scalar ops: which segments (a tile, one K slice of
    a split tile, or a stream-K piece) each walker takes, and each segment's coordinates.  With
    clusters, one cluster tile is CL neighbouring tiles (along N when A is shared, along M when B is),
    and each cluster walks its own cluster tiles."""

    def __init__(self, cfg: Fp8GemmConfig):
        self.cfg = cfg
        self.CL, self.SK, self.XC, self.STK = cfg.cluster, cfg.split_k, cfg.split_cluster, cfg.stream_k
        self.pair_n = self.CL > 1 and cfg.multicast == "A"
        self.pair_m = self.CL > 1 and cfg.multicast == "B"
        self.grid_n_blocks = cfg.n_blocks // self.CL if self.pair_n else cfg.n_blocks
        self.KBS = cfg.k_blocks_per_split

    def segments(self, b: Builder):
        """(segments of this walker, coordinates of segment li, K blocks it fills): the tile loop
        of the plain walk (one segment = one tile, or one K slice of a split tile), or the stream-K
        walk."""
        cfg, CL, KBS = self.cfg, self.CL, self.KBS
        if self.STK:
            w = stream_k.walk(b, block_rows=cfg.block_m * (CL if self.pair_m else 1),
                              grid_n_blocks=self.grid_n_blocks, k_blocks=KBS, clustered=CL > 1)
            cap = self.m_tail_cap(b)

            def coords(li):
                base, k_first, k_end, t, full, cut = stream_k.segment(b, li, w, KBS)
                m0, n0 = self.tile_origin(b, t, w["mblocks"], cap)
                return dict(base=base, m0=m0, n0=n0, mn=t, split=None, kb0=0, k_first=k_first, k_end=k_end,
                            full=full, cut=cut, pieces=w["P"])
            return w["segs"], coords, lambda: w["fills"]
        bid, gsz, mblocks, mine = self.tile_loop(b)
        cap = self.m_tail_cap(b)

        def coords(li):
            base, m0, n0, mn, split, kb0 = self.tile_coords(b, li, bid, gsz, mblocks, cap)
            return dict(base=base, m0=m0, n0=n0, mn=mn, split=split, kb0=kb0, k_first=0, k_end=KBS)
        return mine, coords, lambda: b.scalar(Op.MUL, "fills", mine, KBS)

    def tile_loop(self, b: Builder):
        """Persistent tile loop shared by both roles: (walker id, walkers, m blocks of the walked grid,
        tiles this walker takes).  The loop counts this walker's own tiles (li = 0, 1, ...; tile
        t = bid + li * gsz): the ring counter base li * KBS then needs no division per tile (a
        division by the run-time grid size is a MUFU.RCP sequence in SASS; this one runs once)."""
        clustered = self.CL > 1 or self.XC
        bid = b.scalar(Op.SREG, "bid", which="cluster_id" if clustered else "block_id")
        gsz = b.scalar(Op.SREG, "gsz", which="cluster_count" if clustered else "grid_size")
        M = b.scalar(Op.DIM, "M", "A", axis=0)
        mblocks = b.scalar(Op.CEILDIV, "m_blocks", M, self.cfg.block_m * (self.CL if self.pair_m else 1))
        # a cluster of slices walks output tiles; otherwise every K slice is a tile of the walk
        ntiles = b.scalar(Op.MUL, "tiles", mblocks, self.grid_n_blocks * (1 if self.XC else self.SK))
        left = b.scalar(Op.SUB, "tiles_left", ntiles, b.scalar(Op.MIN, "first", bid, ntiles))
        mine = b.scalar(Op.CEILDIV, "my_tiles", left, gsz)
        return bid, gsz, mblocks, mine

    def tile_coords(self, b: Builder, li, bid, gsz, mblocks, cap):
        """(ring counter base, m0, n0, output tile, K slice, first K block of the slice) of this
        walker's tile number li."""
        KBS = self.KBS
        t = b.scalar(Op.ADD, "t", bid, b.scalar(Op.MUL, "t_off", li, gsz))
        base = b.scalar(Op.MUL, "kb_base", li, KBS)
        mn, split, kb0 = t, None, 0
        if self.XC:       # the CTA's rank in its cluster is its K slice
            split = b.scalar(Op.SREG, "split", which="cluster_rank")
            kb0 = self.first_k_block(b, split)
        elif self.SK > 1:   # the K slices of one output tile are neighbours in the tile order
            mn = b.scalar(Op.DIV, "mn", t, self.SK)
            split = b.scalar(Op.MOD, "split", t, self.SK)
            kb0 = self.first_k_block(b, split)
        m0, n0 = self.tile_origin(b, mn, mblocks, cap)
        return base, m0, n0, mn, split, kb0

    def first_k_block(self, b: Builder, split):
        """The first K block of slice `split`: its run's start (contiguous slices), or the slice
        itself (interleaved: the slice takes every SK-th block from there, k_block)."""
        if self.cfg.split_order == "interleaved":
            return split
        return b.scalar(Op.MUL, "kb0", split, self.KBS)

    def tile_origin(self, b: Builder, mn, mblocks, cap):
        """(m0, n0) of this CTA's output tile in walked tile mn (L2-banded order; a cluster tile is
        CL neighbouring tiles, this CTA's by its rank); `cap`: m_tail_cap's (M, highest m0), or None."""
        cfg, CL = self.cfg, self.CL
        # a cluster tile sharing B spans CL m blocks: the band holds swizzle_group m blocks, but at
        # least one cluster row (a band of zero rows would divide by zero in the tile walk)
        group = max(1, cfg.swizzle_group // CL) if self.pair_m else cfg.swizzle_group
        mb = b.scalar(Op.TILE_M, "mb", mn, mblocks, group=group, n_blocks=self.grid_n_blocks)
        nb = b.scalar(Op.TILE_N, "nb", mn, mblocks, group=group, n_blocks=self.grid_n_blocks)
        if CL > 1:   # this CTA's tile of the cluster tile (past M for an odd last m block: loads
            rank = b.scalar(Op.SREG, "rank", which="cluster_rank")     # zero-fill, stores skip it)
            if self.pair_n:
                nb = b.scalar(Op.ADD, "nb_cta", b.scalar(Op.MUL, "nb_pair", nb, CL), rank)
            else:
                mb = b.scalar(Op.ADD, "mb_cta", b.scalar(Op.MUL, "mb_pair", mb, CL), rank)
        m0 = b.scalar(Op.MUL, "m0", mb, cfg.block_m)
        n0 = b.scalar(Op.MUL, "n0", nb, cfg.block_n)
        if cap is not None:    # a tile inside M starts at cap at most: m0 - (m0 < M) * (m0 - min(m0, cap))
            M, m0_cap = cap
            over = b.scalar(Op.SUB, "over_cap", m0, b.scalar(Op.MIN, "m0_capped", m0, m0_cap))
            m0 = b.scalar(Op.SUB, "m0_tail", m0, b.scalar(Op.MUL, "tail_up", over, b.scalar(Op.LT, "inside", m0, M)))
        return m0, n0

    def m_tail_cap(self, b: Builder):
        """m_tail: (M, the highest m0 a tile inside M may start at: `tail_cap`, computed by the host
        for each launch), or None when the kernel never shifts.  Per tile, m0 is then capped
        (tile_origin); a tile that starts at or past M, the idle half of a last B-sharing pair,
        keeps its place."""
        if not tail_shift_below(self.cfg):
            return None
        return (b.scalar(Op.DIM, "M_tail", "A", axis=0),
                b.scalar(Op.DIM, "m0_cap", "A", axis=0, derive="m_tail_cap"))


def _k_block(b: Builder, cfg: Fp8GemmConfig, kb0, kbl):
    """The K block of a slice's kbl-th step: kb0 + kbl (contiguous slices), kb0 + kbl * split_k
    (interleaved: kb0 is the slice), or kbl without a split.  Both roles ask here, so the loads
    and the scales they are promoted with always name the same block."""
    if cfg.split_k == 1:
        return kbl
    if cfg.split_order == "interleaved":
        return b.scalar(Op.ADD, "kb", kb0, b.scalar(Op.MUL, "kb_step", kbl, cfg.split_k))
    return b.scalar(Op.ADD, "kb", kb0, kbl)


def _load_role(cfg: Fp8GemmConfig, walk: _TileWalk) -> tuple:
    """The producer: one elected thread of the last warpgroup issues every TMA load."""
    b = Builder(role="load")
    mine, coords, fills = walk.segments(b)
    with b.region(Op.FOR, "li", 0, mine, 1) as li:
        c = coords(li)
        base, m0, n0, kb0 = c["base"], c["m0"], c["n0"], c["kb0"]
        with b.region(Op.FOR, "kbl", c["k_first"], c["k_end"], 1) as kbl:
            ctr = b.scalar(Op.ADD, "ctr", base, kbl)
            kb = _k_block(b, cfg, kb0, kbl)
            k0 = b.scalar(Op.MUL, "k0", kb, BLOCK_K)
            b.emit(Op.ACQUIRE, "", "ab", ctr)
            b.emit(Op.TMA_LOAD, "", "ab", ctr, "a_ring", "A", k0, m0)
            b.emit(Op.TMA_LOAD, "", "ab", ctr, "b_ring", "B", k0, n0)
            if cfg.sfa_major == "mn":
                b.emit(Op.TMA_LOAD, "", "ab", ctr, "sfa_ring", "SFA", m0, kb)
            b.emit(Op.COMMIT, "", "ab", ctr)
    if cfg.cluster > 1:
        # the peer CTA arrives on this CTA's empty barriers until it has released its last slot:
        # wait for every release before the CTA may exit
        b.emit(Op.DRAIN, "", "ab", fills())
    return b.nodes()


def _math_role(cfg: Fp8GemmConfig, walk: _TileWalk) -> tuple:
    """The math warpgroups: one block-scaled MMA per K block into the tile's accumulators, then the
    epilogue (the store role)."""
    accs, sfas = _register_tiles(cfg)
    wave = _wave(cfg)
    b = Builder(role="mma")
    mine, coords, _ = walk.segments(b)
    # K-major SFA: rows past M (a last m block's) read row M - 1 instead of past the tensor
    sfa_rows = b.scalar(Op.DIM, "sfa_rows", "A", axis=0) if cfg.sfa_major == "k" else None
    # stream-K segments end in one of two epilogues (whole tile or a cut one's piece): the
    # overlap_epilogue rewrite, which assumes one, does not apply
    loop_attrs = {"overlap_epilogue": "skipped: stream-K segments end in two kinds of epilogue"} if cfg.stream_k else {}
    with b.region(Op.FOR, "li", 0, mine, 1, **loop_attrs) as li:
        c = coords(li)
        base, n0, kb0 = c["base"], c["n0"], c["kb0"]
        # B scales: an N tile may straddle two (or three) 128-row scale blocks of B (when 128 % BN != 0)
        sb_row0 = b.scalar(Op.DIV, "sb_row0", n0, 128)
        sb_rows = [sb_row0, b.scalar(Op.MIN, "sb_row1", b.scalar(Op.ADD, "sb_next", sb_row0, 1), ceil_div(cfg.n, 128) - 1)]
        if b_scale_blocks(cfg.block_n) > 2:
            sb_rows.append(b.scalar(Op.MIN, "sb_row2", b.scalar(Op.ADD, "sb_next2", sb_row0, 2), ceil_div(cfg.n, 128) - 1))
        for acc in accs:
            b.emit(Op.ZERO, "", acc)
        with b.region(Op.FOR, "kbl", c["k_first"], c["k_end"], 1) as kbl:
            ctr = b.scalar(Op.ADD, "ctr", base, kbl)
            kb = _k_block(b, cfg, kb0, kbl)
            sbs = [b.emit(Op.LOAD_SCALE, f"sb{i}", "SFB", row, kb, type=Type(DType.f32)) for i, row in enumerate(sb_rows)]
            if cfg.sfa_major == "k":   # this thread's rows' scales of K block kb from global memory:
                for w, sfa in enumerate(sfas):      # issued before the slot wait, which hides their latency
                    b.emit(Op.LOAD_ROW_SCALES, "", sfa, "SFA", c["m0"], kb, sfa_rows, wave=wave(w),
                           prefetch=SFA_PREFETCH_K_BLOCKS or None)
            b.emit(Op.WAIT, "", "ab", ctr)
            for w, (acc, sfa) in enumerate(zip(accs, sfas)):
                if cfg.sfa_major == "mn":
                    b.emit(Op.SMEM_READ, "", sfa, "sfa_ring", ctr, wave=wave(w))
                b.emit(Op.MMA_SCALED, "", acc, "a_ring", "b_ring", ctr, sfa, *sbs, n0, n=cfg.block_n, k=BLOCK_K,
                       wave=wave(w))
            b.emit(Op.RELEASE, "", "ab", ctr)
        _epilogue(b, cfg, c, li, mine)
    if _tma_stores_d(cfg):
        b.emit(Op.TMA_STORE_WAIT, "", read=False, role="store")
    return b.nodes()


def _epilogue(b: Builder, cfg: Fp8GemmConfig, c: dict, li, mine) -> None:
    """The store role after a segment's K loop (`c`: its coordinates), by how the tile's K is cut."""
    accs, _ = _register_tiles(cfg)
    wave, W = _wave(cfg), cfg.waves
    m0, n0, mn, split = c["m0"], c["n0"], c["mn"], c["split"]
    if cfg.split_cluster:
        # cluster split-K: send every CTA of the cluster its share of this slice's partial (once
        # they have read the previous round), then sum this CTA's share over the cluster's
        # partials in rank order (deterministic) into D.  The last round is not freed: after it
        # nothing reaches this CTA's shared memory, so it may exit without waiting for its peers
        b.emit(Op.PARTIAL_RECLAIM, "", "partials", li, role="store")
        b.emit(Op.PARTIAL_PUBLISH, "", "partials", accs[0], li, role="store")
        b.emit(Op.PARTIAL_REDUCE, "", "D", "partials", li, mine, m0, n0, role="store", splits=cfg.split_k,
               n=cfg.block_n)
    elif cfg.split_k > 1:
        # split-K epilogue: store this slice's FP32 partial, count the slice in; the CTA that
        # brings the count to SK sums the partials in slice order 0..SK-1 (deterministic) into D
        for w, acc in enumerate(accs):
            b.emit(Op.SPLIT_STORE, "", "W", acc, split, m0, n0, role="store", wave=wave(w))
        last = b.emit(Op.SPLIT_ARRIVE, "last", "LOCKS", mn, type=Type(DType.i32), splits=cfg.split_k, role="store",
                      flag="split_flag")
        with b.region(Op.IF, "", last, role="store"):
            for w in range(W):
                b.emit(Op.SPLIT_REDUCE, "", "D", "W", m0, n0, role="store", wave=wave(w), splits=cfg.split_k,
                       n=cfg.block_n)
            b.emit(Op.SPLIT_RESET, "", "LOCKS", mn, role="store")
    elif cfg.stream_k:
        _stream_k_epilogue(b, cfg, c)
    elif _tma_stores_d(cfg):
        _tma_epilogue(b, cfg, m0, n0)
    else:
        for w, acc in enumerate(accs):
            b.emit(Op.STORE_DIRECT, "", "D", acc, m0, n0, role="store", wave=wave(w))


def _stream_k_epilogue(b: Builder, cfg: Fp8GemmConfig, c: dict) -> None:
    """Stream-K: a whole tile is stored at once.  A cut tile's pieces count in; the walker that
    completes the count sums the pieces in piece order (the same bits whoever that is: its own piece
    from its registers, the others' from the workspace) and stores the tile.  A walker that finds the
    others already in completes it without storing its own."""
    accs, _ = _register_tiles(cfg)
    wave = _wave(cfg)
    m0, n0, mn = c["m0"], c["n0"], c["mn"]
    with b.region(Op.IF, "", c["full"], role="store"):
        _tma_epilogue(b, cfg, m0, n0)
    with b.region(Op.IF, "", c["full"], negate=True, role="store"):
        (slot0, piece), pieces = c["cut"], c["pieces"]
        lock = mn
        if cfg.cluster > 1:       # every CTA of a cluster tile has its own output tile and pieces
            CL = cfg.cluster
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
            _tma_epilogue(b, cfg, m0, n0)


def _tma_epilogue(b: Builder, cfg: Fp8GemmConfig, m0, n0) -> None:
    """bf16 D through a shared-memory staging tile and TMA stores (the store role on the math warpgroups)."""
    accs, _ = _register_tiles(cfg)
    wave = _wave(cfg)
    b.emit(Op.TMA_STORE_WAIT, "", read=True, role="store")
    b.emit(Op.SYNC, "", role="store")
    for w, acc in enumerate(accs):
        b.emit(Op.STAGE_OUT, "", "d_tile", acc, role="store", wave=wave(w))
    b.emit(Op.SYNC, "", fence_async=True, role="store")
    for w in range(cfg.waves):
        b.emit(Op.TMA_STORE, "", "D", "d_tile", n0, m0, role="store", wave=wave(w))


def _kernel_attrs(cfg: Fp8GemmConfig) -> dict:
    """The kernel's attributes: the config as the passes, the launcher and the interpreter read it."""
    attrs = {"op": "fp8_gemm_nt", "n": cfg.n, "k": cfg.k, "block_m": cfg.block_m, "block_n": cfg.block_n,
             "block_k": BLOCK_K, "stages": cfg.stages, "num_sms": cfg.num_sms, "threads": cfg.threads,
             "config": cfg.key(), "split_k": cfg.split_k}
    if cfg.ctas_per_sm > 1:
        attrs["ctas_per_sm"] = cfg.ctas_per_sm
    if cfg.math_order != "together":
        attrs["math_order"] = cfg.math_order      # read by the order_wgmma_issue pass
    if cfg.cluster > 1:
        attrs.update(cluster=cfg.cluster, multicast=cfg.multicast)
    if cfg.split_cluster:
        attrs.update(cluster=cfg.split_k, split_reduce="cluster")
    if cfg.stream_k:
        attrs["stream_k"] = True
    if cfg.promotion != "fp32":
        attrs["promotion"] = cfg.promotion         # read by the rescale_accumulator pass
    if cfg.staging != "tile":
        attrs["staging"] = cfg.staging             # read by the stage_in_ring_slot pass
    if tail_shift_below(cfg):
        attrs["m_tail_below"] = tail_shift_below(cfg)   # read by launch_scalar (the host's m_tail_cap)
    if cfg.early_epilogue != "on":
        attrs["early_epilogue"] = cfg.early_epilogue    # read by the stage_first_wave_early pass
    if cfg.partials != 2:
        attrs["partials"] = cfg.partials                # read by the schedule_mma pass
    if cfg.refill_slots != 1:
        attrs["refill_slots"] = cfg.refill_slots        # read by the group_tma_issue pass
    return attrs


def choose_config(m: int, n: int, k: int, num_sms: int = NUM_SMS, one_cta_per_sm: bool = False) -> Fp8GemmConfig:
    """The cost model's choice for this shape (dgir/ops/fp8_gemm_model.py, which imports this module);
    `one_cta_per_sm`: for a launch limited to `num_sms` of the device's SMs (deep_gemm.set_num_sms)."""
    from .fp8_gemm_model import choose_config as model_choice
    return model_choice(m, n, k, num_sms, one_cta_per_sm)


register_operator(Operator(
    name="fp8_gemm_nt", dims=("m", "n", "k"), compiled_dims=("n", "k"),
    choose_config=choose_config, lower=lower, check=check,
    doc="D = (A*SFA) @ (B*SFB)^T; e4m3 A[M,K], B[N,K]; f32 scales 1x128 (A) and 128x128 (B); bf16 D."))
