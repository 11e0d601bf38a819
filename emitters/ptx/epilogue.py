"""PTX for the store role: the bf16 staging tile and TMA stores, direct stores, and the fragment
addressing the split-K / stream-K partials (split.py) share."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dgir.ir import Node

from .errors import EmitError

if TYPE_CHECKING:
    from .emit import Emitter


# The 128B-swizzled staging tile is written with stmatrix.x4 (four 8x8 bf16 blocks, 16 bytes a
# lane, per instruction) instead of one st.shared.b32 per register pair: the same bytes in a
# quarter of the store instructions.  False: the per-pair stores (bench A/B).
STAGE_WITH_STMATRIX = True


def _staging_parts(self: Emitter, d_tile: str, slot) -> list[tuple[str, int]]:
    """(base register, constant byte offset) of each part of the staging tile: its 64-column panels
    (128B-swizzled tiles) or the whole tile.  A tile of its own is one block, the panels BM x 128 B
    apart; a tile placed in a ring slot (stage_in_ring_slot) has each part at its `panels` entry:
    (ring, offset in the slot of counter `slot`)."""
    d = self.decls[d_tile]
    BM, BN = d.type.shape
    if not d.get("ring"):
        base = self.smem_addr(d_tile)
        count = BN // 64 if d.get("swizzle") == 128 else 1
        return [(base, p * BM * 128) for p in range(count)]
    return [(self.smem_addr(ring, slot, off), 0) for ring, off in d.get("panels")]


def _stage_out(self: Emitter, n: Node) -> None:
    d_tile, acc = n.args[:2]
    b = self.b
    A = self.tile(acc)
    BM, BN = self.decls[d_tile].type.shape
    parts = _staging_parts(self, d_tile, n.args[2] if len(n.args) > 2 else None)
    base = parts[0][0]
    if self.decls[d_tile].get("swizzle") == 128:
        if STAGE_WITH_STMATRIX:
            _stage_out_stmatrix(self, n, A, BM, parts)
            return
        if len(parts) > 1 and parts[1][0] != base:
            raise EmitError("the per-pair staging stores need the staging panels in one block (STAGE_WITH_STMATRIX)")
        # 64-column panels of BM rows x 128 B; 16-byte chunk c of row r sits at chunk c ^ (r % 8)
        row, x, rb = b.reg(), b.reg(), b.reg()
        b(f"mad.lo.u32 {row}, {self.slice_of(n)}, 64, {self.row0};")
        b(f"and.b32 {x}, {self.row0}, 7;")
        b(f"mad.lo.u32 {rb}, {row}, 128, {base};")
        b(f"mad.lo.u32 {rb}, {self.col0}, 2, {rb};")
        for j in range(len(A) // 4):
            lo, hi, ch, addr = b.reg(), b.reg(), b.reg(), b.reg()
            b(f"cvt.rn.bf16x2.f32 {lo}, {A[4 * j + 1]}, {A[4 * j]};")
            b(f"cvt.rn.bf16x2.f32 {hi}, {A[4 * j + 3]}, {A[4 * j + 2]};")
            b(f"xor.b32 {ch}, {x}, {j % 8};")
            b(f"shl.b32 {ch}, {ch}, 4;")
            b(f"add.u32 {addr}, {rb}, {ch};")
            panel = (j // 8) * BM * 128
            b(f"st.shared.b32 [{addr}+{panel}], {lo};")
            b(f"st.shared.b32 [{addr}+{panel + 8 * 128}], {hi};   // row + 8: same swizzle phase")
        return
    row = b.reg()
    b(f"mad.lo.u32 {row}, {self.slice_of(n)}, 64, {self.row0};")
    addr = b.reg()
    b(f"mad.lo.u32 {addr}, {row}, {BN}, {self.col0};")
    b(f"mad.lo.u32 {addr}, {addr}, 2, {base};")
    for j in range(len(A) // 4):
        lo, hi = b.reg(), b.reg()
        b(f"cvt.rn.bf16x2.f32 {lo}, {A[4 * j + 1]}, {A[4 * j]};")
        b(f"cvt.rn.bf16x2.f32 {hi}, {A[4 * j + 3]}, {A[4 * j + 2]};")
        b(f"st.shared.b32 [{addr}+{16 * j}], {lo};")
        b(f"st.shared.b32 [{addr}+{16 * j + 8 * BN * 2}], {hi};   // row + 8")


def _stage_out_stmatrix(self: Emitter, n: Node, A: list, BM: int, parts: list) -> None:
    """The accumulator's 8-column groups j, j + 1 (registers 4j..4j+7) are the four 8x8 blocks of
    one stmatrix.x4: (rows 0-7, group j), (rows 8-15, j), (rows 0-7, j + 1), (rows 8-15, j + 1) of
    the warp's 16 rows.  Lane l gives the address of row l % 8 of block l / 8; in the 128B-swizzled
    panel (64 columns, 128-byte rows) 16-byte chunk c of row r sits at chunk c ^ (r % 8)."""
    b = self.b
    lane_row, half, r8, rb = b.reg(), b.reg(), b.reg(), b.reg()
    b(f"and.b32 {r8}, {self.lane}, 7;")
    b(f"bfe.u32 {half}, {self.lane}, 3, 1;            // block l/8: odd blocks are rows 8-15")
    b(f"mad.lo.u32 {lane_row}, {half}, 8, {r8};")
    b(f"mad.lo.u32 {lane_row}, {self.warp}, 16, {lane_row};")
    b(f"mad.lo.u32 {lane_row}, {self.slice_of(n)}, 64, {lane_row};")
    one_block = all(p[0] == parts[0][0] for p in parts)
    # one block: the lane's row address includes the base; panels in ring slots: each adds its own
    b(f"mad.lo.u32 {rb}, {lane_row}, 128, {parts[0][0] if one_block else 0};")
    b(f"shr.u32 {half}, {self.lane}, 4;                // blocks 2, 3: column group j + 1")
    chunk_addr = {}
    for jc in (0, 2, 4, 6):                          # the group's chunk within its panel
        c, addr = b.reg(), b.reg()
        b(f"add.u32 {c}, {half}, {jc};")
        b(f"xor.b32 {c}, {c}, {r8};")
        b(f"shl.b32 {c}, {c}, 4;")
        b(f"add.u32 {addr}, {rb}, {c};")
        chunk_addr[jc] = addr
    for j in range(0, len(A) // 4, 2):
        regs = []
        for g in (j, j + 1):
            lo, hi = b.reg(), b.reg()
            b(f"cvt.rn.bf16x2.f32 {lo}, {A[4 * g + 1]}, {A[4 * g]};")
            b(f"cvt.rn.bf16x2.f32 {hi}, {A[4 * g + 3]}, {A[4 * g + 2]};")
            regs += [lo, hi]
        base, panel = parts[j // 8]
        addr = chunk_addr[j % 8]
        if not one_block:
            addr = b.reg()
            b(f"add.u32 {addr}, {base}, {chunk_addr[j % 8]};")
        b(f"stmatrix.sync.aligned.m8n8.x4.shared.b16 [{addr}+{panel}], {{{', '.join(regs)}}};")


# the named barrier over every math warpgroup of the CTA (sync [across="math"]; split-K's flag
# broadcast uses the same one, never in the same kernel)
MATH_BARRIER = 15


def _sync(self: Emitter, n: Node) -> None:
    if n.get("fence_async"):
        self.b("fence.proxy.async.shared::cta;      // st.shared -> visible to the TMA engine")
    if n.get("across") == "math":
        self.b(f"bar.sync {MATH_BARRIER}, {128 * self.n_wgs};   // every math warpgroup")
        return
    bar = self.b.reg()
    self.b(f"add.u32 {bar}, {self.wg_local}, 1;")
    self.b(f"bar.sync {bar}, 128;")


def _tma_store(self: Emitter, n: Node) -> None:
    param, d_tile, c0, c1 = n.args[:4]
    b = self.b
    skip = b.label("store_done")
    self.if_leader(skip)
    BN = self.decls[d_tile].type.shape[1]
    parts = _staging_parts(self, d_tile, n.args[4] if len(n.args) > 4 else None)
    sl = self.slice_of(n)
    src = b.reg()                                    # this warpgroup's rows of an unswizzled tile
    b(f"mad.lo.u32 {src}, {sl}, {64 * BN * 2}, {parts[0][0]};")
    row = b.reg()
    b(f"mad.lo.u32 {row}, {sl}, 64, {self.val(c1)};")
    M = b.reg()
    b(f"ld.param.u32 {M}, [dim_M];")
    p = b.reg("pred")
    b(f"setp.ge.u32 {p}, {row}, {M};                // this warpgroup's rows lie past M")
    b(f"@{p} bra {skip};")
    tm = self.tmap(param)
    # an L2 eviction policy for D's lines (made at the top of the region), when the store asks for one
    hint, policy = (".L2::cache_hint", f", {self.policies[n.get('l2')]}") if n.get("l2") else ("", "")
    if self.decls[d_tile].get("swizzle") == 128:     # one store per 64-column panel
        rows_of = {}                                 # this warpgroup's 64 rows of each panel's block
        for base, _ in parts:
            if base not in rows_of:
                rows_of[base] = b.reg()
                b(f"mad.lo.u32 {rows_of[base]}, {sl}, {64 * 128}, {base};")
        for c, (base, off) in enumerate(parts):
            col = b.reg()
            b(f"add.u32 {col}, {self.val(c0)}, {64 * c};")
            b(f"cp.async.bulk.tensor.2d.global.shared::cta.bulk_group{hint} [{tm}, {{{col}, {row}}}], "
              f"[{rows_of[base]}+{off}]{policy};")
    else:
        b(f"cp.async.bulk.tensor.2d.global.shared::cta.bulk_group{hint} [{tm}, {{{self.val(c0)}, {row}}}], [{src}]{policy};")
    b("cp.async.bulk.commit_group;")
    b.put_label(skip)


def _tma_store_wait(self: Emitter, n: Node) -> None:
    skip = self.b.label("store_wait_done")
    self.if_leader(skip)
    self.b(f"cp.async.bulk.wait_group{'.read' if n.get('read') else ''} 0;")
    self.b.put_label(skip)


def _fragment_rows_cols(self: Emitter, n: Node):
    """Global (row r0, row r0 + 8, column base) of this thread's accumulator fragment for a tile op."""
    b = self.b
    m0, n0 = self.val(n.args[-2]), self.val(n.args[-1])
    r0, r1, c = b.reg(), b.reg(), b.reg()
    b(f"mad.lo.u32 {r0}, {self.slice_of(n)}, 64, {self.row0};")
    b(f"add.u32 {r0}, {r0}, {m0};")
    b(f"add.u32 {r1}, {r0}, 8;")
    b(f"add.u32 {c}, {n0}, {self.col0};")
    M = b.reg()
    b(f"ld.param.u32 {M}, [dim_M];")
    return r0, r1, c, M


