"""Structural checks of a kernel: names, types, role rules, channel pairing, resource limits."""
from __future__ import annotations

from .ir import DECLS, GLOBAL_ACCESS, ROLES, SCALAR_OPS, DType, Node, Op

SMEM_LIMIT = 232448       # sm_90 opt-in maximum of dynamic shared memory per block
SMEM_PER_SM = 233472      # one SM's shared memory; each resident CTA reserves 1 KB of it
REGISTER_FILE = 65536


def smem_budget(ctas_per_sm: int = 1) -> int:
    """Dynamic shared memory one CTA may use when `ctas_per_sm` CTAs share an sm_90 SM."""
    return min(SMEM_LIMIT, SMEM_PER_SM // ctas_per_sm - 1024)


def launch_registers(threads: int, ctas_per_sm: int = 1) -> int:
    """Registers per thread a CTA of `threads` starts with when `ctas_per_sm` CTAs share an SM: the
    register file's share, in setmaxnreg's steps of 8, at most 248 (ptxas caps a thread at 255).
    setmaxnreg moves registers between a CTA's warps only, so this times `threads` is the pool every
    warpgroup budget of the CTA must fit (at three or four CTAs per SM the share is not a multiple of
    8 and the rounding matters)."""
    return min(REGISTER_FILE // ctas_per_sm // threads, 255) // 8 * 8

# the `l2` attr of tma_load / tma_store: none, or a primary priority of PTX's createpolicy
L2_PRIORITIES = (None, "evict_first", "evict_last", "evict_normal", "evict_unchanged")
# the `straddle` attr of promote (passes/promote_scales.py): how a tile crossing B-scale blocks picks
# each column's scale; none for a tile inside one block (or a promote no pass decided: selects)
STRADDLE_FORMS = (None, "arms", "selects", "jump")

# which role may issue which op (ops not listed may appear in any role)
ROLE_OF = {Op.ACQUIRE: "load", Op.COMMIT: "load", Op.DRAIN: "load", Op.STAGE_SCALE: "load", Op.TMA_LOAD: "load", Op.PREFETCH_TMAP: "load", Op.TMA_PREFETCH: "load",
           Op.WAIT: "mma", Op.RELEASE: "mma", Op.WGMMA: "mma", Op.WGMMA_WAIT: "mma", Op.MMA_SCALED: "mma",
           Op.PROMOTE: "mma", Op.SMEM_READ: "mma", Op.LOAD_ROW_SCALES: "mma", Op.RESCALE: "mma", Op.APPLY_SCALE: "mma",
           Op.TMA_STORE: "store", Op.STAGE_OUT: "store", Op.TMA_STORE_WAIT: "store",
           Op.SPLIT_STORE: "store", Op.SPLIT_ARRIVE: "store", Op.SPLIT_REDUCE: "store", Op.SPLIT_GATHER: "store", Op.SPLIT_PEEK: "store", Op.SPLIT_RESET: "store",
           Op.STORE_DIRECT: "store", Op.PARTIAL_PUBLISH: "store", Op.PARTIAL_REDUCE: "store", Op.PARTIAL_RECLAIM: "store"}
ARITY = {Op.ACQUIRE: 2, Op.COMMIT: 2, Op.DRAIN: 2, Op.STAGE_SCALE: 7, Op.SMEM_SCALAR: 3, Op.WAIT: 2, Op.RELEASE: 2, Op.TMA_LOAD: 6, Op.WGMMA: 4,
         Op.PROMOTE: 6, Op.MMA_SCALED: 8, Op.RESCALE: 6, Op.APPLY_SCALE: 2, Op.SMEM_READ: 3, Op.LOAD_ROW_SCALES: 5, Op.STAGE_OUT: 2, Op.TMA_STORE: 4,
         Op.LOAD_SCALE: 3, Op.ZERO: 1, Op.PREFETCH_TMAP: 1, Op.TMA_PREFETCH: 3, Op.FOR: 3, Op.IF: 1,
         Op.SPLIT_STORE: 5, Op.SPLIT_REDUCE: 4, Op.SPLIT_GATHER: 5, Op.SPLIT_PEEK: 3, Op.SPLIT_RESET: 2, Op.STORE_DIRECT: 4,
         Op.TIMESTAMP: 1, Op.GRID_WAIT: 0, Op.LAUNCH_DEPENDENTS: 0, Op.PARTIAL_PUBLISH: 3, Op.PARTIAL_REDUCE: 6, Op.PARTIAL_RECLAIM: 2}


class VerifyError(ValueError):
    """The IR breaks a rule; the message names the op (and the pass, when run by the pipeline)."""


def verify(kernel: Node) -> None:
    errors: list[str] = []

    def err(n: Node, msg: str):
        errors.append(f"{msg} at `{_short(n)}`")

    if kernel.op is not Op.KERNEL:
        raise VerifyError(f"top-level op must be kernel, got {kernel.op.value}")
    decls = {n.name: n for n in kernel.body if n.op in DECLS}
    kinds = {name: n.op for name, n in decls.items()}

    for n in kernel.body:
        if n.op in (Op.PARAM, Op.SMEM, Op.REGS) and n.type is None:
            err(n, f"{n.op.value} %{n.name} needs a type")
        if n.op is Op.CHANNEL:
            for r in n.args:
                if kinds.get(r) is not Op.SMEM:
                    err(n, f"channel %{n.name} member %{r} is not a smem buffer")
                elif decls[r].get("stages") != n.get("stages"):
                    err(n, f"channel %{n.name} has {n.get('stages')} stages but %{r} has {decls[r].get('stages')}")
        if n.op is Op.SMEM and n.get("ring") and kinds.get(n.get("ring")) is not Op.CHANNEL:
            err(n, f"smem %{n.name} is placed in the slots of %{n.get('ring')}, which is not a channel")
        if n.op not in DECLS and n.op is not Op.WARPGROUP:
            err(n, f"only declarations and warpgroup regions may sit at kernel level, found {n.op.value}")

    # channel pairing: every channel has a producer (acquire+commit) and a consumer (wait+release)
    used = {}
    for n in kernel.walk():
        if n.op in (Op.ACQUIRE, Op.COMMIT, Op.WAIT, Op.RELEASE):
            used.setdefault(n.args[0], set()).add(n.op)
    for name, n in decls.items():
        if n.op is Op.CHANNEL:
            ops = used.get(name, set())
            missing = {Op.ACQUIRE, Op.COMMIT, Op.WAIT, Op.RELEASE} - ops
            if ops and missing:
                err(n, f"channel %{name} is used without {', '.join(sorted(o.value for o in missing))}")

    # a kernel that may start before the previous one ends (programmatic dependent launch) waits for it
    # in every region before any global access
    pdl = kernel.get("pdl") is True or any(n.op is Op.GRID_WAIT for n in kernel.walk())
    ids_seen: set[int] = set()
    regs_total = 0
    for wg in (n for n in kernel.body if n.op is Op.WARPGROUP):
        ids = wg.get("ids", ())
        if not ids or set(ids) & ids_seen:
            err(wg, f"warpgroup ids {ids} empty or overlapping")
        ids_seen |= set(ids)
        roles = set(wg.get("roles", ()))
        if not roles <= set(ROLES):
            err(wg, f"unknown roles {sorted(roles - set(ROLES))}")
        regs = wg.get("regs")
        if regs is not None:
            if regs % 8 or not 24 <= regs <= 256:
                err(wg, f"regs={regs}: setmaxnreg takes a multiple of 8 in [24, 256]")
            regs_total += regs * 128 * len(ids)
        _check_body(wg.body, set(decls), kinds, decls, roles, err)
        if pdl:
            _check_waits_first(wg, err)
    if ids_seen and sorted(ids_seen) != list(range(len(ids_seen))):
        err(kernel, f"warpgroup ids {sorted(ids_seen)} must be 0..n-1")
    occ = kernel.get("ctas_per_sm") or 1
    threads = kernel.get("threads") or 128 * max(len(ids_seen), 1)
    pool = launch_registers(threads, occ) * threads
    if regs_total > pool:
        err(kernel, f"register budgets need {regs_total} registers, a CTA starts with {pool} "
                    f"({occ} per SM)")
    smem = kernel.get("smem_bytes")
    limit = smem_budget(occ)
    if smem is not None and smem > limit:
        err(kernel, f"shared memory {smem} B exceeds the {limit} B limit ({occ} CTA(s) per SM)")
    if errors:
        raise VerifyError("; ".join(errors[:5]) + (f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""))


def _check_waits_first(region: Node, err) -> None:
    """The region's first global access (program order) comes after a grid_wait at its top level."""
    for top in region.body:
        if top.op is Op.GRID_WAIT:
            return
        if top.get("at") == "entry" and all(n.op is Op.TMA_PREFETCH for n in top.walk() if n.op in GLOBAL_ACCESS):
            continue        # L2 prefetches from the entry (prefetch_first_stages): nothing the kernel reads
        first = next((n for n in top.walk() if n.op in GLOBAL_ACCESS), None)
        if first is not None:
            err(first, f"{first.op.value} touches global memory before the region's grid_wait "
                       f"(a kernel launched with programmatic dependent launch may still be sharing the GPU "
                       f"with the kernel that writes it)")
            return
    if any(n.op in GLOBAL_ACCESS for n in region.walk()):
        err(region, "a region of a pdl kernel touches global memory without a grid_wait")


def _check_body(body, defined: set, kinds: dict, decls: dict, roles: set, err) -> None:
    scope = set(defined)
    for n in body:
        for a in n.args:
            if isinstance(a, str) and a not in scope:
                err(n, f"%{a} is not defined here")
        want = ARITY.get(n.op)
        if n.op is Op.TMA_LOAD and n.get("multicast"):
            want += 1                  # the part of the slot this CTA's box fills
        if n.op is Op.SPLIT_ARRIVE:
            want = 4 if len(n.args) == 4 else 2      # counters, tile [, count, skip]
        if n.op in (Op.PROMOTE, Op.MMA_SCALED) and len(n.args) == want + 1:
            want += 1                  # a third B scale (tiles that can touch three scale blocks)
        if n.op is Op.RELEASE and len(n.args) == 3:
            want = 3                   # .., keep: the counter whose slot stays held (stage_in_ring_slot)
        if n.op in (Op.STAGE_OUT, Op.TMA_STORE) and len(n.args) > 1:
            tile = decls.get(n.args[1 if n.op is Op.TMA_STORE else 0])
            if tile is not None and tile.get("ring"):
                want += 1              # the ring counter whose slot holds the staging tile
        if n.op is Op.SYNC and n.get("across") not in (None, "math"):
            err(n, f"sync across={n.get('across')!r}: only 'math' (every math warpgroup) is known")
        if want is not None and len(n.args) != want:
            err(n, f"{n.op.value} takes {want} operands, got {len(n.args)}")
        role = n.role
        if role is None:
            err(n, f"{n.op.value} has no role tag")
        elif role not in roles:
            err(n, f"role {role!r} is not one of this warpgroup region's roles {sorted(roles)}")
        need = ROLE_OF.get(n.op)
        if need is not None and role != need:
            err(n, f"only the {need} role may issue {n.op.value} (this op is tagged {role!r})")
        if n.op in SCALAR_OPS and (n.type is None or n.type.shape):
            err(n, f"{n.op.value} must produce a scalar")
        if n.op in (Op.TMA_LOAD, Op.TMA_STORE, Op.TMA_PREFETCH) and n.get("l2") not in L2_PRIORITIES:
            err(n, f"l2={n.get('l2')!r} is not an L2 eviction priority ({' / '.join(L2_PRIORITIES[1:])})")
        if n.op in (Op.TMA_LOAD, Op.TMA_PREFETCH) and n.get("l2_if") is not None and n.get("l2_if") not in scope:
            err(n, f"l2_if=%{n.get('l2_if')} is not defined here")
        if n.op is Op.TMA_PREFETCH and n.args and (kinds.get(n.args[0]) is not Op.PARAM
                                                   or decls[n.args[0]].get("box") is None):
            err(n, f"%{n.args[0]} is not a TMA-described param")
        if n.op in (Op.TMA_LOAD,):
            ch, _, ring, param = n.args[:4]
            if kinds.get(ch) is not Op.CHANNEL or ring not in decls.get(ch, n).args:
                err(n, f"%{ring} is not a member of channel %{ch}")
            if kinds.get(param) is not Op.PARAM or decls[param].get("box") is None:
                err(n, f"%{param} is not a TMA-described param")
            elif decls[param].type.dtype is not decls[ring].type.dtype:
                err(n, f"dtype mismatch: %{param} is {decls[param].type.dtype.name}, %{ring} is {decls[ring].type.dtype.name}")
            mc = n.get("multicast")
            if mc:
                cl = decls[ch].get("cluster", 1) if kinds.get(ch) is Op.CHANNEL else 1
                if mc != cl:
                    err(n, f"multicast={mc} into channel %{ch} of a {cl}-CTA cluster (the consumers of every "
                           f"receiving CTA must release the slot before the next multicast)")
                elif kinds.get(param) is Op.PARAM and decls[param].get("box") is not None:
                    rows = decls[ring].type.shape[0]
                    if decls[param].get("box")[1] * mc != rows:
                        err(n, f"multicast={mc}: box rows {decls[param].get('box')[1]} x {mc} != {rows} slot rows")
        if n.op in (Op.WGMMA, Op.MMA_SCALED):
            acc, a, b = n.args[:3]
            if kinds.get(acc) is not Op.REGS or decls[acc].type.dtype is not DType.f32:
                err(n, f"%{acc} must be an f32 register tile")
            for r in (a, b):
                if kinds.get(r) is not Op.SMEM:
                    err(n, f"%{r} must be a smem ring")
            if kinds.get(a) is Op.SMEM and decls[a].type.dtype not in (DType.e4m3, DType.e5m2, DType.bf16, DType.f16):
                err(n, f"wgmma does not take {decls[a].type.dtype.name} operands")
            nn = n.get("n")
            if not isinstance(nn, int) or nn % 8 or not 8 <= nn <= 256:
                err(n, f"wgmma n={nn}: must be a multiple of 8 in [8, 256]")
        if n.op in (Op.PROMOTE, Op.RESCALE, Op.APPLY_SCALE):
            for r in n.args[:2 if n.op is Op.APPLY_SCALE else 3]:
                if kinds.get(r) is not Op.REGS:
                    err(n, f"%{r} must be a register tile")
        if n.op is Op.PROMOTE and n.get("straddle") not in STRADDLE_FORMS:
            err(n, f"straddle={n.get('straddle')!r} is not a promotion form ({' / '.join(STRADDLE_FORMS[1:])})")
        if n.op is Op.FOR:
            _check_body(n.body, scope | {n.name}, kinds, decls, roles, err)
        elif n.body:
            _check_body(n.body, scope, kinds, decls, roles, err)
        if n.name:
            scope.add(n.name)


def _short(n: Node) -> str:
    from .printer import print_node
    return print_node(n.with_body(()) if n.body else n).strip().split("\n")[0][:160]
