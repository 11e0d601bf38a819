"""PTX for split-K over a cluster (split_reduce="cluster"): the K slices of a tile are the CTAs of one
cluster; each publishes its FP32 partial in its own shared memory, and each sums a share of the
tile over every CTA's partial through distributed shared memory (ld.shared::cluster).

Two mbarriers per CTA sequence the rounds (one round per output tile the cluster walks); every math
warp of every CTA arrives on them, so each counts S x 4 x math warpgroups arrivals:
  ready  - the partials of this round are published (arrive.release.cluster after the st.shared;
           the reducer waits with acquire.cluster, then reads the peers' shared memory);
  done   - every CTA has read this CTA's partial (arrive.release.cluster after the reads); a CTA
           waits for it before overwriting its partial with the next round, and before it exits.
The partial is stored in fragment order, one float2 per (warpgroup, pair, thread) with the threads
contiguous, so the 8-byte accesses of a warp are conflict-free and every thread reads exactly the
positions it wrote itself in the peers' copies."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dgir.ir import Node

from .epilogue import _for_each_pair, _global_ptr, _store_bf16_pair

if TYPE_CHECKING:
    from .emit import Emitter


def _barriers(self: Emitter, buf: str) -> tuple[str, str]:
    """Shared addresses of this CTA's (ready, done) barriers of partial `buf`."""
    ready = self.b.reg()
    self.b(f"add.u32 {ready}, {self.base}, {self.decls[buf].get('barriers')};")
    done = self.b.reg()
    self.b(f"add.u32 {done}, {ready}, 8;")
    return ready, done


def _arrive_everywhere(self: Emitter, bar: str, ranks: int) -> None:
    """Once the warp's shared-memory accesses are done (bar.warp.sync orders them before lane 0's
    release, which is cumulative), lane 0 arrives at cluster scope on barrier `bar` of every CTA of
    the cluster.  One arrival per warp: an arrival per thread (S x 128 remote arrivals per barrier
    and round) made the exchange slower than the global-memory reduction (bench/TUNING.md step 23)."""
    b = self.b
    skip = b.label("cluster_arrived")
    b("bar.warp.sync -1;")
    not_lane0 = b.reg("pred")
    b(f"setp.ne.u32 {not_lane0}, {self.lane}, 0;")
    b(f"@{not_lane0} bra {skip};")
    # one fence, then relaxed arrivals (a release pattern): a release on each of the S arrivals
    # would fence S times
    b("fence.acq_rel.cluster;")
    for q in range(ranks):
        remote = b.reg()
        b(f"mapa.shared::cluster.u32 {remote}, {bar}, {q};")
        b(f"mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [{remote}];")
    b.put_label(skip)


def _wait_cluster(self: Emitter, bar: str, parity: str) -> None:
    """Spin on a phase of an own barrier that peers arrive on: acquire at cluster scope, so their
    shared-memory writes (ready) or reads (done) before the arrival are ordered before what follows."""
    b = self.b
    p, loop = b.reg("pred"), b.label("cluster_wait")
    b.put_label(loop)
    b(f"mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 {p}, [{bar}], {parity};")
    b(f"@!{p} bra {loop};")


def _slot(self: Emitter, buf: str, pair: int) -> str:
    """Shared address of this thread's float2 for fragment pair `pair` in partial `buf`."""
    b = self.b
    pairs = self.decls[buf].type.shape[1] // 4
    t, addr = b.reg(), b.reg()
    b(f"and.b32 {t}, {self.tid}, 127;")
    b(f"mad.lo.u32 {t}, {self.wg_local}, {pairs * 128}, {t};")
    b(f"add.u32 {t}, {t}, {pair * 128};")
    b(f"add.u32 {addr}, {self.base}, {self.decls[buf].get('offset')};")
    b(f"mad.lo.u32 {addr}, {t}, 8, {addr};")
    return addr


def _partial_publish(self: Emitter, n: Node) -> None:
    buf, acc = n.args[:2]
    b = self.b
    A = self.tile(acc)
    for p in range(len(A) // 2):                 # pair p = registers 2p, 2p + 1 (columns c, c + 1)
        b(f"st.shared.v2.f32 [{_slot(self, buf, p)}], {{{A[2 * p]}, {A[2 * p + 1]}}};")
    ready, _ = _barriers(self, buf)
    _arrive_everywhere(self, ready, self.decls[buf].get("exchange"))


def _partial_reduce(self: Emitter, n: Node) -> None:
    D, buf, rnd = n.args[:3]
    b = self.b
    S = self.decls[buf].get("exchange")
    ready, done = _barriers(self, buf)
    parity = b.reg()
    b(f"and.b32 {parity}, {self.val(rnd)}, 1;")
    _wait_cluster(self, ready, parity)
    rank = b.reg()
    b(f"mov.u32 {rank}, %cluster_ctarank;")
    dptr, N = _global_ptr(self, D), self.k.get("n")
    pairs = []
    _for_each_pair(self, n, self.decls[buf].type.shape[1], lambda j, half, r, col, ok: pairs.append((r, col, ok)))
    for p, (r, col, ok) in enumerate(pairs):    # p = 2 * column group + row half, as published
        # rank p % S reduces pair p: a branch (uniform over the CTA), so the S loads of one pair are
        # all that is in flight (predicated loads of every pair spilled at S = 8)
        other, skip = b.reg("pred"), b.label("reduce_pair_done")
        b(f"setp.ne.u32 {other}, {rank}, {p % S};")
        b(f"@{other} bra.uni {skip};")
        local = _slot(self, buf, p)
        xs, ys = [], []
        for q in range(S):
            remote, x, y = b.reg(), b.reg("f32"), b.reg("f32")
            b(f"mapa.shared::cluster.u32 {remote}, {local}, {q};")
            b(f"ld.shared::cluster.v2.f32 {{{x}, {y}}}, [{remote}];")
            xs.append(x)
            ys.append(y)
        sx, sy = b.reg("f32"), b.reg("f32")
        b(f"mov.f32 {sx}, 0f00000000;")
        b(f"mov.f32 {sy}, 0f00000000;")
        for x, y in zip(xs, ys):                 # rank order: the same bits in every run
            b(f"add.rn.f32 {sx}, {sx}, {x};")
            b(f"add.rn.f32 {sy}, {sy}, {y};")
        _store_bf16_pair(self, dptr, N, r, col, sx, sy, ok)
        b.put_label(skip)
    _arrive_everywhere(self, done, S)


def _partial_reclaim(self: Emitter, n: Node) -> None:
    buf, rnd = n.args
    b = self.b
    skip = b.label("reclaim_done")
    first = b.reg("pred")
    r = self.val(rnd)
    b(f"setp.eq.u32 {first}, {r}, 0;")
    b(f"@{first} bra {skip};")
    _, done = _barriers(self, buf)
    parity = b.reg()
    b(f"sub.u32 {parity}, {r}, 1;")
    b(f"and.b32 {parity}, {parity}, 1;")
    _wait_cluster(self, done, parity)
    b.put_label(skip)
