"""PTX for the channel protocol and the load role: mbarrier waits/arrivals (cluster-wide ones too),
TMA loads (multicast), the staged B scales and the drain before exit."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dgir.ir import Node

if TYPE_CHECKING:
    from .emit import Emitter


def _scalar_address(self: Emitter, param: str, row, col) -> str:
    """Global address of param[row, col] of a row-major f32 param."""
    b = self.b
    ncols = self.decls[param].type.shape[1]
    ptr, off, w = b.reg("b64"), b.reg(), b.reg("b64")
    b(f"ld.param.u64 {ptr}, [ptr_{param}];")
    b(f"cvta.to.global.u64 {ptr}, {ptr};")
    b(f"mad.lo.u32 {off}, {self.val(row)}, {ncols}, {self.val(col)};")
    b(f"mul.wide.u32 {w}, {off}, 4;")
    b(f"add.s64 {ptr}, {ptr}, {w};")
    return ptr


def _global_scalar(self: Emitter, param: str, row, col) -> str:
    """f32 register <- param[row, col] (read-only path)."""
    d = self.b.reg("f32")
    self.b(f"ld.global.nc.f32 {d}, [{_scalar_address(self, param, row, col)}];")
    return d


def _stage_scale(self: Emitter, n: Node) -> None:
    """Producer thread: global f32 -> its acquired slot.  Synchronous: a load and st.shared, which the
    commit's arrive (release) publishes; the thread waits for the load.  [async]: cp.async, which the
    commit tracks with cp.async.mbarrier.arrive, so the thread goes on at once."""
    ch, ctr, ring, param, row, col, idx = n.args
    if n.get("async"):
        dst = self.smem_addr(ring, ctr, 4 * idx)
        self.b(f"cp.async.ca.shared.global [{dst}], [{_scalar_address(self, param, row, col)}], 4;")
        return
    v = _global_scalar(self, param, row, col)
    self.b(f"st.shared.f32 [{self.smem_addr(ring, ctr, 4 * idx)}], {v};")


def _acquire(self: Emitter, n: Node) -> None:
    addr, phase = self.barrier(n.args[0], n.args[1], "empty")
    self.b(f"xor.b32 {phase}, {phase}, 1;        // a fresh empty barrier passes parity 1: slots start free")
    self.wait_parity(addr, phase)


def _drain(self: Emitter, n: Node) -> None:
    """Wait for the release of each slot's last fill: acquire (without filling) counters fills..fills+S-1."""
    ch, fills = n.args
    S = self.decls[ch].get("stages")
    for s in range(S):
        c = self.b.reg()
        self.b(f"add.u32 {c}, {self.val(fills)}, {s};")
        self.env[f" drain{s}"] = c                 # a counter without an IR name
        addr, phase = self.barrier(ch, f" drain{s}", "empty")
        self.b(f"xor.b32 {phase}, {phase}, 1;")
        self.wait_parity(addr, phase)


def _wait(self: Emitter, n: Node) -> None:
    self.wait_parity(*self.barrier(n.args[0], n.args[1], "full"))


# experiment knob (bench/experiments.py variants headN): after the CTA's first fill, the load role
# sleeps this many ns before it issues the next, so that the first stage's requests reach DRAM ahead
# of the rest of the ring (at small M every stage is asked for at once and the first lands with the
# last, bench/TUNING.md step 129).  None: no pause (the default).
FIRST_FILL_HEAD_START_NS: int | None = None


def _commit(self: Emitter, n: Node) -> None:
    """expect_tx = the bytes every TMA of the stage lands; a box that fits M (`fit_m`) is sized at run
    time exactly as the host encodes it: min(box, align(M, a)) along that axis."""
    _commit_bytes(self, n)
    if FIRST_FILL_HEAD_START_NS:
        first = self.b.reg("pred")
        self.b(f"setp.eq.u32 {first}, {self.val(n.args[1])}, 0;")
        self.b(f"@{first} nanosleep.u32 {FIRST_FILL_HEAD_START_NS};")


