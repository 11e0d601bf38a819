"""hint_l2_eviction: at small M, B's TMA loads ask L2 to evict their lines first."""
from __future__ import annotations

from dgir.ir import DType, Node, Op, Type, map_bodies

from . import Pass


class HintL2Eviction(Pass):
    """At small M, B's TMA loads (B: the weights) carry the L2 evict-first policy: `l2="evict_first"` on
    the load and `l2_if` naming a run-time predicate on M.  The emitter makes the policy once per
    region (`createpolicy.fractional.L2::evict_first`) and issues the hinted form of the load while
    the predicate holds, the plain form otherwise.

    Why: L2 fills by evicting the least recently used line of a set.  After a kernel that wrote
    memory (the benchmark's L2 flush writes 256 MB; in a model, the previous layer's output) those
    lines are dirty, and each eviction costs a DRAM write-back that competes with the reads: 5-14% of
    a memory-bound small-M call (bench/TUNING.md step 60).  With B's lines marked evict-first, a set
    holding one of them gives that clean line up instead, so the stream of B recycles its own lines.
    A and SFA keep the normal policy: the next rounds' tiles read them again.

    When (bench/TUNING.md step 61, specs 104-108 on four leases):
    * M in at most `max_readers` (2) m blocks and M <= `max_m` (256): then one or two concurrent
      tiles read each B panel and nobody comes back for it.  At M = 4096 the 16 m blocks of a band
      read each panel in turn, and evict-first lines were pushed out between them by A's and D's
      traffic (4096x32768x512 14% slower); at M = 192-512 the kernels are no longer memory-bound
      (-3..+4%).  M <= 128: +3.5-12% in all 15 coverage shapes it reaches.
    * B of at least `min_bytes` (24 MiB, about half the H200's L2; N and K are compiled in): the
      cells with B >= 29 MB gained on every lease, those with B <= 16.7 MB moved -8..+7% from one
      lease to another.
    * While the predicate is false the load carries no hint at all: a load with an evict_normal
      policy ran up to 17% slower than a plain one (256x4096x7168, spec 106).
    The decision is recorded on the kernel (`l2_hint`).  `streamed` names the params to mark;
    idempotent.
    """
    name = "hint_l2_eviction"

    def __init__(self, streamed: tuple = ("B",), max_readers: int = 2, max_m: int = 256, min_bytes: int = 24 << 20,
                 policy: str = "evict_first"):
        self.streamed, self.max_readers, self.max_m = tuple(streamed), max_readers, max_m
        self.min_bytes, self.policy = min_bytes, policy

    def run(self, kernel: Node) -> Node:
        if any(n.name == "b_streams" for n in kernel.walk()):
            return kernel
        sizes = [n.type.nbytes for n in kernel.body if n.op is Op.PARAM and n.name in self.streamed]
        if sum(sizes) < self.min_bytes:
            return kernel.with_attrs(l2_hint=f"skipped: {sum(sizes) / 2**20:.1f} MiB streamed < "
                                             f"{self.min_bytes / 2**20:.0f} MiB")
        # M < limit: at most max_readers m blocks, and M small enough for the kernel to be memory-bound
        limit = min(self.max_readers * kernel.get("block_m"), self.max_m) + 1

        def mark(parent, body):
            out = []
            for n in body:
                if n.op is Op.TMA_LOAD and n.args[3] in self.streamed:
                    n = n.with_attrs(l2=self.policy, l2_if="b_streams")
                out.append(n)
                if parent.op is Op.WARPGROUP and n.op is Op.DIM and n.name == "M" and "load" in parent.get("roles"):
                    role = n.role
                    out.append(Node(Op.CONST, "b_stream_limit", (), Type(DType.i32), {"value": limit, "role": role}))
                    out.append(Node(Op.LT, "b_streams", ("M", "b_stream_limit"), Type(DType.i32), {"role": role}))
            return tuple(out)

        return map_bodies(kernel, mark).with_attrs(l2_hint=f"{self.policy} while M < {limit}")


PASS = HintL2Eviction()
