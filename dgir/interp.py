"""CPU interpreter of the tile IR: runs a kernel on small shapes with torch, with the real dtypes, and
models the asynchrony that matters.  It is the oracle every pass is tested against (before/after
equivalence on the CPU) and the reference the GPU tests compare with.

    out = run_kernel(kernel, {"A": a, "B": b, "SFA": sfa, "SFB": sfb, "D": d}, seed=3)
    out["D"]    # bf16[M, N]

Execution model
---------------
* CTAs (``grid`` of them, default: the launcher's persistent grid) run one after another; params
  (global memory) are shared, shared memory and channels are fresh per CTA.  A kernel with attr
  ``cluster`` = C runs its CTAs in clusters of C consecutive block ids: the tasks of a cluster's CTAs
  interleave in one scheduler, ``sreg`` cluster_rank / cluster_id / cluster_count are defined, a
  ``tma_load [multicast=C]`` lands its box at rows part*box of the slot in every CTA of the cluster
  (and counts on each CTA's full barrier), and a release on a channel with ``cluster`` = C arrives on
  the empty barrier of every CTA of the cluster, which completes after consumers*C releases.
* Inside a CTA every warpgroup id of every ``warpgroup [ids=[...]]`` region runs the region body as
  its own task (a Python generator) with private register tiles and scalars.  ``wg_local`` (the
  index of the id in ``ids``) selects the 64 rows of a BM-row tile that warpgroup owns.
* Tasks yield before every non-scalar op.  A seeded ``random.Random(seed)`` picks, at every step,
  one of: a runnable task (resumed until its next op), or landing one queued TMA copy.  When nothing
  can move, ``DeadlockError`` names every blocked task's role, warpgroup, op, channel, stage
  (slot), round and phase.  ``max_steps`` bounds the run (loops count too): never a hang.

Asynchrony and the checks (strict: a protocol breach raises ``RaceError`` at the op that breaches
it, so a buggy schedule fails deterministically instead of only on unlucky seeds)
------------------------------------------------------------------------------------------------
* Channel (one full + one empty barrier per slot per CTA; ``slot = ctr % stages``, ``round = ctr //
  stages``, ``phase = round & 1``).  ``acquire`` blocks until the empty barrier completed ``round``
  phases (round 0 is free); ``tma_load`` needs a slot this task acquired and has not committed; it
  QUEUES the box copy, which lands at a random later step; ``commit`` arrives on full, and the slot
  becomes full only once all its queued copies have landed.  ``wait`` blocks until full; then (and
  only then) the task may read the slot (smem_read, mma_scaled, wgmma) until it ``release``s it.
  A read of a slot this task has not waited for (or already released) raises RaceError.  When all
  ``consumers`` warpgroups released a round, the slot is POISONED (NaN; 0x7f for e4m3) and free
  for the next round.  All rings start poisoned.  Acquiring/waiting on a round whose phase has
  already passed (mbarrier parity aliasing) raises RaceError.  A multicast into a CTA whose slot has
  not been released by every consumer of the cluster raises RaceError.  ``drain`` blocks until every
  slot's empty barrier completed the phases of all fills before the given counter; a CTA whose
  producer ends while a peer may still arrive on its barriers is what drain prevents.
* ``wgmma`` is asynchronous: the destination tile is poisoned (NaN) and marked in flight; each
  wgmma is one commit group; ``wgmma_wait [pending=N]`` retires all but the newest N groups of the
  task, and only then the result lands.  Operands are read from the ring at RETIRE time (the
  stricter model: the tensor core may read shared memory any time before it retires), and
  releasing a slot that an un-retired wgmma reads raises RaceError.  Any other op touching an
  in-flight tile (zero, promote, scale, stage_out, smem_read, mma_scaled, or a tile operand) raises
  RaceError.  A further wgmma with the same accumulator is allowed (PTX orders wgmmas on one
  accumulator; scale_d=1 chains onto the previous result).  A task ending with groups in flight
  raises RaceError.
* ``tma_store`` copies the warpgroup's own 64 rows of the smem tile to global immediately (clipped
  at the tensor edge), but the smem tile counts as being read until ``tma_store_wait``: a
  ``stage_out`` into it before that raises RaceError, as does a task ending with such a store.
  ``tma_store`` of a tile this task wrote with ``stage_out`` but has not fenced with
  ``sync [fence_async=true]`` raises RaceError.
* ``sync`` is a rendezvous of all tasks of the same warpgroup region (k-th sync waits for every
  task's k-th sync).

Numerics (identical for ``mma_scaled`` and ``wgmma`` + ``promote``, so promote_scales is BITWISE
equivalent): e4m3 tiles are upcast to f32 exactly; ``part = A_rows @ B^T`` is a torch float32
matmul; the scale ``s[r, c] = sfa[r] * sb(c)`` is one f32 multiply (sb(c) = sb_i for the i-th
128-row B-scale block from n0's, the last one for any further); the promotion ``acc + part * s`` is an FFMA, emulated in float64 (the product
of two f32 is exact there) then rounded to f32 (exact FFMA except in double-rounding ties).
``wgmma`` with scale_d=1 adds onto the accumulator with one f32 add; ``scale`` is an f32 multiply;
``stage_out`` rounds to bf16 (round to nearest even).

Helpers for tests: ``fp8_gemm_inputs``, ``fp8_gemm_reference``, ``calc_diff`` (DeepGEMM's).
"""
from __future__ import annotations

