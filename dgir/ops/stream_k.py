"""The stream-K walk of a persistent GEMM (Fp8GemmConfig.stream_k), as IR integer ops.

T tiles of the walked grid (cluster tiles with clusters), G walkers (CTAs, or clusters):

* the first D = T - T % G tiles are whole rounds, walked round-robin (tile walker + j * G);
* the R = T % G tiles left - a partial round, in which G - R walkers would idle - are cut into P
  equal K pieces and the R * P pieces walked round-robin, piece-major (unit v: piece v / R of
  tile D + v % R), so the walkers of one round read one K range, as in the whole rounds (L2
  reuse: the first, contiguous-range form of stream-K lost it, bench/TUNING.md step 36).

P is the divisor of the tile's K blocks (equal pieces keep the ring counter contiguous: the
counter runs on over a walker's segments, dp * KBS + s * L) with the fewest rounds of pieces per
tile, ceil(R * P / G) / P, a larger one taken only for >= 5% fewer, within MAX_ROUNDS rounds.
`split` is the host's copy of that choice (workspace sizing); `walk` and `segment` emit it, so
the kernel needs nothing but M at run time.  The pieces of a cut tile are summed by the split ops
(emitters/ptx/split.py) in piece order, whoever completes the tile.

Measured on the H200 (step 36): correct and bitwise stable, but slower than the plain walk in
every case timed - each piece's epilogue holds the math warpgroups ~8 us.
"""
from __future__ import annotations

from ..builder import Builder
from ..ir import Op

MAX_PIECES = 8       # most pieces a tile is cut into (the split ops unroll over this many planes)
MAX_ROUNDS = 4       # rounds of pieces: bounds the compact workspace by MAX_ROUNDS * G tiles


