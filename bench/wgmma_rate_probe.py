"""How many cycles a 64-row slice's K block (four m64nNk32 e4m3 wgmmas, 128 of K) costs on its own,
with no loads, and with dgir's barrier and scale work added back one piece at a time (device call;
writes JSON).

bench/TUNING.md step 118 asks whether the ~180-cycle intercept of the small tiles' no-load K block
(spec 287: 225 / 268 / 355 cycles at N = 32 / 64 / 128) is the tensor core's own rate with both
operands read from shared memory, or our loop around it.  Each variant is a hand-written PTX kernel,
one CTA per SM, that runs `--blocks` K blocks back to back and times them with %clock64:

  operands  ss: A and B from shared memory (what dgir emits);  rs: A from registers, loaded once;
            rs_lds: A from registers, re-read from shared memory each K block (what an RS kernel pays)
  retire    wait0: each K block's group waits for itself (nothing in flight across blocks);
            promote_bar / promote_scales / promote_full: promote, plus what dgir's loop adds around it
            (the full barrier's wait and the empty one's arrival per block, slot and parity from the
            block counter over an 11-slot ring; the two A-row scales from shared memory and B's from
            global memory, multiplied; both);
            promote_bar2 / promote_all2: as promote_bar / promote_all with one wait and one release
            per two K blocks (a ring slot holding two K blocks);
            promote_desc: promote with the wgmma descriptors built each K block from the slot, as
            dgir builds them (the warpgroup's slab in a regular register, so ptxas moves each into
            uniform registers: R2UR); promote_all: barriers, scales and descriptors;
            inflight: two accumulators, block j + 1 issued before block j is waited for (four
            blocks an iteration, drained at its end);
            promote: inflight, plus an FFMA per accumulator element into a third set after each
            wait (the FP32 promotion's arithmetic, without the scale loads)
  warpgroups 1 (a 64xN tile) or 2 (a 128xN tile: two A slabs, one B shared)

    python3 bench/wgmma_rate_probe.py --out $OUT/wgmma_rate.json            (on the H200)
    python3 bench/wgmma_rate_probe.py --compile-only                        (here: ptxas only)
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dgir.toolchain import assemble  # noqa: E402

A_SLAB = 64 * 128              # one warpgroup's 64 rows x 128 bytes of K
RING = 11                      # ring slots the promote_bar / promote_scales forms index (dgir's 64x64: 11)
B_BASE = 2 * A_SLAB            # B after both A slabs (1024-aligned)


def _desc_hi() -> int:
    return 0x40000040          # SBO = 1024 >> 4, 128-byte swizzle (hopper-ptx.md 4.3)


def probe_ptx(n: int, operands: str, retire: str, warpgroups: int) -> str:
    """The kernel `probe(out, blocks)`: thread 0 of each warpgroup writes its cycles to
    out[2 * (ctaid * warpgroups + wg)] and a sum of accumulators beside it (keeps the math live)."""
    regs = n // 2                              # FP32 accumulator registers of m64nNk32 per thread
    sets = 1 if retire == "wait0" else 2
    promoting = retire.startswith("promote")
    paired = retire.endswith("2")             # one barrier wait and one release per two K blocks
    retire = retire.rstrip("2")
    with_bar = retire in ("promote_bar", "promote_full", "promote_all")
    with_scales = retire in ("promote_scales", "promote_full", "promote_all")
    with_desc = retire in ("promote_desc", "promote_all")
    bars = B_BASE + n * 128                    # RING full barriers, then RING empty ones
    scales = bars + 16 * RING                  # RING slots of 64 A-scales per warpgroup
    lines = []
    emit = lines.append
    emit(".version 8.7\n.target sm_90a\n.address_size 64\n")
    emit(".extern .shared .align 1024 .b8 smem[];\n")
    emit(".visible .entry probe(.param .u64 out, .param .u32 blocks)\n{")
    emit(f"  .reg .f32 %acc<{sets * regs}>;\n  .reg .f32 %pro<{regs if promoting else 1}>;")
    emit("  .reg .b32 %a<16>;\n  .reg .b32 %r<16>;\n  .reg .b64 %rd<16>;\n  .reg .pred %p<4>;")
    emit("  .reg .f32 %s<8>;\n  .reg .b32 %q<24>;\n  .reg .b64 %rq<4>;\n  .reg .b64 %rk<8>;")
    emit("  ld.param.u64 %rd0, [out];\n  ld.param.u32 %r0, [blocks];")
    emit("  mov.u32 %r1, %tid.x;\n  shr.u32 %r2, %r1, 7;            // warpgroup")
    emit("  mov.u32 %r3, smem;")
    # fill the operands with e4m3 values of magnitude ~1 (0x38 = 1.0, 0x30 = 0.5, signs mixed)
    emit("  mov.u32 %r4, %r1;")
    emit("FILL:")
    emit("  shl.b32 %r5, %r4, 2;\n  add.u32 %r6, %r3, %r5;")
    emit("  mul.lo.u32 %r7, %r4, 0x9E3779B1;\n  and.b32 %r7, %r7, 0x80808080;\n  or.b32 %r7, %r7, 0x38303830;")
    emit("  st.shared.u32 [%r6], %r7;")
    emit(f"  add.u32 %r4, %r4, {128 * warpgroups};")
    emit(f"  setp.lt.u32 %p0, %r4, {(B_BASE + n * 128) // 4};\n  @%p0 bra FILL;")
    if with_bar:   # every full barrier completes its phase 0 once: waits on parity 0 pass at once
        emit("  setp.ne.u32 %p3, %r1, 0;\n  @%p3 bra BARS_DONE;")
        for i in range(RING):
            emit(f"  add.u32 %q0, %r3, {bars + 8 * i};\n  mbarrier.init.shared::cta.b64 [%q0], 1;")
            emit(f"  add.u32 %q0, %r3, {bars + 8 * (RING + i)};\n  mbarrier.init.shared::cta.b64 [%q0], {4 * warpgroups};")
            emit(f"  add.u32 %q0, %r3, {bars + 8 * i};\n  mbarrier.arrive.shared::cta.b64 _, [%q0];")
        emit("BARS_DONE:")
    emit("  fence.proxy.async.shared::cta;\n  bar.sync 0;")
    # 0 at run time (blocks < 2^31), unknown to ptxas: keeps computed parities and slot offsets computed
    emit("  shr.u32 %q15, %r0, 31;")
    # descriptors: A slab of this warpgroup, B shared
    emit(f"  mul.lo.u32 %r8, %r2, {A_SLAB};\n  add.u32 %r8, %r8, %r3;")
    emit("  shr.u32 %r9, %r8, 4;\n  and.b32 %r9, %r9, 0x3FFF;\n  or.b32 %r9, %r9, 0x00010000;")
    emit(f"  mov.u32 %r10, {_desc_hi()};\n  mov.b64 %rd1, {{%r9, %r10}};")
    emit(f"  add.u32 %r11, %r3, {B_BASE};")
    emit("  shr.u32 %r11, %r11, 4;\n  and.b32 %r11, %r11, 0x3FFF;\n  or.b32 %r11, %r11, 0x00010000;")
    emit("  mov.b64 %rd2, {%r11, %r10};")
    for j in range(1, 4):
        emit(f"  add.s64 %rd{1 + 2 * j}, %rd1, {2 * j};\n  add.s64 %rd{2 + 2 * j}, %rd2, {2 * j};")
    # A fragments for rs: this thread's 16 bytes of each k32 step (a plain per-thread read; the
    # values do not matter for a rate)
    emit("  and.b32 %r12, %r1, 127;\n  shl.b32 %r12, %r12, 4;\n  add.u32 %r12, %r12, %r8;")

    def load_a():
        for j in range(4):
            emit(f"  ld.shared.v4.b32 {{%a{4 * j}, %a{4 * j + 1}, %a{4 * j + 2}, %a{4 * j + 3}}}, [%r12+{2048 * j}];")

    if operands != "ss":
        load_a()
    for i in range(sets * regs):
        emit(f"  mov.f32 %acc{i}, 0f00000000;")
    if promoting:
        for i in range(regs):
            emit(f"  mov.f32 %pro{i}, 0f00000000;")
    emit("  mov.f32 %s0, 0f3F800000;\n  mov.f32 %s2, 0f3F800000;\n  mov.f32 %s3, 0f3F800000;")
    # this thread's accumulator rows (dgir's layout): r0 = 16 * warp + lane / 4, and r0 + 8
    emit("  shr.u32 %q1, %r1, 5;\n  and.b32 %q1, %q1, 3;\n  and.b32 %q2, %r1, 31;\n  shr.u32 %q2, %q2, 2;")
    emit("  mad.lo.u32 %q1, %q1, 16, %q2;\n  shl.b32 %q1, %q1, 2;")
    emit(f"  mad.lo.u32 %q3, %r2, {4 * 64 * RING}, %r3;\n  add.u32 %q3, %q3, {scales};\n  add.u32 %q3, %q3, %q1;")
    emit("  and.b32 %q4, %r1, 31;\n  setp.eq.u32 %p3, %q4, 0;            // lane 0: one arrival per warp")

    def descriptors(blk: str):
        """dgir's descriptors of a block's slot, built each K block: the slot from the block counter,
        its A (this warpgroup's slab) and B addresses, the 14-bit start fields, the K steps' 64-bit
        adds.  The slot's offset is multiplied by %q15 (0 at run time): the same shared memory, the
        same instructions.  Returns the A and B descriptors of the four K steps."""
        emit(f"  rem.u32 %q16, {blk}, {RING};\n  mul.lo.u32 %q16, %q16, %q15;")
        emit(f"  mad.lo.u32 %q17, %q16, {A_SLAB * 2}, %r8;")
        emit(f"  mad.lo.u32 %q18, %q16, {n * 128}, %r3;\n  add.u32 %q18, %q18, {B_BASE};")
        for reg, rk in (("%q17", 0), ("%q18", 1)):
            emit(f"  shr.u32 {reg}, {reg}, 4;\n  and.b32 {reg}, {reg}, 0x3FFF;\n  or.b32 {reg}, {reg}, 0x00010000;")
            emit(f"  mov.b64 %rk{rk}, {{{reg}, %r10}};")
            for j in range(1, 4):
                emit(f"  add.s64 %rk{rk + 2 * j}, %rk{rk}, {2 * j};")
        return [f"%rk{2 * j}" for j in range(4)], [f"%rk{2 * j + 1}" for j in range(4)]

    def group(s: int, blk: str | None = None):
        d = "{" + ", ".join(f"%acc{s * regs + i}" for i in range(regs)) + "}"
        da, db = descriptors(blk) if with_desc and blk else ([f"%rd{1 + 2 * j}" for j in range(4)],
                                                            [f"%rd{2 + 2 * j}" for j in range(4)])
        emit("  wgmma.fence.sync.aligned;")
        for j in range(4):
            a = da[j] if operands == "ss" else "{" + ", ".join(f"%a{4 * j + q}" for q in range(4)) + "}"
            # a block's first wgmma starts a fresh partial only where the promotion reads it: with
            # nothing reading the accumulators ptxas drops every group but the last as dead (it
            # kept a 64x8x16 placeholder in their place, and the loop ran "faster than the peak")
            fresh = j == 0 and promoting
            emit(f"  wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {d}, {a}, {db[j]}, "
                 f"{0 if fresh else 1}, 1, 1;")
        emit("  wgmma.commit_group.sync.aligned;")

    def wait_full(blk: str):
        """dgir's wait on a ring slot's full barrier: slot and parity from the block counter."""
        if not with_bar:
            return
        if paired:         # the pair's barrier: (block / 2) % (RING / 2), parity (block / 2) / (RING / 2)
            emit(f"  shr.u32 %q14, {blk}, 1;")
            emit(f"  rem.u32 %q5, %q14, {RING // 2};\n  div.u32 %q6, %q14, {RING // 2};\n  and.b32 %q6, %q6, %q15;")
        else:
            emit(f"  rem.u32 %q5, {blk}, {RING};\n  div.u32 %q6, {blk}, {RING};\n  and.b32 %q6, %q6, %q15;")
        emit(f"  mad.lo.u32 %q7, %q5, 8, %r3;\n  add.u32 %q7, %q7, {bars};")
        label = f"W{len(lines)}"
        emit(f"{label}:\n  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%q7], %q6;\n  @!%p2 bra {label};")

    def release(blk: str):
        if with_bar and paired:
            emit(f"  shr.u32 %q14, {blk}, 1;\n  rem.u32 %q5, %q14, {RING // 2};\n  mad.lo.u32 %q8, %q5, 8, %r3;")
            emit(f"  add.u32 %q8, %q8, {bars + 8 * RING};\n  @%p3 mbarrier.arrive.shared::cta.b64 _, [%q8];")
        elif with_bar:
            emit(f"  rem.u32 %q5, {blk}, {RING};\n  mad.lo.u32 %q8, %q5, 8, %r3;\n  add.u32 %q8, %q8, {bars + 8 * RING};")
            emit("  @%p3 mbarrier.arrive.shared::cta.b64 _, [%q8];")

    def load_scales(blk: str):
        """dgir's scale reads for a block: two A rows from the slot's shared scales, B's from global."""
        if not with_scales:
            return
        emit(f"  rem.u32 %q9, {blk}, {RING};\n  mad.lo.u32 %q10, %q9, 256, %q3;")
        emit("  ld.shared.f32 %s4, [%q10];\n  ld.shared.f32 %s5, [%q10+32];")
        emit(f"  and.b32 %q11, {blk}, 63;\n  mul.wide.u32 %rq0, %q11, 4;\n  add.s64 %rq1, %rd0, %rq0;")
        emit("  ld.global.nc.f32 %s6, [%rq1];")
        emit("  mul.f32 %s2, %s4, %s6;\n  mul.f32 %s3, %s5, %s6;")

    def promote(s: int):
        for i in range(regs):
            scale = ("%s2" if i % 4 < 2 else "%s3") if with_scales else "%s0"
            emit(f"  fma.rn.f32 %pro{i}, %acc{s * regs + i}, {scale}, %pro{i};")

    emit("  bar.sync 0;\n  mov.u64 %rd10, %clock64;\n  mov.u32 %r13, 0;")
    if retire == "wait0":
        emit("LOOP:")
        if operands == "rs_lds":
            load_a()
        group(0)
        emit("  wgmma.wait_group.sync.aligned 0;")
        emit("  add.u32 %r13, %r13, 1;\n  setp.lt.u32 %p1, %r13, %r0;\n  @%p1 bra LOOP;")
    else:   # four blocks an iteration, one group in flight behind each wait, drained before the
        # back-edge (as dgir's loop: a group in flight across it makes ptxas serialise, C7514)
        emit("LOOP:")
        for j, s in enumerate((0, 1, 0, 1)):
            emit(f"  add.u32 %q12, %r13, {j};")
            if not (paired and j % 2):      # a pair's second block: its slot's barrier was waited for
                wait_full("%q12")
            if operands == "rs_lds":
                load_a()
            group(s, "%q12")
            if j:
                emit(f"  add.u32 %q13, %r13, {j - 1};")
                load_scales("%q13")
                emit("  wgmma.wait_group.sync.aligned 1;")
                if promoting:
                    if not (paired and j % 2):   # release a pair after its second block retires
                        release("%q13")
                    promote(1 - s)
        emit("  add.u32 %q13, %r13, 3;")
        load_scales("%q13")
        emit("  wgmma.wait_group.sync.aligned 0;")
        if promoting:
            release("%q13")
            promote(1)
        emit("  add.u32 %r13, %r13, 4;\n  setp.lt.u32 %p1, %r13, %r0;\n  @%p1 bra LOOP;")
    emit("  mov.u64 %rd11, %clock64;\n  sub.s64 %rd12, %rd11, %rd10;")
    # a sum over every accumulator (and promoted value) keeps each wgmma's result live
    total = [f"%acc{i}" for i in range(sets * regs)] + ([f"%pro{i}" for i in range(regs)] if promoting else [])
    emit("  mov.f32 %s1, 0f00000000;")
    for t in total:
        emit(f"  add.f32 %s1, %s1, {t};")
    emit("  and.b32 %r14, %r1, 127;\n  setp.ne.u32 %p2, %r14, 0;\n  @%p2 bra DONE;")
    emit(f"  mov.u32 %r15, %ctaid.x;\n  mad.lo.u32 %r15, %r15, {warpgroups}, %r2;")
    emit("  mul.wide.u32 %rd13, %r15, 16;\n  add.s64 %rd14, %rd0, %rd13;")
    emit("  st.global.u64 [%rd14], %rd12;\n  mov.b32 %r14, %s1;\n  st.global.u32 [%rd14+8], %r14;")
    emit("DONE:\n  ret;\n}")
    return "\n".join(lines) + "\n"


VARIANTS = [(n, ops, ret, wg) for n, ops, ret, wg in itertools.product(
    (32, 64, 128, 256), ("ss", "rs", "rs_lds"), ("wait0", "inflight", "promote"), (1, 2))
    if not (n == 256 and ret != "wait0")]       # two 128-register sets do not fit beside the rest
# dgir's loop around the same wgmmas: its barrier wait and release per block, its scale reads, both
VARIANTS += [(n, "ss", ret, wg) for n, ret, wg in itertools.product(
    (64, 128), ("promote_bar", "promote_scales", "promote_full", "promote_desc", "promote_all"), (1, 2))]
# the same with one barrier wait and one release per two K blocks (a ring slot of two K blocks)
VARIANTS += [(n, "ss", ret, wg) for n, ret, wg in itertools.product(
    (32, 64, 128), ("promote_bar2", "promote_all2"), (1, 2))]
VARIANTS += [(32, "ss", ret, 1) for ret in ("promote_bar", "promote_all")]

# the tensor core's rate across widths that are not powers of two (two warpgroups, which reach the
# peak at N = 64 / 128): whether a width costs its own columns or rounds up to a coarser step (the
# model's 128x136 picks lost to other tiles at 15 of 22 shapes, bench/TUNING.md step 120)
WIDTHS = (96, 112, 120, 136, 144, 152, 160, 176, 192)
VARIANTS += [(n, "ss", ret, 2) for n, ret in itertools.product(WIDTHS, ("wait0", "inflight"))
             if not (n > 192 and ret != "wait0")]


def name(v) -> str:
    n, ops, ret, wg = v
    return f"n{n}_{ops}_{ret}_wg{wg}"


def smem_bytes(n: int) -> int:
    return B_BASE + n * 128 + 16 * RING + 2 * 4 * 64 * RING


def run(blocks: int, out_path: str | None, match: list[str] | None = None) -> None:
    import ctypes
    import datetime
    import statistics
    import subprocess

    import torch
    from runtime import driver
    dev = torch.cuda.get_device_properties(0)
    rows = []
    for v in VARIANTS:
        if match and not any(m in name(v) for m in match):
            continue
        n, ops, ret, wg = v
        res = assemble(probe_ptx(*v))
        fn = driver.load_module(res.cubin).function("probe")
        out = torch.zeros(dev.multi_processor_count * wg * 2, dtype=torch.int64, device="cuda")
        for rep in range(3):   # the first launch warms the clocks; the last is kept
            out.zero_()
            driver.launch(fn, (dev.multi_processor_count, 1, 1), (128 * wg, 1, 1), smem_bytes(n),
                          [ctypes.c_uint64(out.data_ptr()), ctypes.c_uint32(blocks)])
            torch.cuda.synchronize()
        cyc = out.view(-1, 2)[:, 0].tolist()
        med = statistics.median(cyc)
        tc_peak = wg * 2 * 64 * n * 128 / 8192     # cycles at the FP8 peak: 8192 FLOP a cycle an SM
        row = {"variant": name(v), "n": n, "operands": ops, "retire": ret, "warpgroups": wg,
               "cycles_per_block_med": med / blocks, "cycles_per_block_max": max(cyc) / blocks,
               "peak_cycles_per_block": tc_peak, "fraction_of_peak": tc_peak / (med / blocks),
               "registers": res.resources.registers, "spills": res.resources.spill_stores}
        rows.append(row)
        print(json.dumps(row), flush=True)
    rev = os.environ.get("DGIR_GIT_REV") or subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                                           capture_output=True, text=True).stdout.strip()
    doc = {"device": torch.cuda.get_device_name(0), "git_rev": rev,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "method": f"bench/wgmma_rate_probe.py: one CTA per SM, {blocks} K blocks of four m64nNk32 e4m3 "
                     "wgmmas timed with %clock64 by each warpgroup; median (and max) over CTAs of the third "
                     "launch; peak = warpgroups*2*64*N*128 FLOP at 8192 FLOP a cycle an SM (1979 TFLOPS, 132 SMs, 1.83 GHz)",
           "rows": rows}
    if out_path:
        with open(out_path, "w") as f:
            json.dump(doc, f, indent=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--blocks", type=int, default=4096)
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--match", action="append", metavar="SUBSTR",
                    help="run only the variants whose name contains one of these (repeatable)")
    ap.add_argument("--print", metavar="VARIANT", help="print one variant's PTX (e.g. n64_ss_inflight_wg1)")
    a = ap.parse_args(argv)
    if a.print:
        v = next(v for v in VARIANTS if name(v) == a.print)
        print(probe_ptx(*v))
        return 0
    if a.compile_only:
        for v in VARIANTS:
            res = assemble(probe_ptx(*v))
            r = res.resources
            print(f"{name(v):24s} {r.registers:3d} registers, {r.spill_stores} spill stores, warnings: {res.warnings}")
        return 0
    run(a.blocks, a.out, a.match)
    return 0


if __name__ == "__main__":
    sys.exit(main())
