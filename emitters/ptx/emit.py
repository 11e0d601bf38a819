"""PTX for sm_90a from the scheduled tile IR: one small function per op kind (the table `EMIT`).

Conventions the runtime relies on (see `kernel_params`): TMA-described params are passed as
128-byte tensor maps first, then plain params as .u64 pointers, then the runtime extents (M) as
.u32.  Register tiles follow the wgmma accumulator layout (hopper-ptx.md §4.4): a 64xN f32 tile
is N/2 registers per thread; thread t of the warpgroup owns rows 16*(t/32) + (t%32)/4 and +8.
"""
from __future__ import annotations

import math

from dgir.ir import SCALAR_OPS, DType, Node, Op, tma_filled_rings

from .builder import PtxBuilder

PTX_VERSION = "8.7"


class EmitError(ValueError):
    """The IR holds something the PTX emitter cannot express; names the op."""


def kernel_params(kernel: Node) -> list[tuple[str, str, str]]:
    """[(ptx param name, kind, IR name)] in PTX order; kind is tmap | ptr | dim."""
    params = [n for n in kernel.body if n.op is Op.PARAM]
    out = [(f"tmap_{p.name}", "tmap", p.name) for p in params if p.get("box") is not None]
    out += [(f"ptr_{p.name}", "ptr", p.name) for p in params if p.get("box") is None]
    syms = []
    for p in params:
        for d in p.type.shape:
            if isinstance(d, str) and d not in syms and d == "M":
                syms.append(d)
    out += [(f"dim_{s}", "dim", s) for s in syms]
    return out


