"""PTX for sm_90a from the scheduled tile IR: one small function per op kind (the table `EMIT`).

Conventions the runtime relies on (see `kernel_params`): TMA-described params are passed as
128-byte tensor maps first, then plain params as .u64 pointers, then the runtime extents (M) as
.u32, then the u32 values the host derives from M (`Op.DIM` with attr `derive`, e.g. m_tail's cap:
dgir.ops.fp8_gemm.launch_scalar).  Register tiles follow the wgmma accumulator layout (hopper-ptx.md §4.4): a 64xN f32 tile
is N/2 registers per thread; thread t of the warpgroup owns rows 16*(t/32) + (t%32)/4 and +8.
"""
from __future__ import annotations

from dgir.ir import SCALAR_OPS, Node, Op, async_filled_rings, tma_filled_rings
from dgir.verifier import launch_registers

from .arith import emit_udiv, emit_urem
from .builder import PtxBuilder
from .channels import _acquire, _commit, _drain, _global_scalar, _prefetch, _release, _stage_scale, _tma_load, _tma_prefetch, _wait
from .epilogue import _stage_out, _store_direct, _sync, _tma_store, _tma_store_wait
from .split import _split_arrive, _split_gather, _split_peek, _split_reduce, _split_reset, _split_store
from .errors import EmitError
from .mma import (_apply_scale, _load_row_scales, _promote, _rescale, _scale, _smem_read, _turn, _wgmma,
                  _wgmma_wait, _zero)
from .cluster_split import _partial_publish, _partial_reclaim, _partial_reduce
from .hoist import hoist_above_waits
from .trace import _timestamp, init_first_flags

PTX_VERSION = "8.7"
# the prologue's cluster arrive: ".release", or ".relaxed" (bench variants `relaxed`, `early`): the
# fence.mbarrier_init before it already releases the barrier inits, and a .release arrive costs a
# MEMBAR.ALL.GPU in every thread; measured no faster (TUNING step 53), so the default stays
CLUSTER_ARRIVE = ".release"
# True: the dispatch falls through into the load region, which ptxas then lays out right after the
# entry (branched to, it goes last, 10-20 KB away).  Tried for the producer's ~600 cycles before its
# first TMA; they stayed (TUNING step 65: the tile walk's dependent divisions, not instruction
# fetch), and the calls timed the same, so the default keeps the form before (bench variant `loadfirst`)
LOAD_REGION_FALLS_THROUGH = False
# a persistent loop `for(0, ceildiv(a, g), 1)` over the grid's CTAs or clusters tests i * g < a, so
# the first tile does not wait for a run-time division: the producer reaches its first TMA 50-200
# cycles sooner (TUNING step 70).  False: the division form (bench variant `loopdiv`)
LOOP_BOUND_WITHOUT_DIVISION = True
# the barrier waits' suspend-time hint (ns), or None for none: with a hint a waiting warp sleeps until
# the phase completes (or the time passes) instead of retrying after the system's default limit;
# CUTLASS's ClusterBarrier::wait passes 0x989680 (10 ms).  Measured in TUNING step 105 (bench
# variants `suspend`, `suspend1us`) against the power the waits spend at the 700 W limit
WAIT_SUSPEND_NS: int | None = None


