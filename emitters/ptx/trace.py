"""PTX for `timestamp` (the trace_timeline pass): thread 0 of the region's first warpgroup writes
%globaltimer (ns, one clock for every SM) and %clock64 (this SM's cycles) to trace[cta, event]."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dgir.ir import Node

if TYPE_CHECKING:
    from .emit import Emitter


def _timestamp(self: Emitter, n: Node) -> None:
    b = self.b
    skip = b.label("timestamp_done")
    other = b.reg("pred")
    b(f"setp.ne.u32 {other}, {self.wg_local}, 0;")
    b(f"@{other} bra {skip};")
    self.if_leader(skip)
    ns, cycles = b.reg("b64"), b.reg("b64")
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
    if n.get("keep") == "first":     # a milestone inside a loop: the first arrival wins
        old = b.reg("b64")
        b(f"atom.global.cas.b64 {old}, [{ptr}], 0, {ns};")
        won = b.reg("pred")
        b(f"setp.eq.u64 {won}, {old}, 0;")
        b(f"@{won} st.global.u64 [{ptr}+8], {cycles};")
    else:
        b(f"st.global.v2.u64 [{ptr}], {{{ns}, {cycles}}};")
    b.put_label(skip)