class Emitter:
    def __init__(self, kernel: Node):
        self.k = kernel
        self.b = PtxBuilder()
        self.decls = {n.name: n for n in kernel.body if n.op in (Op.PARAM, Op.SMEM, Op.REGS, Op.CHANNEL)}
        self.env: dict[str, str] = {}          # SSA name -> register
        self.tiles: dict[str, list[str]] = {}  # register tile -> f32 registers of this thread
        # which param each ring is filled from (for the stage's expect_tx byte count)
        self.ring_param = {ring: param for ring, (_, param) in tma_filled_rings(kernel).items()}

    # --- helpers -------------------------------------------------------------------------------
    def val(self, a) -> str:
        """Register holding operand `a` (an SSA name or an int literal)."""
        if isinstance(a, int):
            r = self.b.reg()
            self.b(f"mov.u32 {r}, {a};")
            return r
        if a not in self.env:
            raise EmitError(f"%{a} has no value here")
        return self.env[a]

    def tmap(self, name: str) -> str:
        r = self.b.reg("b64")
        self.b(f"mov.u64 {r}, tmap_{name};")
        self.b(f"cvta.param.u64 {r}, {r};")
        return r

    def smem_addr(self, buf: str, ctr=None, extra: int | str = 0) -> str:
        """Shared address of buffer `buf` (slot ctr % stages when it is a ring) plus `extra` bytes."""
        d = self.decls[buf]
        r = self.b.reg()
        self.b(f"add.u32 {r}, {self.base}, {d.get('offset')};")
        if ctr is not None and d.get("stages", 1) > 1:
            slot = self.stage_of(ctr, d.get("stages"))
            self.b(f"mad.lo.u32 {r}, {slot}, {d.get('slot_bytes')}, {r};")
        if extra:
            self.b(f"add.u32 {r}, {r}, {extra};")
        return r

    def stage_of(self, ctr, stages: int) -> str:
        r = self.b.reg()
        self.b(f"rem.u32 {r}, {self.val(ctr)}, {stages};")
        return r

    def barrier(self, ch: str, ctr, which: str) -> tuple[str, str]:
        """(address of full/empty[ctr % S], phase = (ctr / S) & 1)."""
        c = self.decls[ch]
        S = c.get("stages")
        slot = self.stage_of(ctr, S)
        addr, phase = self.b.reg(), self.b.reg()
        off = c.get("barriers") + (8 * S if which == "empty" else 0)
        self.b(f"mad.lo.u32 {addr}, {slot}, 8, {self.base};")
        self.b(f"add.u32 {addr}, {addr}, {off};")
        self.b(f"div.u32 {phase}, {self.val(ctr)}, {S};")
        self.b(f"and.b32 {phase}, {phase}, 1;")
        return addr, phase

    def wait_parity(self, addr: str, parity: str) -> None:
        """Spin on an mbarrier phase (default acquire semantics, also for barriers peers arrive on)."""
        p, loop = self.b.reg("pred"), self.b.label("wait")
        self.b.put_label(loop)
        self.b(f"mbarrier.try_wait.parity.shared::cta.b64 {p}, [{addr}], {parity};")
        self.b(f"@!{p} bra {loop};")

    def tile(self, name: str) -> list[str]:
        if name not in self.tiles:
            d = self.decls[name]
            if d.op is not Op.REGS:
                raise EmitError(f"%{name} is not a register tile")
            # 64xN: N/2 per thread (wgmma layout); 64 (one value per row): this thread's 2 rows
            shape = d.type.shape
            self.tiles[name] = self.b.regs("f32", shape[1] // 2 if len(shape) == 2 else 2)
        return self.tiles[name]

    def slice_of(self, n: Node) -> str:
        """Index of the 64-row slice an op works on: wave w of warpgroup g owns slice w * n_wgs + g."""
        w = n.get("wave") or 0
        if not w:
            return self.wg_local
        r = self.b.reg()
        self.b(f"add.u32 {r}, {self.wg_local}, {w * self.n_wgs};")
        return r

    def if_leader(self, pred_true_skip_label: str) -> None:
        """Branch to the label unless this thread is thread 0 of its warpgroup."""
        self.b(f"@!{self.wg_leader} bra {pred_true_skip_label};")

    # --- module --------------------------------------------------------------------------------
    def module(self) -> str:
        k, b = self.k, self.b
        threads = k.get("threads")
        tid, wg = b.reg(), b.reg()
        self.tid, self.wg = tid, wg
        b(f"mov.u32 {tid}, %tid.x;")
        b(f"shr.u32 {wg}, {tid}, 7;")
        self.base = b.reg()
        b(f"mov.u32 {self.base}, smem;")
        b(f"add.u32 {self.base}, {self.base}, 1023;")
        b(f"and.b32 {self.base}, {self.base}, -1024;     // 1024-aligned window: swizzle atoms")
        lane, warp = b.reg(), b.reg()
        b(f"and.b32 {lane}, {tid}, 31;")
        b(f"shr.u32 {warp}, {tid}, 5;")
        b(f"and.b32 {warp}, {warp}, 3;                 // warp within its warpgroup")
        self.lane, self.warp = lane, warp
        # one thread initialises every channel's barriers
        p0, done = b.reg("pred"), b.label("bar_init_done")
        b(f"setp.ne.u32 {p0}, {tid}, 0;")
        b(f"@{p0} bra {done};")
        for c in (n for n in k.body if n.op is Op.CHANNEL):
            S = c.get("stages")
            for s in range(S):
                b(f"mbarrier.init.shared::cta.b64 [{self.base}+{c.get('barriers') + 8 * s}], 1;          // %{c.name} full[{s}]")
            for s in range(S):
                # every warp of every consumer warpgroup (of every CTA of a cluster channel) arrives once per use
                arrivals = 4 * c.get("consumers") * (c.get("cluster") or 1)
                b(f"mbarrier.init.shared::cta.b64 [{self.base}+{c.get('barriers') + 8 * (S + s)}], {arrivals};  // %{c.name} empty[{s}]")
        b("fence.mbarrier_init.release.cluster;")
        b.put_label(done)
        if (k.get("cluster") or 1) > 1:
            # the peers multicast into this CTA's slots and arrive on its barriers: all initialised first
            b("barrier.cluster.arrive.release.aligned;")
            b("barrier.cluster.wait.acquire.aligned;")
        else:
            b("bar.sync 0;")
        regions = [n for n in k.body if n.op is Op.WARPGROUP]
        labels = [b.label("wg_" + "_".join(r.get("roles"))) for r in regions]
        for r, lab in zip(regions, labels):
            ids = r.get("ids")
            p = b.reg("pred")
            b(f"setp.ge.u32 {p}, {wg}, {ids[0]};")
            q = b.reg("pred")
            b(f"setp.le.u32 {q}, {wg}, {ids[-1]};")
            b(f"and.pred {p}, {p}, {q};")
            b(f"@{p} bra {lab};")
        b("ret;")
        for r, lab in zip(regions, labels):
            b.put_label(lab)
            self.region(r)
            b("ret;")
        params = ",\n".join(self.param_decl(p) for p in kernel_params(k))
        head = [f".version {PTX_VERSION}", ".target sm_90a", ".address_size 64", "",
                f"// generated by dgir from kernel %{k.name}", "",
                ".extern .shared .align 1024 .b8 smem[];", "",
                f".visible .entry {k.name}(\n{params})",
                f".maxntid {threads}, 1, 1", f".minnctapersm {k.get('ctas_per_sm') or 1}"]
        if (k.get("cluster") or 1) > 1:     # the cubin carries its cluster shape: no launch attribute needed
            head.append(f".reqnctapercluster {k.get('cluster')}, 1, 1")
        head.append("{")
        return "\n".join(head + b.declarations() + b.lines + ["}", ""])

    @staticmethod
    def param_decl(p) -> str:
        name, kind, _ = p
        return {"tmap": f"  .param .align 64 .b8 {name}[128]", "ptr": f"  .param .u64 {name}",
                "dim": f"  .param .u32 {name}"}[kind]

    def region(self, r: Node) -> None:
        b = self.b
        self.env, self.tiles = {}, {}
        roles = set(r.get("roles"))
        regs = r.get("regs")
        if regs is not None:
            b(f"setmaxnreg.{'dec' if regs <= 168 else 'inc'}.sync.aligned.u32 {regs};")
        self.wg_local = b.reg()
        self.n_wgs = len(r.get("ids"))
        b(f"sub.u32 {self.wg_local}, {self.wg}, {r.get('ids')[0]};")
        t = b.reg()
        b(f"and.b32 {t}, {self.tid}, 127;")
        self.wg_leader = b.reg("pred")
        b(f"setp.eq.u32 {self.wg_leader}, {t}, 0;")
        if roles == {"load"}:
            # one thread issues every TMA; the rest of the producer warpgroup is done
            b(f"@!{self.wg_leader} ret;")
        # this thread's two accumulator rows inside the warpgroup's 64-row slice
        self.row0 = b.reg()
        q = b.reg()
        b(f"shr.u32 {q}, {self.lane}, 2;")
        b(f"mad.lo.u32 {self.row0}, {self.warp}, 16, {q};")
        self.col0 = b.reg()
        b(f"and.b32 {self.col0}, {self.lane}, 3;")
        b(f"shl.b32 {self.col0}, {self.col0}, 1;")
        self.body(r.body)

    def body(self, nodes) -> None:
        for n in nodes:
            fn = EMIT.get(n.op)
            if fn is None:
                raise EmitError(f"the PTX emitter cannot lower `{n.op.value}` (did a pass not run?)")
            fn(self, n)


# --- per-op emission ------------------------------------------------------------------------------
def _scalar(self: Emitter, n: Node) -> None:
    b, a = self.b, n.args
    d = b.reg()
    op = n.op
    if op is Op.CONST:
        b(f"mov.u32 {d}, {n.get('value')};")
    elif op is Op.SREG:
        sreg = {"block_id": "%ctaid.x", "grid_size": "%nctaid.x", "cluster_rank": "%cluster_ctarank",
                "cluster_id": "%clusterid.x", "cluster_count": "%nclusterid.x"}.get(n.get("which"))
        if sreg is None:
            raise EmitError(f"unknown special register {n.get('which')!r}")
        b(f"mov.u32 {d}, {sreg};")
    elif op is Op.DIM:
        p = self.decls[a[0]]
        sym = p.type.shape[n.get("axis")]
        b(f"ld.param.u32 {d}, [dim_{sym}];")
    elif op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MOD, Op.MIN):
        ins = {Op.ADD: "add.s32", Op.SUB: "sub.s32", Op.MUL: "mul.lo.s32", Op.DIV: "div.u32",
               Op.MOD: "rem.u32", Op.MIN: "min.s32"}[op]
        b(f"{ins} {d}, {self.val(a[0])}, {self.val(a[1])};")
    elif op is Op.CEILDIV:
        t = b.reg()
        b(f"add.s32 {t}, {self.val(a[0])}, {self.val(a[1])};")
        b(f"sub.s32 {t}, {t}, 1;")
        b(f"div.u32 {d}, {t}, {self.val(a[1])};")
    elif op is Op.LT:
        p = b.reg("pred")
        b(f"setp.lt.s32 {p}, {self.val(a[0])}, {self.val(a[1])};")
        b(f"selp.u32 {d}, 1, 0, {p};")
    elif op in (Op.TILE_M, Op.TILE_N):
        # persistent tile order: bands of `group` m blocks, m fastest inside a band (L2 reuse of B)
        G, NB = n.get("group"), n.get("n_blocks")
        t, mblocks = self.val(a[0]), self.val(a[1])
        band, first, rows, idx = b.reg(), b.reg(), b.reg(), b.reg()
        b(f"div.u32 {band}, {t}, {G * NB};")
        b(f"mul.lo.u32 {first}, {band}, {G};")
        b(f"sub.u32 {rows}, {mblocks}, {first};")
        b(f"min.u32 {rows}, {rows}, {G};")
        b(f"mul.lo.u32 {idx}, {band}, {G * NB};")
        b(f"sub.u32 {idx}, {t}, {idx};")
        if op is Op.TILE_M:
            b(f"rem.u32 {d}, {idx}, {rows};")
            b(f"add.u32 {d}, {d}, {first};")
        else:
            b(f"div.u32 {d}, {idx}, {rows};")
    elif op is Op.LOAD_SCALE:
        d = _global_scalar(self, *a)
    elif op is Op.SMEM_SCALAR:
        d = b.reg("f32")
        b(f"ld.shared.f32 {d}, [{self.smem_addr(a[0], a[1], 4 * a[2])}];")
    self.env[n.name] = d


