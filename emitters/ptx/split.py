"""PTX for split-K and stream-K partials: FP32 pieces of an output tile stored to a global
workspace, counted in per tile, and summed in a fixed order by whichever CTA completes the tile
(the same bits whoever that is, run after run)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dgir.ir import Node

from .epilogue import _for_each_pair, _global_ptr, _store_bf16_pair

if TYPE_CHECKING:
    from .emit import Emitter


def _tile_offsets(self: Emitter, n: Node, ncols: int) -> list[tuple[int, str]]:
    """(first register index, float offset inside a BLOCK_M x ncols tile) of each fragment pair of
    this thread: row = its 64-row slice + row0 (+8), column = col0 + 8 j."""
    b = self.b
    r0 = b.reg()
    b(f"mad.lo.u32 {r0}, {self.slice_of(n)}, 64, {self.row0};")
    rows = []
    for half in (0, 1):
        o = b.reg()
        b(f"mad.lo.u32 {o}, {r0}, {ncols}, {self.col0};")
        if half:
            b(f"add.u32 {o}, {o}, {8 * ncols};")
        rows.append(o)
    out = []
    for j in range(ncols // 8):
        for half in (0, 1):
            o = b.reg()
            b(f"add.u32 {o}, {rows[half]}, {8 * j};")
            out.append((4 * j + 2 * half, o))
    return out


def _compact_plane(self: Emitter, base: str, slot: str) -> str:
    """Address of compact workspace plane `slot` (a register; BLOCK_M x BLOCK_N floats)."""
    b = self.b
    plane = b.reg("b64")
    BM, BN = self.k.get("block_m"), self.k.get("block_n")
    b(f"mul.wide.u32 {plane}, {slot}, {4 * BM * BN};")
    b(f"add.s64 {plane}, {plane}, {base};")
    return plane


def _split_store(self: Emitter, n: Node) -> None:
    W, acc, split = n.args[:3]
    b = self.b
    A = self.tile(acc)
    base = _global_ptr(self, W)
    if n.get("compact"):     # a whole tile-sized plane per slot: no bounds, rows past M included
        plane = _compact_plane(self, base, self.val(split))
        for v, off in _tile_offsets(self, n, 2 * len(A)):
            addr = b.reg("b64")
            b(f"mad.wide.u32 {addr}, {off}, 4, {plane};")
            b(f"st.global.v2.f32 [{addr}], {{{A[v]}, {A[v + 1]}}};")
        return
    M = b.reg()
    b(f"ld.param.u32 {M}, [dim_M];")
    plane = b.reg()
    b(f"mul.lo.u32 {plane}, {self.val(split)}, {M};")        # rows of slice `split` start at split * M
    N = self.k.get("n")

    def store(j, half, r, col, ok):
        idx, off, addr = b.reg(), b.reg("b64"), b.reg("b64")
        b(f"add.u32 {idx}, {plane}, {r};")
        b(f"mad.lo.u32 {idx}, {idx}, {N}, {col};")
        b(f"mul.wide.u32 {off}, {idx}, 4;")
        b(f"add.s64 {addr}, {base}, {off};")
        v = 4 * j + 2 * half
        b(f"@{ok} st.global.v2.f32 [{addr}], {{{A[v]}, {A[v + 1]}}};")
    _for_each_pair(self, n, 2 * len(A), store)


def _counter_of_tile(self: Emitter, n: Node, label: str) -> tuple[str, str]:
    """(address of the tile's arrival counter, label after the block) - only CTA thread 0 goes on."""
    locks, tile = n.args[:2]
    b = self.b
    skip = b.label(label)
    lead = b.reg("pred")
    b(f"setp.ne.u32 {lead}, {self.tid}, 0;")
    b(f"@{lead} bra {skip};")
    ptr = _global_ptr(self, locks)
    off = b.reg("b64")
    b(f"mul.wide.u32 {off}, {self.val(tile)}, 4;")
    b(f"add.s64 {ptr}, {ptr}, {off};")
    return ptr, skip


def _split_arrive(self: Emitter, n: Node) -> None:
    """Count this CTA's piece in; 1 (uniform over the CTA) when it completes the tile.  With
    (counters, tile, count, skip): a run-time count, and skip != 0 (uniform) returns 1 at once."""
    b = self.b
    d = done = None
    if len(n.args) == 4:
        d, done = b.reg(), b.label("split_arrive_skipped")
        b(f"mov.u32 {d}, 1;")
        whole = b.reg("pred")
        b(f"setp.ne.u32 {whole}, {self.val(n.args[3])}, 0;")
        b(f"@{whole} bra.uni {done};")
        final = b.reg()
        b(f"sub.u32 {final}, {self.val(n.args[2])}, 1;")
    else:
        final = n.get("splits") - 1

    def count_in(ptr):
        old, last = b.reg(), b.reg()
        # the release half publishes every partial the bar.sync before it ordered (cumulativity:
        # CUTLASS's semaphore is this pattern); the acquire half, with the bar.sync after it, makes
        # the other CTAs' partials visible to the reducing threads.  No separate fence.acq_rel.gpu:
        # each one waited for the CTA's stores to reach L2 (bench/TUNING.md step 21)
        b(f"atom.acq_rel.gpu.global.add.u32 {old}, [{ptr}], 1;")
        p = b.reg("pred")
        b(f"setp.eq.u32 {p}, {old}, {final};")
        b(f"selp.u32 {last}, 1, 0, {p};")
        return last
    self.env[n.name] = _leader_decides(self, n, "split_arrive", "every partial of this CTA is stored", count_in, d)
    if done:
        b.put_label(done)


def _split_peek(self: Emitter, n: Node) -> None:
    """1 (uniform over the CTA) when the other count-1 pieces of the tile have all counted in: then
    this CTA completes the tile without storing its own piece (an acquire load of the counter)."""
    b = self.b

    def peek(ptr):
        v, final, p, last = b.reg(), b.reg(), b.reg("pred"), b.reg()
        b(f"ld.acquire.gpu.global.u32 {v}, [{ptr}];")
        b(f"sub.u32 {final}, {self.val(n.args[2])}, 1;")
        b(f"setp.eq.u32 {p}, {v}, {final};")
        b(f"selp.u32 {last}, 1, 0, {p};")
        return last
    self.env[n.name] = _leader_decides(self, n, "split_peek", "the flag's last reader is done", peek)


def _leader_decides(self: Emitter, n: Node, what: str, why: str, decide, dst: str | None = None) -> str:
    """Thread 0 of the CTA computes a flag from the tile's counter (decide(ptr) -> register); every
    math thread gets it through shared memory between two barriers over the math warpgroups."""
    b = self.b
    flag = self.smem_addr(n.get("flag"))
    nthreads = 128 * self.n_wgs
    b(f"bar.sync 15, {nthreads};                 // {why}")
    ptr, skip = _counter_of_tile(self, n, f"{what}_done")
    b(f"st.shared.u32 [{flag}], {decide(ptr)};")
    b.put_label(skip)
    b(f"bar.sync 15, {nthreads};")
    dst = dst or b.reg()
    b(f"ld.shared.u32 {dst}, [{flag}];")
    return dst


# Registers a thread may hold for partials in flight during the reduction (the accumulator is dead
# by then; the math warpgroups have 216).
REDUCE_INFLIGHT_REGS = 128


def _split_reduce(self: Emitter, n: Node) -> None:
    """D tile = bf16(sum over slices 0..S-1 of W[s] tile), added in slice order whoever reduces, so the
    sum has the same bits in every run.  The loads of every slice are issued before the first add:
    the reduction is one L2 round trip per chunk, not S of them (a loop over slices cost ~3 us at S=7,
    bench/TUNING.md step 21)."""
    D, W = n.args[:2]
    b = self.b
    S, BN = n.get("splits"), n.get("n")
    base, dptr = _global_ptr(self, W), _global_ptr(self, D)
    M = b.reg()
    b(f"ld.param.u32 {M}, [dim_M];")
    N = self.k.get("n")
    plane_bytes = b.reg("b64")                # one slice of W is M x N floats
    b(f"mul.wide.u32 {plane_bytes}, {M}, {4 * N};")
    pairs = []
    _for_each_pair(self, n, BN, lambda j, half, r, col, ok: pairs.append((r, col, ok)))
    chunk = max(1, REDUCE_INFLIGHT_REGS // (2 * S))
    for at in range(0, len(pairs), chunk):
        group = pairs[at:at + chunk]
        loaded = []                           # loaded[i][s] = (x, y) of pair i, slice s
        for r, col, ok in group:
            idx, off, addr = b.reg(), b.reg("b64"), b.reg("b64")
            b(f"mad.lo.u32 {idx}, {r}, {N}, {col};")
            b(f"mul.wide.u32 {off}, {idx}, 4;")
            b(f"add.s64 {addr}, {base}, {off};")
            xy = []
            for s in range(S):
                px, py = b.reg("f32"), b.reg("f32")
                b(f"mov.f32 {px}, 0f00000000;")
                b(f"mov.f32 {py}, 0f00000000;")
                b(f"@{ok} ld.global.cg.v2.f32 {{{px}, {py}}}, [{addr}];")
                xy.append((px, py))
                if s + 1 < S:
                    nxt = b.reg("b64")
                    b(f"add.s64 {nxt}, {addr}, {plane_bytes};")
                    addr = nxt
            loaded.append(xy)
        for (r, col, ok), xy in zip(group, loaded):
            _store_bf16_pair(self, dptr, N, r, col, *ordered_sum(b, xy), ok)


# Fragment pairs split_gather sums at a time: a running sum and a loaded pair each
GATHER_CHUNK_PAIRS = 16


def _split_gather(self: Emitter, n: Node) -> None:
    """acc = the tile's sum over pieces 0..count-1 in piece order (count <= attr splits, known at
    run time): piece `own` is acc itself, piece p the compact workspace plane slot0 + p.  Per chunk
    of fragment pairs a running sum starts from 0 and adds the pieces in order, so its bits are
    those of ordered_sum whoever gathers; count and own are the same in the whole CTA, so absent
    and own pieces are skipped by uniform branches."""
    acc, W, count, own, slot0 = n.args
    b = self.b
    A = self.tile(acc)
    base = _global_ptr(self, W)
    offsets = _tile_offsets(self, n, 2 * len(A))
    for at in range(0, len(offsets), GATHER_CHUNK_PAIRS):
        chunk = offsets[at:at + GATHER_CHUNK_PAIRS]
        sums = [(b.reg("f32"), b.reg("f32")) for _ in chunk]
        for sx, sy in sums:
            b(f"mov.f32 {sx}, 0f00000000;")
            b(f"mov.f32 {sy}, 0f00000000;")
        for s in range(n.get("splits")):
            p, mine, done = b.reg("pred"), b.label("gather_own_piece"), b.label("gather_piece_done")
            b(f"setp.ge.u32 {p}, {s}, {self.val(count)};")
            b(f"@{p} bra.uni {done};")                  # no piece s
            b(f"setp.eq.u32 {p}, {self.val(own)}, {s};")
            b(f"@{p} bra.uni {mine};")                  # piece s is this CTA's: in acc
            slot = b.reg()
            b(f"add.u32 {slot}, {self.val(slot0)}, {s};")
            plane = _compact_plane(self, base, slot)
            loaded = []
            for v, off in chunk:
                addr, x, y = b.reg("b64"), b.reg("f32"), b.reg("f32")
                b(f"mad.wide.u32 {addr}, {off}, 4, {plane};")
                b(f"ld.global.cg.v2.f32 {{{x}, {y}}}, [{addr}];")
                loaded.append((x, y))
            for (sx, sy), (x, y) in zip(sums, loaded):
                b(f"add.rn.f32 {sx}, {sx}, {x};")
                b(f"add.rn.f32 {sy}, {sy}, {y};")
            b(f"bra.uni {done};")
            b.put_label(mine)
            for (v, off), (sx, sy) in zip(chunk, sums):
                b(f"add.rn.f32 {sx}, {sx}, {A[v]};")
                b(f"add.rn.f32 {sy}, {sy}, {A[v + 1]};")
            b.put_label(done)
        for (v, off), (sx, sy) in zip(chunk, sums):
            b(f"mov.f32 {A[v]}, {sx};")
            b(f"mov.f32 {A[v + 1]}, {sy};")


def ordered_sum(b, pairs) -> tuple[str, str]:
    """(0 + x0 + x1 + ..., 0 + y0 + y1 + ...) in the given order, round-to-nearest FP32 adds: the
    one summation both split-K reductions (global workspace, cluster) use, so that they give the
    same bits as each other and as the interpreter, whoever reduces."""
    sx, sy = b.reg("f32"), b.reg("f32")
    b(f"mov.f32 {sx}, 0f00000000;")
    b(f"mov.f32 {sy}, 0f00000000;")
    for x, y in pairs:
        b(f"add.rn.f32 {sx}, {sx}, {x};")
        b(f"add.rn.f32 {sy}, {sy}, {y};")
    return sx, sy


def _split_reset(self: Emitter, n: Node) -> None:
    ptr, skip = _counter_of_tile(self, n, "split_reset_done")
    self.b(f"st.relaxed.gpu.global.u32 [{ptr}], 0;       // ready for the next launch")
    self.b.put_label(skip)
