"""PTX for split-K over a cluster (split_reduce="cluster"): the K slices of a tile are the S CTAs of one
cluster.  Rank q reduces the fragment pairs p with p % S == q (pair p = registers 2p, 2p + 1 of the
accumulator: columns 8 * (p // 2) + {0, 1}, row half p % 2).  Each CTA pushes every rank its share
with st.async into that rank's receive buffer (`partials`: [sender, pair slot, math thread, 2] floats;
each math warpgroup exchanges its own 64-row fragment),
which completes bytes on the receiver's `ready` mbarrier - no fence on the critical path, and the
reducer reads its own shared memory.  Two mbarriers per CTA, one phase per round (output tile):
  ready - the receiver's math warps each post the bytes they expect (arrive.expect_tx); the phase
          completes when every sender's bytes landed;
  free  - after reading, each math warp of each receiver arrives on every sender's free barrier
          (one fence.acq_rel.cluster, then relaxed arrivals); a sender waits for it before pushing
          the next round.  The last round is not freed: once a CTA has its last round's bytes,
          nothing reaches its shared memory again, so it exits without waiting for its peers
          (a wait there cost ~0.35 us at the end of every kernel, bench/TUNING.md step 25).
Thread t reads exactly the slots that thread t of every sender wrote: the same fragment positions."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dgir.ir import Node

from .epilogue import _fragment_rows_cols, _global_ptr, _store_bf16_pair
from .split import ordered_sum

if TYPE_CHECKING:
    from .emit import Emitter


def _geometry(self: Emitter, buf: str) -> tuple[int, int, int]:
    """(S ranks, pairs per thread, pair slots per sender in a receive buffer)."""
    S, slots, _, _ = self.decls[buf].type.shape
    return S, self.k.get("block_n") // 4, slots     # a 64 x BLOCK_N fragment: BLOCK_N / 4 pairs a thread


def _barriers(self: Emitter, buf: str) -> tuple[str, str]:
    """Shared addresses of this CTA's (ready, free) barriers of receive buffer `buf`."""
    ready = self.b.reg()
    self.b(f"add.u32 {ready}, {self.base}, {self.decls[buf].get('barriers')};")
    free = self.b.reg()
    self.b(f"add.u32 {free}, {ready}, 8;")
    return ready, free


def _slot(self: Emitter, buf: str, sender: str, slot: int | str) -> str:
    """Shared address (this CTA's window) of math thread t's float2 from `sender` in pair slot `slot`
    (t counts the math threads: warpgroup g's thread j is 128 g + j)."""
    b = self.b
    _, _, slots = _geometry(self, buf)
    threads = self.decls[buf].type.shape[2]
    i, addr = b.reg(), b.reg()
    b(f"mad.lo.u32 {i}, {sender}, {slots}, {self.val(slot)};")
    t = b.reg()
    b(f"and.b32 {t}, {self.tid}, 127;")
    if threads > 128:
        b(f"mad.lo.u32 {t}, {self.wg_local}, 128, {t};")
    b(f"mad.lo.u32 {i}, {i}, {threads}, {t};")
    b(f"add.u32 {addr}, {self.base}, {self.decls[buf].get('offset')};")
    b(f"mad.lo.u32 {addr}, {i}, 8, {addr};")
    return addr


def _rank(self: Emitter) -> str:
    r = self.b.reg()
    self.b(f"mov.u32 {r}, %cluster_ctarank;")
    return r