def _global_scalar(self: Emitter, param: str, row, col) -> str:
    """f32 register <- param[row, col] of a row-major f32 param (read-only path)."""
    b = self.b
    ncols = self.decls[param].type.shape[1]
    ptr, off, w, d = b.reg("b64"), b.reg(), b.reg("b64"), b.reg("f32")
    b(f"ld.param.u64 {ptr}, [ptr_{param}];")
    b(f"cvta.to.global.u64 {ptr}, {ptr};")
    b(f"mad.lo.u32 {off}, {self.val(row)}, {ncols}, {self.val(col)};")
    b(f"mul.wide.u32 {w}, {off}, 4;")
    b(f"add.s64 {ptr}, {ptr}, {w};")
    b(f"ld.global.nc.f32 {d}, [{ptr}];")
    return d


def _stage_scale(self: Emitter, n: Node) -> None:
    """Producer thread: global f32 -> its acquired slot; the commit's arrive (release) publishes it."""
    ch, ctr, ring, param, row, col, idx = n.args
    v = _global_scalar(self, param, row, col)
    self.b(f"st.shared.f32 [{self.smem_addr(ring, ctr, 4 * idx)}], {v};")


def _for(self: Emitter, n: Node) -> None:
    b = self.b
    start, stop, step = n.args
    i = b.reg()
    b(f"mov.u32 {i}, {self.val(start)};")
    stop_r = self.val(stop)
    head, end = b.label("for_" + n.name), b.label("end_" + n.name)
    b.put_label(head)
    p = b.reg("pred")
    b(f"setp.ge.s32 {p}, {i}, {stop_r};")
    b(f"@{p} bra {end};")
    self.env[n.name] = i
    self.body(n.body)
    b(f"add.s32 {i}, {i}, {self.val(step)};")
    b(f"bra.uni {head};")
    b.put_label(end)


