"""The K loop's SASS instruction mix: what one K block costs a math warp, instruction by instruction.

A scheduling or emitter change shows in the SASS of the K loop before it shows in a timing, and the
count per K block is what step 118's probe compared (bench/TUNING.md: dgir's 64x64 loop issued ~94
instructions a K block where the bare wgmmas with their promotion need ~40).  This reads it from the
nvdisasm listing of a compiled kernel:

* the K loop is the innermost loop that issues wgmma: of the conditional backward branches whose
  body holds a wgmma (QGMMA / HGMMA), the one with the shortest body.  (A barrier wait's retry stub
  branches back unconditionally, and its own spin loop holds no wgmma.)
* one pass through the body covers `wgmmas in it / wgmmas a K block` K blocks, the latter from the
  kernel IR: BLOCK_K / 32 (e4m3) per 64-row wave, waves = BLOCK_M / 64 / math warpgroups.
* where the body holds more FFMAs than a K block runs (a straddling tile's promotion: one copy per
  branch arm, or the two runs of its indexed jumps), the executed count takes one per accumulator
  register of each 64-row wave (BLOCK_N / 2) in their place.

`dgir compile --dump-dir` prints the result on its `k-loop` line and writes it to resources.txt.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_BRANCH = re.compile(r"^(@!?U?P\w+\s+)?BRA(\.\S+)?\s+`\((\.L_x_\d+)\)")
WGMMA = ("QGMMA", "HGMMA")
# how the line groups opcodes: the tensor-core work, the promotion, and what surrounds them
GROUPS = (("wgmma", lambda op: op in WGMMA), ("FFMA", lambda op: op == "FFMA"),
          ("R2UR", lambda op: op == "R2UR"), ("uniform", lambda op: op.startswith("U")),
          ("sync", lambda op: op in ("SYNCS", "WARPGROUP", "BAR", "WARPSYNC")),
          ("memory", lambda op: op.startswith(("LD", "ST"))),
          ("other", lambda op: True))


@dataclass(frozen=True)
class LoopMix:
    """One pass through the K loop's body."""
    start: int              # byte offsets of its first instruction and of the back-edge branch
    end: int
    k_blocks: int           # K blocks the pass covers
    opcodes: tuple          # ((base opcode, count), ...), most frequent first
    inner_branches: int = 0  # conditional branches to a point inside the body: a static count takes
                             # every arm (e.g. a straddling tile's promotion), executed or not
    tile_loop: bool = False  # the IR's K loop runs one pass a tile (short K, unrolled): the loop found
                             # is the tile loop, and its count holds the epilogue and the tile switch
    # FFMAs a K block executes where the body holds more than that (a straddling tile's promotion:
    # one copy per branch arm, or the two runs of its indexed jumps): one per accumulator register
    # of each 64-row wave; None where the static count is the executed one
    executed_ffma: float | None = None

    @property
    def instructions(self) -> int:
        return sum(n for _, n in self.opcodes)

    def per_k_block(self, opcode: str | None = None) -> float:
        n = self.instructions if opcode is None else dict(self.opcodes).get(opcode, 0)
        return n / self.k_blocks

    def executed_per_k_block(self) -> float:
        """per_k_block() with the FFMAs a K block runs in place of those written (every arm's)."""
        if self.executed_ffma is None:
            return self.per_k_block()
        return self.per_k_block() - self.per_k_block("FFMA") + self.executed_ffma

    def groups(self) -> dict:
        """Instructions a K block by GROUPS (each opcode in the first group that takes it)."""
        out = {name: 0 for name, _ in GROUPS}
        for op, n in self.opcodes:
            out[next(name for name, takes in GROUPS if takes(op))] += n
        return {name: n / self.k_blocks for name, n in out.items()}

    def describe(self) -> str:
        parts = ", ".join(f"{name} {v:g}" for name, v in self.groups().items() if v)
        caveats = f", {self.inner_branches} branches inside (every arm counted)" if self.inner_branches else ""
        if self.executed_ffma is not None:
            caveats += (f"; ~{self.executed_per_k_block():g} executed ({self.executed_ffma:g} of the "
                        f"{self.per_k_block('FFMA'):g} FFMAs run)")
        if self.tile_loop:
            caveats += "; the tile loop (the K loop is one pass: epilogue included)"
        return (f"{self.per_k_block():g} SASS instructions a K block per math warp ({parts}); "
                f"{self.instructions} over {self.k_blocks} K block{'s' if self.k_blocks > 1 else ''} "
                f"at {self.start:#06x}-{self.end:#06x}{caveats}")


