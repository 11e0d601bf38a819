"""hint_l2_eviction: the weight operand's TMA loads ask L2 to evict their lines first."""
from __future__ import annotations

from dgir.ir import Node, Op, map_bodies

from . import Pass


class HintL2Eviction(Pass):
    """Mark the TMA loads of the streamed operand `l2="evict_first"` (the emitter attaches an L2
    cache policy made by `createpolicy.fractional.L2::evict_first`).

    Which operand streams: B (the weights).  The persistent walk takes the m blocks of a band
    (`swizzle_group`, 16 m blocks) for one n block in consecutive tiles, which run in the same round,
    so every CTA that reads a B panel reads it at about the same time and nobody comes back for it;
    at small M one or two tiles read each panel at all.  A's panels are read again by the next
    rounds' tiles (and SFA with them): they keep the normal policy.

    Why it matters: L2 fills by evicting its least recently used line in the set.  After a kernel
    that wrote memory (the benchmark's L2 flush writes 256 MB; in a model, the previous layer's
    output) those lines are dirty, and each one evicted costs a DRAM write-back competing with the
    reads (bench/TUNING.md step 60: 5-14% of a memory-bound small-M call).  With B's lines marked
    evict-first, a set that holds one of them gives that clean line up instead, so after the first
    lines the stream of B recycles its own lines and leaves the rest of L2 alone.
    `streamed` names the params to mark; idempotent.
    """
    name = "hint_l2_eviction"

    def __init__(self, streamed: tuple = ("B",), policy: str = "evict_first"):
        self.streamed, self.policy = tuple(streamed), policy

    def run(self, kernel: Node) -> Node:
        def mark(parent, body):
            return tuple(n.with_attrs(l2=self.policy) if n.op is Op.TMA_LOAD and n.args[3] in self.streamed else n
                         for n in body)
        return map_bodies(kernel, mark)


PASS = HintL2Eviction()
