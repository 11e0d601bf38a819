import hashlib
import struct
from pathlib import Path

import pytest

from dgir import toolchain as tc
from dgir.runtime import sass
from dgir.runtime.sass import FLIP_MASK, REUSE_B_BIT, SassInstr


def _ffma_ptx(n=32):
    """Loads, then n FFMAs sharing operand A (x_i * s0 + c_i) and n sharing A and B
    (s0 * s1 + c_i): ptxas emits a long FFMA run whose B operand carries .reuse (bit 59)."""
    lines = [".version 8.7", ".target sm_90a", ".address_size 64",
             ".visible .entry ffma_run(.param .u64 p)", "{",
             "  .reg .b64 %rd<4>; .reg .f32 %f<200>; .reg .b32 %r<4>;",
             "  ld.param.u64 %rd0, [p]; cvta.to.global.u64 %rd0, %rd0;",
             "  mov.u32 %r0, %tid.x; mul.wide.u32 %rd1, %r0, 4; add.s64 %rd0, %rd0, %rd1;",
             "  ld.global.f32 %f0, [%rd0+524288];", "  ld.global.f32 %f99, [%rd0+524292];"]
    for i in range(n):
        lines.append(f"  ld.global.f32 %f{1 + i}, [%rd0+{i * 4096}];")
        lines.append(f"  ld.global.f32 %f{100 + i}, [%rd0+{i * 4096 + 131072}];")
    lines.append("  bar.sync 0;")
    for i in range(n):
        lines.append(f"  fma.rn.f32 %f{100 + i}, %f{1 + i}, %f0, %f{100 + i};")
    for i in range(n):
        lines.append(f"  fma.rn.f32 %f{100 + i}, %f0, %f99, %f{100 + i};")
    lines.append("  bar.sync 0;")
    for i in range(n):
        lines.append(f"  st.global.f32 [%rd0+{i * 4096}], %f{100 + i};")
    lines += ["  ret;", "}"]
    return "\n".join(lines) + "\n"


NO_FFMA = """.version 8.7
.target sm_90a
.address_size 64
.visible .entry plain(.param .u64 p)
{
  .reg .b64 %rd<4>; .reg .b32 %r<4>;
  ld.param.u64 %rd0, [p]; cvta.to.global.u64 %rd0, %rd0;
  mov.u32 %r0, %tid.x;
  st.global.u32 [%rd0], %r0;
  ret;
}
"""


@pytest.fixture(scope="module")
def ffma_cubin():
    return tc.assemble(_ffma_ptx()).cubin


# ------------------------------------------------------------------ the rule, synthetic

def _ins(i, text="FFMA R{d}, R2, R0, R{d}", reuse=True, label=False, d=None):
    hi = 0x000FE20000000000 | (REUSE_B_BIT if reuse else 0)
    return SassInstr(i * 16, text.format(d=d if d is not None else 10 + i), 0x7223 + i, hi,
                     label)


def test_flip_mask():
    assert FLIP_MASK == 0x0800200000000000


def test_key_register_is_deepgemm_parse_registers_minus_2():
    assert SassInstr(0, "FFMA R5, R0.reuse, R7.reuse, R4", 0, 0).key_register == "R7"
    assert SassInstr(0, "@P0 FFMA R5, R0, 0.5, R4", 0, 0).key_register == "R0"
    assert SassInstr(0, "FFMA R5, R0, UR6, R4", 0, 0).key_register == "R0"
    assert SassInstr(0, "FFMA.FTZ R5, R1, R2, R3", 0, 0).is_ffma
    assert not SassInstr(0, "FADD R5, R1, R2", 0, 0).is_ffma


def test_shared_b_register_interleaves():
    # 16 FFMAs all reusing B=R0: 9*16//16 = 9 considered; first occurrence flips, then
    # alternately kept (reused) / flipped (previous still reused, same key).
    instrs = [_ins(i) for i in range(16)]
    chosen, runs = sass.select_ffma_patches(instrs)
    assert runs == 1 and chosen == [0, 2, 4, 6, 8]