def _partial_publish(self: Emitter, n: Node) -> None:
    buf, acc = n.args[:2]
    b = self.b
    S, pairs, _ = _geometry(self, buf)
    A = self.tile(acc)
    rank = _rank(self)
    ready, _ = _barriers(self, buf)
    for p in range(pairs):                      # to rank p % S, its slot p // S of this sender
        q = p % S
        local = _slot(self, buf, rank, p // S)
        remote, bar = b.reg(), b.reg()
        b(f"mapa.shared::cluster.u32 {remote}, {local}, {q};")
        b(f"mapa.shared::cluster.u32 {bar}, {ready}, {q};")
        b(f"st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [{remote}], "
          f"{{{A[2 * p]}, {A[2 * p + 1]}}}, [{bar}];")


def _partial_reduce(self: Emitter, n: Node) -> None:
    D, buf, rnd = n.args[:3]
    b = self.b
    S, pairs, slots = _geometry(self, buf)
    ready, free = _barriers(self, buf)
    rank = _rank(self)
    # this rank's pairs: pairs // S, one more for the first pairs % S ranks; each arrives from S senders
    mine, extra = b.reg(), b.reg("pred")
    b(f"setp.lt.u32 {extra}, {rank}, {pairs % S};")
    b(f"selp.u32 {mine}, {pairs // S + 1}, {pairs // S}, {extra};")
    skip = b.label("expect_posted")
    not_lane0 = b.reg("pred")
    b(f"setp.ne.u32 {not_lane0}, {self.lane}, 0;")
    b(f"@{not_lane0} bra {skip};")
    nbytes = b.reg()
    b(f"mul.lo.u32 {nbytes}, {mine}, {S * 32 * 8};")           # this warp's 32 threads x 8 bytes x S senders
    b(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [{ready}], {nbytes};")
    b.put_label(skip)
    parity = b.reg()
    b(f"and.b32 {parity}, {self.val(rnd)}, 1;")
    self.wait_parity(ready, parity)              # the bytes completed on it: st.async data is visible
    r0, r1, c, M = _fragment_rows_cols(self, n)
    dptr, N = _global_ptr(self, D), self.k.get("n")
    for i in range(slots):
        p = b.reg()                               # pair rank + i * S of the fragment
        b(f"mad.lo.u32 {p}, {i}, {S}, {rank};")
        done = b.label("reduce_slot_done")
        past = b.reg("pred")
        b(f"setp.ge.u32 {past}, {p}, {pairs};")
        b(f"@{past} bra.uni {done};")
        xs = []
        for s in range(S):
            x, y = b.reg("f32"), b.reg("f32")
            b(f"ld.shared.v2.f32 {{{x}, {y}}}, [{_slot(self, buf, self.val(s), i)}];")
            xs.append((x, y))
        sx, sy = ordered_sum(b, xs)              # rank order 0..S-1: the same bits in every run
        # pair p: columns c + 8 * (p // 2), row r0 + 8 * (p % 2)
        col, row, half = b.reg(), b.reg(), b.reg()
        b(f"shr.u32 {col}, {p}, 1;")
        b(f"mad.lo.u32 {col}, {col}, 8, {c};")
        b(f"and.b32 {half}, {p}, 1;")
        b(f"mad.lo.u32 {row}, {half}, 8, {r0};")
        ok, cok = b.reg("pred"), b.reg("pred")
        b(f"setp.lt.u32 {ok}, {row}, {M};")
        b(f"setp.lt.u32 {cok}, {col}, {N};")
        b(f"and.pred {ok}, {ok}, {cok};")
        _store_bf16_pair(self, dptr, N, row, col, sx, sy, ok)
        b.put_label(done)
    # every sender may reuse this buffer once all of this CTA's warps read it; after the last round
    # nothing is sent again, and no arrival may reach a peer that has already exited
    b("bar.warp.sync -1;")
    arrived = b.label("free_arrived")
    b(f"@{not_lane0} bra {arrived};")
    final, last = b.reg(), b.reg("pred")
    b(f"add.u32 {final}, {self.val(rnd)}, 1;")
    b(f"setp.eq.u32 {last}, {final}, {self.val(n.args[3])};")
    b(f"@{last} bra {arrived};")
    b("fence.acq_rel.cluster;                   // the reads above before the arrivals")
    for q in range(S):
        remote = b.reg()
        b(f"mapa.shared::cluster.u32 {remote}, {free}, {q};")
        b(f"mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [{remote}];")
    b.put_label(arrived)


def _partial_reclaim(self: Emitter, n: Node) -> None:
    buf, rnd = n.args
    b = self.b
    skip = b.label("reclaim_done")
    first = b.reg("pred")
    r = self.val(rnd)
    b(f"setp.eq.u32 {first}, {r}, 0;")
    b(f"@{first} bra {skip};")
    _, free = _barriers(self, buf)
    parity = b.reg()
    b(f"sub.u32 {parity}, {r}, 1;")
    b(f"and.b32 {parity}, {parity}, 1;")
    self.wait_parity(free, parity, "cluster")   # the receivers' reads before this CTA's next pushes
    b.put_label(skip)