def _global_ptr(self: Emitter, param: str) -> str:
    p = self.b.reg("b64")
    self.b(f"ld.param.u64 {p}, [ptr_{param}];")
    self.b(f"cvta.to.global.u64 {p}, {p};")
    return p


def _for_each_pair(self: Emitter, n: Node, ncols: int, fn) -> None:
    """Call fn(j, half, row, col, ok_pred) for each (8-column group j, row half) of the fragment;
    ok_pred is false outside [0, M) x [0, N)."""
    b = self.b
    r0, r1, c, M = _fragment_rows_cols(self, n)
    N = self.k.get("n")
    rows_ok = []
    for r in (r0, r1):
        p = b.reg("pred")
        b(f"setp.lt.u32 {p}, {r}, {M};")
        rows_ok.append(p)
    for j in range(ncols // 8):
        col = b.reg()
        b(f"add.u32 {col}, {c}, {8 * j};")
        cp = b.reg("pred")
        b(f"setp.lt.u32 {cp}, {col}, {N};")
        for half, r in enumerate((r0, r1)):
            ok = b.reg("pred")
            b(f"and.pred {ok}, {rows_ok[half]}, {cp};")
            fn(j, half, r, col, ok)


def _store_direct(self: Emitter, n: Node) -> None:
    """bf16 D straight from the accumulator registers, without shared memory (epilogue="direct").

    A lane holds columns 2t, 2t + 1 (t = lane % 4) of each 8-column group j, for rows r and r + 8.
    Lanes t and t ^ 1 swap one bf16 pair per two groups (shfl.bfly 1): an even lane then holds
    columns 2t .. 2t + 3 of group j, an odd lane 2t - 2 .. 2t + 1 of group j + 1, so each lane
    stores 8 bytes and a quad writes a row's 32-byte sector whole (one pair per lane would leave
    every sector half-written by each store).  Column offsets are immediates from one address
    per row; N % 8 == 0 keeps each 4-column piece wholly inside or outside D."""
    D, acc = n.args[:2]
    b = self.b
    A = self.tile(acc)
    N = self.k.get("n")
    base = _global_ptr(self, D)
    r0, r1, c, M = _fragment_rows_cols(self, n)
    odd = b.reg("pred")
    t1 = b.reg()
    b(f"and.b32 {t1}, {self.lane}, 1;")
    b(f"setp.ne.u32 {odd}, {t1}, 0;")
    col = b.reg()                                    # this lane's first column: c (= n0 + 2t), +6 if odd
    b(f"mad.lo.u32 {col}, {t1}, 6, {c};")
    groups = len(A) // 4
    edge = N % self.k.get("block_n") != 0           # the last n tile reaches past N
    row_addr, row_ok = [], []
    for r in (r0, r1):
        idx, off, addr, ok = b.reg(), b.reg("b64"), b.reg("b64"), b.reg("pred")
        b(f"mad.lo.u32 {idx}, {r}, {N}, {col};")
        b(f"mul.wide.u32 {off}, {idx}, 2;")
        b(f"add.s64 {addr}, {base}, {off};")
        b(f"setp.lt.u32 {ok}, {r}, {M};")
        row_addr.append(addr)
        row_ok.append(ok)
    for j in range(0, groups - 1, 2):
        col_ok = None
        if edge:
            cj, col_ok = b.reg(), b.reg("pred")
            b(f"add.u32 {cj}, {col}, {8 * j};")
            b(f"setp.lt.u32 {col_ok}, {cj}, {N};")
        for half in (0, 1):
            mine, other = b.reg(), b.reg()           # bf16 pairs of groups j and j + 1, this row
            v, w = 4 * j + 2 * half, 4 * (j + 1) + 2 * half
            b(f"cvt.rn.bf16x2.f32 {mine}, {A[v + 1]}, {A[v]};")
            b(f"cvt.rn.bf16x2.f32 {other}, {A[w + 1]}, {A[w]};")
            send, got, lo, hi = b.reg(), b.reg(), b.reg(), b.reg()
            b(f"selp.b32 {send}, {mine}, {other}, {odd};      // even lanes keep group j, odd lanes j + 1")
            b(f"shfl.sync.bfly.b32 {got}, {send}, 1, 31, -1;")
            b(f"selp.b32 {lo}, {got}, {mine}, {odd};")
            b(f"selp.b32 {hi}, {other}, {got}, {odd};")
            ok = row_ok[half]
            if col_ok is not None:
                ok = b.reg("pred")
                b(f"and.pred {ok}, {row_ok[half]}, {col_ok};")
            b(f"@{ok} st.global.v2.b32 [{row_addr[half]}+{16 * j}], {{{lo}, {hi}}};")
    if groups % 2:     # a last group without a partner (BLOCK_N an odd multiple of 8): a pair per lane
        j = groups - 1
        cj, col_ok = b.reg(), b.reg("pred")
        b(f"add.u32 {cj}, {c}, {8 * j};")
        b(f"setp.lt.u32 {col_ok}, {cj}, {N};")
        for half, r in enumerate((r0, r1)):
            ok = b.reg("pred")
            b(f"and.pred {ok}, {row_ok[half]}, {col_ok};")
            _store_bf16_pair(self, base, N, r, cj, A[4 * j + 2 * half], A[4 * j + 2 * half + 1], ok)


def _store_bf16_pair(self: Emitter, base: str, N: int, r, col, lo: str, hi: str, ok: str) -> None:
    """D[r, col:col+2] = bf16(lo, hi) where predicate ok holds (row-major bf16 D with N columns)."""
    b = self.b
    pair, idx, off, addr = b.reg(), b.reg(), b.reg("b64"), b.reg("b64")
    b(f"cvt.rn.bf16x2.f32 {pair}, {hi}, {lo};")
    b(f"mad.lo.u32 {idx}, {r}, {N}, {col};")
    b(f"mul.wide.u32 {off}, {idx}, 2;")
    b(f"add.s64 {addr}, {base}, {off};")
    b(f"@{ok} st.global.b32 [{addr}], {pair};")
