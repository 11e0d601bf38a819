"""The channel protocol (acquire / tma_load / commit / wait / release / drain) and the shared-memory
ops of the interpreter's machine: a mixin of `_Machine`, whose state these methods read."""
from __future__ import annotations

import torch

from ..ir import Node
from .state import InterpError, RaceError, _Blocker, check_box_start, _Channel, _Copy, _poison, _Task


class ChannelOps:
    # --- channel protocol -----------------------------------------------------------------------
    def _acquire(self, t: _Task, n: Node):
        ch, slot, rnd = self._slot_key(t, n.args[0], n.args[1])
        if ch.empty_done[slot] > rnd:
            raise RaceError(f"acquire of channel '{ch.name}' stage {slot} round {rnd}, but that slot's empty "
                            f"barrier already completed {ch.empty_done[slot]} phases (phase aliasing)")
        if ch.empty_done[slot] < rnd:
            yield _Blocker(lambda: ch.empty_done[slot] >= rnd, lambda: (
                f"channel '{ch.name}' stage {slot} to be empty for round {rnd} (phase {rnd & 1}); "
                f"{len(ch.releasers[slot])}/{ch.consumers} releases of round {rnd - 1} arrived"))
        key = (ch.name, slot, rnd)
        if ch.empty_done[slot] != rnd or ch.full_done[slot] != rnd or key in t.acquired:
            raise RaceError(f"acquire of channel '{ch.name}' stage {slot} round {rnd}: slot state is "
                            f"full={ch.full_done[slot]}, empty={ch.empty_done[slot]} phases (acquired twice?)")
        t.acquired.add(key)

    def _tma_load(self, t: _Task, n: Node):
        if len(n.args) < 5:
            raise InterpError("tma_load needs (channel, counter, ring, param, coords...)")
        chan, ctr, ring, param, *coords = n.args
        mc = n.get("multicast") or 1
        part = None
        if mc > 1:
            if mc != self.cluster:
                raise InterpError(f"tma_load multicast={mc} in a kernel with clusters of {self.cluster}")
            part = self._int(t, coords.pop())
            if not 0 <= part < mc:
                raise InterpError(f"tma_load multicast part {part} is not in [0, {mc})")
        ch, slot, rnd = self._producer_slot(t, chan, ctr, ring, "tma_load")
        if param not in self.tensors:
            raise InterpError(f"tma_load from unknown param %{param}")
        src = self.tensors[param]
        slot_t = t.cta.smem[ring][slot]
        rows = None
        if mc > 1:
            h = slot_t.shape[0] // mc
            rows = slice(part * h, (part + 1) * h)
            slot_t = slot_t[rows]
        if slot_t.dtype != src.dtype:
            raise InterpError(f"tma_load: ring %{ring} is {slot_t.dtype} but param %{param} is {src.dtype}")
        c = [self._int(t, x) for x in coords]
        if len(c) != src.dim():
            raise InterpError(f"tma_load: {len(c)} coordinates for a rank-{src.dim()} param %{param}")
        if param in self.prefetched_params:
            self.loaded_boxes[(t.cta.block_id, param, tuple(c))] += 1
        check_box_start(c, src, "tma_load", param)
        if slot_t.dim() > src.dim():
            raise InterpError(f"tma_load: slot {tuple(slot_t.shape)} has a higher rank than %{param}")
        box = (1,) * (src.dim() - slot_t.dim()) + tuple(slot_t.shape)
        data = torch.zeros(box, dtype=src.dtype)
        src_sl, dst_sl = [], []
        empty = False
        for st, ext, size in zip(reversed(c), box, src.shape):
            lo, hi = max(st, 0), min(st + ext, size)
            if hi <= lo:
                empty = True
                break
            src_sl.append(slice(lo, hi))
            dst_sl.append(slice(lo - st, hi - st))
        if not empty:
            data[tuple(dst_sl)] = src[tuple(src_sl)]
            if any(d.stop - d.start != ext for d, ext in zip(dst_sl, box)):
                self.partial_loads[param] = self.partial_loads.get(param, 0) + 1
        data = data.reshape(slot_t.shape)
        dests = t.cta.cluster if mc > 1 else [t.cta]
        for cta in dests:
            dch = cta.chans[chan]
            if dch.empty_done[slot] < rnd:
                raise RaceError(f"multicast into CTA {cta.block_id} channel '{chan}' stage {slot} round {rnd}: "
                                f"that CTA's consumers have not all released round {rnd - 1} "
                                f"({dch.empty_done[slot]} empty phases completed)")
            dch.pending[slot] += 1
            self.copies.append(_Copy(cta, dch, slot, ring, data, rows))

    def _producer_slot(self, t: _Task, chan, ctr, ring, what: str) -> tuple:
        """(channel, slot, round) a producer op writes: the ring must be the channel's, the slot acquired."""
        ch, slot, rnd = self._slot_key(t, chan, ctr)
        if ring not in ch.rings:
            raise InterpError(f"{what}: ring %{ring} is not part of channel %{chan}")
        if (chan, slot, rnd) not in t.acquired:
            raise RaceError(f"{what} into %{ring} (channel '{chan}' stage {slot} round {rnd} phase {rnd & 1}) "
                            f"that this task has not acquired (or has already committed)")
        return ch, slot, rnd

    def _stage_scale(self, t: _Task, n: Node):
        """The producer writes one scalar into its acquired slot (st.shared, published by the commit)."""
        chan, ctr, ring, param, row, col, idx = n.args
        ch, slot, rnd = self._producer_slot(t, chan, ctr, ring, "stage_scale")
        dst = t.cta.smem[ring][slot]
        i = self._int(t, idx)
        if dst.dim() != 1 or not 0 <= i < dst.shape[0]:
            raise InterpError(f"stage_scale: element {i} of a %{ring} slot of shape {tuple(dst.shape)}")
        v = self._global_scalar(t, param, row, col, what="stage_scale")
        if n.get("async"):          # cp.async: lands later; the fill waits for it (counted in expect)
            ch.pending[slot] += 1
            self.copies.append(_Copy(t.cta, ch, slot, ring, torch.tensor([v], dtype=dst.dtype), slice(i, i + 1)))
        else:
            dst[i] = v

    def _land(self, cp: _Copy) -> None:
        if cp.cta.exited and self.cluster > 1:
            raise RaceError(f"a multicast copy lands in CTA {cp.cta.block_id} after that CTA exited")
        dst = cp.cta.smem[cp.ring][cp.slot]
        (dst if cp.rows is None else dst[cp.rows]).copy_(cp.data)
        ch, s = cp.chan, cp.slot
        ch.pending[s] -= 1
        ch.landed[s] += cp.data.numel()
        self._complete_fill(ch, s)

    def _complete_fill(self, ch: _Channel, s: int) -> None:
        """The full barrier's phase completes: commit arrived and the expected bytes landed."""
        if ch.landed[s] > ch.expect:
            raise RaceError(f"channel '{ch.name}' stage {s}: {ch.landed[s]} elements landed in one fill, "
                            f"its barrier expects {ch.expect} (a copy of the next round landed early?)")
        if ch.committed[s] and ch.landed[s] == ch.expect:
            ch.committed[s] = False
            ch.landed[s] = 0
            ch.full_done[s] += 1

    def _held_slot(self, t: _Task, n: Node, held: set, unheld: str):
        """(channel, slot, round, key) of the slot `n` names, which `held` (this task's acquired or
        waited slots) must contain; else a RaceError ending in `unheld` (`{phase}`: the round's)."""
        ch, slot, rnd = self._slot_key(t, n.args[0], n.args[1])
        key = (ch.name, slot, rnd)
        if key not in held:
            raise RaceError(f"{n.op.value} of channel '{ch.name}' stage {slot} round {rnd} "
                            + unheld.format(phase=rnd & 1))
        return ch, slot, rnd, key

    def _commit(self, t: _Task, n: Node):
        ch, slot, _, key = self._held_slot(t, n, t.acquired,
                                           "that this task has not acquired (or has already committed)")
        t.acquired.discard(key)
        ch.committed[slot] = True
        self._complete_fill(ch, slot)

    def _wait(self, t: _Task, n: Node):
        ch, slot, rnd = self._slot_key(t, n.args[0], n.args[1])
        if ch.full_done[slot] <= rnd:
            def describe():
                s = (f"channel '{ch.name}' stage {slot} to be full for round {rnd} (phase {rnd & 1}); "
                     f"{ch.full_done[slot]} fills completed")
                if ch.committed[slot]:
                    s += (f", committed; {ch.landed[slot]}/{ch.expect} elements landed, "
                          f"{ch.pending[slot]} copies in flight")
                return s
            yield _Blocker(lambda: ch.full_done[slot] > rnd, describe)
        if ch.full_done[slot] != rnd + 1:
            raise RaceError(f"wait on channel '{ch.name}' stage {slot} round {rnd}, but the slot already "
                            f"completed {ch.full_done[slot]} fills (phase aliasing)")
        t.waited.add((ch.name, slot, rnd))

    def _release(self, t: _Task, n: Node):
        if len(n.args) > 2 and self._int(t, n.args[1]) == self._int(t, n.args[2]):
            return                # keep: this slot stays held (stage_in_ring_slot's epilogue releases it)
        ch, slot, rnd, key = self._held_slot(t, n, t.waited,
                                             "phase {phase} that this warpgroup has not waited for (or released twice)")
        if t.holds.get(key):
            raise RaceError(f"release of channel '{ch.name}' stage {slot} round {rnd} while {t.holds[key]} "
                            f"in-flight wgmma(s) still read it (wgmma_wait first)")
        reading = sorted({tile for tile, _ in t.store_reads if t.cta.staged.get(tile) == key})
        if reading:
            raise RaceError(f"release of channel '{ch.name}' stage {slot} round {rnd} while a tma_store of this "
                            f"warpgroup may still read the staging tile {reading} in it (tma_store_wait [read=true] first)")
        t.waited.discard(key)
        # a cluster channel: the release arrives on the empty barrier of every CTA of the cluster
        spans = (self.chans[ch.name].get("cluster") or 1) > 1
        for cta in (t.cta.cluster if spans else [t.cta]):
            dch = cta.chans[ch.name]
            if cta.exited:
                raise RaceError(f"release of channel '{ch.name}' stage {slot} round {rnd} arrives on CTA "
                                f"{cta.block_id}'s empty barrier after that CTA exited (no drain?)")
            if dch.empty_done[slot] != rnd:
                raise RaceError(f"release of channel '{ch.name}' stage {slot} round {rnd} arrives on CTA "
                                f"{cta.block_id}'s empty barrier in phase {dch.empty_done[slot]} (phase aliasing)")
            dch.releasers[slot].add(t.tid)
            if len(dch.releasers[slot]) >= dch.consumers:
                dch.releasers[slot].clear()
                dch.empty_done[slot] += 1
                cta.clobbered.discard(key)
                for r in dch.rings:
                    _poison(cta.smem[r][slot])

    def _drain(self, t: _Task, n: Node):
        ch = t.cta.chans.get(n.args[0])
        if ch is None:
            raise InterpError(f"%{n.args[0]} is not a channel")
        fills = self._int(t, n.args[1])
        # slot s was filled rounds 0..r-1 where r = fills of s; each must have been released
        need = [len(range(s, fills, ch.stages)) for s in range(ch.stages)]

        def ready():
            return all(ch.empty_done[s] >= need[s] for s in range(ch.stages))
        if not ready():
            yield _Blocker(ready, lambda: (f"drain of channel '{ch.name}': empty phases completed "
                                           f"{ch.empty_done} of {need}"))
        over = [s for s in range(ch.stages) if ch.empty_done[s] > need[s]]
        if over:
            raise RaceError(f"drain of channel '{ch.name}' after {fills} fills, but stages {over} were "
                            f"released more often ({ch.empty_done} vs {need})")

    # --- memory ---------------------------------------------------------------------------------
    def _no_effect(self, t: _Task, n: Node):
        return None

    def _tma_prefetch(self, t: _Task, n: Node):
        """L2 only: nothing in the CTA changes; the box is recorded for prefetch_misses."""
        param, *coords = n.args
        if param not in self.tensors:
            raise InterpError(f"tma_prefetch of unknown param %{param}")
        c = [self._int(t, x) for x in coords]
        if len(c) != self.tensors[param].dim():
            raise InterpError(f"tma_prefetch: {len(c)} coordinates for a rank-{self.tensors[param].dim()} param %{param}")
        check_box_start(c, self.tensors[param], "tma_prefetch", param)
        key = (t.cta.block_id, param, tuple(c))
        self.prefetched[key] += 1
        if self.loaded_boxes[key]:
            self.late_prefetches.add(key)

    def _prefetch(self, t: _Task, n: Node):
        if not n.args or n.args[0] not in self.params:
            raise InterpError(f"prefetch_tmap of unknown param {n.args}")

    def _smem_read(self, t: _Task, n: Node):
        dst, ring, ctr = n.args
        r = self._reg(t, dst, "smem_read writes")
        slot = self._ring_read(t, ring, ctr, "smem_read")
        src = slot[self._rows(t, slot, "smem_read", n.get("wave"))]
        if src.shape[0] != r.shape[0] or src.numel() != r.numel():
            raise InterpError(f"smem_read: rows {tuple(src.shape)} of %{ring} do not fit %{dst} {tuple(r.shape)}")
        r.copy_(src.reshape(r.shape).to(r.dtype))

    def _load_row_scales(self, t: _Task, n: Node):
        """This warpgroup's 64 rows (its wave's slice of the tile at m0) of column `col` of a global
        row-major param; rows at or past `rows` read row rows - 1, as the emitted clamp does."""
        dst, param, m0, col, rows = n.args
        r = self._reg(t, dst, "load_row_scales writes")
        if param not in self.tensors:
            raise InterpError(f"load_row_scales of unknown param %{param}")
        T = self.tensors[param]
        m0, col, rows = self._int(t, m0), self._int(t, col), self._int(t, rows)
        lo = 64 * ((n.get("wave") or 0) * t.n_wgs + t.wg_local)
        bm = self.kernel.get("block_m") or 64
        if lo + 64 > max(bm, 64):
            raise InterpError(f"load_row_scales: warpgroup {t.wg_local} (wave {n.get('wave') or 0}) owns rows "
                              f"{lo}..{lo + 64} of a {bm}-row tile")
        if T.dim() != 2 or not 0 <= col < T.shape[1] or not 0 < rows <= T.shape[0] or m0 < 0:
            raise InterpError(f"load_row_scales %{param}[{m0} + {lo}.., {col}] (rows < {rows}) is out of bounds "
                              f"of {tuple(T.shape)}")
        idx = torch.arange(m0 + lo, m0 + lo + 64).clamp(max=rows - 1)
        r.copy_(T[idx, col].reshape(r.shape).to(r.dtype))

    def _stage_out(self, t: _Task, n: Node):
        tile, acc = n.args[:2]
        if tile not in self.smem or self.smem[tile].get("stages", 1) != 1:
            raise InterpError(f"stage_out needs a single-buffer shared-memory tile, got %{tile}")
        if (tile, n.get("wave") or 0) in t.store_reads:     # the same rows (a wave's slice) of the tile
            raise RaceError(f"stage_out overwrites %{tile} while a tma_store of this warpgroup may still read it "
                            f"(tma_store_wait [read=true] first)")
        if self.smem[tile].get("ring"):
            self._stage_in_slot(t, tile, n.args[2] if len(n.args) > 2 else None)
        a = self._reg(t, acc, "stage_out reads")
        d = t.cta.smem[tile][0]
        rows = self._rows(t, d, "stage_out", n.get("wave"))
        if d[rows].shape != a.shape:
            raise InterpError(f"stage_out: %{acc} {tuple(a.shape)} does not fit rows {rows.start}.. of %{tile} "
                              f"{tuple(d.shape)}")
        d[rows] = a.to(d.dtype)
        t.unfenced.add(tile)

    def _stage_in_slot(self, t: _Task, tile: str, ctr) -> None:
        """A staging tile placed in a ring slot (stage_in_ring_slot): this warpgroup must hold the slot
        of counter `ctr`, and no warpgroup of the CTA may still have a wgmma reading it; its A / B
        bytes are then gone until the slot's next fill."""
        if ctr is None:
            raise InterpError(f"%{tile} lives in a ring slot: stage_out / tma_store name the slot's counter")
        chan = self.smem[tile].get("ring")
        ch, slot, rnd = self._slot_key(t, chan, ctr)
        key = (chan, slot, rnd)
        if key not in t.waited:
            raise RaceError(f"%{tile} in channel '{chan}' stage {slot} round {rnd}, a slot this warpgroup does not "
                            f"hold (not waited, or already released)")
        for u in self.tasks_of(t.cta):
            if u.holds.get(key):
                raise RaceError(f"stage_out of %{tile} into channel '{chan}' stage {slot} round {rnd} while "
                                f"warpgroup {u.wg_id}'s wgmma still reads that slot (sync [across=\"math\"] after "
                                f"every warpgroup's wgmma_wait first)")
        t.cta.staged[tile] = key
        t.cta.clobbered.add(key)
        for ring, _ in self.smem[tile].get("panels"):
            _poison(t.cta.smem[ring][slot])

    def _sync(self, t: _Task, n: Node):
        """The emitter's `bar.sync wg+1, 128`: a barrier of the warpgroup's own 128 threads, which one
        task runs in program order, so nothing waits here; with fence_async, the staging writes
        before it become visible to the TMA engine.  Warpgroups do not wait for each other: each
        stages and stores its own rows (stage_out / tma_store take this warpgroup's slice).
        across="math": one barrier over every warpgroup of the region (bar.sync 15)."""
        if n.get("fence_async"):
            t.unfenced.clear()
        if n.get("across") == "math":
            key = (t.region, t.syncs)
            t.syncs += 1
            arr = t.cta.sync_arrivals
            arr[key] = arr.get(key, 0) + 1
            need = t.n_wgs
            if arr[key] < need:
                yield _Blocker(lambda: arr[key] >= need,
                               lambda: f"sync across the math warpgroups: {arr[key]}/{need} arrived")

    def _turn(self, t: _Task, n: Node):
        """One named barrier per warpgroup, in a ring: `pass` arrives on the next one's, `wait` syncs
        on one's own (a bar.arrive / bar.sync pair of 256 threads); `prime` (the last warpgroup)
        gives warpgroup 0 the first turn, `drain` (warpgroup 0) takes the last one's final pass.  A
        barrier may run at most one generation ahead: a second pass before the matching wait would
        mix generations (RaceError); every pass must be waited for before the warpgroups end (checked
        at the end of the region)."""
        N = t.n_wgs
        if N < 2:
            raise InterpError(f"turn needs a region of two or more warpgroups, this one has {N}")
        step, me = n.get("step"), t.wg_local
        nxt, prev = (me + 1) % N, (me - 1) % N
        mine, succ = t.cta.turns.setdefault((t.region, me), [0, 0]), t.cta.turns.setdefault((t.region, nxt), [0, 0])
        if step in ("prime", "drain") and me != (N - 1 if step == "prime" else 0):
            return                                          # another warpgroup's step
        if step in ("pass", "prime"):
            if succ[0] > succ[1]:
                raise RaceError(f"turn {step}: warpgroup {nxt} has not taken the previous turn yet "
                                f"(its barrier would run two generations ahead)")
            succ[0] += 1
        elif step in ("wait", "drain"):
            k = mine[1] + 1
            if mine[0] < k:
                yield _Blocker(lambda: mine[0] >= k, lambda: f"turn {step}: waiting for warpgroup {prev}'s pass #{k}")
            mine[1] = k
        else:
            raise InterpError(f"turn: unknown step {step!r}")
