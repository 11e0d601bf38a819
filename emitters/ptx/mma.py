"""PTX for the math role: wgmma with shared-memory descriptors, the A-scale reads (from the ring,
or K-major from global memory) and the FP32 promotion (including tiles that straddle two 128-row
B-scale blocks)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dgir.ir import DType, Node
from dgir.ops.fp8_gemm_config import straddle_splits

from .errors import EmitError

if TYPE_CHECKING:
    from .emit import Emitter


def _zero(self: Emitter, n: Node) -> None:
    for r in self.tile(n.args[0]):
        self.b(f"mov.f32 {r}, 0f00000000;")


def _smem_read(self: Emitter, n: Node) -> None:
    """This thread's two rows (r, r + 8) of the slot."""
    dst, ring, ctr = n.args
    b = self.b
    regs = self.tile(dst)
    base = self.smem_addr(ring, ctr)
    row = b.reg()
    b(f"mad.lo.u32 {row}, {self.slice_of(n)}, 64, {self.row0};")
    b(f"mad.lo.u32 {row}, {row}, 4, {base};")
    b(f"ld.shared.f32 {regs[0]}, [{row}];")
    b(f"ld.shared.f32 {regs[1]}, [{row}+32];      // row + 8")


def _load_row_scales(self: Emitter, n: Node) -> None:
    """This thread's two rows (r, r + 8) of column `col` of a row-major f32 param, straight from
    global memory (the read-only path, cached in L1: a row's 128-byte line serves 32 columns), each
    row clamped below `rows`; with `prefetch`=D, the line that column min(col + D, last) of a row
    starts (if it starts one: the base is taken as 128-byte aligned) is pulled into L1 as well, so a
    row's next line is there before it is read."""
    dst, param, m0, col, rows = n.args
    b = self.b
    regs = self.tile(dst)
    ncols = self.decls[param].type.shape[1]
    ptr, last, row = b.reg("b64"), b.reg(), b.reg()
    b(f"ld.param.u64 {ptr}, [ptr_{param}];")
    b(f"cvta.to.global.u64 {ptr}, {ptr};")
    b(f"sub.u32 {last}, {self.val(rows)}, 1;")
    b(f"mad.lo.u32 {row}, {self.slice_of(n)}, 64, {self.row0};")
    b(f"add.u32 {row}, {row}, {self.val(m0)};")
    ahead = n.get("prefetch")
    if ahead:
        pcol = b.reg()
        b(f"add.u32 {pcol}, {self.val(col)}, {ahead};")
        b(f"min.u32 {pcol}, {pcol}, {ncols - 1};")
    for i, reg in enumerate(regs[:2]):
        r, start, off, addr = b.reg(), b.reg(), b.reg(), b.reg("b64")
        b(f"add.u32 {r}, {row}, {8 * i};")
        b(f"min.u32 {r}, {r}, {last};            // rows past M read row M - 1")
        b(f"mul.lo.u32 {start}, {r}, {ncols};")
        b(f"add.u32 {off}, {start}, {self.val(col)};")
        b(f"mad.wide.u32 {addr}, {off}, 4, {ptr};")
        b(f"ld.global.nc.f32 {reg}, [{addr}];")
        if ahead:      # only where that column starts a 128-byte line: one prefetch per line, not per read
            first, p = b.reg(), b.reg("pred")
            b(f"add.u32 {off}, {start}, {pcol};")
            b(f"and.b32 {first}, {off}, 31;")
            b(f"setp.eq.u32 {p}, {first}, 0;")
            b(f"mad.wide.u32 {addr}, {off}, 4, {ptr};")
            b(f"@{p} prefetch.global.L1 [{addr}];")


# A/B knob (bench/experiments.py variant "desc32"): build the K steps' descriptors from the 32-bit
# low word (its 14-bit address field cannot carry: shared addresses < 228 KB) instead of 64-bit adds
DESC_LOW_WORD_STEPS = False
DESC_HI = 1073741888           # SBO 64, layout 1 (128B swizzle)


# A/B knob (bench/experiments.py variant "desccompact"): the low word as the start address >> 4 alone.
# The 14-bit mask is a no-op (shared addresses stay below 228 KB, so >> 4 fits in 14 bits) and the
# leading-byte offset is unused by 128B-swizzled K-major operands (DeepGEMM writes 0): two uniform
# instructions fewer per descriptor, four a K block (bench/TUNING.md step 118)
DESC_COMPACT = False