def test_distinct_b_registers_all_flip_in_prefix():
    instrs = [_ins(i, text=f"FFMA R{{d}}, R2, R{40 + i}, R{{d}}") for i in range(20)]
    chosen, _ = sass.select_ffma_patches(instrs)
    assert chosen == list(range(9 * 20 // 16))          # 11


def test_non_reused_not_flipped_and_breaks_reuse_chain():
    instrs = [_ins(i, reuse=(i != 1)) for i in range(16)]
    chosen, _ = sass.select_ffma_patches(instrs)
    # 0 first -> flip; 1 no reuse -> skip; 2 seen, prev not reused -> keep; 3 -> flip; ...
    assert chosen == [0, 3, 5, 7]


def test_run_boundaries():
    short = [_ins(i) for i in range(7)]
    assert sass.select_ffma_patches(short) == ([], 0)
    assert sass.find_ffma_runs([_ins(i) for i in range(8)]) == [(0, 8)]
    # a non-FFMA splits the run into 8 + 8
    mixed = [_ins(i) for i in range(8)] + [_ins(8, text="IMAD R1, R2, R3, R4")] + \
            [_ins(9 + i) for i in range(8)]
    assert sass.find_ffma_runs(mixed) == [(0, 8), (9, 8)]
    # a label (branch target) splits it too
    lab = [_ins(i, label=(i == 8)) for i in range(16)]
    assert sass.find_ffma_runs(lab) == [(0, 8), (8, 8)]
    assert sass.find_ffma_runs(lab, min_run=16) == []


# ------------------------------------------------------------------ ELF

def test_elf_sections(ffma_cubin):
    secs = {s.name: s for s in sass.elf_sections(ffma_cubin)}
    text = secs[".text.ffma_run"]
    assert text.size % 16 == 0 and text.size > 16 * 64
    first = sass.parse_sass(tc.disassemble(ffma_cubin), "ffma_run")[0]
    assert struct.unpack_from("<QQ", ffma_cubin, text.offset) == (first.lo, first.hi)
    with pytest.raises(ValueError):
        sass.elf_sections(b"not an elf" * 10)


# ------------------------------------------------------------------ real cubins

def test_real_cubin_patch(ffma_cubin):
    before = sass.parse_sass(tc.disassemble(ffma_cubin), "ffma_run")
    assert sum(i.is_ffma and bool(i.hi & REUSE_B_BIT) for i in before) >= 8, \
        "test kernel should have FFMAs with operand-B reuse"
    want, nruns = sass.select_ffma_patches(before)
    r = sass.interleave_ffma_sass(ffma_cubin, "ffma_run")
    assert r.runs == nruns >= 1 and r.patched == len(want) > 0
    assert len(r.cubin) == len(ffma_cubin)
    text = {s.name: s for s in sass.elf_sections(ffma_cubin)}[".text.ffma_run"]
    diff = [o for o in range(0, len(ffma_cubin), 8)
            if ffma_cubin[o:o + 8] != r.cubin[o:o + 8]]
    want_offs = [text.offset + before[i].offset + 8 for i in want]
    assert diff == want_offs                       # only the high words of chosen FFMAs
    for i, off in zip(want, want_offs):
        (hi,) = struct.unpack_from("<Q", r.cubin, off)
        assert hi == before[i].hi ^ FLIP_MASK and not hi & REUSE_B_BIT
    # the patched cubin still disassembles; B lost its .reuse, everything else identical
    after = sass.parse_sass(tc.disassemble(r.cubin), "ffma_run")
    assert r.after_sass != r.before_sass
    for i, (a, b) in enumerate(zip(before, after)):
        if i in want:
            assert ".reuse" in a.text.split(",")[2] and ".reuse" not in b.text.split(",")[2]
        else:
            assert a.text == b.text
    # idempotence is not expected (flags changed), but a second pass must still be valid
    r2 = sass.interleave_ffma_sass(r.cubin, "ffma_run")
    assert tc.disassemble(r2.cubin)


def test_real_cubin_without_runs_roundtrips():
    cubin = tc.assemble(NO_FFMA).cubin
    r = sass.interleave_ffma_sass(cubin, "plain")
    assert (r.patched, r.runs) == (0, 0) and r.cubin == cubin
    assert r.before_sass == r.after_sass and "plain" in r.before_sass


def test_unknown_kernel(ffma_cubin):
    with pytest.raises(ValueError, match="ffma_run"):
        sass.interleave_ffma_sass(ffma_cubin, "nope")


def test_source_id():
    src = Path(sass.__file__).read_bytes()
    assert sass.SOURCE_ID == hashlib.sha256(src).hexdigest()[:16]
