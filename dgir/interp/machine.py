"""The machine: binds inputs, runs the CTAs of a grid (a cluster's CTAs in one seeded scheduler), executes
scalars and dispatches every other op to its handler (channels.py, epilogue.py, mma.py)."""
from __future__ import annotations

from collections import Counter

import random
import re

import torch

from ..ir import Node, Op, SCALAR_OPS, async_filled_rings
from ..printer import print_node
from .channels import ChannelOps
from .epilogue import EpilogueOps
from .mma import MathOps
from .state import (I32_MAX, I32_MIN, ROWS_PER_WG, TORCH_DTYPE, DeadlockError, InterpError, RaceError, _align, _Channel,
                    _Copy, _Cta, _poison, _Task)


# ------------------------------------------------------------------------------------------------
# the machine
# ------------------------------------------------------------------------------------------------
class _Machine(ChannelOps, EpilogueOps, MathOps):
    def __init__(self, kernel: Node, inputs: dict, grid: int | None, seed: int, max_steps: int):
        if not isinstance(kernel, Node) or kernel.op is not Op.KERNEL:
            raise InterpError("run_kernel expects a kernel node")
        self.kernel = kernel
        self.rng = random.Random(seed)
        self.max_steps = max_steps
        self.steps = 0
        self.params: dict[str, Node] = {}
        self.smem: dict[str, Node] = {}
        self.regs: dict[str, Node] = {}
        self.chans: dict[str, Node] = {}
        self.ring_chan: dict[str, str] = {}
        self.regions: list[Node] = []
        for n in kernel.body:
            if n.op is Op.PARAM:
                self.params[n.name] = n
            elif n.op is Op.SMEM:
                self.smem[n.name] = n
            elif n.op is Op.REGS:
                self.regs[n.name] = n
            elif n.op is Op.CHANNEL:
                self.chans[n.name] = n
                for r in n.args:
                    if r not in self.smem:
                        raise InterpError(f"channel %{n.name}: %{r} is not a shared-memory buffer declared before it")
                    if r in self.ring_chan:
                        raise InterpError(f"ring %{r} belongs to two channels")
                    if self.smem[r].get("stages", 1) != n.get("stages", 1):
                        raise InterpError(f"channel %{n.name} has stages={n.get('stages')} but ring %{r} "
                                          f"has stages={self.smem[r].get('stages', 1)}")
                    self.ring_chan[r] = n.name
            elif n.op is Op.WARPGROUP:
                self.regions.append(n)
            else:
                raise InterpError(f"unexpected op '{n.op.value}' at kernel level")
        # outputs: params stored to, and params nothing reads (a kernel that lost its stores still
        # returns its output, unwritten)
        stored = {n.args[0] for n in kernel.walk() if n.op is Op.TMA_STORE and n.args}
        read = {n.args[3] for n in kernel.walk() if n.op is Op.TMA_LOAD and len(n.args) > 3}
        read |= {n.args[0] for n in kernel.walk() if n.op in (Op.LOAD_SCALE, Op.DIM) and n.args}
        read |= {n.args[3] for n in kernel.walk() if n.op is Op.STAGE_SCALE and len(n.args) > 3}
        read |= {n.args[1] for n in kernel.walk() if n.op is Op.LOAD_ROW_SCALES and len(n.args) > 1}
        self.outputs = sorted(stored | (set(self.params) - read))
        self._bind(inputs)
        self.cluster = kernel.get("cluster") or 1
        self.partial_loads: dict[str, int] = {}     # param -> TMA boxes partly past its ends
        # prefetch_to_l2's contract, per CTA: every box of a prefetched param that the CTA loads was
        # prefetched by it exactly once, and it prefetched nothing else ((block, param, coords) -> count)
        self.prefetched_params = {n.args[0] for n in kernel.walk() if n.op is Op.TMA_PREFETCH and n.args}
        self.prefetched: Counter = Counter()
        self.loaded_boxes: Counter = Counter()
        self.late_prefetches: set = set()
        # a fill is complete when the commit arrived and every ring the channel's loads write is whole
        loaded = {(ch, ring) for ring, (ch, _, _) in async_filled_rings(kernel).items()}
        self.fill_elems: dict[str, int] = {}
        for ch, ring in loaded:
            if ring in self.smem and self.smem[ring].type is not None:
                self.fill_elems[ch] = self.fill_elems.get(ch, 0) + self.smem[ring].type.numel
        self.grid = self._grid() if grid is None else grid
        if not isinstance(self.grid, int) or self.grid < 1 or self.grid % self.cluster:
            raise InterpError(f"grid must be a positive int (a multiple of the cluster size {self.cluster}), "
                              f"got {self.grid!r}")
        self.handlers = {
            Op.ACQUIRE: self._acquire, Op.COMMIT: self._commit, Op.WAIT: self._wait,
            Op.RELEASE: self._release, Op.DRAIN: self._drain, Op.STAGE_SCALE: self._stage_scale,
            Op.PREFETCH_TMAP: self._prefetch, Op.TMA_LOAD: self._tma_load, Op.TMA_PREFETCH: self._tma_prefetch,
            Op.TMA_STORE: self._tma_store, Op.TMA_STORE_WAIT: self._tma_store_wait,
            Op.SMEM_READ: self._smem_read, Op.LOAD_ROW_SCALES: self._load_row_scales,
            Op.STAGE_OUT: self._stage_out, Op.SYNC: self._sync, Op.TURN: self._turn,
            Op.ZERO: self._zero, Op.WGMMA: self._wgmma, Op.WGMMA_WAIT: self._wgmma_wait,
            Op.PROMOTE: self._promote, Op.MMA_SCALED: self._mma_scaled, Op.SCALE: self._scale,
            Op.RESCALE: self._rescale, Op.APPLY_SCALE: self._apply_scale,
            Op.SPLIT_STORE: self._split_store, Op.SPLIT_ARRIVE: self._split_arrive,
            Op.SPLIT_REDUCE: self._split_reduce, Op.SPLIT_GATHER: self._split_gather, Op.SPLIT_PEEK: self._split_peek, Op.SPLIT_RESET: self._split_reset,
            Op.STORE_DIRECT: self._store_direct, Op.TIMESTAMP: self._timestamp,
            Op.PARTIAL_PUBLISH: self._partial_publish, Op.PARTIAL_REDUCE: self._partial_reduce,
            Op.PARTIAL_RECLAIM: self._partial_reclaim,
            # one kernel runs here, so there is no previous grid to wait for nor a next one to release
            Op.GRID_WAIT: self._no_effect, Op.LAUNCH_DEPENDENTS: self._no_effect,
        }

    # --- inputs ---------------------------------------------------------------------------------
    def _bind(self, inputs: dict) -> None:
        if not isinstance(inputs, dict):
            raise InterpError("inputs must be a dict {param name: tensor}")
        unknown = sorted(set(inputs) - set(self.params))
        if unknown:
            raise InterpError(f"inputs {unknown} are not params of the kernel (params: {sorted(self.params)})")
        syms: dict[str, tuple] = {}
        for name, p in self.params.items():
            if name not in inputs:
                if name in self.outputs:
                    continue
                raise InterpError(f"missing input for param %{name} : {p.type}")
            t = inputs[name]
            if not isinstance(t, torch.Tensor):
                raise InterpError(f"input %{name} must be a torch.Tensor, got {type(t).__name__}")
            want = TORCH_DTYPE.get(p.type.dtype)
            if t.dtype != want:
                raise InterpError(f"input %{name} has dtype {t.dtype}, param type {p.type} needs {want}")
            if t.dim() != len(p.type.shape):
                raise InterpError(f"input %{name} has shape {tuple(t.shape)}, param type {p.type} has rank {len(p.type.shape)}")
            if t.device.type != "cpu":
                raise InterpError(f"input %{name} is on {t.device}; the interpreter runs on the CPU")
            for ax, (d, v) in enumerate(zip(p.type.shape, t.shape)):
                if isinstance(d, int):
                    if d != v:
                        raise InterpError(f"input %{name} has shape {tuple(t.shape)}, param type {p.type} needs "
                                          f"extent {d} on axis {ax}")
                else:
                    if d in syms and syms[d][0] != v:
                        raise InterpError(f"extent {d} is {syms[d][0]} from %{syms[d][1]} but {v} from %{name} "
                                          f"(axis {ax})")
                    syms.setdefault(d, (v, name))
        # derived symbols: "M4" = align(M, 4) when M is bound too
        for s, (v, who) in syms.items():
            m = re.fullmatch(r"([A-Za-z_]+?)(\d+)", s)
            if m and m.group(1) in syms:
                base = syms[m.group(1)][0]
                want = _align(base, int(m.group(2)))
                if v != want:
                    raise InterpError(f"extent {s} of %{who} must be align({m.group(1)}, {m.group(2)}) = {want} "
                                      f"for {m.group(1)} = {base}, got {v}")
        self.syms = {s: v for s, (v, _) in syms.items()}
        self.tensors: dict[str, torch.Tensor] = {}
        for name, p in self.params.items():
            if name in self.outputs:
                if name in inputs:
                    self.tensors[name] = inputs[name].clone()
                else:
                    shape = []
                    for d in p.type.shape:
                        if not isinstance(d, int) and d not in self.syms:
                            raise InterpError(f"output %{name}: extent {d} is not bound by any input")
                        shape.append(d if isinstance(d, int) else self.syms[d])
                    t = torch.empty(shape, dtype=TORCH_DTYPE[p.type.dtype])
                    _poison(t)
                    self.tensors[name] = t
            else:
                self.tensors[name] = inputs[name]

    def _grid(self) -> int:
        k = self.kernel
        if k.get("block_m") and k.get("block_n") and k.get("n") and "M" in self.syms:
            from ..ops.fp8_gemm import kernel_grid
            return kernel_grid(dict(k.attrs), self.syms["M"])
        return max(1, k.get("num_sms", 1))

    # --- driver ---------------------------------------------------------------------------------
    def run(self) -> dict[str, torch.Tensor]:
        for b in range(0, self.grid, self.cluster):
            self._run_cluster(range(b, b + self.cluster))
        return {name: self.tensors[name] for name in self.outputs}

    def prefetch_misses(self) -> list[str]:
        """Where a CTA's L2 prefetches (tma_prefetch) break prefetch_to_l2's contract: a box prefetched
        more than once, prefetched but never loaded by that CTA, or prefetched only after its load."""
        out = []
        for key in sorted(self.prefetched):
            block, param, coords = key
            loaded = self.loaded_boxes[key]
            if self.prefetched[key] > 1:
                out.append(f"CTA {block}: %{param} box at {list(coords)} prefetched {self.prefetched[key]}x")
            if not loaded:
                out.append(f"CTA {block}: %{param} box at {list(coords)} prefetched, never loaded")
            elif key in self.late_prefetches:
                out.append(f"CTA {block}: %{param} box at {list(coords)} prefetched after its load")
        return out

    def unprefetched_loads(self) -> int:
        """Loads of a prefetched param whose box the CTA had not prefetched (by design each K loop's
        first min(ring, distance) blocks: their loads go out at once)."""
        return sum(1 for key in self.loaded_boxes if key not in self.prefetched)

    def _tick(self):
        self.steps += 1
        if self.steps > self.max_steps:
            raise InterpError(f"max_steps={self.max_steps} exceeded (livelock or a very large problem)")

    def _run_cluster(self, block_ids) -> None:
        """Run the CTAs of one cluster (one CTA without clusters) to completion, interleaved."""
        cluster: list[_Cta] = []
        self.copies: list[_Copy] = []      # queued TMA copies of the cluster, landing in random order
        tasks = []
        for block_id in block_ids:
            cta = _Cta(block_id, cluster)
            for name, d in self.smem.items():
                if d.type is None or any(not isinstance(x, int) for x in d.type.shape):
                    raise InterpError(f"smem %{name} needs a static type, got {d.type}")
                t = torch.empty((d.get("stages", 1),) + tuple(d.type.shape), dtype=TORCH_DTYPE[d.type.dtype])
                _poison(t)
                cta.smem[name] = t
            for name, d in self.chans.items():
                cta.chans[name] = _Channel(name, d.args, d.get("stages", 1),
                                           d.get("consumers", 1) * (d.get("cluster") or 1),
                                           expect=self.fill_elems.get(name, 0))
                if (d.get("cluster") or 1) not in (1, self.cluster):
                    raise InterpError(f"channel %{name} spans {d.get('cluster')} CTAs, the kernel's clusters "
                                      f"have {self.cluster}")
            for ri, region in enumerate(self.regions):
                ids = region.get("ids", ())
                if not ids:
                    raise InterpError("warpgroup region without ids")
                for li, wid in enumerate(ids):
                    t = _Task(len(tasks), cta, ri, wid, li, tuple(region.get("roles", ())), n_wgs=len(ids))
                    for rn, rd in self.regs.items():
                        if rd.type is None or any(not isinstance(x, int) for x in rd.type.shape):
                            raise InterpError(f"regs %{rn} needs a static type, got {rd.type}")
                        rt = torch.empty(tuple(rd.type.shape), dtype=TORCH_DTYPE[rd.type.dtype])
                        _poison(rt)
                        t.regs[rn] = rt
                    t.gen = self._task_main(t, region.body)
                    tasks.append(t)
                    cta.tasks.append(t)
        alive = list(tasks)
        rng = self.rng
        while alive:
            self._tick()
            runnable = [t for t in alive if t.blocker is None or t.blocker.ready()]
            n = len(runnable) + (1 if self.copies else 0)
            if n == 0:
                self._deadlock(alive)
            i = rng.randrange(n)
            if i == len(runnable):
                self._land(self.copies.pop(rng.randrange(len(self.copies))))
                continue
            t = runnable[i]
            try:
                t.blocker = next(t.gen)
            except StopIteration:
                t.done = True
                alive.remove(t)
                if not any(x.cta is t.cta for x in alive):
                    t.cta.exited = True
                    dangling = {k: v for k, v in t.cta.turns.items() if v[0] != v[1]}
                    if dangling:   # a bar.arrive nobody synced on: the named barrier is left mid-generation
                        raise RaceError(f"CTA {t.cta.block_id} ends with turns passed but not taken "
                                        f"(region, warpgroup) -> [passes, waits]: {dangling}")
            except DeadlockError:
                raise
            except Exception as e:
                where = f"CTA {t.cta.block_id}, {t.label()}"
                where += f", at `{print_node(t.cur).strip()}`" if t.cur is not None else ", at the end of the task"
                if isinstance(e, InterpError):
                    raise type(e)(f"{where}: {e}") from None
                raise InterpError(f"{where}: {type(e).__name__}: {e}") from e
        while self.copies:              # loads issued but never committed: harmless, drain them
            self._land(self.copies.pop())

    def _deadlock(self, alive) -> None:
        ids = sorted({t.cta.block_id for t in alive})
        lines = [f"deadlock in CTA {ids[0] if len(ids) == 1 else ids}: every live task is blocked"]
        for t in alive:
            where = f"CTA {t.cta.block_id} " if self.cluster > 1 else ""
            lines.append(f"  {where}{t.label()} blocked at `{print_node(t.cur).strip()}`: {t.blocker.describe()}")
        raise DeadlockError("\n".join(lines))

    # --- task body ------------------------------------------------------------------------------
    def _task_main(self, t: _Task, body):
        yield from self._exec(t, body)
        t.cur = None                     # errors below are reported "at the end of the task"
        if t.groups:
            raise RaceError(f"task ends with {len(t.groups)} wgmma group(s) in flight (no wgmma_wait retired them)")
        if t.store_reads:
            raise RaceError(f"task ends with tma_store(s) still reading {sorted(t.store_reads)} (no tma_store_wait)")
        if t.acquired:
            raise RaceError(f"task ends with acquired but uncommitted slots {sorted(t.acquired)}")

    def _exec(self, t: _Task, body):
        for n in body:
            op = n.op
            if op in SCALAR_OPS:
                t.cur = n
                t.env[n.name] = self._scalar(t, n)
            elif op is Op.FOR:
                t.cur = n
                if len(n.args) != 3:
                    raise InterpError("for needs (start, stop, step)")
                start, stop, step = (self._int(t, a) for a in n.args)
                if step <= 0:
                    raise InterpError(f"for step must be positive, got {step}")
                for i in range(start, stop, step):
                    self._tick()
                    t.env[n.name] = i
                    yield from self._exec(t, n.body)
            elif op is Op.IF:
                t.cur = n
                p = bool(self._val(t, n.args[0]))
                if p != bool(n.get("negate", False)):
                    yield from self._exec(t, n.body)
            else:
                h = self.handlers.get(op)
                if h is None:
                    t.cur = n
                    raise InterpError(f"the interpreter does not know op '{op.value}'")
                t.cur = n
                yield None                      # a scheduling point before every effect
                g = h(t, n)
                if g is not None:
                    yield from g

    # --- scalars --------------------------------------------------------------------------------
    def _val(self, t: _Task, a):
        if isinstance(a, str):
            try:
                return t.env[a]
            except KeyError:
                raise InterpError(f"scalar %{a} is not defined") from None
        return a

    def _int(self, t: _Task, a) -> int:
        v = self._val(t, a)
        if isinstance(v, bool) or not isinstance(v, int):
            raise InterpError(f"expected an integer, %{a} is {v!r}")
        return v

    def _scalar(self, t: _Task, n: Node):
        op = n.op
        if op is Op.CONST:
            v = n.get("value")
            if v is None:
                raise InterpError("const without value")
            return v
        if op is Op.SREG:
            which = n.get("which")
            if which == "block_id":
                return t.cta.block_id
            if which == "grid_size":
                return self.grid
            if which == "cluster_rank":
                return t.cta.rank
            if which == "cluster_id":
                return t.cta.block_id // self.cluster
            if which == "cluster_count":
                return self.grid // self.cluster
            raise InterpError(f"unknown special register {which!r}")
        if op is Op.DIM:
            p = n.args[0]
            if p not in self.tensors:
                raise InterpError(f"dim of unknown param %{p}")
            ax = n.get("axis", 0)
            if not 0 <= ax < self.tensors[p].dim():
                raise InterpError(f"dim axis {ax} of rank-{self.tensors[p].dim()} param %{p}")
            if n.get("derive"):       # a u32 the host derives from M, as the launcher does
                from ..ops.fp8_gemm import launch_scalar
                return launch_scalar(n.get("derive"), int(self.tensors[p].shape[ax]), dict(self.kernel.attrs))
            return int(self.tensors[p].shape[ax])
        if op is Op.LOAD_SCALE:
            return self._global_scalar(t, *n.args, what="load_scale")
        if op is Op.SMEM_SCALAR:
            ring, ctr, idx = n.args
            slot = self._ring_read(t, ring, ctr, "smem_scalar")
            i = self._int(t, idx)
            if slot.dim() != 1 or not 0 <= i < slot.shape[0]:
                raise InterpError(f"smem_scalar: element {i} of a %{ring} slot of shape {tuple(slot.shape)}")
            return float(slot[i].float())
        if op is Op.LT:
            a, b = (self._val(t, x) for x in n.args)
            return int(a < b)           # an i32 0 / 1, as the emitted selp
        if op in (Op.TILE_M, Op.TILE_N):
            tt, mblocks = (self._int(t, x) for x in n.args)
            G, NB = n.get("group"), n.get("n_blocks")
            if not G or not NB:
                raise InterpError(f"{op.value} needs group and n_blocks attrs")
            band = tt // (G * NB)
            first = band * G
            rows = min(G, mblocks - first)
            if rows <= 0:
                raise InterpError(f"{op.value}: tile {tt} is beyond {mblocks} m blocks x {NB} n blocks")
            idx = tt % (G * NB)
            return first + idx % rows if op is Op.TILE_M else idx // rows
        a, b = (self._int(t, x) for x in n.args)
        if op is Op.ADD:
            v = a + b
        elif op is Op.SUB:
            v = a - b
        elif op is Op.MUL:
            v = a * b
        elif op is Op.CEILDIV:
            if b <= 0:
                raise InterpError(f"ceildiv by {b}")
            v = -(-a // b)
        elif op in (Op.DIV, Op.MOD):
            if b == 0:
                raise InterpError(f"{op.value} by zero")
            q = abs(a) // abs(b)
            q = q if (a >= 0) == (b > 0) else -q       # C: truncate toward zero
            v = a - b * q if op is Op.MOD else q
        elif op is Op.MIN:
            v = min(a, b)
        else:
            raise InterpError(f"the interpreter does not know op '{op.value}'")
        if not I32_MIN <= v <= I32_MAX:
            raise InterpError(f"i32 overflow: {op.value}({a}, {b}) = {v}")
        return v

    def _global_scalar(self, t: _Task, p, r, c, what: str) -> float:
        if p not in self.tensors:
            raise InterpError(f"{what} of unknown param %{p}")
        T = self.tensors[p]
        r, c = self._int(t, r), self._int(t, c)
        if T.dim() != 2 or not (0 <= r < T.shape[0] and 0 <= c < T.shape[1]):
            raise InterpError(f"{what} %{p}[{r}, {c}] is out of bounds of {tuple(T.shape)}")
        return float(T[r, c].float())

    # --- operands -------------------------------------------------------------------------------
    def _reg(self, t: _Task, name, what: str) -> torch.Tensor:
        if not isinstance(name, str) or name not in self.regs:
            raise InterpError(f"%{name} is not a register tile")
        if t.inflight.get(name):
            raise RaceError(f"{what} register tile %{name} while a wgmma writing it is in flight "
                            f"(no wgmma_wait has retired it)")
        return t.regs[name]

    @staticmethod
    def tasks_of(cta) -> list:
        return cta.tasks

    def _slot_key(self, t: _Task, chan: str, ctr) -> tuple:
        ch = t.cta.chans.get(chan)
        if ch is None:
            raise InterpError(f"%{chan} is not a channel")
        c = self._int(t, ctr)
        if c < 0:
            raise InterpError(f"negative counter {c}")
        return ch, c % ch.stages, c // ch.stages

    def _ring_read(self, t: _Task, ring: str, ctr, what: str) -> torch.Tensor:
        """Slot contents for a read, after checking this task holds the slot (waited, not released)."""
        if ring not in self.smem:
            raise InterpError(f"%{ring} is not a shared-memory buffer")
        chan = self.ring_chan.get(ring)
        buf = t.cta.smem[ring]
        if chan is None:
            return buf[self._int(t, ctr) % buf.shape[0]]
        ch, slot, rnd = self._slot_key(t, chan, ctr)
        if (chan, slot, rnd) not in t.waited:
            state = (f"full phases completed: {ch.full_done[slot]}, empty phases completed: "
                     f"{ch.empty_done[slot]}")
            raise RaceError(f"{what} reads %{ring} (channel '{chan}' stage {slot} round {rnd} phase {rnd & 1}) "
                            f"that this warpgroup has not waited for or has already released ({state})")
        return buf[slot]

    def _rows(self, t: _Task, tile: torch.Tensor, what: str, wave: int | None = 0) -> slice:
        """This task's 64-row slice of a tile: wave w of warpgroup g owns slice w * n_wgs + g."""
        idx = (wave or 0) * t.n_wgs + t.wg_local
        lo = ROWS_PER_WG * idx
        if tile.shape[0] < lo + ROWS_PER_WG and not (idx == 0 and tile.shape[0] <= ROWS_PER_WG):
            raise InterpError(f"{what}: warpgroup {t.wg_local} (wave {wave or 0}) of its region owns rows "
                              f"{lo}..{lo + ROWS_PER_WG} but the tile has {tile.shape[0]} rows")
        return slice(lo, lo + ROWS_PER_WG)

    def _scale_operands(self, t: _Task, args: tuple, what: str):
        """(sfa, [sb0, sb1(, sb2)], n0) where sfa is a register tile or (ring, counter)."""
        sfa_name = args[0]
        if sfa_name in self.regs:
            sfa = self._reg(t, sfa_name, f"{what} reads")
            rest = args[1:]
        elif sfa_name in self.smem:
            slot = self._ring_read(t, sfa_name, args[1], what)
            sfa = slot[self._rows(t, slot, what)]
            rest = args[2:]
        else:
            raise InterpError(f"{what}: %{sfa_name} is neither a register tile nor a shared-memory ring")
        if len(rest) not in (3, 4):
            raise InterpError(f"{what}: expected sb0, sb1 (, sb2), n0 after the A scales, got {rest}")
        sbs = [float(self._val(t, x)) for x in rest[:-1]]
        n0 = self._int(t, rest[-1])
        return sfa, sbs, n0

    def _mma_operands(self, t: _Task, n: Node, acc: torch.Tensor, a_ring: str, b_ring: str, ctr):
        a = self._ring_read(t, a_ring, ctr, n.op.value)
        b = self._ring_read(t, b_ring, ctr, n.op.value)
        a = a[self._rows(t, a, n.op.value, n.get("wave"))]
        N, K = n.get("n", b.shape[0]), n.get("k", b.shape[-1])
        if b.shape[0] != N or acc.shape != (a.shape[0], N) or a.shape[-1] != K or b.shape[-1] != K:
            raise InterpError(f"{n.op.value}: shapes do not match: A rows {tuple(a.shape)}, B {tuple(b.shape)}, "
                              f"acc {tuple(acc.shape)}, n={N}, k={K}")
        return a, b


def run_kernel(kernel: Node, inputs: dict[str, torch.Tensor], grid: int | None = None, seed: int = 0,
               max_steps: int = 10_000_000, stats: dict | None = None) -> dict[str, torch.Tensor]:
    """Run `kernel` on the CPU.  `inputs` maps param names to tensors (runtime extents such as M and
    M4 = align(M, 4) are bound from their shapes); returns the params the kernel stores to (fresh
    tensors: an output given in `inputs` is copied first, one left out starts as NaN).  `grid` CTAs
    run one after another (default min(#tiles, num_sms)); `seed` drives the interleaving of tasks and
    the landing of asynchronous copies.  Raises InterpError / DeadlockError / RaceError.  `stats`, when
    given, receives "partial_loads": {param: TMA loads whose box lies partly outside the tensor}
    (the rows past the end that TMA zero-fills), "prefetch_misses" (`_Machine.prefetch_misses`:
    empty when each CTA's L2 prefetches are boxes it loads later, once each) and
    "unprefetched_loads" (loads of a prefetched param without a prefetch before them)."""
    machine = _Machine(kernel, inputs, grid, seed, max_steps)
    out = machine.run()
    if stats is not None:
        stats["partial_loads"] = dict(machine.partial_loads)
        stats["prefetch_misses"] = machine.prefetch_misses()
        stats["unprefetched_loads"] = machine.unprefetched_loads()
    return out