def _commit_bytes(self: Emitter, n: Node) -> None:
    b = self.b
    ch = self.decls[n.args[0]]
    fixed, fitted = 0, []
    for ring in (r for r in ch.args if r in self.ring_param):   # only TMA bytes complete the phase
        param = self.decls.get(self.ring_param[ring])
        fit = param.get("fit_m") if param is not None else None
        if fit is None:
            fixed += self.decls[ring].type.nbytes
        else:
            axis, a = fit
            box = param.get("box")
            fitted.append((box[axis], a, box[1 - axis] * param.type.dtype.bits // 8))
    addr, _ = self.barrier(n.args[0], n.args[1], "full")
    if n.args[0] in self.cp_async_channels:
        # one more pending arrival, made when this thread's cp.async copies (the staged scales) land
        b(f"cp.async.mbarrier.arrive.shared::cta.b64 [{addr}];")
    if not fitted:
        b(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [{addr}], {fixed};")
        return
    M, total = b.reg(), b.reg()
    b(f"ld.param.u32 {M}, [dim_M];")
    b(f"mov.u32 {total}, {fixed};")
    for box_len, a, unit in fitted:
        r = b.reg()
        b(f"add.u32 {r}, {M}, {a - 1};")
        b(f"and.b32 {r}, {r}, {-a};")
        b(f"min.u32 {r}, {r}, {box_len};")
        b(f"mad.lo.u32 {total}, {r}, {unit}, {total};")
    b(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [{addr}], {total};")


def _release(self: Emitter, n: Node) -> None:
    b = self.b
    addr, _ = self.barrier(n.args[0], n.args[1], "empty")
    keep = None
    if len(n.args) > 2:      # keep: the slot of that counter stays held (the epilogue releases it)
        keep = b.reg("pred")
        b(f"setp.ne.u32 {keep}, {self.val(n.args[1])}, {self.val(n.args[2])};")
    p = b.reg("pred")
    b(f"setp.eq.u32 {p}, {self.lane}, 0;")
    C = self.decls[n.args[0]].get("cluster") or 1
    if C == 1:
        if keep:
            b(f"and.pred {p}, {p}, {keep};")
        b(f"@{p} mbarrier.arrive.shared::cta.b64 _, [{addr}];   // one arrival per consumer warp")
        return
    # the slot is multicast into every CTA of the cluster: release it in each of them, lane r of the
    # warp arriving on CTA rank r's barrier (the C remote arrivals go out in parallel).  Default
    # semantics (release at CTA scope), as CUTLASS's ClusterBarrier: the consumer only read the slot,
    # and a cluster-scope release would also wait for this warp's unrelated global loads
    q, rank, remote = b.reg("pred"), b.reg(), b.reg()
    b(f"setp.lt.u32 {q}, {self.lane}, {C};")
    if keep:
        b(f"and.pred {q}, {q}, {keep};")
    b(f"min.u32 {rank}, {self.lane}, {C - 1};")
    b(f"mapa.shared::cluster.u32 {remote}, {addr}, {rank};")
    b(f"@{q} mbarrier.arrive.shared::cluster.b64 _, [{remote}];   // lane r -> CTA rank r")


def _tma_load(self: Emitter, n: Node) -> None:
    ch, ctr, ring, param, c0, c1 = n.args[:6]
    b = self.b
    mc = n.get("multicast") or 1
    if mc > 1:   # this box is part p of the slot: rows p * box, in every CTA of the cluster
        part_bytes = self.decls[ring].type.nbytes // mc
        dst = self.smem_addr(ring, ctr)
        b(f"mad.lo.u32 {dst}, {self.val(n.args[6])}, {part_bytes}, {dst};")
    else:
        dst = self.smem_addr(ring, ctr)
    full, _ = self.barrier(ch, ctr, "full")
    tm = self.tmap(param)
    coords = f"[{tm}, {{{self.val(c0)}, {self.val(c1)}}}], [{full}]"
    mc_part, mask = "", ""
    if mc > 1:
        mask = b.reg("b16")
        b(f"mov.b16 {mask}, {(1 << mc) - 1};")
        mc_part, mask = ".multicast::cluster", f", {mask}"
    insn = f"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes{mc_part}"
    _issue_with_l2_policy(self, n, insn, f"[{dst}], {coords}{mask}")


def _issue_with_l2_policy(self: Emitter, n: Node, insn: str, operands: str) -> None:
    """`insn operands;`, or with the L2 eviction policy that n's `l2` names (hint_l2_eviction), made at
    the top of the region.  With `l2_if` the hinted form is issued only while that predicate holds,
    the plain form otherwise: a load with an evict_normal policy is not the same as one without a
    hint (spec 106: up to 17% slower)."""
    b = self.b
    if not n.get("l2"):
        b(f"{insn} {operands};")
        return
    hinted = f"{insn}.L2::cache_hint {operands}, {self.policies[n.get('l2')]};"
    if not n.get("l2_if"):
        b(hinted)
        return
    p = b.reg("pred")
    b(f"setp.ne.u32 {p}, {self.val(n.get('l2_if'))}, 0;")
    b(f"@{p} {hinted}")
    b(f"@!{p} {insn} {operands};")


def _tma_prefetch(self: Emitter, n: Node) -> None:
    """A box into L2 only: no shared memory, no barrier, nothing waits for it (prefetch_to_l2)."""
    param, c0, c1 = n.args
    _issue_with_l2_policy(self, n, "cp.async.bulk.prefetch.tensor.2d.L2.global",
                          f"[{self.tmap(param)}, {{{self.val(c0)}, {self.val(c1)}}}]")


def _prefetch(self: Emitter, n: Node) -> None:
    if n.get("at") != "entry":        # at="entry": issued in the kernel's prologue (Emitter.module)
        self.b(f"prefetch.tensormap [{self.tmap(n.args[0])}];")
