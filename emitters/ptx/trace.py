"""PTX for `timestamp` (the trace_timeline pass): thread 0 of the region's first warpgroup writes
%globaltimer (ns, one clock for every SM) and %clock64 (this SM's cycles) to trace[cta, event]; the
`placement` event writes %smid and %cluster_ctarank there instead."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dgir.ir import Node, Op

if TYPE_CHECKING:
    from .emit import Emitter


def _timestamp(self: Emitter, n: Node) -> None:
    b = self.b
    skip = b.label("timestamp_done")
    first = n.get("keep") == "first"
    if first:              # a milestone inside a loop: only its first pass records (no atomics in the loop)
        done = self.first_flags[n.get("event")]
        b(f"@{done} bra {skip};")
        b(f"setp.eq.u32 {done}, 0, 0;")
    other = b.reg("pred")
    b(f"setp.ne.u32 {other}, {self.wg_local}, 0;")
    b(f"@{other} bra {skip};")
    self.if_leader(skip)
    ns, cycles = b.reg("b64"), b.reg("b64")
    if n.get("placement"):         # where the CTA runs, in place of the clocks
        sm, rank = b.reg(), b.reg()
        b(f"mov.u32 {sm}, %smid;")
        b(f"mov.u32 {rank}, %cluster_ctarank;")
        b(f"cvt.u64.u32 {ns}, {sm};")
        b(f"cvt.u64.u32 {cycles}, {rank};")
    else:
        b(f"mov.u64 {ns}, %globaltimer;")
        b(f"mov.u64 {cycles}, %clock64;")
    events = self.decls[n.args[0]].type.shape[1]
    idx, off, ptr = b.reg(), b.reg("b64"), b.reg("b64")
    b(f"mov.u32 {idx}, %ctaid.x;")
    b(f"mad.lo.u32 {idx}, {idx}, {events}, {n.get('event')};")
    b(f"mul.wide.u32 {off}, {idx}, 16;")
    b(f"ld.param.u64 {ptr}, [ptr_{n.args[0]}];")
    b(f"cvta.to.global.u64 {ptr}, {ptr};")
    b(f"add.s64 {ptr}, {ptr}, {off};")
    b(f"st.global.v2.u64 [{ptr}], {{{ns}, {cycles}}};")
    b.put_label(skip)


def init_first_flags(self: Emitter, region: Node) -> None:
    """One predicate per keep="first" timestamp of the region, false until it has recorded."""
    self.first_flags = {}
    for n in region.walk():
        if n.op is Op.TIMESTAMP and n.get("keep") == "first":
            flag = self.first_flags[n.get("event")] = self.b.reg("pred")
            self.b(f"setp.ne.u32 {flag}, 0, 0;")