def piece_counts(k_blocks: int) -> list[int]:
    """The piece counts a tile of `k_blocks` K blocks may be cut into: its divisors up to
    MAX_PIECES that leave pieces of >= 2 blocks."""
    return [p for p in range(2, MAX_PIECES + 1) if k_blocks % p == 0 and k_blocks // p >= 2]


def split(tiles: int, walkers: int, k_blocks: int) -> tuple[int, int]:
    """(whole tiles walked first, pieces per remaining tile): the choice `walk` emits."""
    rest = tiles % walkers
    P, best = 1, -(-rest // walkers)
    for cand in piece_counts(k_blocks):
        r = -(-rest * cand // walkers)
        if r * 100 * P < best * 95 * cand and r <= MAX_ROUNDS:
            P, best = cand, r
    return tiles - rest, P


def select(b: Builder, c, x, y, name: str):
    """c ? x : y for c in {0, 1}, in the IR's integer ops (there is no select op: y + c * (x - y))."""
    return b.scalar(Op.ADD, name, y, b.scalar(Op.MUL, name + "_c", c, b.scalar(Op.SUB, name + "_d", x, y)))


def walk(b: Builder, *, block_rows: int, grid_n_blocks: int, k_blocks: int, clustered: bool) -> dict:
    """Emit the walker's plan: whole rounds, then the piece count and this walker's share of the
    pieces.  block_rows: rows of A one walked tile covers; k_blocks: K blocks per tile.  Returns
    the values `segment` needs, and `segs` (this walker's segments) and `fills` (its K blocks)."""
    bid = b.scalar(Op.SREG, "bid", which="cluster_id" if clustered else "block_id")
    G = b.scalar(Op.SREG, "gsz", which="cluster_count" if clustered else "grid_size")
    M = b.scalar(Op.DIM, "M", "A", axis=0)
    mblocks = b.scalar(Op.CEILDIV, "m_blocks", M, block_rows)
    T = b.scalar(Op.MUL, "tiles", mblocks, grid_n_blocks)
    R = b.scalar(Op.MOD, "rest", T, G)
    D = b.scalar(Op.SUB, "dp_tiles", T, R)
    dp = b.scalar(Op.DIV, "dp_rounds", D, G)
    P, best_r = 1, b.scalar(Op.CEILDIV, "rounds1", R, G)
    for cand in piece_counts(k_blocks):
        r = b.scalar(Op.CEILDIV, f"rounds{cand}", b.scalar(Op.MUL, f"units{cand}", R, cand), G)
        # r / cand < 0.95 best_r / P, cross-multiplied; and within MAX_ROUNDS rounds of pieces
        fewer = b.scalar(Op.LT, f"fewer{cand}", b.scalar(Op.MUL, f"lhs{cand}", b.scalar(Op.MUL, f"r100_{cand}", r, 100), P),
                         b.scalar(Op.MUL, f"rhs{cand}", best_r, 95 * cand))
        take = b.scalar(Op.MUL, f"take{cand}", fewer, b.scalar(Op.LT, f"few_rounds{cand}", r, MAX_ROUNDS + 1))
        P = select(b, take, cand, P, f"pieces{cand}")
        best_r = select(b, take, r, best_r, f"best{cand}")
    if isinstance(P, int):          # no divisor to cut by: whole tiles only
        P = b.scalar(Op.ADD, "pieces", 0, 1)
    L = b.scalar(Op.DIV, "piece_blocks", k_blocks, P)
    units = b.scalar(Op.MUL, "sk_units", R, P)
    n_sk = b.scalar(Op.CEILDIV, "sk_segments",
                    b.scalar(Op.SUB, "sk_left", units, b.scalar(Op.MIN, "sk_first", bid, units)), G)
    segs = b.scalar(Op.ADD, "segments", dp, n_sk)
    fills = b.scalar(Op.ADD, "fills", b.scalar(Op.MUL, "dp_fills", dp, k_blocks), b.scalar(Op.MUL, "sk_fills", n_sk, L))
    R1 = b.scalar(Op.ADD, "rest1", R, b.scalar(Op.LT, "no_rest", R, 1))      # max(R, 1): a divisor
    return dict(bid=bid, G=G, mblocks=mblocks, D=D, dp=dp, P=P, L=L, R1=R1, segs=segs, fills=fills)


def segment(b: Builder, j, w: dict, k_blocks: int):
    """Emit segment j's coordinates: (ring counter base - K block kb has counter base + kb -,
    first and end K block, walked tile, 1 if it is a whole tile, (compact workspace slot of the
    tile's piece 0, this piece))."""
    is_sk = b.scalar(Op.SUB, "is_sk", 1, b.scalar(Op.LT, "is_dp", j, w["dp"]))
    s = b.scalar(Op.SUB, "s", j, w["dp"])
    v = b.scalar(Op.ADD, "unit", w["bid"], b.scalar(Op.MUL, "unit_off", s, w["G"]))
    piece = b.scalar(Op.DIV, "piece", v, w["R1"])
    tt = b.scalar(Op.SUB, "rest_tile", v, b.scalar(Op.MUL, "rest_row", piece, w["R1"]))
    t = select(b, is_sk, b.scalar(Op.ADD, "t_sk", w["D"], tt),
               b.scalar(Op.ADD, "t_dp", w["bid"], b.scalar(Op.MUL, "t_off", j, w["G"])), "t")
    k0 = b.scalar(Op.MUL, "piece_k0", piece, w["L"])
    kb0 = b.scalar(Op.MUL, "kb_first", is_sk, k0)
    kb1 = select(b, is_sk, b.scalar(Op.ADD, "piece_k1", k0, w["L"]), k_blocks, "kb_end")
    sk_base = b.scalar(Op.SUB, "sk_base", b.scalar(Op.ADD, "sk_base0", b.scalar(Op.MUL, "dp_base", w["dp"], k_blocks),
                                                  b.scalar(Op.MUL, "sk_off", s, w["L"])), k0)
    base = select(b, is_sk, sk_base, b.scalar(Op.MUL, "kb_base", j, k_blocks), "ctr_base")
    full = b.scalar(Op.SUB, "full", 1, b.scalar(Op.MUL, "cut", is_sk, b.scalar(Op.LT, "is_cut", w["L"], k_blocks)))
    slot0 = b.scalar(Op.MUL, "slot0", tt, w["P"])
    return base, kb0, kb1, t, full, (slot0, piece)
