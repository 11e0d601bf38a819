"""Address arithmetic ahead of mbarrier waits (a lowering detail of the PTX emitter).

The emitter lowers `wait(ch, ctr)` to a try_wait spin loop and the ops after it (scale reads, the
wgmma, a TMA) compute their slot's shared-memory addresses and wgmma descriptors from `ctr` right
where they are used, i.e. after the loop.  ptxas does not move code above a loop, so that integer
arithmetic runs after the barrier's phase flips, between the data's arrival and the wgmma.  None of
it depends on the wait: this moves it in front of the loop, keeping the order of everything else.
"""
from __future__ import annotations

import re

from .builder import PREFIX

# pure integer arithmetic on registers: no memory operand, no predicate guard, no float type
_INT_ALU = re.compile(r"^(add|sub|mul|mad|shr|shl|and|or|xor|mov|min|max)\.(lo\.|hi\.|wide\.)?(u32|s32|b32|u64|s64|b64)$")
# the builder's virtual registers (%r7, %rd3, %f12, %p1, %h0)
_REG = re.compile("%(?:" + "|".join(sorted(PREFIX.values(), key=len, reverse=True)) + r")\d+\b")
# special registers whose value changes while a thread runs (timers, the SM and warp slot it runs
# on); the others (%tid, %ctaid, %cluster_ctarank, ...) are constants and may move
_VOLATILE = re.compile(r"%(clock|clock64|globaltimer|globaltimer_lo|globaltimer_hi|smid|warpid|pm\d)\b")
_WAIT = re.compile(r"^\s*mbarrier\.try_wait\.")


def _parse(line: str):
    """(opcode, registers written, registers read, guarded) of an instruction line, or None for
    labels, comments and blank lines.  The first operand is the destination: a register, a `{..}`
    group of registers (all written), or a memory operand / `_` (its registers are read)."""
    code = line.split("//")[0].strip()
    if not code or code.endswith(":"):
        return None
    guard = None
    if code.startswith("@"):
        guard, _, code = code.partition(" ")
        guard = guard.lstrip("@!")
    op, _, rest = code.rstrip(";").partition(" ")
    rest = rest.strip()
    if rest.startswith("{"):
        first, _, others = rest[1:].partition("}")
        writes = set(_REG.findall(first))
    else:
        first, _, others = rest.partition(",")
        writes = {first.strip()} if _REG.fullmatch(first.strip()) else set()
        if not writes:
            others = rest
    reads = set(_REG.findall(others)) | ({guard} if guard else set())
    return op, writes, reads, guard is not None


def _hoistable(parsed, line: str) -> bool:
    """Integer arithmetic that reads no clock: a timer (%clock64, %globaltimer) or the SM / warp
    slot is read where it stands, so a line naming one stays."""
    return (parsed is not None and len(parsed[1]) == 1 and not parsed[3] and _INT_ALU.match(parsed[0]) is not None
            and _VOLATILE.search(line.split("//")[0]) is None)


def _ends_window(line: str) -> bool:
    code = line.split("//")[0].strip()
    return (code.endswith(":") or " bra" in f" {code}" or code.startswith(("ret", "bar.", "barrier."))
            or code.startswith("wgmma.mma_async") or "mbarrier." in code)


def hoist_above_waits(lines: list[str]) -> list[str]:
    """Move, for every spin-wait loop `L: try_wait ...; @!p bra L;`, the integer arithmetic that
    follows it (up to the next wgmma, barrier operation, branch or label) and does not depend on
    anything the wait guards, in front of the loop's label.  A line stays if it reads a register
    written by a line that stays, writes a register that a staying line or the wait reads, or is
    predicated.  Loops are taken last to first, so arithmetic moved in front of one wait moves on
    past the waits before it where it can."""
    out = list(lines)
    loops = [i for i in range(len(out) - 2) if _is_spin_loop(out[i:i + 3])]
    for i in reversed(loops):
        wait_reads = set(_REG.findall(out[i + 1].split("//")[0]))
        stay_defs, stay_reads, moved, kept = set(), set(), [], []
        j = i + 3
        while j < len(out) and not _ends_window(out[j]):
            p = _parse(out[j])
            if _hoistable(p, out[j]) and not (p[2] & stay_defs) and not (p[1] & (stay_reads | stay_defs | wait_reads)):
                moved.append(out[j])
            else:
                kept.append(out[j])
                if p is not None:
                    stay_defs |= p[1]
                    stay_reads |= p[2]
            j += 1
        out[i:j] = moved + out[i:i + 3] + kept
    return out


def _is_spin_loop(three: list[str]) -> bool:
    label, wait, branch = (s.strip() for s in three)
    if not (label.endswith(":") and _WAIT.match(wait)):
        return False
    (pred,) = _parse(wait)[1]                    # the predicate the try_wait writes
    return branch == f"@!{pred} bra {label[:-1]};"
