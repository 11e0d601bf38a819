"""Each sm90a pass's dump has the structure it promises (golden patterns, FileCheck-like)."""
from __future__ import annotations

import re

import pytest
import torch
from dgir_testlib import (CONFIGS, DEFAULT, SM90A_PASSES, SOME_CONFIGS, bench_module, cfg_id, edit, final,
                          interpret_as_launched, k_loops, region, stage, stages_for)

import dgir
from dgir.ir import SCALAR_OPS, Node, Op
from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
from dgir.ops.fp8_gemm_config import straddle_splits
from dgir.passes import Pass
from dgir.passes import (allocate_smem, assign_registers, interleave_ffma, prefetch_tma_descriptors,
                         promote_scales)
from dgir.pipeline import pipeline, run_pipeline


# --- a small FileCheck ---------------------------------------------------------------------------
def filecheck(text: str, spec: str) -> None:
    """`CHECK: re` matches a later line (in order), `CHECK-NEXT: re` the very next line,
    `CHECK-NOT: re` must not match between the previous and the next CHECK match."""
    lines = text.splitlines()
    pos = 0                              # next line to look at
    nots: list[str] = []
    for raw in spec.strip().splitlines():
        kind, _, pat = raw.strip().partition(":")
        pat = pat.strip()
        if kind == "CHECK-NOT":
            nots.append(pat)
            continue
        if kind == "CHECK-NEXT":
            assert pos < len(lines) and re.search(pat, lines[pos]), \
                f"CHECK-NEXT: {pat!r} does not match line {pos + 1}: {lines[pos] if pos < len(lines) else '<eof>'!r}"
            hit = pos
        elif kind == "CHECK":
            hit = next((i for i in range(pos, len(lines)) if re.search(pat, lines[i])), None)
            assert hit is not None, f"CHECK: {pat!r} not found after line {pos}"
        else:
            raise ValueError(f"bad directive {raw!r}")
        for bad in nots:
            for i in range(pos, hit):
                assert not re.search(bad, lines[i]), f"CHECK-NOT: {bad!r} matched line {i + 1}: {lines[i]!r}"
        nots = []
        pos = hit + 1
    for bad in nots:
        for i in range(pos, len(lines)):
            assert not re.search(bad, lines[i]), f"CHECK-NOT: {bad!r} matched line {i + 1}: {lines[i]!r}"


def test_filecheck_itself():
    filecheck("a\nb\nc\n", "CHECK: a\nCHECK-NEXT: b\nCHECK-NOT: x\nCHECK: c")
    for bad in ("CHECK: c\nCHECK: a", "CHECK: a\nCHECK-NEXT: c", "CHECK: a\nCHECK-NOT: b\nCHECK: c", "CHECK-NOT: c"):
        with pytest.raises(AssertionError):
            filecheck("a\nb\nc\n", bad)


def text(cfg, name):
    return dgir.print_ir(stage(cfg, name))


# --- every pass -----------------------------------------------------------------------------------
def test_pipeline_passes_are_named_documented_objects():
    passes = pipeline("sm90a")
    names = [p.name for p in passes]
    assert names == SM90A_PASSES
    for p in passes:
        assert isinstance(p, Pass)
        assert len((type(p).__doc__ or "").strip()) > 80, p.name
        assert re.fullmatch(r"\w+:[0-9a-f]{12}", p.identity())


@pytest.mark.parametrize("cfg", SOME_CONFIGS, ids=cfg_id)
def test_passes_are_pure_functions(cfg):
    k = lower(cfg)
    for p in pipeline("sm90a"):
        again = p.run(k)
        assert p.run(k) == again            # deterministic, input untouched
        k = again


# --- promote_scales -------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", SOME_CONFIGS, ids=cfg_id)
def test_promote_scales(cfg):
    before = stage(cfg, "lower_gemm")
    k = stage(cfg, "promote_scales")
    assert before.find(Op.MMA_SCALED) and not k.find(Op.MMA_SCALED)
    assert k.decl("part").type == k.decl("acc").type
    filecheck(dgir.print_ir(k), rf"""
        CHECK: %acc = regs : f32\[64, {cfg.block_n}\]
        CHECK: %part = regs : f32\[64, {cfg.block_n}\]
        CHECK: %kbl = for\(0, {cfg.k_blocks}, 1\) \[role="mma"\]
        CHECK: %sb0 = load_scale\(%SFB, %sb_row0, %kbl\)
        CHECK-NEXT: %sb1 = load_scale\(%SFB, %sb_row1, %kbl\)
        CHECK-NEXT: wait\(%ab, %ctr\)
        CHECK-NEXT: smem_read\(%sfa, %sfa_ring, %ctr\)
        CHECK-NEXT: wgmma\(%part, %a_ring, %b_ring, %ctr\) \[k=128, n={cfg.block_n}, role="mma", scale_d=0\]
        CHECK-NEXT: wgmma_wait \[pending=0, role="mma"\]
        CHECK-NEXT: release\(%ab, %ctr\)
        CHECK-NEXT: promote\(%acc, %part, %sfa, %sb0, %sb1, %n0\)
        CHECK-NEXT: \}}
        CHECK-NOT: mma_scaled
        CHECK: stage_out\(%d_tile, %acc\)
    """)
    # each k-loop: wgmma [scale_d=0] -> wgmma_wait -> release -> promote, in that order
    for loop in k_loops(k):
        ops = [c.op for c in loop.body if c.op in (Op.WGMMA, Op.WGMMA_WAIT, Op.RELEASE, Op.PROMOTE)]
        assert ops == [Op.WGMMA, Op.WGMMA_WAIT, Op.RELEASE, Op.PROMOTE]
        assert all(c.get("scale_d") == 0 for c in loop.body if c.op is Op.WGMMA)