def _if(self: Emitter, n: Node) -> None:
    b = self.b
    p, end = b.reg("pred"), b.label("endif")
    b(f"setp.{'ne' if n.get('negate') else 'eq'}.u32 {p}, {self.val(n.args[0])}, 0;")
    b(f"@{p} bra {end};")
    self.body(n.body)
    b.put_label(end)


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


def _commit(self: Emitter, n: Node) -> None:
    """expect_tx = the bytes every TMA of the stage lands; a box that fits M (`fit_m`) is sized at run
    time exactly as the host encodes it: min(box, align(M, a)) along that axis."""
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
    p = b.reg("pred")
    b(f"setp.eq.u32 {p}, {self.lane}, 0;")
    C = self.decls[n.args[0]].get("cluster") or 1
    if C == 1:
        b(f"@{p} mbarrier.arrive.shared::cta.b64 _, [{addr}];   // one arrival per consumer warp")
        return
    # the slot is multicast into every CTA of the cluster: release it in each of them, lane r of the
    # warp arriving on CTA rank r's barrier (the C remote arrivals go out in parallel).  Default
    # semantics (release at CTA scope), as CUTLASS's ClusterBarrier: the consumer only read the slot,
    # and a cluster-scope release would also wait for this warp's unrelated global loads
    q, rank, remote = b.reg("pred"), b.reg(), b.reg()
    b(f"setp.lt.u32 {q}, {self.lane}, {C};")
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
    if mc == 1:
        b(f"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [{dst}], {coords};")
        return
    mask = b.reg("b16")
    b(f"mov.b16 {mask}, {(1 << mc) - 1};")
    b(f"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [{dst}], {coords}, {mask};")


