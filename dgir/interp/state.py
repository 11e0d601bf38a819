"""The interpreter's state: dtypes, errors, the numerics every math op shares, and the records of
channels, copies, wgmma groups, tasks and CTAs."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..ir import DType, Node


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
# integer helpers
# ------------------------------------------------------------------------------------------------
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _align(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


# ------------------------------------------------------------------------------------------------
# numerics (shared by mma_scaled, wgmma and promote so that the passes can be bitwise equivalent)
# ------------------------------------------------------------------------------------------------
def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A_rows @ B^T: e4m3 upcast exactly, FP32 matmul."""
    return a.float() @ b.float().T


def _block_columns(n0: int, cols: int, blocks: int) -> torch.Tensor:
    """For each column of a tile at n0: which 128-column B-scale block, counted from n0's, it lies in
    (columns past the last of `blocks` count as the last)."""
    return ((n0 + torch.arange(cols)) // 128 - n0 // 128).clamp(max=blocks - 1)


def _scale_tile(sfa: torch.Tensor, sbs: list, n0: int, cols: int) -> torch.Tensor:
    """s[r, c] = sfa[r] * sb(c), one f32 multiply; sb(c) = the scale of the B-scale block of column
    n0 + c counted from n0's (sbs[0], sbs[1], ...; columns past the last one use the last)."""
    sb = torch.tensor(sbs, dtype=torch.float32)[_block_columns(n0, cols, len(sbs))]
    return sfa.float()[:, None] * sb[None, :]


def _ffma(acc: torch.Tensor, part: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """acc + part * s with one rounding of the exact product (FFMA), via float64."""
    return (acc.double() + part.double() * s.double()).float()


def check_box_start(coords: list, tensor: torch.Tensor, what: str, param: str) -> None:
    """A TMA box must start on a 16-byte boundary in the tensor's innermost dimension (coords are
    innermost first); elsewhere any coordinate goes.  The H200 stops such a kernel with an illegal
    instruction (bench/TUNING.md step 86: SFA boxes from a row not a multiple of 4)."""
    offset = coords[0] * tensor.element_size()
    if offset % 16:
        raise InterpError(f"{what} of %{param}: the box starts {offset} bytes into the innermost dimension "
                          f"(coordinate {coords[0]}), not a multiple of 16")


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
    store_reads: set = field(default_factory=set)  # (smem tile, wave) read by tma_stores not yet waited
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
        # stage_in_ring_slot: the ring slot (channel, stage, round) each staging tile was written into,
        # and the slots whose A / B bytes a staging tile overwrote (until their next fill)
        self.tasks: list = []                        # its warpgroups' tasks
        self.staged: dict[str, tuple] = {}
        self.clobbered: set[tuple] = set()
        self.turns: dict[tuple, list] = {}           # (region, barrier of warpgroup g) -> [passes, waits]
        # cluster split-K: arrivals on this CTA's ready / done barriers per (partials, round), and
        # the round each 64-row slice of its partial holds
        self.partial_ready: dict[tuple, int] = {}
        self.partial_done: dict[tuple, int] = {}
        self.partial_round: dict[tuple, int] = {}
        self.partial_values: dict[tuple, torch.Tensor] = {}