@pytest.mark.parametrize("block_m,block_n,straddles,form,rule", [
    (128, 96, True, "arms", ""), (128, 160, True, "arms", ""),
    (128, 112, True, "jump", ", >= 104 columns on 128 rows"), (192, 104, True, "jump", ", >= 104 columns on 192 rows"),
    (128, 88, True, "selects", ", jumps only from 104 columns on 128 or 192 rows"),
    (64, 112, True, "selects", ", jumps only from 104 columns on 128 or 192 rows"),
    (256, 112, True, "selects", ", jumps only from 104 columns on 128 or 192 rows"),
    (128, 128, False, None, ""), (128, 64, False, None, "")])
def test_promote_scales_straddling_b_scale_blocks(block_m, block_n, straddles, form, rule):
    cfg = Fp8GemmConfig(n=1536, k=256, block_m=block_m, block_n=block_n, stages=3)
    k = stage(cfg, "promote_scales")
    loop = k_loops(k)[0]
    promote = next(c for c in loop.body if c.op is Op.PROMOTE)
    scales = {c.name: c for c in loop.body if c.op is Op.LOAD_SCALE}
    sb0, sb1 = (scales[a] for a in promote.args[3:5])
    assert (sb0.args[1], sb1.args[1]) == ("sb_row0", "sb_row1")   # both B-scale rows reach the promotion
    # some tile really straddles a 128-row scale block exactly when 128 % block_n != 0
    assert any((n0 // 128) != ((n0 + block_n - 1) // 128) for n0 in range(0, cfg.n, block_n)) == straddles
    # the promotion's form, decided here for the emitter: arms up to 4 possible crossing columns
    # (96: 2, 160: 4), else jumps from 104 columns on 128 or 192 rows (spec 300), else selects; why,
    # on the kernel
    assert promote.get("straddle") == form and (k.get("straddle_promotion") or None) == (
        form and f"{form}: {len(straddle_splits(block_n))} columns where a tile can cross a B-scale block"
        + (f" (> 4 arms{rule})" if form in ("selects", "jump") else ""))


def test_promote_scales_without_mma_scaled_is_identity():
    k = stage(DEFAULT, "promote_scales")
    assert promote_scales.PASS.run(k) == k


# --- prefetch_tma_descriptors ------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", SOME_CONFIGS, ids=cfg_id)
def test_prefetch_tma_descriptors(cfg):
    k = stage(cfg, "prefetch_tma_descriptors")
    tma_params = [n.name for n in k.body if n.op is Op.PARAM and n.get("box") is not None]
    assert tma_params == ["A", "B", "SFA", "D"]
    load = region(k, "load")
    first = load.body[:len(tma_params)]
    assert [(n.op, n.args[0], n.role) for n in first] == [(Op.PREFETCH_TMAP, p, "load") for p in tma_params]
    assert len(k.find(Op.PREFETCH_TMAP)) == len(tma_params)          # once each, nowhere else
    assert not region(k, "mma").find(Op.PREFETCH_TMAP)
    filecheck(dgir.print_ir(k), r"""
        CHECK: warpgroup \[ids=\[\d\], roles=\["load"\]\] \{
        CHECK-NEXT: prefetch_tmap\(%A\) \[role="load"\]
        CHECK-NEXT: prefetch_tmap\(%B\)
        CHECK-NEXT: prefetch_tmap\(%SFA\)
        CHECK-NEXT: prefetch_tmap\(%D\)
        CHECK-NEXT: %bid = sreg
        CHECK-NOT: prefetch_tmap
        CHECK: tma_store_wait \[read=false
    """)


def test_prefetch_tma_descriptors_at_entry_is_emitted_before_the_barrier_setup():
    """at_entry=True (bench variant `early`): thread 0 issues the prefetches before it initialises
    the barriers, and the load region does not issue them again; the default keeps them there."""
    from dgir.emitters.ptx.emit import emit_ptx
    from dgir.passes.prefetch_tma_descriptors import PrefetchTmaDescriptors
    k = stage(DEFAULT, "stage_b_scales")
    early = PrefetchTmaDescriptors(at_entry=True).run(k)
    assert [n.get("at") for n in early.find(Op.PREFETCH_TMAP)] == ["entry"] * 4
    passes = pipeline("sm90a")
    for p in passes[[q.name for q in passes].index("prefetch_tma_descriptors") + 1:]:
        early = p.run(early)
    ptx = emit_ptx(early)
    assert ptx.count("prefetch.tensormap") == 4
    assert ptx.index("prefetch.tensormap") < ptx.index("mbarrier.init") < ptx.index("WG_LOAD")
    late = emit_ptx(stage(DEFAULT, "allocate_smem"))
    assert late.count("prefetch.tensormap") == 4
    assert late.index("mbarrier.init") < late.index("WG_LOAD") < late.index("prefetch.tensormap")


def test_prefetch_tma_descriptors_is_idempotent():
    k = stage(DEFAULT, "prefetch_tma_descriptors")
    p = prefetch_tma_descriptors.PASS
    assert p.run(k) == k
    assert p.run(p.run(stage(DEFAULT, "stage_b_scales"))) == k


# --- assign_registers --------------------------------------------------------------------------------
@pytest.mark.parametrize("block_m,math_regs", [(128, 232), (64, 256)])
def test_assign_registers(block_m, math_regs):
    cfg = Fp8GemmConfig(n=576, k=640, block_m=block_m, block_n=128, stages=3)
    k = stage(cfg, "assign_registers")
    load, mma = region(k, "load"), region(k, "mma")
    assert load.get("regs") == 40
    assert mma.get("regs") == math_regs
    assert len(mma.get("ids")) == block_m // 64
    total = sum(wg.get("regs") * 128 * len(wg.get("ids")) for wg in (load, mma))
    assert total <= 65536
    assert assign_registers.PASS.run(k) == k          # budgets already set: left alone


@pytest.mark.parametrize("occ,launch,math_regs", [(2, 128, 216), (3, 80, 120), (4, 64, 88)])
def test_assign_registers_fits_the_pool_a_shared_sm_cta_starts_with(occ, launch, math_regs):
    """setmaxnreg moves registers between one CTA's warps: the budgets of a CTA sharing its SM add up
    to what it was launched with (at three CTAs 65536 / 768 = 85 rounds to 80 a thread; budgets from
    the unrounded third, 40 / 128, would wait forever on registers no warp frees).  The kernel
    computes the same bits as at one CTA per SM."""
    from dgir.interp import fp8_gemm_inputs, run_kernel
    from dgir.verifier import VerifyError, launch_registers, verify
    cfg = Fp8GemmConfig(n=576, k=640, block_m=64, block_n=32, stages=3, ctas_per_sm=occ)
    k = final(cfg)
    load, mma = region(k, "load"), region(k, "mma")
    assert launch_registers(256, occ) == launch and (load.get("regs"), mma.get("regs")) == (40, math_regs)
    assert (load.get("regs") + mma.get("regs")) * 128 == launch * 256
    over = edit(k, lambda n: n.op is Op.WARPGROUP and "mma" in n.get("roles", ()), lambda n: n.with_attrs(regs=math_regs + 8))
    with pytest.raises(VerifyError, match="register budgets need"):
        verify(over)
    ins = fp8_gemm_inputs(100, 576, 640, seed=3)
    one = run_kernel(final(Fp8GemmConfig(n=576, k=640, block_m=64, block_n=32, stages=3)), ins, seed=1)["D"]
    shared = run_kernel(k, ins, seed=1)["D"]
    assert torch.isfinite(shared.float()).all() and torch.equal(one.view(torch.int16), shared.view(torch.int16))


# --- schedule_mma ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", SOME_CONFIGS, ids=cfg_id)
def test_schedule_mma_writes_stage_order_latency(cfg):
    k = stage(cfg, "schedule_mma")
    loops = k_loops(k)
    assert len(loops) == 1 and loops[0].get("pipelined") is False
    body = loops[0].body
    staged = [c for c in body if c.get("stage") is not None]
    scale_read = Op.SMEM_SCALAR if cfg.block_m * cfg.block_n >= 128 * 128 else Op.LOAD_SCALE
    assert {c.op for c in staged} == {scale_read, Op.WAIT, Op.SMEM_READ, Op.WGMMA, Op.WGMMA_WAIT, Op.RELEASE,
                                      Op.PROMOTE}
    for c in body:
        if c.op in SCALAR_OPS and c.op is not scale_read:
            assert c.get("stage") is None            # index math: recomputed where needed
        else:
            assert isinstance(c.get("order"), int) and isinstance(c.get("latency"), int), c
    assert [c.get("order") for c in staged] == sorted(c.get("order") for c in staged)
    by_op = {c.op: c for c in staged}
    assert by_op[Op.WGMMA].get("stage") == 0 and by_op[Op.WGMMA].get("latency") == 512
    # B-scale reads issue with the wgmma (their latency hides behind it)
    assert all(by_op[o].get("stage") == 0 for o in (Op.WAIT, Op.SMEM_READ))
    assert by_op[scale_read].get("stage") == (0 if 128 % cfg.block_n == 0 else 1)
    assert all(by_op[o].get("stage") == 1 for o in (Op.WGMMA_WAIT, Op.RELEASE, Op.PROMOTE))
    # only the math k-loop is scheduled; the producer's loop is untouched
    assert not any(n.get("stage") is not None for n in region(k, "load").walk())


# --- interleave_ffma ---------------------------------------------------------------------------------
def _issue_count(k: Node, op: Op) -> int:
    """How many times `op` executes per tile (static loop trip counts)."""
    def count(n: Node) -> int:
        if n.op is Op.FOR and all(isinstance(a, int) for a in n.args):
            start, stop, step = n.args
            trips = len(range(start, stop, step))
            return trips * sum(count(c) for c in n.body)
        return (n.op is op) + sum(count(c) for c in n.body)
    tile_loop = next(n for n in region(k, "mma").body if n.op is Op.FOR)
    return sum(count(c) for c in tile_loop.body)


@pytest.mark.parametrize("k_dim", [640, 768, 1024, 256, 128])
@pytest.mark.parametrize("block_m,block_n", [(128, 128), (64, 144), (128, 96), (64, 16)])
def test_interleave_ffma_double_buffers(block_m, block_n, k_dim, monkeypatch):
    # the mechanism for every K (short k-loops of several math warpgroups are skipped by default:
    # test_short_k_loops_with_several_math_warpgroups_are_not_interleaved)
    monkeypatch.setattr(interleave_ffma.InterleaveFfma, "min_k_blocks", 0)
    cfg = Fp8GemmConfig(n=1536, k=k_dim, block_m=block_m, block_n=block_n, stages=3)
    k = {stem.split("_", 1)[1]: kern for stem, kern in stages_for.__wrapped__(cfg)}["interleave_ffma"]   # not cached
    nkb = cfg.k_blocks
    assert k.decl("part1").type == k.decl("part").type
    assert k.decl("sfa1").type == k.decl("sfa").type
    # every K block is issued once, released once and promoted once, whatever the unrolling and tail
    assert _issue_count(k, Op.WGMMA) == nkb
    assert _issue_count(k, Op.PROMOTE) == nkb
    assert _issue_count(k, Op.RELEASE) == nkb
    mma = region(k, "mma")
    U = min(interleave_ffma.PASS.unroll, nkb)
    loops = [n for n in mma.walk() if n.op is Op.FOR and n.get("interleave") is not None]
    assert [l.get("interleave") for l in loops] == [f"double_buffer x{U}"]
    loop = loops[0]
    assert loop.args == (0, nkb // U * U, U) and loop.get("pipelined") is True
    # block j+1 is issued before block j is retired (pending=1); the last block of an iteration is
    # drained (pending=0), so no wgmma is in flight across the back-edge
    waits = [c.get("pending") for c in loop.body if c.op is Op.WGMMA_WAIT]
    assert waits == [1] * (U - 1) + [0]
    if U >= 3:
        filecheck(dgir.print_ir(loop), r"""
            CHECK: wgmma\(%part,
            CHECK-NOT: wgmma_wait
            CHECK: wgmma\(%part1,
            CHECK: wgmma_wait \[.*pending=1
            CHECK: release
            CHECK: promote\(%acc, %part, %sfa,
            CHECK: wgmma\(%part,
            CHECK: wgmma_wait \[.*pending=1
            CHECK: promote\(%acc, %part1, %sfa1,
        """)
    tile_loop = next(n for n in mma.body if n.op is Op.FOR)
    tail = [c.get("pending") for c in tile_loop.body if c.op is Op.WGMMA_WAIT]
    rest = nkb % U
    assert tail == ([1] * (rest - 1) + [0] if rest else [])   # peeled tail, drained before the epilogue
    assert not any(n.get("stage") is not None or n.get("order") is not None for n in k.walk())


@pytest.mark.parametrize("partials", [3, 4])
@pytest.mark.parametrize("block_m,block_n,k_dim", [(64, 64, 2048), (64, 32, 1664), (128, 64, 1408)])
def test_interleave_ffma_rotates_more_partials(partials, block_m, block_n, k_dim):
    """partials=D: schedule_mma writes D and its unroll on the loop (data); interleave_ffma builds D
    buffers of each carried tile, issues block j + D - 1 before retiring block j (pending=D-1) and
    drains each iteration (pending D-2 .. 0), block j in buffer j mod D."""
    cfg = Fp8GemmConfig(n=1536, k=k_dim, block_m=block_m, block_n=block_n, stages=6, partials=partials)
    U = 4 * (partials - 1)
    assert [(lp.get("partials"), lp.get("unroll")) for lp in k_loops(stage(cfg, "schedule_mma"))] == [(partials, U)]
    k = stage(cfg, "interleave_ffma")
    for b in range(1, partials):
        assert k.decl(f"part{b}").type == k.decl("part").type and k.decl(f"sfa{b}").type == k.decl("sfa").type
    with pytest.raises(KeyError):
        k.decl(f"part{partials}")
    nkb = cfg.k_blocks
    assert _issue_count(k, Op.WGMMA) == _issue_count(k, Op.PROMOTE) == _issue_count(k, Op.RELEASE) == nkb
    U = min(U, nkb)         # 1408: 11 K blocks, one iteration of 11
    loop = next(n for n in region(k, "mma").walk() if n.op is Op.FOR and n.get("pipelined") is True)
    assert loop.get("interleave") == f"{partials} buffers x{U}" and loop.args == (0, nkb // U * U, U)

    def pendings(count):
        return [partials - 1] * max(0, count - partials + 1) + list(range(min(count, partials - 1) - 1, -1, -1))
    assert [c.get("pending") for c in loop.body if c.op is Op.WGMMA_WAIT] == pendings(U)
    assert [c.args[0] for c in loop.body if c.op is Op.WGMMA] == ["part" + (str(j % partials) if j % partials else "")
                                                                  for j in range(U)]
    tile_loop = next(n for n in region(k, "mma").body if n.op is Op.FOR)
    assert [c.get("pending") for c in tile_loop.body if c.op is Op.WGMMA_WAIT] == pendings(nkb % U)


def test_interleave_ffma_needs_a_ring_stage_per_partial():
    cfg = Fp8GemmConfig(n=1536, k=2048, block_m=64, block_n=64, stages=3, partials=4)
    assert k_loops(stage(cfg, "interleave_ffma"))[0].get("interleave") == "skipped: needs a ring of >= 4 stages"


@pytest.mark.parametrize("block_n", [192, 160])
def test_interleave_ffma_skips_when_registers_do_not_fit(block_n):
    cfg = Fp8GemmConfig(n=1536, k=640, block_m=128, block_n=block_n, stages=3)
    k = stage(cfg, "interleave_ffma")
    loop = k_loops(k)[0]
    why = loop.get("interleave")
    # acc + part + part1 (3 x block_n/2) + sfa (0) + reserve 40 > 232
    m = re.fullmatch(r"skipped: needs (\d+) > 232 registers", why)
    assert m and int(m.group(1)) == 3 * block_n // 2 + 40
    with pytest.raises(KeyError):
        k.decl("part1")
    waits = [c for c in loop.body if c.op is Op.WGMMA_WAIT]
    assert [w.get("pending") for w in waits] == [0]
    assert _issue_count(k, Op.WGMMA) == cfg.k_blocks


@pytest.mark.parametrize("block_n,jump,reserve,switch,why", [
    (144, True, None, True, "double_buffer x4"), (136, True, None, True, "double_buffer x4"),
    (144, False, None, False, "skipped: needs 256 > 232 registers"),
    (136, True, 40, True, "skipped: needs 244 > 232 registers"),
    # by default a loop that selects and fits only without the selects' temporaries switches to jumps
    (144, False, None, True, "double_buffer x4 (promotion by jumps: selects leave no room)"),
    (136, False, None, True, "double_buffer x4 (promotion by jumps: selects leave no room)"),
    (192, False, None, True, "skipped: needs 328 > 232 registers")])     # (192: arms, and too wide anyway)
def test_interleave_ffma_leaves_room_by_the_promotion_form(block_n, jump, reserve, switch, why):
    """Promoted by indexed jumps (promote `straddle="jump"`) a tile selects nothing, and the pass
    keeps 16 registers beside the tiles instead of 40: 128x144 (216 + 16 = 232) and 128x136 are
    interleaved.  With selects they are not, unless the pass switches the loop's promotion to jumps,
    which it does by default where that alone makes the loop fit (spec 297: 0.90-0.95x the time)."""
    from dgir.passes.interleave_ffma import InterleaveFfma
    from dgir.passes.promote_scales import PromoteScales
    cfg = Fp8GemmConfig(n=1536, k=640, block_m=128, block_n=block_n, stages=3)
    passes = [PromoteScales(jump=jump) if p.name == "promote_scales" else
              InterleaveFfma(jump_register_reserve=reserve, switch_to_jumps=switch) if p.name == "interleave_ffma" else p
              for p in pipeline("sm90a")]
    k = run_pipeline(lower(cfg), passes[:[p.name for p in passes].index("interleave_ffma") + 1])
    assert {n.get("interleave") for n in k.walk() if n.op is Op.FOR} - {None} == {why}
    forms = {n.get("straddle") for n in k.walk() if n.op is Op.PROMOTE}
    assert forms == ({"jump"} if jump or why.endswith("no room)") else {"selects"} if block_n != 192 else {"arms"})


def test_interleave_ffma_respects_a_smaller_budget():
    k = stage(DEFAULT, "schedule_mma")
    k = k.with_body([n.with_attrs(regs=160) if n.op is Op.WARPGROUP and "mma" in n.get("roles") else n
                     for n in k.body])
    out = interleave_ffma.PASS.run(k)
    assert k_loops(out)[0].get("interleave") == "skipped: needs 232 > 160 registers"


# --- allocate_smem -----------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", CONFIGS[::3], ids=cfg_id)
def test_allocate_smem(cfg):
    k = stage(cfg, "allocate_smem")
    spans = []
    for n in k.body:
        if n.op is Op.SMEM:
            off, slot = n.get("offset"), n.get("slot_bytes")
            assert slot >= n.type.nbytes
            if n.get("swizzle"):
                assert off % 1024 == 0 and slot % 1024 == 0, n     # every slot starts on a swizzle atom
            else:
                assert off % 128 == 0, n
            spans.append((off, off + slot * n.get("stages", 1), n.name))
    ch = k.decl("ab")
    spans.append((ch.get("barriers"), ch.get("barriers") + 16 * ch.get("stages"), "barriers"))
    assert ch.get("barriers") % 8 == 0
    spans.sort()
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        assert a1 <= b0, f"{an} [{a0}, {a1}) overlaps {bn} [{b0}, {b1})"
    assert k.get("smem_bytes") == spans[-1][1] + 1024     # + base alignment slack
    assert k.get("smem_bytes") <= 232448
    assert allocate_smem.PASS.run(k) == k                  # idempotent


def test_allocate_smem_places_buffers_added_by_earlier_passes():
    k = stage(DEFAULT, "allocate_smem")
    assert all(n.get("offset") is not None for n in k.body if n.op is Op.SMEM)
    # the first swizzled ring starts at 0; the (128B-swizzled) d_tile staging buffer is 1024-aligned
    # and placed with the other swizzled buffers, before the unswizzled scale ring
    assert k.decl("a_ring").get("offset") == 0
    assert k.decl("d_tile").get("swizzle") == 128 and k.decl("d_tile").get("offset") % 1024 == 0
    assert k.decl("d_tile").get("offset") < k.decl("sfa_ring").get("offset")


# --- multicast_tma ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mc,bm,bn", [("A", 256, 128), ("B", 128, 192)])
def test_multicast_tma_splits_the_shared_load(mc, bm, bn):
    from dgir.passes import multicast_tma
    from dgir.printer import print_ir
    cfg = Fp8GemmConfig(n=2048, k=1024, block_m=bm, block_n=bn, stages=3, cluster=2, multicast=mc)
    before = lower(cfg)
    after = multicast_tma.PASS.run(before)
    rows = bm if mc == "A" else bn
    assert before.decl(mc).get("box") == (128, rows) and after.decl(mc).get("box") == (128, rows // 2)
    loads = after.find(Op.TMA_LOAD)
    shared = [n for n in loads if n.args[3] == mc]
    assert len(shared) == 1 and shared[0].get("multicast") == 2 and shared[0].args[5:] == ("mc_c1", "mc_part")
    assert all(not n.get("multicast") for n in loads if n.args[3] != mc)     # the other operand: own load
    filecheck(print_ir(after), rf"""
        CHECK: %mc_part = sreg \[.*which="cluster_rank"
        CHECK-NEXT: %mc_rows = mul\(%mc_part, {rows // 2}\)
        CHECK-NEXT: %mc_c1 = add\(
        CHECK-NEXT: tma_load\(%ab, %ctr, %{mc.lower()}_ring, %{mc}, %k0, %mc_c1, %mc_part\) \[multicast=2
        CHECK: drain\(%ab, %fills\)
    """)
    assert multicast_tma.PASS.run(after) == after                     # idempotent
    plain = lower(Fp8GemmConfig(n=2048, k=1024, block_m=bm, block_n=bn, stages=3))
    assert multicast_tma.PASS.run(plain) is plain                     # no clusters: unchanged


def test_verifier_rejects_multicast_outside_a_cluster_channel():
    from dgir.passes import multicast_tma
    from dgir.verifier import VerifyError, verify
    k = multicast_tma.PASS.run(lower(Fp8GemmConfig(n=2048, k=1024, block_m=256, block_n=128, stages=3, cluster=2)))
    verify(k)
    bad = k.with_body([n.with_attrs(cluster=None) if n.op is Op.CHANNEL else n for n in k.body])
    with pytest.raises(VerifyError, match="multicast=2 into channel %ab of a 1-CTA cluster"):
        verify(bad)


# --- stage_b_scales --------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", SOME_CONFIGS, ids=cfg_id)
def test_stage_b_scales_moves_the_loads_to_the_load_role(cfg):
    from dgir.printer import print_ir
    k = stage(cfg, "stage_b_scales")
    if cfg.block_m * cfg.block_n < 128 * 128:      # small tiles keep the loads (the producer would stall)
        assert k.find(Op.LOAD_SCALE) and not k.find(Op.STAGE_SCALE) and "in the math loop" in k.get("b_scales")
        return
    assert k.get("b_scales") == "staged by the load role"
    assert not k.find(Op.LOAD_SCALE)                        # no global load left in the math role
    assert [c.args[-1] for c in region(k, "load").walk() if c.op is Op.STAGE_SCALE] == [0, 1]
    assert "sfb_ring" in k.decl("ab").args and k.decl("sfb_ring").get("stages") == cfg.stages
    filecheck(print_ir(region(k, "load")), r"""
        CHECK: %sb_row0 = div\(%n0, 128\)
        CHECK: acquire\(%ab, %ctr\)
        CHECK: stage_scale\(%ab, %ctr, %sfb_ring, %SFB, %sb_row0, %kb[l]?, 0\)
        CHECK-NEXT: stage_scale\(%ab, %ctr, %sfb_ring, %SFB, %sb_row1, %kb[l]?, 1\)
        CHECK-NEXT: commit\(%ab, %ctr\)
    """)
    filecheck(print_ir(region(k, "mma")), r"""
        CHECK: wait\(%ab, %ctr\)
        CHECK-NEXT: %sb0 = smem_scalar\(%sfb_ring, %ctr, 0\)
        CHECK-NEXT: %sb1 = smem_scalar\(%sfb_ring, %ctr, 1\)
        CHECK: release\(%ab, %ctr\)
    """)
    from dgir.passes import stage_b_scales
    assert stage_b_scales.PASS.run(k) == k                    # idempotent


def test_stage_b_scales_up_to_a_k_bound():
    """StageBScales(max_k=...): above that K the math loop keeps its B-scale loads and the kernel
    says why; at or below it the scales are staged as before.  The default has no bound."""
    from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
    from dgir.passes.stage_b_scales import PASS, StageBScales
    long_k, short_k = (lower(Fp8GemmConfig(n=1024, k=k, block_m=256, block_n=128, stages=3)) for k in (16384, 2048))
    bounded = StageBScales(max_k=8192)
    k = bounded.run(long_k)
    assert k.find(Op.LOAD_SCALE) and not k.find(Op.STAGE_SCALE) and k.get("b_scales") == "in the math loop (K 16384 > 8192)"
    assert bounded.run(short_k).get("b_scales") == "staged by the load role"
    assert PASS.run(long_k).get("b_scales") == "staged by the load role" and PASS.max_k is None


def test_short_k_loops_with_several_math_warpgroups_are_not_interleaved():
    """interleave_ffma leaves k-loops of fewer than min_k_blocks K blocks alone when other math
    warpgroups cover a promotion (overlap_epilogue then applies); one math warpgroup always gets it."""
    from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
    from dgir.pipeline import pipeline, run_pipeline

    def decisions(**kw):
        k = run_pipeline(lower(Fp8GemmConfig(n=1024, stages=4, **kw)), pipeline("sm90a"))
        return [n.get("interleave") for n in k.walk() if n.op is Op.FOR and n.get("interleave")], \
            [n.get("overlap_epilogue") for n in k.walk() if n.op is Op.FOR and n.get("overlap_epilogue")]

    inter, ovl = decisions(k=512, block_m=128, block_n=128)
    assert inter == ["skipped: 4 K blocks < 5 with 2 math warpgroups"] and ovl == ["next tile's first wgmma"]
    inter, ovl = decisions(k=640, block_m=128, block_n=128)          # 5 K blocks: interleaved
    assert inter[0].startswith("double_buffer") and ovl[0].startswith("skipped")
    inter, _ = decisions(k=512, block_m=64, block_n=128)             # one math warpgroup: interleaved
    assert inter[0].startswith("double_buffer")


# --- programmatic_dependent_launch ---------------------------------------------------------------------
PDL_CONFIGS = [DEFAULT,
               Fp8GemmConfig(n=2112, k=7168, block_m=64, block_n=64, stages=8, split_k=4),
               Fp8GemmConfig(n=576, k=7168, block_m=64, block_n=32, stages=6, split_k=8, split_reduce="cluster",
                             ctas_per_sm=2),
               Fp8GemmConfig(n=7168, k=16384, block_m=256, block_n=128, stages=3, cluster=2),
               Fp8GemmConfig(n=7168, k=2048, block_m=128, block_n=128, stages=5, stream_k=True),
               Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=64, stages=10, epilogue="direct")]
# a PTX instruction that reads or writes global memory (cvta only converts an address)
GLOBAL_INSN = re.compile(r"^\s*(@!?%\w+\s+)?(?!cvta)[a-z][\w.:]*\.global\b", re.M)


@pytest.mark.parametrize("cfg", PDL_CONFIGS, ids=cfg_id)
def test_programmatic_dependent_launch_waits_before_every_global_access(cfg):
    """In the PTX of each warpgroup region, griddepcontrol.wait comes before the first instruction
    that touches global memory; the load role lets the next grid launch once, after its loads."""
    from dgir.emitters.ptx.emit import emit_ptx
    k = final(cfg)
    assert k.get("pdl") is True
    ptx = emit_ptx(k)
    starts = [m.start() for m in re.finditer(r"^WG_\w+:", ptx, re.M)]
    assert len(starts) == 2
    for a, b in zip(starts, starts[1:] + [len(ptx)]):
        seg = ptx[a:b]
        first = GLOBAL_INSN.search(seg)
        assert first is not None, seg[:40]
        assert seg.count("griddepcontrol.wait;") == 1 and seg.index("griddepcontrol.wait;") < first.start(), seg[:40]
    load = ptx[starts[0]:starts[1]]
    assert load.startswith("WG_LOAD") and load.count("griddepcontrol.launch_dependents;") == 1
    last_load = max(m.start() for m in re.finditer(r"cp\.async\.bulk\.tensor", load))
    assert load.index("griddepcontrol.launch_dependents;") > last_load
    assert ptx.count("griddepcontrol.launch_dependents;") == 1


def test_programmatic_dependent_launch_is_idempotent_and_keeps_prefetches_first():
    from dgir.passes.programmatic_dependent_launch import PASS as pdl
    k = stage(DEFAULT, "programmatic_dependent_launch")
    assert pdl.run(k) == k
    load = region(k, "load")
    assert [n.op for n in load.body[:5]] == [Op.PREFETCH_TMAP] * 4 + [Op.GRID_WAIT]
    assert region(k, "mma").body[0].op is Op.GRID_WAIT
    assert load.body[-1].op is Op.LAUNCH_DEPENDENTS or load.body[-2].op is Op.LAUNCH_DEPENDENTS


def test_verifier_rejects_a_global_access_before_grid_wait():
    from dgir.verifier import VerifyError, verify
    k = final(DEFAULT)
    load = region(k, "load")
    body = [n for n in load.body if n.op is not Op.GRID_WAIT]
    at = max(i for i, n in enumerate(body) if n.op is Op.FOR) + 1
    moved = k.with_body([r.with_body(body[:at] + [Node(Op.GRID_WAIT, "", (), None, {"role": "load"})] + body[at:])
                         if r is load else r for r in k.body])
    with pytest.raises(VerifyError, match="tma_load touches global memory before the region's grid_wait"):
        verify(moved)
    verify(k)


def test_no_work_ablation_keeps_only_the_prologue():
    """bench's NoWork (step 58): regions emptied, same launch; with smem_bytes no barrier is
    initialised past the smaller allocation."""
    NoWork = bench_module("ablations").NoWork

    from dgir.emitters.ptx.emit import emit_ptx
    from dgir.verifier import verify
    cfg = PDL_CONFIGS[2]                                   # a cluster split-K kernel: exchange barriers too
    k = final(cfg)
    empty, small = NoWork().run(k), NoWork(smem_bytes=2048).run(k)
    for e in (empty, small):
        verify(e)
        ptx = emit_ptx(e)
        assert not GLOBAL_INSN.search(ptx) and "wgmma" not in ptx
        assert "barrier.cluster.wait" in ptx                 # the cluster's prologue stays
    assert empty.get("smem_bytes") == k.get("smem_bytes") and emit_ptx(empty).count("mbarrier.init") > 0
    assert small.get("smem_bytes") == 2048 and "mbarrier.init" not in emit_ptx(small)


@pytest.mark.parametrize("cfg,m", [
    (Fp8GemmConfig(n=112, k=512, block_m=128, block_n=56, stages=3, num_sms=2), 100),           # boxes fit M
    (Fp8GemmConfig(n=256, k=512, block_m=128, block_n=128, stages=3, cluster=2, multicast="A", num_sms=2), 256)])
def test_drop_operand_loads_keeps_the_barrier_protocol(cfg, m):
    """bench's DropOperandLoads (step 115, timing only): the dropped operand's boxes leave the slot's
    expected bytes (else the full barrier would wait forever).  The interpreter sizes each fill from
    the loads left, as the emitter's expect_tx does, and runs to the end; the PTX has one TMA load
    fewer per operand, and the cluster kernel's constant expect_tx drops by exactly those boxes."""
    import torch

    from dgir.gpu_run import fp8_inputs, kernel_tensors
    from dgir.pipeline import run_pipeline
    ablations = bench_module("ablations")
    A, sfa, B, sfb, _ = fp8_inputs(m, cfg.n, cfg.k, torch.device("cpu"), 0)
    ins = kernel_tensors(A, sfa, B, sfb, torch.empty(m, cfg.n, dtype=torch.bfloat16))
    from dgir.emitters.ptx.emit import emit_ptx
    loads = emit_ptx(final(cfg)).count("cp.async.bulk.tensor.2d.shared::cluster.global")
    for params in (("A",), ("A", "B")):
        kern = run_pipeline(lower(cfg), ablations.pipeline_with() + [ablations.DropOperandLoads(params)])
        assert not any(n.op is Op.TMA_LOAD and n.args[3] in params for n in kern.walk())
        assert emit_ptx(kern).count("cp.async.bulk.tensor.2d.shared::cluster.global") == loads - len(params)
        out = interpret_as_launched(kern, m, ins)
        assert out["D"].shape == (m, cfg.n)
        if cfg.cluster > 1:     # 128x128 tile: A 16 KB, B 16 KB, SFA 512 B a slot
            tx = set(re.findall(r"expect_tx\.shared::cta\.b64 _, \[[^\]]+\], (\d+);", emit_ptx(kern)))
            assert tx == {str(16384 * (2 - len(params)) + 512)}, tx


# --- hint_l2_eviction ------------------------------------------------------------------------------------
BIG_B = Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=64, stages=10)       # B 28 MiB: hinted


def test_hint_l2_eviction_marks_only_a_large_b_and_only_at_small_m():
    from dgir.emitters.ptx.emit import emit_ptx
    k = stage(BIG_B, "hint_l2_eviction")
    loads = k.find(Op.TMA_LOAD)
    marked = [n for n in loads if n.get("l2")]
    assert marked and all(n.args[3] == "B" and n.get("l2") == "evict_first" and n.get("l2_if") == "b_streams"
                          for n in marked)
    assert all(n.get("l2") is None for n in loads if n.args[3] != "B")            # A and SFA keep the normal policy
    load = region(k, "load")
    names = [n.name for n in load.body]
    assert names.index("M") < names.index("b_stream_limit") < names.index("b_streams")
    limit = next(n for n in load.body if n.name == "b_stream_limit")
    assert limit.get("value") == 2 * 64 + 1 and k.get("l2_hint") == "evict_first while M < 129"
    wide = stage(Fp8GemmConfig(n=4096, k=7168, block_m=256, block_n=128, stages=3, cluster=2), "hint_l2_eviction")
    assert wide.get("l2_hint") == "evict_first while M < 257"                    # capped at M = 256
    ptx = emit_ptx(final(BIG_B))
    assert "createpolicy.fractional.L2::evict_first.b64" in ptx and "evict_normal" not in ptx
    # the hinted load while the predicate holds, the plain one otherwise (not an evict_normal policy)
    hinted = re.findall(r"^\s*@(%p\d+) cp\.async\.bulk\.tensor\S*\.L2::cache_hint .*$", ptx, re.M)
    plain = re.findall(r"^\s*@!(%p\d+) cp\.async\.bulk\.tensor\S*complete_tx::bytes \[.*\], \[%rd\d+, \{.*\}\], \[%r\d+\];$",
                       ptx, re.M)
    assert len(hinted) == 1 and plain == hinted
    small = stage(DEFAULT, "hint_l2_eviction")                                        # B 0.35 MiB
    assert not any(n.get("l2") for n in small.find(Op.TMA_LOAD))
    assert small.get("l2_hint").startswith("skipped: 0.4 MiB streamed")
    assert "cache_hint" not in emit_ptx(final(DEFAULT))


def test_hint_l2_eviction_is_idempotent_and_changes_no_result():
    from dgir.interp import fp8_gemm_inputs, run_kernel
    from dgir.passes.hint_l2_eviction import PASS, HintL2Eviction
    k = stage(BIG_B, "hint_l2_eviction")
    assert PASS.run(k) == k
    plain = final(DEFAULT)
    hinted = HintL2Eviction(min_bytes=0).run(plain)
    assert sum(1 for n in hinted.find(Op.TMA_LOAD) if n.get("l2")) > 0
    ins = fp8_gemm_inputs(130, 576, 640, seed=5)
    a, b = run_kernel(plain, ins, seed=1)["D"], run_kernel(hinted, ins, seed=1)["D"]
    assert torch.isfinite(a.float()).all() and torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_verifier_checks_the_l2_hint():
    from dgir.verifier import VerifyError, verify
    k = final(BIG_B)
    bad = edit(k, lambda n: n.op is Op.TMA_LOAD and n.get("l2"), lambda n: n.with_attrs(l2="evict_sometimes"))
    with pytest.raises(VerifyError, match="not an L2 eviction priority"):
        verify(bad)
    bad = edit(k, lambda n: n.op is Op.TMA_LOAD and n.get("l2"), lambda n: n.with_attrs(l2_if="nowhere"))
    with pytest.raises(VerifyError, match="l2_if=%nowhere is not defined here"):
        verify(bad)


def test_tma_store_carries_an_l2_policy_when_asked():
    """The emitter's l2 attr on tma_store (bench ablation HintStores, step 62)."""
    HintStores = bench_module("ablations").HintStores

    from dgir.emitters.ptx.emit import emit_ptx
    from dgir.verifier import VerifyError, verify
    k = HintStores().run(final(DEFAULT))
    verify(k)
    ptx = emit_ptx(k)
    stores = re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.bulk_group\S* .*", ptx)
    assert stores and all(".L2::cache_hint" in s and s.rstrip(";").split(", ")[-1].startswith("%rd") for s in stores)
    assert "createpolicy.fractional.L2::evict_first.b64" in ptx
    assert "bulk_group.L2::cache_hint" not in emit_ptx(final(DEFAULT))
    with pytest.raises(VerifyError, match="not an L2 eviction priority"):
        verify(HintStores("evict_often").run(final(DEFAULT)))
