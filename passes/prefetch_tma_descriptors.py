"""prefetch_tma_descriptors: prefetch every tensor map at the start of the load role."""
from __future__ import annotations

from dgir.ir import Node, Op

from . import Pass


class PrefetchTmaDescriptors(Pass):
    """Insert `prefetch_tmap(%P)` for every TMA-described param (one with a `box`) at the top of the
    warpgroup region that runs the load role.  The first TMA through a descriptor otherwise stalls
    on fetching the 128-byte tensor map from parameter memory; prefetching overlaps that fetch with
    barrier set-up.  Idempotent: params already prefetched are skipped.
    """
    name = "prefetch_tma_descriptors"

    def run(self, kernel: Node) -> Node:
        maps = [n.name for n in kernel.body if n.op is Op.PARAM and n.get("box") is not None]
        body = []
        for n in kernel.body:
            if n.op is Op.WARPGROUP and "load" in n.get("roles", ()):
                done = {p.args[0] for p in n.body if p.op is Op.PREFETCH_TMAP}
                pre = [Node(Op.PREFETCH_TMAP, "", (m,), None, {"role": "load"}) for m in maps if m not in done]
                n = n.with_body(pre + list(n.body))
            body.append(n)
        return kernel.with_body(body)


PASS = PrefetchTmaDescriptors()
