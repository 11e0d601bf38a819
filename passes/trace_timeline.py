"""trace_timeline: timestamps at the milestones of each CTA's roles (an opt-in measuring pass)."""
from __future__ import annotations

from dgir.ir import SCALAR_OPS, DType, Node, Op, Type

from . import Pass

# (event, role, where, keep): `where` names the op the timestamp follows ("start" / "end" of the
# region, or the first op of a kind in program order); keep="first" records the first time a
# CTA gets there (inside loops), "last" the last time.
EVENTS = (
    ("load_start", "load", "start", "last"),
    ("first_acquire", "load", "before:acquire", "first"),    # a slot is free: the first TMA goes out next
    ("load_end", "load", "end", "last"),
    ("mma_start", "mma", "start", "last"),
    ("first_full", "mma", "after:wait", "first"),            # the first stage's bytes have landed
    ("first_kloop_end", "mma", "after:kloop", "first"),      # first tile's K loop done (epilogue next)
    ("first_stored", "mma", "after:tma_store", "first"),     # first tile's epilogue issued its TMA store
    ("last_kloop_end", "mma", "after:kloop", "last"),        # last tile's K loop done
    ("last_store_free", "mma", "after:tma_store_wait", "last"),  # last tile: the previous store left the staging tile
    ("last_stored", "mma", "after:tma_store", "last"),       # last tile's epilogue issued its TMA store
    ("first_published", "mma", "after:partial_publish", "first"),  # cluster split-K: partial published
    ("tile_end", "mma", "end:tile", "last"),                 # last tile's epilogue done
    ("mma_end", "mma", "end", "last"),
    # not a time: where the CTA ran, (%smid, %cluster_ctarank) in place of the two clocks; several
    # CTAs on one SM share its tensor core and shared-memory bandwidth (how the driver places clusters)
    ("placement", "load", "end", "last"),
)
PLACEMENT = "placement"
TRACE = "TRACE"


class TraceTimeline(Pass):
    """Record, per CTA, when its load and math roles reach the milestones in `EVENTS`: a
    `timestamp` op after each milestone writes %globaltimer (ns, comparable across SMs) and
    %clock64 (the SM's cycles) into a new param %TRACE : u64[CTAS, events, 2], which the caller
    passes (zeroed) and reads back; the last event, `placement`, holds the CTA's SM and cluster rank
    instead (written after the load role's last milestone, so no timed one waits on it).  The first
    warpgroup of a region records; a "first" event
    inside a loop records on its first pass only (a predicate register, so later iterations pay a
    branch, not a store: an atomic per K block once doubled a small-M kernel's time).

    Not in any default pipeline: it measures where a kernel's fixed costs go (launch skew, first
    TMA round trip, epilogue, split-K reduction) - bench/experiments.py variant `trace`.  Run it
    last so that the timestamps do not disturb the scheduling passes' view of the IR.
    """
    name = "trace_timeline"

    def run(self, kernel: Node) -> Node:
        if any(n.op is Op.PARAM and n.name == TRACE for n in kernel.body):
            return kernel                                   # idempotent
        names = [e[0] for e in EVENTS]
        decl = Node(Op.PARAM, TRACE, (), Type(DType.u64, ("CTAS", len(EVENTS), 2)),
                    {"layout": "rowmajor", "trace": True, "events": tuple(names)})
        body = []
        for n in kernel.body:
            if n.op is Op.WARPGROUP:
                for role in n.get("roles", ()):
                    for i, (_, r, where, keep) in enumerate(EVENTS):
                        if r == role:
                            n = _place(n, where, _stamp(i, keep, role))
            body.append(n)
        params = [n for n in body if n.op is Op.PARAM]
        at = body.index(params[-1]) + 1
        return kernel.with_body(body[:at] + [decl] + body[at:])


def _stamp(event: int, keep: str, role: str) -> Node:
    attrs = {"event": event, "keep": keep, "role": role}
    if EVENTS[event][0] == PLACEMENT:
        attrs["placement"] = True
    return Node(Op.TIMESTAMP, "", (TRACE,), None, attrs)


def _place(region: Node, where: str, stamp: Node) -> Node:
    if where == "start":
        return region.with_body((stamp,) + region.body)
    if where == "end":
        return region.with_body(region.body + (stamp,))
    tile_loop = next((n for n in region.body if n.op is Op.FOR), None)
    if where == "end:tile":
        if tile_loop is None:
            return region
        return region.with_body(tuple(n.with_body(n.body + (stamp,)) if n is tile_loop else n for n in region.body))
    side, kind = where.split(":")
    if kind == "kloop":           # the K loop: the loop inside the tile loop that waits on a channel
        match = lambda n: n.op is Op.FOR and n is not tile_loop and any(m.op is Op.WAIT for m in n.walk())  # noqa: E731
    else:
        match = lambda n: n.op is Op(kind)  # noqa: E731
    done = [False]

    def visit(n: Node) -> Node:
        if not n.body:
            return n
        out, body, i = [], list(n.body), 0
        while i < len(body):
            c = body[i]
            i += 1
            if not done[0] and match(c):
                done[0] = True
                if side == "before":
                    out += [stamp, c]
                    continue
                out.append(c)
                if kind == "kloop" and side == "after":       # and the K blocks peeled after it
                    end = _peeled_k_blocks_end(body, i)
                    out += body[i:end]
                    i = end
                while i < len(body) and body[i].op is Op.TIMESTAMP:   # stamps placed here before
                    out.append(body[i])                                # keep their (event) order
                    i += 1
                out.append(stamp)
            else:
                out.append(visit(c))
        return n.with_body(out)
    return visit(region)


# what the K blocks peeled after an unrolled K loop consist of (their index arithmetic included)
_K_BLOCK_OPS = SCALAR_OPS | {Op.WAIT, Op.SMEM_READ, Op.LOAD_ROW_SCALES, Op.WGMMA, Op.WGMMA_WAIT, Op.RELEASE,
                             Op.PROMOTE, Op.RESCALE, Op.TIMESTAMP}


def _peeled_k_blocks_end(body, i: int) -> int:
    """Index just past the K blocks that follow the K loop ending at body[i - 1]: interleave_ffma
    unrolls the loop by U and leaves K mod U blocks after it (7 K blocks a slice: blocks 4-6), so
    "the K loop is done" is after their last promote, not at the loop's end.  A loop with no such
    blocks (the next op is the epilogue, or the next tile's first wgmma under an `if`): i itself."""
    end = j = i
    while j < len(body) and body[j].op in _K_BLOCK_OPS:
        if body[j].op is Op.PROMOTE:
            end = j + 1
        j += 1
    return end


PASS = TraceTimeline()