def _prefetch(self: Emitter, n: Node) -> None:
    self.b(f"prefetch.tensormap [{self.tmap(n.args[0])}];")


def _zero(self: Emitter, n: Node) -> None:
    for r in self.tile(n.args[0]):
        self.b(f"mov.f32 {r}, 0f00000000;")


def _smem_read(self: Emitter, n: Node) -> None:
    dst, ring, ctr = n.args
    b = self.b
    regs = self.tile(dst)
    base = self.smem_addr(ring, ctr)
    row = b.reg()
    b(f"mad.lo.u32 {row}, {self.slice_of(n)}, 64, {self.row0};")
    b(f"mad.lo.u32 {row}, {row}, 4, {base};")
    b(f"ld.shared.f32 {regs[0]}, [{row}];")
    b(f"ld.shared.f32 {regs[1]}, [{row}+32];      // row + 8")


def _desc(self: Emitter, addr: str) -> str:
    """64-bit wgmma descriptor: K-major, 128B swizzle, SBO 1024 (hopper-ptx.md §4.3)."""
    b = self.b
    lo, d = b.reg(), b.reg("b64")
    b(f"shr.u32 {lo}, {addr}, 4;")
    b(f"and.b32 {lo}, {lo}, 16383;")
    b(f"or.b32 {lo}, {lo}, 65536;")
    b(f"mov.b64 {d}, {{{lo}, 1073741888}};       // hi: SBO 64, layout 1 (128B swizzle)")
    return d


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
    da, db = _desc(self, a_addr), _desc(self, self.smem_addr(b_ring, ctr))
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
            dA, dB = b.reg("b64"), b.reg("b64")
            b(f"add.s64 {dA}, {da}, {2 * s};")
            b(f"add.s64 {dB}, {db}, {2 * s};")
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


