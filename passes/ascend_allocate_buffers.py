"""ascend_allocate_buffers: byte offsets of the on-chip buffers, checked against the chip's capacities."""
from __future__ import annotations

from dgir.ir import Node, Op

from . import Pass

# usable bytes per AI core (ascendc.md §1.3; the same figures as the emulator's chip profiles)
CAPACITY = {
    "950": {"L1": 512 * 1024, "L0A": 64 * 1024, "L0B": 64 * 1024, "L0C": 256 * 1024, "UB": 248 * 1024},
    "910b": {"L1": 512 * 1024, "L0A": 64 * 1024, "L0B": 64 * 1024, "L0C": 128 * 1024,
             "UB": 192 * 1024 - 256 - 8 * 1024},
}
# start alignment: Mmad operands 512 B (L0A/L0B), Mmad destination 1024 B (L0C), 32 B elsewhere
ALIGN = {"L1": 32, "L0A": 512, "L0B": 512, "L0C": 1024, "UB": 32}


class AscendAllocateBuffers(Pass):
    """Give every `local` buffer an `offset` in its physical buffer (L1, L0A, L0B, L0C, UB), bump
    allocated in declaration order with the start alignment the consuming instruction needs (L0A/L0B
    512 B, L0C 1024 B for the Mmad destination, L1/UB 32 B).  A kernel that does not fit raises, naming
    the buffer, the bytes needed and the chip's limit (910B: L0C 128 KB, UB 183.75 KB usable; 950: L0C
    256 KB, UB 248 KB).  UB is per vector core.  Records the totals as kernel attrs (`l1_bytes`, ...).
    """
    name = "ascend_allocate_buffers"

    def run(self, kernel: Node) -> Node:
        chip = kernel.get("chip")
        cap = CAPACITY[chip]
        used = {p: 0 for p in cap}
        body = []
        for n in kernel.body:
            if n.op is Op.LOCAL:
                pos = n.get("pos")
                if pos not in cap:
                    raise ValueError(f"local %{n.name}: unknown position {pos!r} (known: {', '.join(cap)})")
                off = -(-used[pos] // ALIGN[pos]) * ALIGN[pos]
                size = n.type.nbytes
                if off + size > cap[pos]:
                    raise ValueError(f"local %{n.name} needs {size} B of {pos} at offset {off}, but the "
                                     f"{'Ascend 950' if chip == '950' else 'Ascend 910B'} has {cap[pos]} B of {pos}")
                used[pos] = off + size
                n = n.with_attrs(offset=off)
            body.append(n)
        attrs = {f"{p.lower()}_bytes": v for p, v in used.items() if v}
        return kernel.with_body(body).with_attrs(**attrs)


PASS = AscendAllocateBuffers()