def kernel_params(kernel: Node) -> list[tuple[str, str, str]]:
    """[(ptx param name, kind, IR name)] in PTX order; kind is tmap | ptr | dim | derived (a u32 the
    host derives from M: dgir.ops.fp8_gemm.launch_scalar)."""
    params = [n for n in kernel.body if n.op is Op.PARAM]
    out = [(f"tmap_{p.name}", "tmap", p.name) for p in params if p.get("box") is not None]
    out += [(f"ptr_{p.name}", "ptr", p.name) for p in params if p.get("box") is None]
    syms = []
    for p in params:
        for d in p.type.shape:
            if isinstance(d, str) and d not in syms and d == "M":
                syms.append(d)
    out += [(f"dim_{s}", "dim", s) for s in syms]
    derived = []
    for n in kernel.walk():
        if n.op is Op.DIM and n.get("derive") and n.get("derive") not in derived:
            derived.append(n.get("derive"))
    out += [(f"dim_{d}", "derived", d) for d in derived]
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
        self.cp_async_channels = {ch for ch, _, how in async_filled_rings(kernel).values() if how == "cp.async"}
        self.at_entry = False                  # emitting the prologue's at="entry" ops (prefetch_first_stages)

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

    def divisor(self, a) -> int | str:
        """A divisor for emit_udiv / emit_urem: the constant itself, else its register."""
        return a if isinstance(a, int) else self.val(a)

    def stage_of(self, ctr, stages: int) -> str:
        r = self.b.reg()
        emit_urem(self.b, r, self.val(ctr), stages)
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
        emit_udiv(self.b, phase, self.val(ctr), S)
        self.b(f"and.b32 {phase}, {phase}, 1;")
        return addr, phase

    def wait_parity(self, addr: str, parity: str, scope: str = "") -> None:
        """Spin on an mbarrier phase (acquire; CTA scope by default, also for barriers peers arrive
        on; scope="cluster" where the peers' memory accesses before their arrival must be ordered)."""
        p, loop = self.b.reg("pred"), self.b.label("wait")
        self.b.put_label(loop)
        sem = f".acquire.{scope}" if scope else ""
        hint = "" if WAIT_SUSPEND_NS is None else f", {WAIT_SUSPEND_NS}"
        self.b(f"mbarrier.try_wait.parity{sem}.shared::cta.b64 {p}, [{addr}], {parity}{hint};")
        self.b(f"@!{p} bra {loop};")

    def tile(self, name: str) -> list[str]:
        if name not in self.tiles:
            d = self.decls[name]
            if d.op is not Op.REGS:
                raise EmitError(f"%{name} is not a register tile")
            # 64xN: N/2 per thread (wgmma layout); 64 (one value per row): this thread's 2 rows;
            # 64xB with `scales` (one value per row and 128-column block): 2 rows x B blocks
            shape = d.type.shape
            count = 2 if len(shape) == 1 else 2 * shape[1] if d.get("scales") else shape[1] // 2
            self.tiles[name] = self.b.regs("f32", count)
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
        if k.get("uniform_wg_index") is True:   # passes/uniform_warpgroup_index.py
            b(f"shfl.sync.idx.b32 {wg}, {wg}, 0, 31, -1;   // lane 0's value: provably warp-uniform")
        self.base = b.reg()
        b(f"mov.u32 {self.base}, smem;")
        b(f"add.u32 {self.base}, {self.base}, 1023;")
        b(f"and.b32 {self.base}, {self.base}, -1024;     // 1024-aligned window: swizzle atoms")
        lane, warp = b.reg(), b.reg()
        b(f"and.b32 {lane}, {tid}, 31;")
        b(f"shr.u32 {warp}, {tid}, 5;")
        b(f"and.b32 {warp}, {warp}, 3;                 // warp within its warpgroup")
        self.lane, self.warp = lane, warp
        # the ops marked at="entry" (prefetch_first_stages: L2 prefetches of the first tile's first
        # K blocks and their index arithmetic) run in thread 32 (warp 1) while thread 0 sets up the
        # barriers below, so the data's round trip starts with the kernel
        entry = [n for r in k.body if r.op is Op.WARPGROUP for n in r.body
                 if n.get("at") == "entry" and n.op is not Op.PREFETCH_TMAP]
        if entry:
            pe, entry_done = b.reg("pred"), b.label("entry_prefetch_done")
            b(f"setp.ne.u32 {pe}, {tid}, 32;")
            b(f"@{pe} bra {entry_done};")
            self.env, self.tiles, self.policies, self.at_entry = {}, {}, {}, True
            self.body(entry)
            self.at_entry = False
            b.put_label(entry_done)
        # one thread initialises every channel's barriers; first it starts the tensor-map fetches
        # marked at="entry" (prefetch_tma_descriptors), which then overlap the whole prologue
        p0, done = b.reg("pred"), b.label("bar_init_done")
        b(f"setp.ne.u32 {p0}, {tid}, 0;")
        b(f"@{p0} bra {done};")
        for r in (n for n in k.body if n.op is Op.WARPGROUP):
            for n in r.body:
                if n.op is Op.PREFETCH_TMAP and n.get("at") == "entry":
                    b(f"prefetch.tensormap [{self.tmap(n.args[0])}];")
        for c in (n for n in k.body if n.op is Op.CHANNEL):
            S = c.get("stages")
            for s in range(S):
                b(f"mbarrier.init.shared::cta.b64 [{self.base}+{c.get('barriers') + 8 * s}], 1;          // %{c.name} full[{s}]")
            for s in range(S):
                # every warp of every consumer warpgroup (of every CTA of a cluster channel) arrives once per use
                arrivals = 4 * c.get("consumers") * (c.get("cluster") or 1)
                b(f"mbarrier.init.shared::cta.b64 [{self.base}+{c.get('barriers') + 8 * (S + s)}], {arrivals};  // %{c.name} empty[{s}]")
        for x in (n for n in k.body if n.op is Op.SMEM and n.get("exchange")):
            # cluster split-K (cluster_split.py): ready - this CTA's math warps post the bytes they
            # expect; free - every math warp of every CTA says it read what this CTA sent
            warps = 4 * (threads // 128 - 1)
            b(f"mbarrier.init.shared::cta.b64 [{self.base}+{x.get('barriers')}], {warps};  // %{x.name} ready")
            b(f"mbarrier.init.shared::cta.b64 [{self.base}+{x.get('barriers') + 8}], {warps * x.get('exchange')};  // %{x.name} free")
        b("fence.mbarrier_init.release.cluster;")
        b.put_label(done)
        if (k.get("cluster") or 1) > 1:
            # the peers multicast into this CTA's slots and arrive on its barriers: all initialised first
            b(f"barrier.cluster.arrive{CLUSTER_ARRIVE}.aligned;")
            b("barrier.cluster.wait.acquire.aligned;")
        else:
            b("bar.sync 0;")
        regions = [n for n in k.body if n.op is Op.WARPGROUP]
        labels = {id(r): b.label("wg_" + "_".join(r.get("roles"))) for r in regions}
        loads = [r for r in regions if set(r.get("roles")) == {"load"}]
        inline = loads[0] if LOAD_REGION_FALLS_THROUGH and loads else None
        branched = [r for r in regions if r is not inline]
        for r in branched + ([inline] if inline else []):       # the inline region is tested last
            ids = r.get("ids")
            p = b.reg("pred")
            b(f"setp.ge.u32 {p}, {wg}, {ids[0]};")
            q = b.reg("pred")
            b(f"setp.le.u32 {q}, {wg}, {ids[-1]};")
            b(f"and.pred {p}, {p}, {q};")
            b(f"@!{p} ret;" if r is inline else f"@{p} bra {labels[id(r)]};")
        if inline is None:
            b("ret;")
        for r in ([inline] if inline else []) + branched:      # ... and laid out first
            b.put_label(labels[id(r)])
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
        # kernels marked by the hoist_wait_arithmetic pass: slot arithmetic ahead of barrier waits
        lines = hoist_above_waits(b.lines) if k.get("hoist_waits") is True else b.lines
        return "\n".join(head + b.declarations() + lines + ["}", ""])

    @staticmethod
    def param_decl(p) -> str:
        name, kind, _ = p
        return {"tmap": f"  .param .align 64 .b8 {name}[128]", "ptr": f"  .param .u64 {name}",
                "dim": f"  .param .u32 {name}", "derived": f"  .param .u32 {name}"}[kind]

    def region(self, r: Node) -> None:
        b = self.b
        self.env, self.tiles, self.region_node = {}, {}, r
        roles = set(r.get("roles"))
        regs = r.get("regs")
        if regs is not None:
            # the kernel starts with at most the register file's share per thread (ptxas's cap for
            # .maxntid, 255 at most): budgets above it grow, budgets at or below shrink
            launch_cap = launch_registers(self.k.get("threads"), self.k.get("ctas_per_sm") or 1)
            b(f"setmaxnreg.{'dec' if regs <= launch_cap else 'inc'}.sync.aligned.u32 {regs};")
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
        # L2 cache policies the region's TMA loads and stores ask for (attr `l2`), made once
        self.policies = {}
        for kind in sorted({n.get("l2") for n in r.walk() if n.op in (Op.TMA_LOAD, Op.TMA_STORE, Op.TMA_PREFETCH) and n.get("l2")}):
            self.policies[kind] = b.reg("b64")
            b(f"createpolicy.fractional.L2::{kind}.b64 {self.policies[kind]}, 1.0;")
        init_first_flags(self, r)
        self.body(r.body)

    def body(self, nodes) -> None:
        for n in nodes:
            if n.get("at") == "entry" and not self.at_entry and n.op is not Op.PREFETCH_TMAP:
                continue                       # issued in the prologue (Emitter.module)
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
        sym = n.get("derive") or p.type.shape[n.get("axis")]
        b(f"ld.param.u32 {d}, [dim_{sym}];")
    elif op in (Op.DIV, Op.MOD):      # a constant divisor is strength-reduced (no MUFU sequence)
        (emit_udiv if op is Op.DIV else emit_urem)(b, d, self.val(a[0]), self.divisor(a[1]))
    elif op in (Op.ADD, Op.SUB, Op.MUL, Op.MIN):
        ins = {Op.ADD: "add.s32", Op.SUB: "sub.s32", Op.MUL: "mul.lo.s32", Op.MIN: "min.s32"}[op]
        b(f"{ins} {d}, {self.val(a[0])}, {self.val(a[1])};")
    elif op is Op.CEILDIV:
        t = b.reg()
        b(f"add.s32 {t}, {self.val(a[0])}, {self.val(a[1])};")
        b(f"sub.s32 {t}, {t}, 1;")
        emit_udiv(b, d, t, self.divisor(a[1]))
    elif op is Op.LT:
        p = b.reg("pred")
        b(f"setp.lt.s32 {p}, {self.val(a[0])}, {self.val(a[1])};")
        b(f"selp.u32 {d}, 1, 0, {p};")
    elif op in (Op.TILE_M, Op.TILE_N):
        # persistent tile order: bands of `group` m blocks, m fastest inside a band (L2 reuse of B)
        G, NB = n.get("group"), n.get("n_blocks")
        t, mblocks = self.val(a[0]), self.val(a[1])
        band, first, rows, idx = b.reg(), b.reg(), b.reg(), b.reg()
        emit_udiv(b, band, t, G * NB)
        b(f"mul.lo.u32 {first}, {band}, {G};")
        b(f"sub.u32 {rows}, {mblocks}, {first};")
        b(f"min.u32 {rows}, {rows}, {G};")
        b(f"mul.lo.u32 {idx}, {band}, {G * NB};")
        b(f"sub.u32 {idx}, {t}, {idx};")
        if op is Op.TILE_M:
            emit_urem(b, d, idx, rows)
            b(f"add.u32 {d}, {d}, {first};")
        else:
            emit_udiv(b, d, idx, rows)
    elif op is Op.LOAD_SCALE:
        d = _global_scalar(self, *a)
    elif op is Op.SMEM_SCALAR:
        d = b.reg("f32")
        b(f"ld.shared.f32 {d}, [{self.smem_addr(a[0], a[1], 4 * a[2])}];")
    self.env[n.name] = d


def _for(self: Emitter, n: Node) -> None:
    b = self.b
    start, stop, step = n.args
    i = b.reg()
    b(f"mov.u32 {i}, {self.val(start)};")
    by_grid = _ceildiv_by_grid(self, n) if LOOP_BOUND_WITHOUT_DIVISION else None
    stop_r = None if by_grid else self.val(stop)
    head, end = b.label("for_" + n.name), b.label("end_" + n.name)
    b.put_label(head)
    p = b.reg("pred")
    if by_grid:
        # i < ceildiv(a, g) with g > 0 is i * g < a: no run-time division before the first iteration
        a, g = by_grid
        t = b.reg()
        b(f"mul.lo.s32 {t}, {i}, {self.val(g)};")
        b(f"setp.ge.s32 {p}, {t}, {self.val(a)};")
    else:
        b(f"setp.ge.s32 {p}, {i}, {stop_r};")
    b(f"@{p} bra {end};")
    self.env[n.name] = i
    self.body(n.body)
    b(f"add.s32 {i}, {i}, {self.val(step)};")
    b(f"bra.uni {head};")
    b.put_label(end)


def _ceildiv_by_grid(self: Emitter, n: Node):
    """(numerator, divisor) names if `n` is for(0, ceildiv(a, g), 1) with g the grid's CTA or
    cluster count (positive), else None."""
    start, stop, step = n.args
    defs = {x.name: x for x in self.region_node.walk() if x.name}
    if not (isinstance(stop, str) and defs.get(stop) is not None and defs[stop].op is Op.CEILDIV):
        return None
    if start != 0 or step != 1:          # int literals in the IR
        return None
    a, g = defs[stop].args
    gd = defs.get(g) if isinstance(g, str) else None
    if gd is None or gd.op is not Op.SREG or gd.get("which") not in ("grid_size", "cluster_count"):
        return None
    return a, g


def _if(self: Emitter, n: Node) -> None:
    b = self.b
    p, end = b.reg("pred"), b.label("endif")
    b(f"setp.{'ne' if n.get('negate') else 'eq'}.u32 {p}, {self.val(n.args[0])}, 0;")
    b(f"@{p} bra {end};")
    self.body(n.body)
    b.put_label(end)


def _grid_wait(self: Emitter, n: Node) -> None:
    self.b("griddepcontrol.wait;                // the previous grid's writes are visible (no-op without PDL)")


def _launch_dependents(self: Emitter, n: Node) -> None:
    self.b("griddepcontrol.launch_dependents;   // the stream's next grid may launch (no-op without PDL)")


# one emitting function per op, grouped by role: channel protocol and loads (channels.py), tensor-core
# math and promotion (mma.py), stores and split-K (epilogue.py), split-K over a cluster
# (cluster_split.py), timestamps (trace.py)
EMIT = {op: _scalar for op in SCALAR_OPS}
EMIT.update({Op.FOR: _for, Op.IF: _if, Op.GRID_WAIT: _grid_wait, Op.LAUNCH_DEPENDENTS: _launch_dependents,
             Op.ACQUIRE: _acquire, Op.COMMIT: _commit, Op.WAIT: _wait, Op.RELEASE: _release, Op.DRAIN: _drain,
             Op.TMA_LOAD: _tma_load, Op.TMA_PREFETCH: _tma_prefetch, Op.PREFETCH_TMAP: _prefetch, Op.STAGE_SCALE: _stage_scale,
             Op.ZERO: _zero, Op.SMEM_READ: _smem_read, Op.LOAD_ROW_SCALES: _load_row_scales,
             Op.WGMMA: _wgmma, Op.WGMMA_WAIT: _wgmma_wait,
             Op.PROMOTE: _promote, Op.SCALE: _scale, Op.RESCALE: _rescale, Op.APPLY_SCALE: _apply_scale, Op.TURN: _turn,
             Op.STAGE_OUT: _stage_out, Op.SYNC: _sync, Op.TMA_STORE: _tma_store, Op.TMA_STORE_WAIT: _tma_store_wait,
             Op.STORE_DIRECT: _store_direct, Op.SPLIT_STORE: _split_store, Op.SPLIT_ARRIVE: _split_arrive,
             Op.SPLIT_REDUCE: _split_reduce, Op.SPLIT_GATHER: _split_gather, Op.SPLIT_PEEK: _split_peek, Op.SPLIT_RESET: _split_reset, Op.TIMESTAMP: _timestamp,
             Op.PARTIAL_PUBLISH: _partial_publish, Op.PARTIAL_REDUCE: _partial_reduce,
             Op.PARTIAL_RECLAIM: _partial_reclaim})


def emit_ptx(kernel: Node) -> str:
    """PTX module text for a fully lowered kernel (the sm90a pipeline's output)."""
    return Emitter(kernel).module()
