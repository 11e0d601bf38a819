"""Stores and split-K epilogues (global workspace, stream-K gathers, the DSMEM exchange of split-K over a
cluster), timestamps and TMA stores: a mixin of `_Machine`."""
from __future__ import annotations

import torch

from ..ir import Node
from .state import InterpError, RaceError, _Blocker, check_box_start, _Task


class EpilogueOps:
    # --- split-K epilogue ---------------------------------------------------------------------------
    def _split_store(self, t: _Task, n: Node):
        W, acc, split = n.args[:3]
        a = self._reg(t, acc, "split_store reads")
        dst = self.tensors[W]
        s = self._int(t, split)
        if n.get("compact"):      # plane s is one BLOCK_M x BLOCK_N tile: every row of the fragment
            if not 0 <= s < dst.shape[0]:
                raise InterpError(f"split_store into compact slot {s} of {dst.shape[0]}")
            rows = self._rows(t, dst[s], "split_store", n.get("wave"))
            dst[s, rows, : a.shape[1]] = a
            return
        m0, n0 = self._int(t, n.args[3]), self._int(t, n.args[4])
        rows = self._rows(t, torch.empty(10**6), "split_store", n.get("wave"))
        r_lo, r_hi = m0 + rows.start, min(m0 + rows.stop, dst.shape[1])
        c_hi = min(n0 + a.shape[1], dst.shape[2])
        if r_hi > r_lo and c_hi > n0:
            dst[s, r_lo:r_hi, n0:c_hi] = a[: r_hi - r_lo, : c_hi - n0]

    def _store_direct(self, t: _Task, n: Node):
        D, acc = n.args[:2]
        a = self._reg(t, acc, "store_direct reads")
        dst = self.tensors[D]
        m0, n0 = self._int(t, n.args[2]), self._int(t, n.args[3])
        rows = self._rows(t, torch.empty(10**6), "store_direct", n.get("wave"))
        r_lo, r_hi = m0 + rows.start, min(m0 + rows.stop, dst.shape[0])
        c_hi = min(n0 + a.shape[1], dst.shape[1])
        if r_hi > r_lo and c_hi > n0:
            dst[r_lo:r_hi, n0:c_hi] = a[: r_hi - r_lo, : c_hi - n0].to(dst.dtype)

    def _split_arrive(self, t: _Task, n: Node):
        locks, tile = n.args[:2]
        count = n.get("splits")
        if len(n.args) == 4:                 # (.., count, skip): run-time count; skip: 1 at once, no barrier
            if self._int(t, n.args[3]):
                t.env[n.name] = 1
                return
            count = self._int(t, n.args[2])
            if not 1 <= count <= n.get("splits"):
                raise InterpError(f"split_arrive: {count} pieces, the workspace holds {n.get('splits')}")

        def arrive(L, i):
            old = int(L[i])
            L[i] = old + 1
            return int(old == count - 1)
        yield from self._leader_decides(t, n, "split_arrive", arrive)

    def _split_peek(self, t: _Task, n: Node):
        count = self._int(t, n.args[2])
        yield from self._leader_decides(t, n, "split_peek", lambda L, i: int(int(L[i]) == count - 1))

    def _leader_decides(self, t: _Task, n: Node, what: str, decide):
        """A CTA-wide barrier of the math warpgroups, then one decision from the tile's counter,
        the same for every warpgroup of the CTA."""
        locks, tile = n.args[:2]
        key = (t.region, t.syncs)
        t.syncs += 1
        arr = t.cta.sync_arrivals
        arr[key] = arr.get(key, 0) + 1
        need = len(self.regions[t.region].get("ids", ()))
        if arr[key] < need:    # a CTA-wide barrier: every partial of the CTA is stored first
            yield _Blocker(lambda: arr[key] >= need,
                           lambda: f"{what} #{key[1]}: {arr[key]}/{need} warpgroups arrived")
        res = t.cta.split_results
        if key not in res:     # the CTA decides once
            L = self.tensors[locks]
            i = self._int(t, tile)
            if not 0 <= i < L.shape[0]:
                raise InterpError(f"{what}: counter {i} outside %{locks} ({L.shape[0]} counters)")
            res[key] = decide(L, i)
        t.env[n.name] = res[key]

    def _split_reduce(self, t: _Task, n: Node):
        D, W = n.args[:2]
        dst, ws = self.tensors[D], self.tensors[W]
        m0, n0 = self._int(t, n.args[2]), self._int(t, n.args[3])
        rows = self._rows(t, torch.empty(10**6), "split_reduce", n.get("wave"))
        r_lo, r_hi = m0 + rows.start, min(m0 + rows.stop, dst.shape[0])
        c_hi = min(n0 + n.get("n"), dst.shape[1])
        if r_hi <= r_lo or c_hi <= n0:
            return
        acc = torch.zeros((r_hi - r_lo, c_hi - n0), dtype=torch.float32)
        for s in range(n.get("splits")):        # slice order, FP32 adds: as the kernel does
            acc = acc + ws[s, r_lo:r_hi, n0:c_hi].float()
        dst[r_lo:r_hi, n0:c_hi] = acc.to(dst.dtype)

    def _split_gather(self, t: _Task, n: Node):
        acc, W = n.args[:2]
        a = self._reg(t, acc, "split_gather writes")
        ws = self.tensors[W]
        count, own, slot0 = (self._int(t, x) for x in n.args[2:5])
        if not (1 <= count <= n.get("splits") and 0 <= slot0 and slot0 + count <= ws.shape[0]):
            raise InterpError(f"split_gather of {count} pieces from slot {slot0}: the workspace has "
                              f"{ws.shape[0]} (attr splits {n.get('splits')})")
        rows = self._rows(t, ws[0], "split_gather", n.get("wave"))
        total = torch.zeros_like(a)
        for p in range(count):           # piece order, FP32 adds from 0: as the kernel does
            total = total + (a if p == own else ws[slot0 + p, rows, : a.shape[1]].float())
        a.copy_(total)

    # --- split-K over a cluster: partials exchanged through distributed shared memory ---------
    def _cluster_arrivals(self, t: _Task) -> int:
        """Arrivals that complete a ready / done barrier: every math warpgroup of every CTA."""
        return self.cluster * t.n_wgs

    def _partial_publish(self, t: _Task, n: Node):
        buf, acc, rnd = n.args
        r = self._int(t, rnd)
        rows = self._rows(t, torch.empty(10**6), "partial_publish", n.get("wave"))
        if r > 0 and t.cta.partial_done.get((buf, r - 1), 0) < self._cluster_arrivals(t):
            raise RaceError(f"partial_publish of round {r} from CTA {t.cta.block_id} (rows {rows.start}..) "
                            f"overwrites %{buf} of the cluster before every CTA read round {r - 1} (no partial_reclaim?)")
        if buf not in self.smem:
            raise InterpError(f"partial_publish to unknown shared-memory buffer %{buf}")
        # the values in flight to the cluster (the emitted kernel pushes each rank its share with
        # st.async; the model keeps the sender's tile, tagged with its round)
        t.cta.partial_values[(buf, rows.start)] = self._reg(t, acc, "partial_publish reads").clone()
        t.cta.partial_round[(buf, rows.start)] = r
        for cta in t.cta.cluster:                                # st.shared, then arrive.release.cluster
            cta.partial_ready[(buf, r)] = cta.partial_ready.get((buf, r), 0) + 1

    def _partial_reduce(self, t: _Task, n: Node):
        D, buf, rnd, rounds = n.args[:4]
        r, last = self._int(t, rnd), self._int(t, rounds) - 1
        m0, n0 = self._int(t, n.args[4]), self._int(t, n.args[5])
        need, ready = self._cluster_arrivals(t), t.cta.partial_ready
        if ready.get((buf, r), 0) < need:
            yield _Blocker(lambda: ready.get((buf, r), 0) >= need,
                           lambda: f"partial_reduce round {r}: {ready.get((buf, r), 0)}/{need} partials published")
        rows = self._rows(t, torch.empty(10**6), "partial_reduce", n.get("wave"))
        total = None
        for peer in t.cta.cluster:                               # rank order, FP32 adds from 0
            if peer.partial_round.get((buf, rows.start)) != r:
                raise RaceError(f"partial_reduce round {r} in CTA {t.cta.block_id} reads the partial CTA "
                                f"{peer.block_id} sent, which is of round {peer.partial_round.get((buf, rows.start))}")
            part = peer.partial_values[(buf, rows.start)].float()
            total = (torch.zeros_like(part) if total is None else total) + part
        dst = self.tensors[D]
        BN = total.shape[1]
        # this rank's share: the fragment pairs p = 2 * (column // 8) + (row % 16) // 8 with p % S == rank
        i = torch.arange(total.shape[0]).view(-1, 1)
        c = torch.arange(BN).view(1, -1)
        mine = ((2 * (c // 8) + (i % 16) // 8) % self.cluster) == t.cta.rank
        mine &= (m0 + rows.start + i < dst.shape[0]) & (n0 + c < dst.shape[1])
        ii, cc = mine.nonzero(as_tuple=True)
        dst[m0 + rows.start + ii, n0 + cc] = total[ii, cc].to(dst.dtype)
        if r == last:      # nothing follows the last round: its buffers are not freed
            return
        for peer in t.cta.cluster:                               # read: arrive on every sender's free barrier
            if peer.exited:
                raise RaceError(f"partial_reduce round {r} in CTA {t.cta.block_id} arrives on the free barrier "
                                f"of CTA {peer.block_id}, which has exited (is round {r} the last one?)")
            peer.partial_done[(buf, r)] = peer.partial_done.get((buf, r), 0) + 1

    def _partial_reclaim(self, t: _Task, n: Node):
        buf, rnd = n.args
        r = self._int(t, rnd)
        need, done = self._cluster_arrivals(t), t.cta.partial_done
        if r > 0 and done.get((buf, r - 1), 0) < need:
            yield _Blocker(lambda: done.get((buf, r - 1), 0) >= need,
                           lambda: f"partial_reclaim: {done.get((buf, r - 1), 0)}/{need} CTAs read round {r - 1}")

    def _timestamp(self, t: _Task, n: Node):
        """The machine's step count stands in for both clocks: it orders a CTA's milestones.  The
        placement event: every CTA is its own SM here (its block id), with its rank in the cluster."""
        if t.wg_local:
            return
        slot = self.tensors[n.args[0]][t.cta.block_id, n.get("event")]
        if n.get("placement"):
            slot[0], slot[1] = t.cta.block_id, t.cta.rank
            return
        if n.get("keep") == "last" or int(slot[0]) == 0:
            slot[:] = self.steps

    def _split_reset(self, t: _Task, n: Node):
        locks, tile = n.args
        self.tensors[locks][self._int(t, tile)] = 0

    def _tma_store(self, t: _Task, n: Node):
        param, tile, *coords = n.args
        if param not in self.tensors:
            raise InterpError(f"tma_store to unknown param %{param}")
        if tile not in self.smem:
            raise InterpError(f"tma_store from unknown shared-memory tile %{tile}")
        if self.smem[tile].get("ring"):      # staged in a ring slot: this warpgroup still holds it
            ch, slot, rnd = self._slot_key(t, self.smem[tile].get("ring"), coords.pop())
            key = (ch.name, slot, rnd)
            if key not in t.waited or t.cta.staged.get(tile) != key:
                raise RaceError(f"tma_store of %{tile} from channel '{ch.name}' stage {slot} round {rnd}: "
                                f"the staging tile is not there or this warpgroup no longer holds the slot")
        if tile in t.unfenced:
            raise RaceError(f"tma_store reads %{tile} written by stage_out without a fence "
                            f"(sync [fence_async=true]) in between")
        dst = self.tensors[param]
        src = t.cta.smem[tile][0]
        rows = self._rows(t, src, "tma_store", n.get("wave"))
        src = src[rows]
        c = [self._int(t, x) for x in coords]
        if len(c) != dst.dim() or src.dim() != dst.dim():
            raise InterpError(f"tma_store: {len(c)} coordinates, tile rank {src.dim()}, param rank {dst.dim()}")
        check_box_start(c, dst, "tma_store", param)
        c[-1] += rows.start              # the outermost coordinate: this warpgroup's rows
        dst_sl, src_sl = [], []
        for st, ext, size in zip(reversed(c), src.shape, dst.shape):
            lo, hi = max(st, 0), min(st + ext, size)
            if hi <= lo:
                break
            dst_sl.append(slice(lo, hi))
            src_sl.append(slice(lo - st, hi - st))
        else:
            if src.dtype != dst.dtype:
                raise InterpError(f"tma_store: tile is {src.dtype}, %{param} is {dst.dtype}")
            dst[tuple(dst_sl)] = src[tuple(src_sl)]
        t.store_reads.add((tile, n.get("wave") or 0))

    def _tma_store_wait(self, t: _Task, n: Node):
        t.store_reads.clear()
