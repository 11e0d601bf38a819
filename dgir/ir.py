"""The tile IR: one immutable node type with an op enum.

A kernel is a tree of `Node`s.  Structured ops (kernel, warpgroup, for, if) hold a body; every
other op is a leaf that names its operands.  Buffers (params, shared-memory rings, register tiles,
channels) are named nodes declared at kernel level and referred to by name; scalars are SSA values.
Register tiles are mutable (like TileLang buffers), which keeps loops free of phi nodes and keeps the
IR close to what the warpgroup actually holds.

Schedule data (`stage`, `order`, `latency`, `role`) lives in `attrs`: scheduling passes write it,
lowering passes and emitters read it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping

FORMAT_VERSION = 1


class DType(enum.Enum):
    """Element types.  `bits` is the storage width; e2m1 packs two per byte."""
    e4m3 = 8
    e5m2 = 8
    e2m1 = 4
    ue8m0 = 8
    bf16 = 16
    f16 = 16
    f32 = 32
    i32 = 32
    u32 = 32
    u64 = 64
    pred = 1

    def __new__(cls, bits):  # several members share a width: give each its own value
        obj = object.__new__(cls)
        obj._value_ = len(cls.__members__)
        obj.bits = bits
        return obj

    @property
    def nbytes(self) -> float:
        return self.bits / 8


class Op(enum.Enum):
    """Every operation the tile IR knows.  The value is the spelling in the text format."""
    # structure
    KERNEL = "kernel"            # attrs: op, dims, config; body: declarations then warpgroup regions
    PARAM = "param"              # a kernel argument (tensor in global memory); attrs: layout
    SMEM = "smem"                # shared-memory buffer, optionally a ring of `stages` slots
    REGS = "regs"                # register tile, private to each executing warpgroup
    CHANNEL = "channel"          # ring slot protocol over smem buffers: full/empty barriers
    WARPGROUP = "warpgroup"      # region executed by the warpgroups in attrs.ids
    FOR = "for"                  # args: start, stop, step; name = induction variable
    IF = "if"                    # args: predicate
    # scalars (SSA)
    CONST = "const"
    SREG = "sreg"                # special register: block_id / grid_size / cluster_rank / cluster_id / cluster_count
    DIM = "dim"                  # runtime extent of a param dimension (M)
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MOD = "mod"
    MIN = "min"
    LT = "lt"
    CEILDIV = "ceildiv"
    TILE_M = "tile_m"            # tile index -> m block (scheduler in attrs)
    TILE_N = "tile_n"            # tile index -> n block
    # channel protocol (lowered to mbarriers by the emitter)
    ACQUIRE = "acquire"          # producer: wait until slot (counter % stages) is empty
    COMMIT = "commit"            # producer: the slot's bytes are in flight, arrive on full
    WAIT = "wait"                # consumer: wait until slot is full
    RELEASE = "release"          # consumer: done reading slot, arrive on empty (of every CTA of a cluster channel)
    DRAIN = "drain"              # producer, after its last commit: wait until every slot is released
                                 # (a CTA must not exit while a cluster peer may still arrive on its barriers)
    # memory
    PREFETCH_TMAP = "prefetch_tmap"
    TMA_PREFETCH = "tma_prefetch"  # a box of a param into L2 only (no shared memory, no barrier); args: param, coords
    TMA_LOAD = "tma_load"        # args: channel, counter, ring, param, coords (innermost first);
                                 # attr multicast=C: one more arg, the part p: the box is 1/C of the slot's
                                 # rows and lands at rows p*box of the slot in all C CTAs of the cluster
    LOAD_SCALE = "load_scale"    # scalar f32 from global (B scales); args: param, row, col
    STAGE_SCALE = "stage_scale"  # load role: param[row, col] (f32, global) -> element `index` of an acquired
                                 # ring slot, published by the slot's commit; args: channel, counter, ring,
                                 # param, row, col, index
    SMEM_SCALAR = "smem_scalar"  # scalar f32 <- element `index` of a waited ring slot; args: ring, counter, index
    TMA_STORE = "tma_store"      # args: param, smem, coords
    TMA_STORE_WAIT = "tma_store_wait"
    SMEM_READ = "smem_read"      # register tile <- this warpgroup's rows of a ring slot (scales)
    LOAD_ROW_SCALES = "load_row_scales"  # register tile <- this warpgroup's rows of column `col` of a global
                                 # row-major f32 [rows, C] param (A scales read in place, through L1);
                                 # args: dst, param, m0, col, rows (a row past `rows` reads row rows - 1);
                                 # attr prefetch=D: also pull into L1 the line column col + D of a row starts
    STAGE_OUT = "stage_out"      # convert a register tile and write it to the smem staging tile
    SYNC = "sync"                # named barrier of the warpgroup's own threads (store role: its staging rows)
    TURN = "turn"                # the warpgroups of a region take turns in a ring (wgmma issue order); attrs:
                                 # step = prime (the last warpgroup hands warpgroup 0 the first turn) | wait (for
                                 # my turn) | pass (give the next one its turn) | drain (warpgroup 0 takes the
                                 # last pass)
    # math
    ZERO = "zero"
    WGMMA = "wgmma"              # args: acc, a ring, b ring, counter; attrs: n, k, scale_d
    WGMMA_WAIT = "wgmma_wait"    # attrs: pending
    PROMOTE = "promote"          # acc += part * sfa[row] * sfb[col]; args: acc, part, sfa, sb0, sb1[, sb2], n0
    MMA_SCALED = "mma_scaled"    # acc += (A_blk @ B_blk^T) * sfa[row] * sfb[col]  (before promote_scales)
    SCALE = "scale"              # acc *= sfa[row] * sfb[col] (scales applied once, for ablations)
    # promotion="rescaled": the tensor-core accumulator holds acc / s_k (s_k = sfa[row] * sfb[col] of
    # the K block last added), so each K block's wgmma accumulates onto it (no partial tile)
    RESCALE = "rescale"          # s = sfa[row] * sfb[col]; acc *= s_prev / s; s_prev = s (one ratio per row
                                 # and B-scale block, one multiply per element); args: acc, s_prev,
                                 # sfa, sb0, sb1, n0; s_prev: f32[64, blocks] (zeroed: the first is a no-op)
    APPLY_SCALE = "apply_scale"  # acc *= s_prev[row, B-scale block of col]; args: acc, s_prev
    # split-K epilogue (deterministic: partials are summed in slice order by whichever CTA is last)
    SPLIT_STORE = "split_store"    # args: workspace, acc, slice, m0, n0: FP32 partial rows < M; attr
                                   # compact: the workspace is [slots, BLOCK_M, BLOCK_N], slice a slot
    SPLIT_ARRIVE = "split_arrive"  # -> i32 1 in the CTA that completes the tile; args: counters, tile
                                   # [, count, skip]: count (else attr splits) pieces complete it; skip
                                   # != 0: a whole tile, nothing to count, the result is 1
    SPLIT_REDUCE = "split_reduce"  # args: D, workspace, m0, n0: D = bf16(sum over slices 0..S-1)
    SPLIT_PEEK = "split_peek"      # -> i32 1 when the tile's other count-1 pieces have all counted in;
                                   # args: counters, tile, count (acquire: their partials are visible)
    SPLIT_GATHER = "split_gather"  # args: acc, workspace, count, own, slot0: acc = sum over pieces
                                   # 0..count-1 in piece order (count <= attr splits); piece `own` is acc
                                   # itself, piece p the compact workspace plane slot0 + p (stream-K)
    SPLIT_RESET = "split_reset"    # args: counters, tile: zero the counter for the next launch
    STORE_DIRECT = "store_direct"  # args: D, acc, m0, n0: bf16 pairs straight from registers, rows < M
    # split-K over a cluster (split_reduce="cluster"): the tile's K slices are the CTAs of one cluster
    PARTIAL_PUBLISH = "partial_publish"  # args: partials, acc, round: each CTA of the cluster receives this
                                         # CTA's partial of the pairs it reduces (into its `partials`)
    PARTIAL_REDUCE = "partial_reduce"    # args: D, partials, round, rounds, m0, n0: once every CTA's partial of
                                         # this round arrived, D at this rank's share of the tile = bf16(sum of
                                         # the partials in rank order); then, unless it is the last round, tell
                                         # every sender it was read
    PARTIAL_RECLAIM = "partial_reclaim"  # args: partials, round: wait until every CTA has read what this CTA
                                         # sent it in round - 1 (nothing to wait for at round 0)
    # programmatic dependent launch (PDL): a no-op unless the launch allows the kernel to start early
    GRID_WAIT = "grid_wait"        # wait until the grids this one depends on (the stream's previous kernel)
                                   # have completed and their writes are visible; every global access after it
    LAUNCH_DEPENDENTS = "launch_dependents"  # this CTA no longer holds back the launch of the stream's next
                                             # kernel (which still waits for this grid's completion in its grid_wait)
    TIMESTAMP = "timestamp"        # args: trace param; attrs: event, keep (first | last): the region's first
                                   # warpgroup writes %globaltimer and %clock64 into trace[cta, event]
    # Ascend (AscendC units; `pipe` attr: MTE2 GM->L1/UB, MTE1 L1->L0A/B, M cube, FIX L0C->GM, V vector, MTE3 UB->GM)
    LOCAL = "local"              # on-chip buffer; attrs: pos (L1, L0A, L0B, L0C, UB), offset (set by allocation)
    COPY_IN = "copy_in"          # GM -> local (MTE2); args: dst, param, row0, col0, rows, cols; attrs: nd2nz
    LOAD_L0 = "load_l0"          # L1 (Nz) -> L0A/L0B (MTE1); args: dst, src, rows, cols
    MMAD = "mmad"                # cube: acc(L0C) (+)= a(L0A) @ b(L0B)^T; args: acc, a, b, m, n, k, init
    MMAD_SCALED = "mmad_scaled"  # acc += (a @ b^T) * sfa[row] * sfb[col]; args: acc, a, b, m, n, k, init, kb, m0, n0
    FIXPIPE = "fixpipe"          # L0C -> GM (FIX, fp32 -> out dtype); args: param, acc, row0, col0, rows, cols
    SET_FLAG = "set_flag"        # intra-core event SRC_DST (attrs: event, id): SRC's earlier ops happen before
    WAIT_FLAG = "wait_flag"      # ... DST's later ops (pairs with set_flag of the same event and id)
    XCORE_SET = "xcore_set"      # cross-core flag (cube <-> vector cores); attrs: flag, mode, pipe
    XCORE_WAIT = "xcore_wait"    # attrs: flag, mode
    VFILL = "vfill"              # vector: local = value; args: dst; attrs: value
    VPROMOTE = "vpromote"        # vector: acc[r] += part[r] * sfa[m0+r, kb] * sfb[sb_row, kb]; args: acc, part, rows, cols, kb, m0, sb_row
    VCAST = "vcast"              # vector: dst = cast(src); args: dst, src
    COPY_OUT = "copy_out"        # UB -> GM (MTE3); args: param, src, row0, col0, rows, cols
    GM_READ = "gm_read"          # scalar read of a GM param by the scalar unit; args: param, index
    LOAD_L0_MX = "load_l0_mx"    # L1 (Nz) -> L0A/L0B plus e8m0 scale pairs -> L0A_MX/L0B_MX (MTE1); args: dst, src, scale_src, rows, cols
    MMAD_MX = "mmad_mx"          # cube MX: acc (+)= (a * 2^(sa-127)) @ (b * 2^(sb-127))^T, one scale per 32 K; args as mmad
    FILL_L1 = "fill_l1"          # zero columns [col0, col0 + cols) of an Nz L1 tile of `rows` rows (MTE1); args: dst, rows, col0, cols


STRUCTURED = {Op.KERNEL, Op.WARPGROUP, Op.FOR, Op.IF}
DECLS = {Op.PARAM, Op.SMEM, Op.REGS, Op.CHANNEL, Op.LOCAL}
SCALAR_OPS = {Op.CONST, Op.SREG, Op.DIM, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MOD, Op.MIN, Op.LT,
              Op.CEILDIV, Op.TILE_M, Op.TILE_N, Op.LOAD_SCALE, Op.SMEM_SCALAR}
# the scalars that are index arithmetic alone (no scale read): passes that recompute a load's
# coordinates elsewhere (prefetch_to_l2 ahead in the loop, prefetch_first_stages at the entry) clone these
INDEX_OPS = SCALAR_OPS - {Op.LOAD_SCALE, Op.SMEM_SCALAR}
ROLES = ("load", "mma", "store", "other")
# ops that read or write global memory other than the kernel's own trace buffer: under programmatic
# dependent launch each must come after its region's grid_wait (verifier)
GLOBAL_ACCESS = {Op.TMA_LOAD, Op.TMA_PREFETCH, Op.STAGE_SCALE, Op.LOAD_SCALE, Op.LOAD_ROW_SCALES, Op.TMA_STORE, Op.STORE_DIRECT, Op.SPLIT_STORE,
                 Op.SPLIT_ARRIVE, Op.SPLIT_REDUCE, Op.SPLIT_PEEK, Op.SPLIT_GATHER, Op.SPLIT_RESET, Op.PARTIAL_REDUCE}


@dataclass(frozen=True)
class Type:
    """dtype[shape]; a shape entry is an int or a symbol (runtime extent, e.g. "M")."""
    dtype: DType
    shape: tuple = ()

    def __str__(self):
        if not self.shape:
            return self.dtype.name
        return f"{self.dtype.name}[{', '.join(str(d) for d in self.shape)}]"

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            if not isinstance(d, int):
                raise ValueError(f"{self} has a symbolic extent")
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return int(self.numel * self.dtype.bits) // 8


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


@dataclass(frozen=True)
class Node:
    """One IR operation.  Immutable and hashable; equality is structural, attributes included."""
    op: Op
    name: str = ""                      # result / declared name (printed with a leading %)
    args: tuple = ()                    # str = reference to a name, int/float = literal
    type: Type | None = None
    attrs: tuple = ()                   # sorted (key, value) pairs
    body: tuple = ()                    # child nodes of structured ops

    def __post_init__(self):
        if isinstance(self.attrs, Mapping):
            object.__setattr__(self, "attrs", tuple(sorted((k, _freeze(v)) for k, v in self.attrs.items())))
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "body", tuple(self.body))

    # --- attributes -------------------------------------------------------------------------
    @property
    def a(self) -> dict:
        return dict(self.attrs)

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def with_attrs(self, **kw) -> "Node":
        d = self.a
        for k, v in kw.items():
            if v is None:
                d.pop(k, None)
            else:
                d[k] = v
        return replace(self, attrs=d)

    def with_body(self, body) -> "Node":
        return replace(self, body=tuple(body))

    @property
    def role(self) -> str | None:
        return self.get("role")

    # --- traversal --------------------------------------------------------------------------
    def walk(self) -> Iterator["Node"]:
        yield self
        for c in self.body:
            yield from c.walk()

    def find(self, op: Op) -> list["Node"]:
        return [n for n in self.walk() if n.op is op]

    def decl(self, name: str) -> "Node":
        """Kernel-level declaration by name."""
        for n in self.body:
            if n.name == name and n.op in DECLS:
                return n
        raise KeyError(name)

    def __repr__(self):
        from .printer import print_node
        return print_node(self)


Kernel = Node  # a kernel is the Node whose op is Op.KERNEL


def node(op: Op, name: str = "", *args, type: Type | None = None, body=(), **attrs) -> Node:
    return Node(op, name, tuple(args), type, attrs, tuple(body))


def async_filled_rings(kernel: Node) -> dict[str, tuple[str, str, str]]:
    """ring -> (channel, param, how) for every ring an asynchronous copy fills, which a channel's
    full barrier must wait for: how = "tma" (tma_load: its bytes are the barrier's expect_tx) or
    "cp.async" (stage_scale [async=true]: tracked by cp.async.mbarrier.arrive).  Rings written
    synchronously (stage_scale's st.shared) are published by the commit's arrive instead.  The
    emitter and the interpreter's fill model both read this one definition."""
    out = {}
    for n in kernel.walk():
        if n.op is Op.TMA_LOAD and len(n.args) > 3:
            out[n.args[2]] = (n.args[0], n.args[3], "tma")
        elif n.op is Op.STAGE_SCALE and n.get("async") and len(n.args) > 3:
            out[n.args[2]] = (n.args[0], n.args[3], "cp.async")
    return out


def tma_filled_rings(kernel: Node) -> dict[str, tuple[str, str]]:
    """ring -> (channel, param) of the rings TMA fills: exactly the bytes of a fill's expect_tx."""
    return {r: (ch, p) for r, (ch, p, how) in async_filled_rings(kernel).items() if how == "tma"}


def map_bodies(n: Node, fn) -> Node:
    """Rebuild `n` bottom-up, replacing each body by fn(parent, new_body)."""
    if not n.body:
        return n
    new = tuple(map_bodies(c, fn) for c in n.body)
    return n.with_body(fn(n, new))


def expand_ops(n: Node, fn) -> Node:
    """Rebuild `n` bottom-up, replacing every node of every body by the list fn(node) returns
    ([node] keeps it, [] drops it, several nodes splice them in)."""
    return map_bodies(n, lambda parent, body: [x for c in body for x in fn(c)])


def warpgroups(kernel: Node) -> list[Node]:
    return [n for n in kernel.body if n.op is Op.WARPGROUP]