import random
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from .ir import DType, Node, Op, SCALAR_OPS, async_filled_rings
from .printer import print_node

ROWS_PER_WG = 64          # rows of a BM-row tile owned by one math warpgroup
BLOCK_K = 128             # K extent of one FP8 scale block

TORCH_DTYPE = {
    DType.e4m3: torch.float8_e4m3fn,
    DType.e5m2: torch.float8_e5m2,
    DType.bf16: torch.bfloat16,
    DType.f16: torch.float16,
    DType.f32: torch.float32,
    DType.i32: torch.int32,
    DType.u64: torch.int64,
    DType.pred: torch.bool,
}

I32_MIN, I32_MAX = -(2 ** 31), 2 ** 31 - 1


class InterpError(ValueError):
    """The interpreter cannot run the kernel (bad inputs, unknown op, malformed IR)."""


class DeadlockError(InterpError):
    """Every live task is blocked: the message names role, warpgroup, op, channel, stage, phase."""


class RaceError(InterpError):
    """A synchronisation breach: reading a slot not waited for, touching an in-flight wgmma tile..."""


# ------------------------------------------------------------------------------------------------
# helpers shared with pass and GPU tests
# ------------------------------------------------------------------------------------------------
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _align(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


def fp8_gemm_inputs(m: int, n: int, k: int, seed: int = 0, scale_exp: float = 8.0,
                    device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Random inputs of fp8_gemm_nt: A e4m3[m, k], B e4m3[n, k], SFA f32[ceil(k/128), align(m, 4)]
    (MN-major, TMA-aligned; the padding columns m..align(m,4) are NaN: a kernel must not let them
    leak into real rows), SFB f32[ceil(n/128), ceil(k/128)], and D bf16[m, n] poisoned with NaN
    so that any element a kernel fails to write is caught.  Scales are positive, log-uniform over
    2^[-scale_exp, scale_exp]."""
    g = torch.Generator().manual_seed(seed)
    nkb = _ceil_div(k, BLOCK_K)
    a = torch.randn(m, k, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=g).to(torch.float8_e4m3fn)

    def scales(*shape):
        e = (torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1) * scale_exp
        return torch.exp2(e).to(torch.float32)

    sfa = torch.full((nkb, _align(m, 4)), float("nan"), dtype=torch.float32)
    sfa[:, :m] = scales(nkb, m)
    sfb = scales(_ceil_div(n, 128), nkb)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    out = {"A": a, "B": b, "SFA": sfa, "SFB": sfb, "D": d}
    return {key: v.to(device) for key, v in out.items()}


def fp8_gemm_reference(A: torch.Tensor, B: torch.Tensor, SFA: torch.Tensor, SFB: torch.Tensor) -> torch.Tensor:
    """Exact-ish float64 reference of fp8_gemm_nt: (A * sfa) @ (B * sfb)^T, [M, N] float64."""
    m, k = A.shape
    n = B.shape[0]
    sfa = SFA[:, :m].double().T.repeat_interleave(BLOCK_K, dim=1)[:, :k]             # [m, k]
    sfb = SFB.double().repeat_interleave(128, dim=0).repeat_interleave(BLOCK_K, dim=1)[:n, :k]
    return (A.double() * sfa) @ (B.double() * sfb).T


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """DeepGEMM's similarity metric: 1 - 2 sum(xy) / sum(x^2 + y^2), in float64 (0 = identical)."""
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    if denom == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denom)


# ------------------------------------------------------------------------------------------------
# numerics (shared by mma_scaled, wgmma and promote so that the passes can be bitwise equivalent)
# ------------------------------------------------------------------------------------------------
def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A_rows @ B^T: e4m3 upcast exactly, FP32 matmul."""
    return a.float() @ b.float().T


def _scale_tile(sfa: torch.Tensor, sbs: list, n0: int, cols: int) -> torch.Tensor:
    """s[r, c] = sfa[r] * sb(c), one f32 multiply; sb(c) = the scale of the B-scale block of column
    n0 + c counted from n0's (sbs[0], sbs[1], ...; columns past the last one use the last)."""
    c = n0 + torch.arange(cols)
    idx = (c // 128 - n0 // 128).clamp(max=len(sbs) - 1)
    sb = torch.tensor(sbs, dtype=torch.float32)[idx]
    return sfa.float()[:, None] * sb[None, :]


def _ffma(acc: torch.Tensor, part: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """acc + part * s with one rounding of the exact product (FFMA), via float64."""
    return (acc.double() + part.double() * s.double()).float()


def _poison(t: torch.Tensor) -> None:
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))       # e4m3: 0x7f
    elif t.dtype is torch.bool:
        t.fill_(True)
    else:
        t.fill_(-1)


# ------------------------------------------------------------------------------------------------
# state
# ------------------------------------------------------------------------------------------------
@dataclass
class _Blocker:
    ready: Callable[[], bool]
    describe: Callable[[], str]


@dataclass
class _Channel:
    name: str
    rings: tuple
    stages: int
    consumers: int
    full_done: list = field(default_factory=list)    # completed full phases per slot
    empty_done: list = field(default_factory=list)   # completed empty phases per slot
    committed: list = field(default_factory=list)    # commit arrived for the current fill
    pending: list = field(default_factory=list)      # queued copies not landed yet
    landed: list = field(default_factory=list)       # elements landed in the current fill
    expect: int = 0       # elements one fill lands (the full barrier's expect_tx): every loaded ring's slot
    releasers: list = field(default_factory=list)    # tasks that released the current round

    def __post_init__(self):
        S = self.stages
        self.full_done, self.empty_done = [0] * S, [0] * S
        self.committed, self.pending, self.landed = [False] * S, [0] * S, [0] * S
        self.releasers = [set() for _ in range(S)]


@dataclass
class _Copy:
    cta: "_Cta"          # destination CTA
    chan: _Channel
    slot: int
    ring: str
    data: torch.Tensor
    rows: slice | None = None   # the slot rows a multicast part fills (None: the whole slot)


@dataclass
class _Group:
    """One wgmma commit group."""
    node: Node
    acc: str
    a_ring: str
    b_ring: str
    key: tuple          # (channel, slot, round) it reads
    slot: int
    base: object        # None (scale_d=0), "chain" (onto an in-flight result), or a saved tensor


@dataclass
class _Task:
    tid: int
    cta: "_Cta"
    region: int
    wg_id: int
    wg_local: int
    roles: tuple
    n_wgs: int = 1        # warpgroups in the region: wave w of this task owns slice w * n_wgs + wg_local
    gen: object = None
    blocker: _Blocker | None = None
    cur: Node | None = None
    env: dict = field(default_factory=dict)
    regs: dict = field(default_factory=dict)
    acquired: set = field(default_factory=set)     # (channel, slot, round) acquired, not committed
    waited: set = field(default_factory=set)       # (channel, slot, round) waited, not released
    groups: deque = field(default_factory=deque)   # in-flight wgmma groups, oldest first
    inflight: dict = field(default_factory=dict)   # regs name -> in-flight groups writing it
    holds: dict = field(default_factory=dict)      # (channel, slot, round) -> in-flight groups reading it
    store_reads: set = field(default_factory=set)  # smem tiles read by tma_stores not yet waited
    unfenced: set = field(default_factory=set)     # smem tiles written by stage_out, not fenced
    syncs: int = 0
    done: bool = False

    def role(self) -> str:
        r = self.cur.get("role") if self.cur is not None else None
        return r or (self.roles[0] if self.roles else "?")

    def label(self) -> str:
        return f"role={self.role()} warpgroup={self.wg_id}"


class _Cta:
    def __init__(self, block_id: int, cluster: list):
        self.block_id = block_id
        self.cluster = cluster                       # the CTAs of its cluster, in rank order (incl. itself)
        self.rank = len(cluster)
        cluster.append(self)
        self.smem: dict[str, torch.Tensor] = {}
        self.chans: dict[str, _Channel] = {}
        self.exited = False                          # every task of the CTA has ended
        self.sync_arrivals: dict[tuple, int] = {}   # (region, k) -> arrivals
        self.split_results: dict[tuple, int] = {}   # (region, k) -> "this CTA reduces" of arrive k
        self.turns: dict[tuple, list] = {}           # (region, barrier of warpgroup g) -> [passes, waits]
        # cluster split-K: arrivals on this CTA's ready / done barriers per (partials, round), and
        # the round each 64-row slice of its partial holds
        self.partial_ready: dict[tuple, int] = {}
        self.partial_done: dict[tuple, int] = {}
        self.partial_round: dict[tuple, int] = {}
        self.partial_values: dict[tuple, torch.Tensor] = {}


# ------------------------------------------------------------------------------------------------
# the machine
# ------------------------------------------------------------------------------------------------
class _Machine:
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
        self.outputs = sorted(stored | (set(self.params) - read))
        self._bind(inputs)
        self.cluster = kernel.get("cluster") or 1
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
            Op.PREFETCH_TMAP: self._prefetch, Op.TMA_LOAD: self._tma_load,
            Op.TMA_STORE: self._tma_store, Op.TMA_STORE_WAIT: self._tma_store_wait,
            Op.SMEM_READ: self._smem_read, Op.STAGE_OUT: self._stage_out, Op.SYNC: self._sync, Op.TURN: self._turn,
            Op.ZERO: self._zero, Op.WGMMA: self._wgmma, Op.WGMMA_WAIT: self._wgmma_wait,
            Op.PROMOTE: self._promote, Op.MMA_SCALED: self._mma_scaled, Op.SCALE: self._scale,
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
            from .ops.fp8_gemm import kernel_grid
            return kernel_grid(dict(k.attrs), self.syms["M"])
        return max(1, k.get("num_sms", 1))

    # --- driver ---------------------------------------------------------------------------------
    def run(self) -> dict[str, torch.Tensor]:
        for b in range(0, self.grid, self.cluster):
            self._run_cluster(range(b, b + self.cluster))
        return {name: self.tensors[name] for name in self.outputs}

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

    def _commit(self, t: _Task, n: Node):
        ch, slot, rnd = self._slot_key(t, n.args[0], n.args[1])
        key = (ch.name, slot, rnd)
        if key not in t.acquired:
            raise RaceError(f"commit of channel '{ch.name}' stage {slot} round {rnd} that this task has not "
                            f"acquired (or has already committed)")
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
        ch, slot, rnd = self._slot_key(t, n.args[0], n.args[1])
        key = (ch.name, slot, rnd)
        if key not in t.waited:
            raise RaceError(f"release of channel '{ch.name}' stage {slot} round {rnd} phase {rnd & 1} that this "
                            f"warpgroup has not waited for (or released twice)")
        if t.holds.get(key):
            raise RaceError(f"release of channel '{ch.name}' stage {slot} round {rnd} while {t.holds[key]} "
                            f"in-flight wgmma(s) still read it (wgmma_wait first)")
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

    def _stage_out(self, t: _Task, n: Node):
        tile, acc = n.args
        if tile not in self.smem or self.smem[tile].get("stages", 1) != 1:
            raise InterpError(f"stage_out needs a single-buffer shared-memory tile, got %{tile}")
        if tile in t.store_reads:
            raise RaceError(f"stage_out overwrites %{tile} while a tma_store of this warpgroup may still read it "
                            f"(tma_store_wait [read=true] first)")
        a = self._reg(t, acc, "stage_out reads")
        d = t.cta.smem[tile][0]
        rows = self._rows(t, d, "stage_out", n.get("wave"))
        if d[rows].shape != a.shape:
            raise InterpError(f"stage_out: %{acc} {tuple(a.shape)} does not fit rows {rows.start}.. of %{tile} "
                              f"{tuple(d.shape)}")
        d[rows] = a.to(d.dtype)
        t.unfenced.add(tile)

    def _sync(self, t: _Task, n: Node):
        """The emitter's `bar.sync wg+1, 128`: a barrier of the warpgroup's own 128 threads, which one
        task runs in program order, so nothing waits here; with fence_async, the staging writes
        before it become visible to the TMA engine.  Warpgroups do not wait for each other: each
        stages and stores its own rows (stage_out / tma_store take this warpgroup's slice)."""
        if n.get("fence_async"):
            t.unfenced.clear()

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
        """The machine's step count stands in for both clocks: it orders a CTA's milestones."""
        if t.wg_local:
            return
        slot = self.tensors[n.args[0]][t.cta.block_id, n.get("event")]
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
        t.store_reads.add(tile)

    def _tma_store_wait(self, t: _Task, n: Node):
        t.store_reads.clear()

    # --- math -----------------------------------------------------------------------------------
    def _zero(self, t: _Task, n: Node):
        self._reg(t, n.args[0], "zero writes").zero_()

    def _mma_scaled(self, t: _Task, n: Node):
        if len(n.args) < 8:
            raise InterpError("mma_scaled needs (acc, a_ring, b_ring, ctr, sfa, sb0, sb1(, sb2), n0)")
        acc_name, a_ring, b_ring, ctr = n.args[:4]
        acc = self._reg(t, acc_name, "mma_scaled accumulates into")
        sfa, sbs, n0 = self._scale_operands(t, n.args[4:], "mma_scaled")
        a, b = self._mma_operands(t, n, acc, a_ring, b_ring, ctr)
        part = _dot(a, b)
        acc.copy_(_ffma(acc, part, _scale_tile(sfa, sbs, n0, acc.shape[1])))

    def _promote(self, t: _Task, n: Node):
        if len(n.args) < 6:
            raise InterpError("promote needs (acc, part, sfa, sb0, sb1(, sb2), n0)")
        acc = self._reg(t, n.args[0], "promote accumulates into")
        part = self._reg(t, n.args[1], "promote reads")
        if acc.shape != part.shape:
            raise InterpError(f"promote: acc {tuple(acc.shape)} vs part {tuple(part.shape)}")
        sfa, sbs, n0 = self._scale_operands(t, n.args[2:], "promote")
        acc.copy_(_ffma(acc, part, _scale_tile(sfa, sbs, n0, acc.shape[1])))

    def _scale(self, t: _Task, n: Node):
        acc = self._reg(t, n.args[0], "scale")
        sfa, sbs, n0 = self._scale_operands(t, n.args[1:], "scale")
        acc.mul_(_scale_tile(sfa, sbs, n0, acc.shape[1]))

    def _wgmma(self, t: _Task, n: Node):
        if len(n.args) != 4:
            raise InterpError("wgmma needs (acc, a_ring, b_ring, ctr)")
        acc_name, a_ring, b_ring, ctr = n.args
        if acc_name not in self.regs:
            raise InterpError(f"%{acc_name} is not a register tile")
        acc = t.regs[acc_name]
        self._mma_operands(t, n, acc, a_ring, b_ring, ctr)      # checks the slots are held, shapes
        chan = self.ring_chan.get(a_ring)
        if chan is None or self.ring_chan.get(b_ring) != chan:
            raise InterpError("wgmma: A and B rings must belong to the same channel")
        ch, slot, rnd = self._slot_key(t, chan, ctr)
        key = (chan, slot, rnd)
        scale_d = n.get("scale_d", 1)
        if not scale_d:
            base = None
        elif t.inflight.get(acc_name):
            base = "chain"
        else:
            base = acc.clone()
        t.groups.append(_Group(n, acc_name, a_ring, b_ring, key, slot, base))
        t.inflight[acc_name] = t.inflight.get(acc_name, 0) + 1
        t.holds[key] = t.holds.get(key, 0) + 1
        if base != "chain":
            # the tile is undefined until retired; a chained group must keep the value its
            # predecessor will retire into it (no op may read it meanwhile: RaceError)
            _poison(acc)

    def _wgmma_wait(self, t: _Task, n: Node):
        pending = n.get("pending", 0)
        while len(t.groups) > pending:
            g = t.groups.popleft()
            if g.key not in t.waited:    # cannot happen: release checks holds
                raise RaceError(f"wgmma operands (channel '{g.key[0]}' stage {g.slot} round {g.key[2]}) were "
                                f"released before the wgmma retired")
            acc = t.regs[g.acc]
            a = t.cta.smem[g.a_ring][g.slot]
            a = a[self._rows(t, a, "wgmma", g.node.get("wave"))]
            part = _dot(a, t.cta.smem[g.b_ring][g.slot])
            if g.base is None:
                res = part
            elif isinstance(g.base, str):
                res = acc + part          # the previous group's result (retired just before)
            else:
                res = g.base + part
            t.inflight[g.acc] -= 1
            if not t.inflight[g.acc]:
                del t.inflight[g.acc]
            t.holds[g.key] -= 1
            if not t.holds[g.key]:
                del t.holds[g.key]
            # while a later group still writes this tile no op may read it (RaceError), so keeping
            # the intermediate value here only serves a chained (scale_d=1) later group
            acc.copy_(res)

def run_kernel(kernel: Node, inputs: dict[str, torch.Tensor], grid: int | None = None, seed: int = 0,
               max_steps: int = 10_000_000) -> dict[str, torch.Tensor]:
    """Run `kernel` on the CPU.  `inputs` maps param names to tensors (runtime extents such as M and
    M4 = align(M, 4) are bound from their shapes); returns the params the kernel stores to (fresh
    tensors: an output given in `inputs` is copied first, one left out starts as NaN).  `grid` CTAs
    run one after another (default min(#tiles, num_sms)); `seed` drives the interleaving of tasks and
    the landing of asynchronous copies.  Raises InterpError / DeadlockError / RaceError."""
    return _Machine(kernel, inputs, grid, seed, max_steps).run()