def _desc(self: Emitter, addr: str) -> tuple[str, str]:
    """64-bit wgmma descriptor (K-major, 128B swizzle, SBO 1024: hopper-ptx.md §4.3) and its low
    word (start address >> 4 in 14 bits, LBO 1)."""
    b = self.b
    lo, d = b.reg(), b.reg("b64")
    b(f"shr.u32 {lo}, {addr}, 4;")
    if not DESC_COMPACT:
        b(f"and.b32 {lo}, {lo}, 16383;")
        b(f"or.b32 {lo}, {lo}, 65536;")
    b(f"mov.b64 {d}, {{{lo}, {DESC_HI}}};       // hi: SBO 64, layout 1 (128B swizzle)")
    return d, lo


def _desc_step(self: Emitter, d: str, lo: str, step: int) -> str:
    """The descriptor `step` K steps (of 32 bytes) past `d` (whose low word is `lo`)."""
    b = self.b
    out = b.reg("b64")
    if DESC_LOW_WORD_STEPS:
        low = b.reg()
        b(f"add.u32 {low}, {lo}, {2 * step};")
        b(f"mov.b64 {out}, {{{low}, {DESC_HI}}};")
    else:
        b(f"add.s64 {out}, {d}, {2 * step};")
    return out


def _wgmma(self: Emitter, n: Node) -> None:
    acc, a_ring, b_ring, ctr = n.args
    b = self.b
    N, K = n.get("n"), n.get("k")
    a_slot = self.decls[a_ring]
    kdt = self.decls[a_ring].type.dtype
    kstep = {DType.e4m3: 32, DType.e5m2: 32, DType.bf16: 16, DType.f16: 16}[kdt]
    row_bytes = a_slot.type.shape[1] * kdt.bits // 8
    a_addr = self.smem_addr(a_ring, ctr)
    b(f"mad.lo.u32 {a_addr}, {self.slice_of(n)}, {64 * row_bytes}, {a_addr};   // this warpgroup's 64 rows")
    (da, lo_a), (db, lo_b) = _desc(self, a_addr), _desc(self, self.smem_addr(b_ring, ctr))
    regs = self.tile(acc)
    if len(regs) != N // 2:
        raise EmitError(f"wgmma n={N} needs a 64x{N} f32 tile, %{acc} has {len(regs)} registers per thread")
    types = {DType.e4m3: "e4m3", DType.e5m2: "e5m2", DType.bf16: "bf16", DType.f16: "f16"}[kdt]
    tail = ", 1, 1" + (", 0, 0" if kstep == 16 else "")
    b("wgmma.fence.sync.aligned;")
    for s in range(K // kstep):
        scale_d = 1 if (s > 0 or n.get("scale_d", 1)) else 0
        dA, dB = da, db
        if s:
            dA, dB = _desc_step(self, da, lo_a, s), _desc_step(self, db, lo_b, s)
        b(f"wgmma.mma_async.sync.aligned.m64n{N}k{kstep}.f32.{types}.{types} "
          f"{{{', '.join(regs)}}}, {dA}, {dB}, {scale_d}{tail};")
    b("wgmma.commit_group.sync.aligned;")


def _wgmma_wait(self: Emitter, n: Node) -> None:
    self.b(f"wgmma.wait_group.sync.aligned {n.get('pending')};")


def _row_scales(self: Emitter, sfa: str, sb) -> tuple[str, str]:
    """(scale of row r0, scale of row r0 + 8) for one B-scale block: sfa[row] * sb."""
    s = self.tile(sfa)
    s0, s1 = self.b.reg("f32"), self.b.reg("f32")
    self.b(f"mul.f32 {s0}, {s[0]}, {self.val(sb)};")
    self.b(f"mul.f32 {s1}, {s[1]}, {self.val(sb)};")
    return s0, s1


def _split_column(self: Emitter, n0) -> str:
    split = self.b.reg()
    self.b(f"and.b32 {split}, {self.val(n0)}, 127;")      # n0 % 128
    self.b(f"sub.u32 {split}, 128, {split};")
    return split


def _block_of(col: int, split: int) -> int:
    """Which B-scale block (0, 1, 2 from n0's) column `col` of a tile that crosses at `split` is in."""
    return (col >= split) + (col >= split + 128)


def _scales(self: Emitter, sfa: str, sbs: list, n0, ncols: int) -> list[tuple[str, str]]:
    """Per 8-column group j: (scale of row r0, scale of row r0+8) = sfa[row] * sfb[n block of col],
    selected per group at run time when the tile crosses a B-scale block."""
    b = self.b
    first = _row_scales(self, sfa, sbs[0])
    block_n = self.k.get("block_n")
    if block_n % 128 == 0:          # aligned tiles: columns 128j .. 128j+127 are B-scale block j
        per_block = [first] + [_row_scales(self, sfa, sb) for sb in sbs[1:block_n // 128]]
        return [per_block[_block_of_group(j, len(per_block))] for j in range(ncols // 8)]
    if not straddle_splits(block_n):
        return [first] * (ncols // 8)
    later = [_row_scales(self, sfa, sb) for sb in sbs[1:]]
    split = _split_column(self, n0)
    out = []
    for j in range(ncols // 8):
        x, y = first
        for i, (sx, sy) in enumerate(later):        # past the i-th crossing: the next block's scale
            p, x2, y2 = b.reg("pred"), b.reg("f32"), b.reg("f32")
            edge = split
            if i:
                edge = b.reg()
                b(f"add.u32 {edge}, {split}, {128 * i};")
            b(f"setp.lt.u32 {p}, {8 * j}, {edge};")
            b(f"selp.f32 {x2}, {x}, {sx}, {p};")
            b(f"selp.f32 {y2}, {y}, {sy}, {p};")
            x, y = x2, y2
        out.append((x, y))
    return out


def _promote(self: Emitter, n: Node) -> None:
    """acc += part * sfa[row] * sfb[block of the column], in the form promote_scales chose for a tile
    that straddles B-scale blocks (`straddle`: arms, selects or jump; a promote without it selects)."""
    acc, part, sfa, *sbs, n0 = n.args
    A, P = self.tile(acc), self.tile(part)
    b = self.b
    splits = straddle_splits(self.k.get("block_n"))
    form = n.get("straddle") or "selects"
    if splits and form == "jump":
        _promote_by_jump(self, A, P, sfa, sbs, n0)
        return
    if not splits or form != "arms":
        scales = _scales(self, sfa, sbs, n0, 2 * len(A))
        for v in range(len(A)):
            b(f"fma.rn.f32 {A[v]}, {P[v]}, {scales[v // 4][(v // 2) % 2]}, {A[v]};")
        return
    # the tile crosses a B-scale block at one of a few columns, fixed for the tile: one branch arm
    # per split column, in which every column group's scale is known at compile time
    row_scales = [_row_scales(self, sfa, sb) for sb in sbs]
    split = _split_column(self, n0)
    done = b.label("promote_done")
    arms = [(b.label(f"promote_split{c}"), c) for c in splits]
    for lab, c in arms:
        p = b.reg("pred")
        b(f"setp.eq.u32 {p}, {split}, {c};")
        b(f"@{p} bra.uni {lab};")
    whole = b.label("promote_one_block")        # the tile lies inside one B-scale block
    b(f"bra.uni {whole};")
    for lab, c in arms + [(whole, len(A) * 2)]:
        b.put_label(lab)
        for v in range(len(A)):
            s = row_scales[min(_block_of(8 * (v // 4), c), len(row_scales) - 1)]
            b(f"fma.rn.f32 {A[v]}, {P[v]}, {s[(v // 2) % 2]}, {A[v]};")
        b(f"bra.uni {done};")
    b.put_label(done)


def _promote_by_jump(self: Emitter, A: list, P: list, sfa: str, sbs: list, n0) -> None:
    """acc += part * scale for a straddling tile, every FFMA once and no select.  Group g (8 columns:
    registers 4g .. 4g + 3) is in B-scale block 0 below J = split / 8 (1 .. 16, fixed for the tile)
    and in block 1 + (g - J) // 16 from there.  So window w of groups (0 .. 16, then 17 .. 32, ...)
    holds one crossing, at J + 16w, with block w below it and block w + 1 from it; each window runs
    block w's FFMAs from the crossing down to its first group, then block w + 1's from the crossing up
    to its last, each run entered by brx.idx on J - 1 (a run that would be empty enters at its end).
    Two copies of the FFMAs in all, however many places the crossing can take."""
    b = self.b
    groups = len(A) // 4
    scales = [_row_scales(self, sfa, sb) for sb in sbs]
    split, entry = _split_column(self, n0), b.reg()
    b(f"shr.u32 {entry}, {split}, 3;")
    b(f"sub.u32 {entry}, {entry}, 1;")             # J - 1, in 0 .. 15
    for w, lo in _windows(groups):
        hi = min(lo + (16 if w == 0 else 15), groups - 1)
        # the crossing J + 16w is at group 16w + 1 .. 16w + 16: below it block w (down to the window's
        # first group), from it block w + 1 (up to its last); a width that never reaches block w + 1
        # has no up run here
        top = min(hi, 16 * w + 15)
        runs = [("down", scales[w], range(top, lo - 1, -1), lambda e: min(e + 16 * w, top))]
        if w + 1 < len(scales):
            runs.append(("up", scales[w + 1], range(16 * w + 1, hi + 1), lambda e: e + 1 + 16 * w))
        for name, (x, y), run, first in runs:
            at = {g: b.label(f"promote_{name}{g}") for g in run}
            end = b.label(f"promote_{name}_end")
            table = b.label(f"promote_{name}_table")
            targets = [at.get(first(e), end) for e in range(16)]    # entry e = J - 1
            b(f"{table}: .branchtargets {', '.join(targets)};")
            b(f"brx.idx.uni {entry}, {table};")
            for g in run:
                b.put_label(at[g])
                for v in range(4 * g, 4 * g + 4):
                    b(f"fma.rn.f32 {A[v]}, {P[v]}, {(x, y)[(v // 2) % 2]}, {A[v]};")
            b.put_label(end)


def _windows(groups: int) -> list[tuple[int, int]]:
    """(w, first group) of the windows of `_promote_by_jump` that hold groups of the tile: 0 .. 16,
    then 17 .. 32, 33 .. 48, ..."""
    return [(0, 0)] + [(w, 16 * w + 1) for w in range(1, groups) if 16 * w + 1 < groups]


def _scale(self: Emitter, n: Node) -> None:
    acc, sfa, *sbs, n0 = n.args
    A = self.tile(acc)
    scales = _scales(self, sfa, sbs, n0, 2 * len(A))
    for v in range(len(A)):
        self.b(f"mul.f32 {A[v]}, {A[v]}, {scales[v // 4][(v // 2) % 2]};")


def _block_of_group(j: int, blocks: int) -> int:
    """The 128-column B-scale block (from n0's) of 8-column group j of a non-straddling tile."""
    return min(8 * j // 128, blocks - 1)


def _rescale(self: Emitter, n: Node) -> None:
    """promotion="rescaled": s_k = sfa[row] * sfb[block]; acc *= s_prev / s_k; s_prev = s_k (s_prev = 0
    before a tile's first K block: a multiply by 0 of a zero tile).  The ratio is s_prev times the
    approximate reciprocal (rcp.approx, 1 ulp): div.rn.f32 compiles to a branch to a slow path per
    division, four of them between the slot's arrival and the wgmma (spec 121: -5..-10%)."""
    acc, s_prev, sfa, *sbs, n0 = n.args
    A, S = self.tile(acc), self.tile(s_prev)
    b = self.b
    ratios = []
    for blk in range(len(S) // 2):
        s_k = _row_scales(self, sfa, sbs[blk])
        r = (b.reg("f32"), b.reg("f32"))
        for i in range(2):
            b(f"rcp.approx.f32 {r[i]}, {s_k[i]};")
            b(f"mul.f32 {r[i]}, {r[i]}, {S[2 * blk + i]};")
            b(f"mov.f32 {S[2 * blk + i]}, {s_k[i]};")
        ratios.append(r)
    for v in range(len(A)):
        b(f"mul.f32 {A[v]}, {A[v]}, {ratios[_block_of_group(v // 4, len(ratios))][(v // 2) % 2]};")


def _apply_scale(self: Emitter, n: Node) -> None:
    acc, s_prev = n.args
    A, S = self.tile(acc), self.tile(s_prev)
    for v in range(len(A)):
        self.b(f"mul.f32 {A[v]}, {A[v]}, {S[2 * _block_of_group(v // 4, len(S) // 2) + (v // 2) % 2]};")


def turn_barrier_base(n_wgs: int) -> int:
    """Named barriers 15 - n_wgs .. 14, one per warpgroup's turn (13, 14 for two warpgroups): 0 is the
    CTA's, 1..n_wgs the warpgroups' own (SYNC), 15 the split-K epilogue's."""
    return 15 - n_wgs


def _turn(self: Emitter, n: Node) -> None:
    """The warpgroups take turns in a ring: `wait` syncs on my barrier, `pass` arrives on the next
    one's (256 threads each: 128 arrive, 128 sync); `prime` (the last warpgroup, warpgroup 0's
    predecessor) and `drain` (warpgroup 0) balance the first and the last pass."""
    b = self.b
    step, N = n.get("step"), self.n_wgs
    base = turn_barrier_base(N)
    bar = b.reg()
    if step in ("wait", "pass"):
        if step == "wait":
            b(f"add.u32 {bar}, {self.wg_local}, {base};")
        elif N == 2:                # base + (1 - wg): one instruction
            b(f"sub.u32 {bar}, {base + 1}, {self.wg_local};")
        else:                       # (wg + 1) mod N
            last = b.reg("pred")
            b(f"add.u32 {bar}, {self.wg_local}, 1;")
            b(f"setp.eq.u32 {last}, {bar}, {N};")
            b(f"selp.u32 {bar}, 0, {bar}, {last};")
            b(f"add.u32 {bar}, {bar}, {base};")
        b(f"bar.{'sync' if step == 'wait' else 'arrive'} {bar}, 256;")
        return
    p = b.reg("pred")
    b(f"setp.eq.u32 {p}, {self.wg_local}, {N - 1 if step == 'prime' else 0};")
    b(f"@{p} bar.{'arrive' if step == 'prime' else 'sync'} {base}, 256;")
