"""SASS-level FFMA reuse/yield interleaving over a cubin (DeepGEMM v1's post-pass).

DeepGEMM (``deep_gemm/jit/interleave_ffma.py``, v1 up to ``03d0be3``; see deepgemm.md §4.5)
disassembled each kernel, found runs of consecutive ``FFMA`` instructions and, in the first
9/16 of each run, cleared the operand-B *reuse* flag (bit 59 of the high 64-bit word of the
128-bit instruction) while toggling the *yield* flag (bit 45): ``hi ^= 0x0800200000000000``.
The rule, reproduced here exactly as that script behaved:

* a *run* is a maximal sequence of consecutive FFMA instructions (no other instruction and
  no label between them) of at least ``min_run`` = 8 instructions. (The script counted
  cuobjdump lines, two per instruction, and required ``>= 16`` lines.)
* only the first ``floor(9 * n / 16)`` instructions of a run of ``n`` are considered (the
  script's ``(lines * 9 // 16) // 2 * 2`` lines, i.e. an even number of lines).
* walking those, with ``key`` = the second-to-last ``R`` register written in the instruction
  (the script's ``parse_registers(line)[-2]``, which for ``FFMA Rd, Ra, Rb, Rc`` is ``Rb``,
  the operand whose reuse flag is bit 59; deepgemm.md calls it the "destination"), an FFMA
  whose bit 59 is set is patched when ``key`` has not been seen earlier in the run, or when
  the previous FFMA still has its reuse flag (after patching) and the same ``key``.
  Otherwise it is left alone. Every visited FFMA adds its key to the "seen" set.
  For a run sharing one reused B register this patches every other FFMA: the interleave.

The cubin is patched in place at the exact byte offsets of the instructions: the kernel's
``.text.<name>`` section is located with a small ELF64 parser and each instruction's bytes are
checked against nvdisasm's encoding before being changed.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from dgir.toolchain import disassemble

__all__ = ["SOURCE_ID", "SassInstr", "SassPatchResult", "ElfSection", "elf_sections",
           "parse_sass", "find_ffma_runs", "select_ffma_patches", "interleave_ffma_sass",
           "REUSE_B_BIT", "YIELD_BIT", "FLIP_MASK"]

SOURCE_ID = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]

REUSE_B_BIT = 1 << 59
YIELD_BIT = 1 << 45
FLIP_MASK = REUSE_B_BIT | YIELD_BIT          # 0x0800200000000000
MIN_RUN = 8


# ----------------------------------------------------------------------------- ELF64

@dataclass(frozen=True)
class ElfSection:
    name: str
    type: int
    offset: int
    size: int
    addr: int


def elf_sections(image: bytes) -> list[ElfSection]:
    """Section headers of a little-endian ELF64 image (a cubin)."""
    if len(image) < 64 or image[:4] != b"\x7fELF":
        raise ValueError("not an ELF image")
    if image[4] != 2 or image[5] != 1:
        raise ValueError("only little-endian ELF64 cubins are supported")
    (e_shoff,) = struct.unpack_from("<Q", image, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    if e_shoff == 0:
        return []
    if e_shentsize != 64:
        raise ValueError(f"unexpected ELF section header size {e_shentsize}")

    def header(i: int):
        off = e_shoff + i * 64
        if off + 64 > len(image):
            raise ValueError("truncated ELF section header table")
        return struct.unpack_from("<IIQQQQIIQQ", image, off)

    first = header(0)
    if e_shnum == 0:                  # extended numbering: count lives in section 0
        e_shnum = first[5]
    if e_shstrndx == 0xFFFF:
        e_shstrndx = first[6]
    raw = [header(i) for i in range(e_shnum)]
    strtab = raw[e_shstrndx]
    names = image[strtab[4]:strtab[4] + strtab[5]]
    out = []
    for (sh_name, sh_type, _flags, sh_addr, sh_offset, sh_size, *_rest) in raw:
        end = names.find(b"\0", sh_name)
        name = names[sh_name:end if end >= 0 else None].decode("ascii", "replace")
        out.append(ElfSection(name, sh_type, sh_offset, sh_size, sh_addr))
    return out


def _text_section(image: bytes, kernel_name: str) -> ElfSection:
    secs = elf_sections(image)
    for s in secs:
        if s.name == f".text.{kernel_name}":
            return s
    have = [s.name[6:] for s in secs if s.name.startswith(".text.")]
    raise ValueError(f"kernel {kernel_name!r} not in cubin; its code sections are for {have}")


# ----------------------------------------------------------------------------- SASS text

@dataclass(frozen=True)
class SassInstr:
    offset: int             # byte offset inside the .text section
    text: str               # e.g. "FFMA R5, R0.reuse, R5, R4"
    lo: int                 # low 64-bit word
    hi: int                 # high 64-bit word (control bits, reuse flags)
    label_before: bool = False   # a label (branch target) precedes this instruction
    labels: tuple = ()           # the names of those labels (e.g. ".L_x_9"), for branch targets

    @property
    def opcode(self) -> str:
        toks = [t for t in self.text.split() if not t.startswith("@")]
        return toks[0] if toks else ""

    @property
    def is_ffma(self) -> bool:
        return self.opcode.split(".")[0] == "FFMA"

    @property
    def key_register(self) -> Optional[str]:
        """Second-to-last ``R*`` register token (DeepGEMM's choice; operand B for FFMA)."""
        regs = []
        body = self.text.replace(";", "")
        for tok in body.split(","):
            for word in tok.split():
                if word.startswith("R"):
                    regs.append(word.split(".")[0])
        return regs[-2] if len(regs) >= 2 else None


_SECTION_RE = re.compile(r"^\s*\.section\s+([^,\s]+)")
_INSN_RE = re.compile(
    r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;?\s*/\*\s*(0x[0-9a-fA-F]{16})\s*\*/\s*$")
_HI_RE = re.compile(r"^\s*/\*\s*(0x[0-9a-fA-F]{16})\s*\*/\s*$")
_LABEL_RE = re.compile(r"^\s*(\.?[A-Za-z_.$][\w.$]*):\s*$")


def parse_sass(sass: str, kernel_name: str) -> list[SassInstr]:
    """Instructions of ``.text.<kernel_name>`` in ``nvdisasm -c -hex`` output."""
    target = f".text.{kernel_name}"
    out: list[SassInstr] = []
    in_sec, pending, labels = False, None, []
    for line in sass.splitlines():
        m = _SECTION_RE.match(line)
        if m:
            in_sec = m.group(1) == target
            pending, labels = None, []
            continue
        if not in_sec:
            continue
        if pending is not None:
            h = _HI_RE.match(line)
            if not h:
                raise ValueError(f"nvdisasm output: expected the high word after {pending}")
            off, text, lo = pending
            out.append(SassInstr(off, text, lo, int(h.group(1), 16), bool(labels), tuple(labels)))
            pending, labels = None, []
            continue
        m = _INSN_RE.match(line)
        if m:
            pending = (int(m.group(1), 16), m.group(2).strip().rstrip(";").strip(),
                       int(m.group(3), 16))
        elif (m := _LABEL_RE.match(line)) and not line.strip().startswith(target):
            labels.append(m.group(1))
    return out


# ----------------------------------------------------------------------------- the rule

def find_ffma_runs(instrs: Sequence[SassInstr], min_run: int = MIN_RUN
                   ) -> list[tuple[int, int]]:
    """(start, length) of each maximal run of >= min_run consecutive FFMAs."""
    runs, start = [], None
    for i, ins in enumerate(list(instrs) + [None]):
        contiguous = (ins is not None and ins.is_ffma and start is not None
                      and not ins.label_before
                      and ins.offset == instrs[i - 1].offset + 16)
        if contiguous:
            continue
        if start is not None and i - start >= min_run:
            runs.append((start, i - start))
        start = i if (ins is not None and ins.is_ffma) else None
    return runs


def select_ffma_patches(instrs: Sequence[SassInstr], min_run: int = MIN_RUN
                        ) -> tuple[list[int], int]:
    """Indices of the instructions DeepGEMM's rule flips, and the number of runs."""
    runs = find_ffma_runs(instrs, min_run)
    chosen: list[int] = []
    for start, n in runs:
        seen: set = set()
        last_reused, last_key = False, object()
        for i in range(start, start + (9 * n) // 16):
            ins = instrs[i]
            key = ins.key_register
            reused = bool(ins.hi & REUSE_B_BIT)
            if reused and (key not in seen or (last_reused and key == last_key)):
                chosen.append(i)
                reused = False
            seen.add(key)
            last_reused, last_key = reused, key
    return chosen, len(runs)


# ----------------------------------------------------------------------------- the pass

@dataclass
class SassPatchResult:
    cubin: bytes
    patched: int
    runs: int
    before_sass: str
    after_sass: str


def _normalise(text: str) -> str:
    return text.replace(".reuse", "")


def interleave_ffma_sass(cubin: bytes, kernel_name: str, *, min_run: int = MIN_RUN
                         ) -> SassPatchResult:
    """Apply the FFMA reuse/yield interleave to ``kernel_name`` in ``cubin``."""
    sec = _text_section(cubin, kernel_name)
    before = disassemble(cubin)
    instrs = parse_sass(before, kernel_name)
    if not instrs:
        raise ValueError(f"nvdisasm printed no instructions for {kernel_name!r}")
    image = bytearray(cubin)
    base = sec.offset                        # nvdisasm offsets are section-relative
    for ins in instrs:                       # nvdisasm and our ELF view must agree
        at = base + ins.offset
        if at + 16 > sec.offset + sec.size or \
                struct.unpack_from("<QQ", image, at) != (ins.lo, ins.hi):
            raise RuntimeError(f"{kernel_name}: instruction at 0x{ins.offset:x} "
                               f"({ins.text}) does not match the ELF section bytes")
    chosen, nruns = select_ffma_patches(instrs, min_run)
    for i in chosen:
        ins = instrs[i]
        struct.pack_into("<Q", image, base + ins.offset + 8, ins.hi ^ FLIP_MASK)
    out = bytes(image)
    if not chosen:
        return SassPatchResult(out, 0, nruns, before, before)
    after = disassemble(out)
    new = parse_sass(after, kernel_name)
    if [_normalise(i.text) for i in new] != [_normalise(i.text) for i in instrs]:
        raise RuntimeError(f"{kernel_name}: SASS changed beyond reuse/yield flags after patch")
    return SassPatchResult(out, len(chosen), nruns, before, after)
