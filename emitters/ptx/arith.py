"""Unsigned division and remainder by compile-time constants, strength-reduced.

ptxas compiles `div.u32 d, x, 3` (an immediate divisor) with the generic sequence (I2F, MUFU.RCP,
F2I and a correction: ~15 instructions with a MUFU round trip), which the NVVM front end would
have replaced by a multiply.  Our emitter writes PTX directly, so it does that replacement itself:
ring slots and phases (`ctr % stages`, `ctr / stages`) are computed before every barrier wait, on
the critical path of each K block (ncu: ~10% of the 256x128 kernel's stall samples sat in that
sequence with 3 stages).
"""
from __future__ import annotations

U32 = 1 << 32


def magic(d: int) -> tuple:
    """How to divide a u32 by d exactly for every 32-bit dividend (Granlund & Montgomery):
    ("shift", s) for d = 2^s; ("mulhi", m, s): q = mulhi(x, m) >> s, valid when
    2^(32+s) <= m*d <= 2^(32+s) + 2^s; else ("mulhi_add", m, l): t = mulhi(x, m),
    q = (t + ((x - t) >> 1)) >> (l - 1) with l = ceil(log2 d) and m = 2^32 (2^l - d) / d + 1."""
    if d < 1 or d >= U32:
        raise ValueError(f"divisor {d} out of the u32 range")
    if d & (d - 1) == 0:
        return ("shift", d.bit_length() - 1)
    for s in range(32):
        m = -(-(1 << (32 + s)) // d)
        if m >= U32:
            break
        if m * d - (1 << (32 + s)) <= (1 << s):
            return ("mulhi", m, s)
    l = (d - 1).bit_length()
    return ("mulhi_add", (U32 * ((1 << l) - d)) // d + 1, l)


def divide(x: int, d: int) -> int:
    """What the emitted sequence computes (for tests against x // d)."""
    how = magic(d)
    if how[0] == "shift":
        return x >> how[1]
    t = (x * how[1]) >> 32
    if how[0] == "mulhi":
        return t >> how[2]
    return (t + ((x - t) >> 1)) >> (how[2] - 1)


def emit_udiv(b, dst: str, x: str, d: int | str) -> None:
    """dst = x / d (u32) with `b` the PTX builder (b(line), b.reg()); d a constant (strength-reduced)
    or a register (div.u32: nothing better is known at compile time)."""
    if isinstance(d, str):
        b(f"div.u32 {dst}, {x}, {d};")
        return
    how = magic(d)
    if how[0] == "shift":
        b(f"shr.u32 {dst}, {x}, {how[1]};")
    elif how[0] == "mulhi":
        b(f"mul.hi.u32 {dst}, {x}, {how[1]};")
        if how[2]:
            b(f"shr.u32 {dst}, {dst}, {how[2]};")
    else:
        t, u = b.reg(), b.reg()
        b(f"mul.hi.u32 {t}, {x}, {how[1]};")
        b(f"sub.u32 {u}, {x}, {t};")
        b(f"shr.u32 {u}, {u}, 1;")
        b(f"add.u32 {u}, {u}, {t};")
        b(f"shr.u32 {dst}, {u}, {how[2] - 1};")


def emit_urem(b, dst: str, x: str, d: int | str) -> None:
    """dst = x % d (u32); d a constant or a register, as for emit_udiv."""
    if isinstance(d, str):
        b(f"rem.u32 {dst}, {x}, {d};")
        return
    if d & (d - 1) == 0:
        b(f"and.b32 {dst}, {x}, {d - 1};")
        return
    q = b.reg()
    emit_udiv(b, q, x, d)
    b(f"mul.lo.u32 {q}, {q}, {d};")
    b(f"sub.u32 {dst}, {x}, {q};")