def _waves(kernel) -> int:
    """64-row waves a math warpgroup runs per K block of `kernel` (an fp8_gemm_nt IR)."""
    math_wgs = kernel.get("threads") // 128 - 1
    return max(1, kernel.get("block_m") // 64 // math_wgs)


def wgmmas_per_k_block(kernel) -> int:
    """wgmma instructions a math warp issues per K block of `kernel` (an fp8_gemm_nt IR)."""
    return kernel.get("block_k") // 32 * _waves(kernel)


def promotion_ffmas_per_k_block(kernel) -> int:
    """FFMAs a math warp executes per K block promoting (FP32 promotion): one per accumulator
    register of each wave, BLOCK_N / 2 of them (the m64nN accumulator layout)."""
    return kernel.get("block_n") // 2 * _waves(kernel)


def k_loop_is_one_pass(kernel) -> bool:
    """Whether every K loop of `kernel` (a for whose own body issues wgmma and that holds no such
    for) has constant bounds and one iteration, so that no SASS loop of its own runs the K blocks."""
    from .ir import Op
    fors = [n for n in kernel.walk() if n.op is Op.FOR and any(c.op is Op.WGMMA for c in n.body)]
    inner = [f for f in fors if not any(g is not f and any(x is g for x in f.walk()) for g in fors)]
    return bool(inner) and all(all(isinstance(a, int) for a in f.args) and f.args[0] + f.args[2] >= f.args[1]
                               for f in inner)


def _opcode(ins) -> str:
    return ins.opcode.split(".")[0]


def k_loop_mix(sass: str, kernel) -> LoopMix | None:
    """The K loop's mix in `sass` (`nvdisasm -c -hex` output, read by runtime/sass.parse_sass) of
    `kernel` (its final IR); None where no loop
    issues wgmma or its wgmmas are not whole K blocks."""
    from .runtime.sass import parse_sass
    code = parse_sass(sass, kernel.name)
    at = {label: i for i, ins in enumerate(code) for label in ins.labels}
    best = None
    for i, ins in enumerate(code):
        m = _BRANCH.match(ins.text)
        if not (m and m.group(1) and m.group(3) in at and at[m.group(3)] <= i):
            continue              # not a conditional backward branch
        body = code[at[m.group(3)]:i + 1]
        if any(_opcode(x) in WGMMA for x in body) and (best is None or len(body) < len(best)):
            best = body
    if best is None:
        return None
    inside = {label for ins in best[1:] for label in ins.labels}
    # conditional branches into the body, and indexed jumps (BRX: a promotion entered at its split)
    inner = sum(1 for ins in best[:-1] if ((m := _BRANCH.match(ins.text)) and m.group(1) and m.group(3) in inside)
                or _opcode(ins) in ("BRX", "BRXU"))
    counts = Counter(_opcode(ins) for ins in best)
    wgmma = sum(counts[op] for op in WGMMA)
    per_kb = wgmmas_per_k_block(kernel)
    if wgmma % per_kb:
        return None
    k_blocks = wgmma // per_kb
    executed = None
    if inner and counts["FFMA"] > k_blocks * promotion_ffmas_per_k_block(kernel):
        executed = float(promotion_ffmas_per_k_block(kernel))
    return LoopMix(best[0].offset, best[-1].offset, k_blocks, tuple(counts.most_common()), inner,
                   k_loop_is_one_pass(kernel), executed)
