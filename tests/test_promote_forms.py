"""The FP32 promotion's emitted PTX, executed on the CPU at every tile offset.

A tile whose columns straddle 128-column B-scale blocks is promoted in one of three forms, which
promote_scales writes on each `promote` (`straddle`: one branch arm per possible split column,
per-group selects, or indexed jumps); which scale each accumulator register gets is decided by
control flow the IR interpreter never sees.  Here the emitter's `_promote` writes its PTX for a
tile, and a small interpreter of the instructions it uses runs that text for every offset n0 % 128
a tile can start at: each accumulator register must get exactly one FFMA, of its own partial, by
sfa[row] * sfb[block of its column]."""
from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest

from dgir.emitters.ptx import mma
from dgir.emitters.ptx.builder import PtxBuilder
from dgir.emitters.ptx.emit import Emitter
from dgir.ops.fp8_gemm_config import b_scale_blocks, straddle_splits
from dgir.passes.promote_scales import PromoteScales


class _Promoting:
    """What `_promote` reads of an Emitter: the builder, block_n, register tiles and operand values."""
    val = Emitter.val

    def __init__(self, block_n: int):
        self.b, self.k = PtxBuilder(), {"block_n": block_n}
        self.tiles = {"acc": [f"%acc{v}" for v in range(block_n // 2)],
                      "part": [f"%part{v}" for v in range(block_n // 2)], "sfa": ["%sa0", "%sa1"]}
        self.env = {"sb0": "%sb0", "sb1": "%sb1", "sb2": "%sb2", "n0": "%n0"}

    def tile(self, name):
        return self.tiles[name]


def run_ptx(lines: list[str], regs: dict) -> list[tuple]:
    """Execute straight-line PTX with labels, branches (bra, brx.idx) and the integer, predicate and
    f32 instructions the promotion uses; f32 values are symbolic products (tuples of names).  Returns
    the FFMAs in execution order as (acc, partial, scale)."""
    code, labels, tables = [], {}, {}
    for line in lines:
        line = line.split("//")[0].strip()
        if not line:
            continue
        if m := re.fullmatch(r"(\w+): \.branchtargets (.*);", line):
            tables[m[1]] = [t.strip() for t in m[2].split(",")]
        elif m := re.fullmatch(r"(\w+):", line):
            labels[m[1]] = len(code)
        else:
            code.append(line)

    def get(x):
        return regs[x] if x.startswith("%") else int(x)

    fmas, pc, steps = [], 0, 0
    while pc < len(code):
        steps += 1
        assert steps < 100000, "no end"
        guard, ins = code[pc].split(" ", 1) if code[pc].startswith("@") else ("", code[pc])
        op, _, rest = ins.partition(" ")
        args = [a.strip() for a in rest.rstrip(";").split(",")]
        pc += 1
        if guard and not (regs[guard[1:]] if guard[1] != "!" else not regs[guard[2:]]):
            continue
        if op == "bra.uni":
            pc = labels[args[0]]
        elif op == "brx.idx.uni":
            targets = tables[args[1]]
            assert 0 <= get(args[0]) < len(targets), "brx.idx past its table: undefined"
            pc = labels[targets[get(args[0])]]
        elif op == "fma.rn.f32":
            assert args[0] == args[3]
            fmas.append((args[0], args[1], regs[args[2]]))
        elif op == "mul.f32":
            regs[args[0]] = tuple(sorted((regs[args[1]], regs[args[2]])))
        elif op == "selp.f32":
            regs[args[0]] = regs[args[1]] if regs[args[3]] else regs[args[2]]
        elif op.startswith("setp."):
            x, y = get(args[1]), get(args[2])
            regs[args[0]] = {"eq": x == y, "lt": x < y}[op.split(".")[1]]
        else:
            x, y = get(args[1]), get(args[2]) if len(args) > 2 else None
            regs[args[0]] = {"mov.u32": lambda: x, "and.b32": lambda: x & y, "sub.u32": lambda: (x - y) % 2**32,
                             "add.u32": lambda: x + y, "shr.u32": lambda: x >> y, "min.u32": lambda: min(x, y)}[op]()
    return fmas


def _node(block_n: int, form: str | None):
    """A promote of a tile of this width, as promote_scales writes it (its `straddle` form)."""
    attrs = {"straddle": form} if form else {}
    return SimpleNamespace(args=("acc", "part", "sfa", *[f"sb{i}" for i in range(b_scale_blocks(block_n))], "n0"),
                           get=attrs.get)


def promotion(block_n: int, form: str | None, n0: int) -> list[tuple]:
    e = _Promoting(block_n)
    mma._promote(e, _node(block_n, form))
    return run_ptx(e.b.lines, {"%n0": n0, "%sa0": "sa0", "%sa1": "sa1", "%sb0": "sb0", "%sb1": "sb1", "%sb2": "sb2"})


def expected(block_n: int, n0: int) -> list[tuple]:
    """Register v of the m64nN accumulator: column 8 (v // 4) + ..., row r0 + 8 ((v // 2) % 2)."""
    out = []
    for v in range(block_n // 2):
        col = n0 + 8 * (v // 4)
        block = col // 128 - n0 // 128
        out.append((f"%acc{v}", f"%part{v}", tuple(sorted((f"sa{(v // 2) % 2}", f"sb{block}")))))
    return out


# widths whose tiles straddle: by arms (<= 4 split columns), else by selects or jumps; 152, 176 and 200
# reach a third block
WIDTHS = (24, 40, 48, 56, 72, 80, 88, 96, 104, 112, 120, 136, 144, 152, 160, 176, 192, 200)


@pytest.mark.parametrize("jump,arms", [(False, 4), (True, 4), (True, 0), (False, 16)],
                         ids=["shipped", "jump", "jumpall", "arms16"])
@pytest.mark.parametrize("block_n", WIDTHS)
def test_every_register_gets_its_blocks_scale_at_every_offset(block_n, jump, arms):
    form = PromoteScales(jump=jump, max_arms=arms).straddle(block_n)[0]
    assert (form is None) == (not straddle_splits(block_n))
    for n0 in range(0, 128 // math.gcd(block_n, 128) * block_n, block_n):    # every offset n0 % 128 once
        assert sorted(promotion(block_n, form, n0)) == sorted(expected(block_n, n0)), (block_n, n0)


def test_a_promote_without_its_form_selects():
    """A promote no pass decided for (a hand-written IR, an ablation's) takes the form that serves
    every straddle: per-group selects."""
    for n0 in range(0, 16 * 136, 136):
        assert sorted(promotion(136, None, n0)) == sorted(expected(136, n0))
    e = _Promoting(136)
    mma._promote(e, _node(136, None))
    assert "selp.f32" in "\n".join(e.b.lines)


@pytest.mark.parametrize("block_n,arms,form", [(136, 4, "jump"), (56, 4, "jump"), (144, 4, "jump"), (152, 4, "jump"),
                                               (176, 4, "jump"), (96, 4, "arms"), (160, 4, "arms"), (64, 4, None),
                                               (96, 0, "jump"), (160, 0, "jump"), (200, 0, "jump")])
def test_which_form_each_width_takes(block_n, arms, form):
    """With jump=True, promote_scales takes the widths that would select per group (those reaching a
    third block too); arms stay where there are few split columns (all of them jump with max_arms 0:
    variant jumpall); a width that never straddles has no form.  The emitter writes what it says."""
    assert PromoteScales(jump=True, max_arms=arms).straddle(block_n)[0] == form
    e = _Promoting(block_n)
    mma._promote(e, _node(block_n, form))
    text = "\n".join(e.b.lines)
    found = ("jump" if "brx.idx" in text else "arms" if "PROMOTE_SPLIT" in text else
             "selects" if "selp.f32" in text else None)
    assert found == form
    # the FFMAs written: one copy per arm (and the one-block arm); the jumps' runs hold each group at
    # most twice (a group that can only be in one block, once); otherwise one copy
    count = text.count("fma.rn.f32")
    if form == "jump":
        assert block_n // 2 < count < block_n
    else:
        assert count == {"arms": len(straddle_splits(block_n)) + 1}.get(form, 1) * block_n // 2


def test_the_jump_form_assembles_and_cuts_the_loop():
    """ptxas takes the indexed jumps (uniform BRXU through a constant-bank table).  A 128x136 K block
    then issues ~45 SASS instructions fewer per math warp: its 17 per-group compares and 34 selects
    go (the static count holds both runs' FFMAs, 64 + 64, of which a tile executes 68 / 4 = 17
    groups).  And with nothing selected, the promotion needs fewer registers beside the tiles
    (interleave_ffma's JUMP_REGISTER_RESERVE): the double-buffered partial fits, so the promotion
    overlaps the next K block's wgmma, with no spill.  (By default interleave_ffma makes that switch
    itself where the selects alone leave no room: test_passes.)"""
    from dgir.compiler import compile
    from dgir.ir import Op
    from dgir.loop_mix import k_loop_mix
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.pipeline import pipeline
    from dgir.toolchain import disassemble
    cfg = Fp8GemmConfig(n=1472, k=14848, block_m=128, block_n=136, stages=5)
    mixes, interleave = {}, {}
    from dgir.passes.interleave_ffma import InterleaveFfma
    for jump in (False, True):       # (the selects as they were: interleave_ffma's switch to jumps off)
        passes = [PromoteScales(jump=jump) if p.name == "promote_scales" else
                  InterleaveFfma(switch_to_jumps=False) if p.name == "interleave_ffma" else p for p in pipeline("sm90a")]
        res = compile("fp8_gemm_nt", m=1432, n=1472, k=14848, config=cfg, passes=passes)
        assert res.ir.get("straddle_promotion").startswith("jump: 16 columns" if jump else "selects: 16 columns")
        assert ("brx.idx" in res.ptx) == jump and res.resources.spill_stores == 0
        mixes[jump] = k_loop_mix(disassemble(res.cubin), res.ir)
        interleave[jump] = {n.get("interleave") for n in res.ir.walk() if n.op is Op.FOR} - {None}
    assert interleave == {False: {"skipped: needs 244 > 232 registers"}, True: {"double_buffer x4"}}
    before, after = mixes[False], mixes[True]
    assert before.per_k_block("FFMA") == 68 and after.per_k_block("FFMA") == 64 + 64
    assert before.inner_branches == 0 and after.inner_branches == 2 * after.k_blocks and after.per_k_block("BRXU") == 2
    assert before.executed_per_k_block() == before.per_k_block() and after.executed_ffma == 68
    assert after.executed_per_k_block() == after.per_k_block() - 60 <= before.per_k_block() - 40
    assert "68 of the 128 FFMAs run" in after.describe()


@pytest.mark.parametrize("m,block_m,block_n", [(1432, 128, 136), (1400, 128, 144), (176, 192, 88)])
def test_the_default_switch_emits_the_jump_variants_ptx(m, block_m, block_n):
    """Where a selecting loop fits only without the selects' temporaries, interleave_ffma switches it
    to jumps: the default kernel's PTX is then byte for byte the `jump` variant's (PromoteScales(jump=
    True)), which the H100 lease checked against the reference and timed (spec 297)."""
    from dgir.compiler import compile
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.pipeline import pipeline
    cfg = Fp8GemmConfig(n=1472, k=14848, block_m=block_m, block_n=block_n, stages=5)
    default = compile("fp8_gemm_nt", m=m, n=1472, k=14848, config=cfg, assemble=False).ptx
    jump = [PromoteScales(jump=True) if p.name == "promote_scales" else p for p in pipeline("sm90a")]
    assert "brx.idx" in default and "selp.f32" not in default
    assert default == compile("fp8_gemm_nt", m=m, n=1472, k=14848, config=cfg, passes=jump, assemble=False).ptx


@pytest.mark.parametrize("m,block_m,block_n", [(1024, 128, 104), (6684, 128, 112), (896, 128, 120), (6684, 192, 112)])
def test_the_default_rule_emits_the_jump_variants_ptx(m, block_m, block_n):
    """From 104 columns on 128 or 192 rows promote_scales jumps by default (spec 300): the default
    kernel's PTX is byte for byte the `jump` variant's (PromoteScales(jump=True)), whose kernels the
    GPU suite checks against the float64 reference (test_gpu_fp8's promotion-form tests, passed on
    the H200 at d1fddf2) and spec 300 timed."""
    from dgir.compiler import compile
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.pipeline import pipeline
    cfg = Fp8GemmConfig(n=1536, k=7168, block_m=block_m, block_n=block_n, stages=4 if block_m == 192 else 6)
    default = compile("fp8_gemm_nt", m=m, n=1536, k=7168, config=cfg, assemble=False)
    jump = [PromoteScales(jump=True) if p.name == "promote_scales" else p for p in pipeline("sm90a")]
    selects = [PromoteScales(jump=False) if p.name == "promote_scales" else p for p in pipeline("sm90a")]
    assert "brx.idx" in default.ptx and "selp.f32" not in default.ptx
    assert default.ptx == compile("fp8_gemm_nt", m=m, n=1536, k=7168, config=cfg, passes=jump, assemble=False).ptx
    assert "selp.f32" in compile("fp8_gemm_nt", m=m, n=1536, k=7168, config=cfg, passes=selects, assemble=False).ptx