def _straddle_splits(block_n: int) -> list[int]:
    """Where an N tile can cross a 128-row B-scale block: the column 128 - (n0 % 128), for the values
    n0 % 128 takes (multiples of gcd(BLOCK_N, 128)) that fall inside the tile; [] if no tile straddles."""
    if block_n % 128 == 0 or 128 % block_n == 0:
        return []
    g = math.gcd(block_n, 128)
    return sorted({128 - r for r in range(0, 128, g) if 128 - r < block_n})


def _split_column(self: Emitter, n0) -> str:
    split = self.b.reg()
    self.b(f"rem.u32 {split}, {self.val(n0)}, 128;")
    self.b(f"sub.u32 {split}, 128, {split};")
    return split


def _scales(self: Emitter, sfa: str, sb0, sb1, n0, ncols: int) -> list[tuple[str, str]]:
    """Per 8-column group j: (scale of row r0, scale of row r0+8) = sfa[row] * sfb[n block of col],
    selected per group at run time when the tile crosses a B-scale block."""
    b = self.b
    first = _row_scales(self, sfa, sb0)
    if not _straddle_splits(self.k.get("block_n")):
        return [first] * (ncols // 8)
    second = _row_scales(self, sfa, sb1)
    split = _split_column(self, n0)
    out = []
    for j in range(ncols // 8):
        p, x, y = b.reg("pred"), b.reg("f32"), b.reg("f32")
        b(f"setp.lt.u32 {p}, {8 * j}, {split};")
        b(f"selp.f32 {x}, {first[0]}, {second[0]}, {p};")
        b(f"selp.f32 {y}, {first[1]}, {second[1]}, {p};")
        out.append((x, y))
    return out


MAX_SPLIT_ARMS = 4    # more possible split columns than this: select per column group instead


def _promote(self: Emitter, n: Node) -> None:
    acc, part, sfa, sb0, sb1, n0 = n.args
    A, P = self.tile(acc), self.tile(part)
    b = self.b
    splits = _straddle_splits(self.k.get("block_n"))
    if not splits or len(splits) > MAX_SPLIT_ARMS:
        scales = _scales(self, sfa, sb0, sb1, n0, 2 * len(A))
        for v in range(len(A)):
            b(f"fma.rn.f32 {A[v]}, {P[v]}, {scales[v // 4][(v // 2) % 2]}, {A[v]};")
        return
    # the tile crosses a B-scale block at one of a few columns, fixed for the tile: one branch arm
    # per split column, in which every column group's scale is known at compile time (measured: the
    # per-group selects cost 128x192 tiles 20% of their speed)
    first, second = _row_scales(self, sfa, sb0), _row_scales(self, sfa, sb1)
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
            s = first if 8 * (v // 4) < c else second
            b(f"fma.rn.f32 {A[v]}, {P[v]}, {s[(v // 2) % 2]}, {A[v]};")
        b(f"bra.uni {done};")
    b.put_label(done)


def _scale(self: Emitter, n: Node) -> None:
    acc, sfa, sb0, sb1, n0 = n.args
    A = self.tile(acc)
    scales = _scales(self, sfa, sb0, sb1, n0, 2 * len(A))
    for v in range(len(A)):
        self.b(f"mul.f32 {A[v]}, {A[v]}, {scales[v // 4][(v // 2) % 2]};")


def _stage_out(self: Emitter, n: Node) -> None:
    d_tile, acc = n.args
    b = self.b
    A = self.tile(acc)
    BM, BN = self.decls[d_tile].type.shape
    base = self.smem_addr(d_tile)
    if self.decls[d_tile].get("swizzle") == 128:
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


def _sync(self: Emitter, n: Node) -> None:
    if n.get("fence_async"):
        self.b("fence.proxy.async.shared::cta;      // st.shared -> visible to the TMA engine")
    bar = self.b.reg()
    self.b(f"add.u32 {bar}, {self.wg_local}, 1;")
    self.b(f"bar.sync {bar}, 128;")


def _tma_store(self: Emitter, n: Node) -> None:
    param, d_tile, c0, c1 = n.args
    b = self.b
    skip = b.label("store_done")
    self.if_leader(skip)
    BN = self.decls[d_tile].type.shape[1]
    src = self.smem_addr(d_tile)
    sl = self.slice_of(n)
    b(f"mad.lo.u32 {src}, {sl}, {64 * BN * 2}, {src};")
    row = b.reg()
    b(f"mad.lo.u32 {row}, {sl}, 64, {self.val(c1)};")
    M = b.reg()
    b(f"ld.param.u32 {M}, [dim_M];")
    p = b.reg("pred")
    b(f"setp.ge.u32 {p}, {row}, {M};                // this warpgroup's rows lie past M")
    b(f"@{p} bra {skip};")
    tm = self.tmap(param)
    if self.decls[d_tile].get("swizzle") == 128:     # one store per 64-column panel
        BM = self.decls[d_tile].type.shape[0]
        src = self.smem_addr(d_tile)
        b(f"mad.lo.u32 {src}, {sl}, {64 * 128}, {src};")
        for c in range(BN // 64):
            col = b.reg()
            b(f"add.u32 {col}, {self.val(c0)}, {64 * c};")
            b(f"cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [{tm}, {{{col}, {row}}}], [{src}+{c * BM * 128}];")
    else:
        b(f"cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [{tm}, {{{self.val(c0)}, {row}}}], [{src}];")
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


def _split_store(self: Emitter, n: Node) -> None:
    W, acc, split = n.args[:3]
    b = self.b
    A = self.tile(acc)
    base = _global_ptr(self, W)
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


def _store_direct(self: Emitter, n: Node) -> None:
    D, acc = n.args[:2]
    b = self.b
    A = self.tile(acc)
    base = _global_ptr(self, D)
    N = self.k.get("n")

    def store(j, half, r, col, ok):
        v = 4 * j + 2 * half
        pair, idx, off, addr = b.reg(), b.reg(), b.reg("b64"), b.reg("b64")
        b(f"cvt.rn.bf16x2.f32 {pair}, {A[v + 1]}, {A[v]};")
        b(f"mad.lo.u32 {idx}, {r}, {N}, {col};")
        b(f"mul.wide.u32 {off}, {idx}, 2;")
        b(f"add.s64 {addr}, {base}, {off};")
        b(f"@{ok} st.global.b32 [{addr}], {pair};")
    _for_each_pair(self, n, 2 * len(A), store)


def _counter_of_tile(self: Emitter, n: Node, label: str) -> tuple[str, str]:
    """(address of the tile's arrival counter, label after the block) - only CTA thread 0 goes on."""
    locks, tile = n.args
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
    b = self.b
    S = n.get("splits")
    flag = self.smem_addr(n.get("flag"))
    nthreads = 128 * self.n_wgs
    b(f"bar.sync 15, {nthreads};                 // every partial of this CTA is stored")
    ptr, skip = _counter_of_tile(self, n, "split_arrive_done")
    old, last = b.reg(), b.reg()
    b("fence.acq_rel.gpu;                      // publish the CTA's partials before counting in")
    b(f"atom.acq_rel.gpu.global.add.u32 {old}, [{ptr}], 1;")
    p = b.reg("pred")
    b(f"setp.eq.u32 {p}, {old}, {S - 1};")
    b(f"selp.u32 {last}, 1, 0, {p};")
    b(f"st.shared.u32 [{flag}], {last};")
    b.put_label(skip)
    b(f"bar.sync 15, {nthreads};")
    d = b.reg()
    b(f"ld.shared.u32 {d}, [{flag}];")
    b("fence.acq_rel.gpu;                      // see the other CTAs' partials")
    self.env[n.name] = d


def _split_reduce(self: Emitter, n: Node) -> None:
    D, W = n.args[:2]
    b = self.b
    S, BN = n.get("splits"), n.get("n")
    base, dptr = _global_ptr(self, W), _global_ptr(self, D)
    M = b.reg()
    b(f"ld.param.u32 {M}, [dim_M];")
    N = self.k.get("n")
    sums = b.regs("f32", BN // 2)           # one running sum per accumulator-fragment element
    for r in sums:
        b(f"mov.f32 {r}, 0f00000000;")
    pairs = []
    _for_each_pair(self, n, BN, lambda j, half, r, col, ok: pairs.append((j, half, r, col, ok)))
    # slice order 0..S-1 whoever reduces: the sum is the same bits in every run
    s_reg, plane = b.reg(), b.reg()
    b(f"mov.u32 {s_reg}, 0;")
    head, end = b.label("reduce_slices"), b.label("reduce_done")
    b.put_label(head)
    p = b.reg("pred")
    b(f"setp.ge.u32 {p}, {s_reg}, {S};")
    b(f"@{p} bra {end};")
    b(f"mul.lo.u32 {plane}, {s_reg}, {M};")
    for j, half, r, col, ok in pairs:
        idx, off, addr, px, py = b.reg(), b.reg("b64"), b.reg("b64"), b.reg("f32"), b.reg("f32")
        b(f"add.u32 {idx}, {plane}, {r};")
        b(f"mad.lo.u32 {idx}, {idx}, {N}, {col};")
        b(f"mul.wide.u32 {off}, {idx}, 4;")
        b(f"add.s64 {addr}, {base}, {off};")
        b(f"mov.f32 {px}, 0f00000000;")
        b(f"mov.f32 {py}, 0f00000000;")
        b(f"@{ok} ld.global.cg.v2.f32 {{{px}, {py}}}, [{addr}];")
        v = 4 * j + 2 * half
        b(f"add.rn.f32 {sums[v]}, {sums[v]}, {px};")
        b(f"add.rn.f32 {sums[v + 1]}, {sums[v + 1]}, {py};")
    b(f"add.u32 {s_reg}, {s_reg}, 1;")
    b(f"bra.uni {head};")
    b.put_label(end)
    for j, half, r, col, ok in pairs:
        v = 4 * j + 2 * half
        pair, idx, off, addr = b.reg(), b.reg(), b.reg("b64"), b.reg("b64")
        b(f"cvt.rn.bf16x2.f32 {pair}, {sums[v + 1]}, {sums[v]};")
        b(f"mad.lo.u32 {idx}, {r}, {N}, {col};")
        b(f"mul.wide.u32 {off}, {idx}, 2;")
        b(f"add.s64 {addr}, {dptr}, {off};")
        b(f"@{ok} st.global.b32 [{addr}], {pair};")


def _split_reset(self: Emitter, n: Node) -> None:
    ptr, skip = _counter_of_tile(self, n, "split_reset_done")
    self.b(f"st.relaxed.gpu.global.u32 [{ptr}], 0;       // ready for the next launch")
    self.b.put_label(skip)


EMIT = {op: _scalar for op in SCALAR_OPS}
EMIT.update({Op.FOR: _for, Op.IF: _if, Op.ACQUIRE: _acquire, Op.DRAIN: _drain, Op.STAGE_SCALE: _stage_scale, Op.WAIT: _wait, Op.COMMIT: _commit,
             Op.RELEASE: _release, Op.TMA_LOAD: _tma_load, Op.PREFETCH_TMAP: _prefetch, Op.ZERO: _zero,
             Op.SMEM_READ: _smem_read, Op.WGMMA: _wgmma, Op.WGMMA_WAIT: _wgmma_wait, Op.PROMOTE: _promote,
             Op.SCALE: _scale, Op.STAGE_OUT: _stage_out, Op.SYNC: _sync, Op.TMA_STORE: _tma_store,
             Op.TMA_STORE_WAIT: _tma_store_wait, Op.SPLIT_STORE: _split_store, Op.SPLIT_ARRIVE: _split_arrive,
             Op.SPLIT_REDUCE: _split_reduce, Op.SPLIT_RESET: _split_reset, Op.STORE_DIRECT: _store_direct})


def emit_ptx(kernel: Node) -> str:
    """PTX module text for a fully lowered kernel (the sm90a pipeline's output)."""
    return Emitter(kernel).module()
