"""Tuning experiments: time hand-picked configs and pass variants of fp8_gemm_nt side by side.

    python bench/experiments.py --out exp.json  "4096,7168,2048:bm=128,bn=128,s=5:noint" ...

A spec is "M,N,K:config:variant".  Config keys (Fp8GemmConfig fields): bm, bn, s (stages), g (swizzle
group), sk (split_k), sr=cl (split_reduce="cluster"), ep (epilogue), cl (cluster and shared operand,
e.g. 2A), o (ctas_per_sm), mo (math order suffix: alt, pp), stk=1 (stream_k), pr=rs (promotion
"rescaled"), stg=ring (staging: D staged in a ring slot), mt=sh / mt=au (m_tail "shift" / "auto"; default "fill"), ee=staging / ee=off (early_epilogue), p (partials: 3, 4), so=il (split_order "interleaved"), rf (refill_slots: 2, 4), sms (num_sms: the persistent grid's SM
count); an empty config is the API's choice.  Variants: VARIANTS below; suffixes "+sass" (the SASS FFMA patch) and "+trace" (the
trace_timeline pass, with timeline() in the row), e.g. "early+trace".
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from ablations import (CeilingNoPromotion, DetachedPromotion, DropOperandLoads, HintStores, InterleaveUnroll8,  # noqa: E402
                       NoEpilogue, NoStageOut, NoWork, RescaleCost, ScaleAtEnd, UnitBScales, pipeline_with)
from common import calc_diff, cublas_fp8_gemm, do_bench, header, write  # noqa: E402

from dgir import deep_gemm  # noqa: E402
from dgir.gpu_run import fp8_inputs, kernel_tensors  # noqa: E402
from dgir.ops.fp8_gemm import MATH_ORDERS, Fp8GemmConfig, kernel_grid  # noqa: E402
from dgir.passes.hoist_wait_arithmetic import HoistWaitArithmetic  # noqa: E402
from dgir.passes.interleave_ffma import InterleaveFfma  # noqa: E402
from dgir.passes.overlap_epilogue import OverlapEpilogue  # noqa: E402
from dgir.passes.group_tma_issue import GroupTmaIssue  # noqa: E402
from dgir.passes.prefetch_tma_descriptors import PrefetchTmaDescriptors  # noqa: E402
from dgir.passes.prefetch_first_stages import PrefetchFirstStages  # noqa: E402
from dgir.passes.prefetch_to_l2 import PrefetchToL2  # noqa: E402
from dgir.passes.promote_scales import PromoteScales  # noqa: E402
from dgir.passes.schedule_mma import ScheduleMma  # noqa: E402
from dgir.passes.stage_b_scales import StageBScales  # noqa: E402
from dgir.passes.stage_first_wave_early import StageFirstWaveEarly  # noqa: E402
from dgir.passes.uniform_warpgroup_index import UniformWarpgroupIndex  # noqa: E402

VARIANTS = {
    "default": lambda: None,
    "noint": lambda: pipeline_with(drop=("interleave_ffma", "schedule_mma")),
    "nopref": lambda: pipeline_with(drop=("prefetch_tma_descriptors",)),
    "unroll8": lambda: pipeline_with({"interleave_ffma": InterleaveUnroll8()}),
    "noovl": lambda: pipeline_with(drop=("overlap_epilogue",)),   # epilogue not overlapped
    "ovl1": lambda: pipeline_with({"overlap_epilogue": OverlapEpilogue(whole_block=False)}),   # only the next wgmma
    "woven": lambda: pipeline_with({"overlap_epilogue": OverlapEpilogue(whole_block=True)}),   # next K block + epilogue
    # k-loops of < 5 (13) K blocks not interleaved with >= 2 math warpgroups (shortk4 = the default
    # since step 52), so overlap_epilogue applies (shallow / woven); "int4": every k-loop interleaved
    "int4": lambda: pipeline_with({"interleave_ffma": InterleaveFfma(min_k_blocks=0)}),
    "shortk4": lambda: pipeline_with({"interleave_ffma": InterleaveFfma(min_k_blocks=5)}),
    "shortk4w": lambda: pipeline_with({"interleave_ffma": InterleaveFfma(min_k_blocks=5),
                                       "overlap_epilogue": OverlapEpilogue(whole_block=True)}),
    "shortk12": lambda: pipeline_with({"interleave_ffma": InterleaveFfma(min_k_blocks=13)}),
    "shortk16": lambda: pipeline_with({"interleave_ffma": InterleaveFfma(min_k_blocks=17)}),
    "shortk12w": lambda: pipeline_with({"interleave_ffma": InterleaveFfma(min_k_blocks=13),
                                        "overlap_epilogue": OverlapEpilogue(whole_block=True)}),
    "nomc": lambda: pipeline_with(drop=("multicast_tma",)),     # cluster tile order, no multicast
    "unit_sfb": lambda: [UnitBScales()] + pipeline_with(),       # B-scale loads -> 1.0 (timing only)
    "nostage": lambda: pipeline_with(drop=("stage_b_scales",)),  # B scales loaded by the math loop
    # every kernel's refills grouped, whatever its config's refill_slots (steps 27, 131)
    "paired": lambda: pipeline_with({"group_tma_issue": GroupTmaIssue(slots=2)}),
    "quad": lambda: pipeline_with({"group_tma_issue": GroupTmaIssue(slots=4)}),   # 512 B of each row
    # the first tile's first K blocks prefetched to L2 from the kernel's entry (step 131)
    "entrypf": lambda: pipeline_with(after={"multicast_tma": PrefetchFirstStages()}),
    # stage_first_wave_early (specs 190-197): early0 = staging only, at any K; early0st = staging and store up
    # to MAX_K_BLOCKS (the default pass); earlyall = staging and store at any K; noearly = without the pass
    "early0": lambda: pipeline_with({"stage_first_wave_early": StageFirstWaveEarly(max_k_blocks=10**6, store_early=False)}),
    "early0st": lambda: pipeline_with({"stage_first_wave_early": StageFirstWaveEarly(store_early=True)}),
    "earlyall": lambda: pipeline_with({"stage_first_wave_early": StageFirstWaveEarly(max_k_blocks=10**6)}),
    "noearly": lambda: pipeline_with(drop=("stage_first_wave_early",)),
    # step 101: wave 0's fence, barrier and TMA store right after wave 1's last wgmma retired
    "earlyret": lambda: pipeline_with({"stage_first_wave_early": StageFirstWaveEarly(store_early="after_retire")}),
    "sfb_async": lambda: pipeline_with({"stage_b_scales": StageBScales(async_copy=True, min_tile=0)}),
    "cublas": lambda: None,            # torch._scaled_mm on the same inputs (the config part is ignored)
    "trace": lambda: None,             # = default+trace: per-CTA milestone timestamps (timeline()); any
                                       # variant takes the suffix "+trace"
    # step 53's prologue: tensor maps prefetched at kernel entry by the barrier-initialising thread,
    # and a .relaxed cluster arrive (emitter knob below); "relaxed": only the arrive.  (Spec 94 ran
    # while these were the default, as variants "late" / "release" of the form before.)
    "early": lambda: pipeline_with({"prefetch_tma_descriptors": PrefetchTmaDescriptors(at_entry=True)}),
    "relaxed": lambda: None,
    "floor": lambda: None,             # a one-element torch kernel: what the timer reports for no work
    "copyB": lambda: None,             # torch copy of B's bytes: what a plain copy of this traffic takes
    # default passes, emitter settings changed (EMITTER_KNOBS below)
    "divgeneric": lambda: None, "desc32": lambda: None, "desccompact": lambda: None, "st32": lambda: None, "loadfirst": lambda: None, "loopmul": lambda: None, "loopdiv": lambda: None,
    # straddling tiles' promotion (promote_scales decides, step 120): one branch arm per split column
    # for up to 8 / 4 / 16 columns; indexed jumps where there are more than 4 (instead of per-group
    # selects), and with no arms at all
    "arms8": lambda: pipeline_with({"promote_scales": PromoteScales(max_arms=8)}),
    "arms4": lambda: pipeline_with({"promote_scales": PromoteScales(max_arms=4)}),
    "arms16": lambda: pipeline_with({"promote_scales": PromoteScales(max_arms=16)}),
    "jump": lambda: pipeline_with({"promote_scales": PromoteScales(jump=True)}),
    # the default before step 121: every tile beyond the arms selects (but interleave_ffma's switch)
    "nojump": lambda: pipeline_with({"promote_scales": PromoteScales(jump=False)}),
    "jumpall": lambda: pipeline_with({"promote_scales": PromoteScales(jump=True, max_arms=0)}),
    # jumps without the room they leave for the double-buffered partial (interleave_ffma's reserve as
    # for selects): what the fewer instructions alone do at 128x136 / 128x144 / 192x88
    "jumpnoil": lambda: pipeline_with({"promote_scales": PromoteScales(jump=True),
                                       "interleave_ffma": InterleaveFfma(jump_register_reserve=40)}),
    # the default before step 120's switch: a selecting loop that does not fit stays unswitched and
    # uninterleaved (128x136, 128x144, 192x88)
    "noswitch": lambda: pipeline_with({"interleave_ffma": InterleaveFfma(switch_to_jumps=False)}),
    # step 121: the next K block's ring wait issued before the current retire (schedule_mma
    # waits_ahead), where the ring holds a slot more than the blocks in flight
    "waitahead": lambda: pipeline_with({"schedule_mma": ScheduleMma(waits_ahead=True)}),
    # ... together with the promotion by jumps at the select widths
    "waitjump": lambda: pipeline_with({"schedule_mma": ScheduleMma(waits_ahead=True),
                                       "promote_scales": PromoteScales(jump=True)}),
    "suspend": lambda: None, "suspend1us": lambda: None,
    "head250": lambda: None, "head500": lambda: None, "head1000": lambda: None,
    "wguni": lambda: pipeline_with({"uniform_warpgroup_index": UniformWarpgroupIndex(force=True)}),   # every kernel
    "nowguni": lambda: pipeline_with(drop=("uniform_warpgroup_index",)),   # no kernel (spec 48-49's default)
    # slot arithmetic in front of the barrier waits (pass hoist_wait_arithmetic, steps 66-68): every
    # kernel / none (specs 124-127 ran these as emitter settings, before the pass decided per kernel)
    "hoist": lambda: pipeline_with({"hoist_wait_arithmetic": HoistWaitArithmetic(force=True)}),
    "nohoist": lambda: pipeline_with({"hoist_wait_arithmetic": HoistWaitArithmetic(force=False)}),
    "pingpong": lambda: None,          # = config math_order="alternate" (spec key mo=alt), kept for spec 17
    "ceiling": lambda: pipeline_with({"promote_scales": CeilingNoPromotion()}),
    "detached": lambda: pipeline_with({"promote_scales": DetachedPromotion()}),   # step 74
    "scale_at_end": lambda: pipeline_with({"promote_scales": ScaleAtEnd()}),
    # step 64: one FMUL per accumulator per K block onto the tensor-core accumulator, no partial
    "rescale_cost": lambda: pipeline_with({"promote_scales": RescaleCost()}),
    "nostageout": lambda: pipeline_with(after={"overlap_epilogue": NoStageOut()}),   # timing only
    "noepilogue": lambda: pipeline_with(after={"overlap_epilogue": NoEpilogue()}),   # timing only
    # programmatic dependent launch (step 57): "nopdl" - kernels without griddepcontrol (what the
    # instructions cost a plain launch); "pdl" - the default kernel launched with the PDL attribute
    "nopdl": lambda: pipeline_with(drop=("programmatic_dependent_launch",)),
    # B's TMA loads without the L2 evict-first policy (step 61)
    "nohint": lambda: pipeline_with(drop=("hint_l2_eviction",)),
    # D's TMA stores with the evict-first / evict-last policy (step 62)
    "st_first": lambda: pipeline_with(after={"hint_l2_eviction": HintStores("evict_first")}),
    "st_last": lambda: pipeline_with(after={"hint_l2_eviction": HintStores("evict_last")}),
    "pdl": lambda: None,
    # the launch configuration alone (step 58): regions emptied, same grid / cluster / smem ("nowork")
    # or 2 KB of shared memory ("nowork_smem")
    "nowork": lambda: pipeline_with() + [NoWork()],
    "nowork_smem": lambda: pipeline_with() + [NoWork(smem_bytes=2048)],
    # operand traffic (step 115): the load role skips A's (L2: re-read per N tile), B's (DRAM) or both
    # TMA loads; timing only (the slots keep stale shared memory)
    "noA": lambda: pipeline_with() + [DropOperandLoads(("A",))],
    "noB": lambda: pipeline_with() + [DropOperandLoads(("B",))],
    "noAB": lambda: pipeline_with() + [DropOperandLoads(("A", "B"))],
    # B's boxes prefetched to L2 that many K blocks ahead of the load issue (step 122; "all": the
    # CTA's whole panel before its K loop), "h": with B's L2 evict-first policy, "ab": A's too
    **{f"l2pf{d}": (lambda d=d: pipeline_with(after={"hint_l2_eviction": PrefetchToL2(distance=d)})) for d in (4, 8, 16, 32)},
    "l2pfall": lambda: pipeline_with(after={"hint_l2_eviction": PrefetchToL2(distance=1 << 16)}),
    "l2pf16h": lambda: pipeline_with(after={"hint_l2_eviction": PrefetchToL2(distance=16, hinted=True)}),
    "l2pfallh": lambda: pipeline_with(after={"hint_l2_eviction": PrefetchToL2(distance=1 << 16, hinted=True)}),
    "l2pf16ab": lambda: pipeline_with(after={"hint_l2_eviction": PrefetchToL2(distance=16, params=("A", "B"))}),
}


def sustained_clocks(run, seconds=1.5) -> dict:
    """Median SM clock (MHz) and board power (W) that nvidia-smi samples every 50 ms while `run` is
    launched back to back for `seconds`: FP8 GEMMs on the H200 are power-limited, so two kernels of
    equal work can run at different clocks."""
    import statistics
    import subprocess
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(20):
            run()
        torch.cuda.synchronize()
    smi.terminate()
    samples = [tuple(map(float, line.split(","))) for line in smi.communicate()[0].splitlines()
               if line.count(",") == 1 and "N/A" not in line]
    samples = samples[len(samples) // 4:]          # drop the ramp
    if not samples:
        return {}
    return {"sm_mhz": statistics.median(c for c, _ in samples), "power_w": statistics.median(p for _, p in samples)}


def emitter_knob(module: str, **values):
    """A/B of an emitter setting: while active, `module`'s attributes take these values (restored
    afterwards).  The PTX differs, so the kernel cache keeps both builds apart."""
    import importlib
    from unittest import mock
    return mock.patch.multiple(importlib.import_module(module), **values)


# variant -> the emitter settings it times (with the default passes)
EMITTER_KNOBS = {
    # division and remainder by constants as plain div.u32 / rem.u32 (ptxas: a MUFU.RCP sequence)
    "divgeneric": lambda: emitter_knob("dgir.emitters.ptx.emit",
                                       emit_udiv=lambda b, d, x, c: b(f"div.u32 {d}, {x}, {c};"),
                                       emit_urem=lambda b, d, x, c: b(f"rem.u32 {d}, {x}, {c};")),
    # the wgmma descriptors' K steps by a 32-bit add on the low word instead of a 64-bit add
    "desc32": lambda: emitter_knob("dgir.emitters.ptx.mma", DESC_LOW_WORD_STEPS=True),
    # the wgmma descriptors' low word as the start address >> 4 alone (no mask, LBO 0)
    "desccompact": lambda: emitter_knob("dgir.emitters.ptx.mma", DESC_COMPACT=True),
    # the 128B-swizzled staging tile written by one st.shared.b32 per register pair, not stmatrix
    "st32": lambda: emitter_knob("dgir.emitters.ptx.epilogue", STAGE_WITH_STMATRIX=False),
    "early": lambda: emitter_knob("dgir.emitters.ptx.emit", CLUSTER_ARRIVE=".relaxed"),
    "relaxed": lambda: emitter_knob("dgir.emitters.ptx.emit", CLUSTER_ARRIVE=".relaxed"),
    # the load region as the dispatch's fall-through, laid out by ptxas right after the entry (step 65;
    # spec 123 ran while this was the default, as variant "loadlast" of the form before)
    "loadfirst": lambda: emitter_knob("dgir.emitters.ptx.emit", LOAD_REGION_FALLS_THROUGH=True),
    # the persistent loops' bound as i * g < a (the default since step 70; spec 131 ran it as a
    # variant) / as i < ceildiv(a, g), the form before
    "loopmul": lambda: emitter_knob("dgir.emitters.ptx.emit", LOOP_BOUND_WITHOUT_DIVISION=True),
    "loopdiv": lambda: emitter_knob("dgir.emitters.ptx.emit", LOOP_BOUND_WITHOUT_DIVISION=False),
    # the barrier waits with a suspend-time hint: CUTLASS's 10 ms (a waiting warp sleeps until the
    # phase completes) / 1 us (step 105)
    "suspend": lambda: emitter_knob("dgir.emitters.ptx.emit", WAIT_SUSPEND_NS=0x989680),
    "suspend1us": lambda: emitter_knob("dgir.emitters.ptx.emit", WAIT_SUSPEND_NS=1000),
    # the first fill's head start: the load role pauses this long after it (step 129)
    "head250": lambda: emitter_knob("dgir.emitters.ptx.channels", FIRST_FILL_HEAD_START_NS=250),
    "head500": lambda: emitter_knob("dgir.emitters.ptx.channels", FIRST_FILL_HEAD_START_NS=500),
    "head1000": lambda: emitter_knob("dgir.emitters.ptx.channels", FIRST_FILL_HEAD_START_NS=1000),
}


def _trace_pass():
    from dgir.passes.trace_timeline import TraceTimeline     # here: bench/ab_revisions.sh runs this
    return TraceTimeline()                                   # script against older wheels too


def placement_summary(sms) -> dict:
    """How the driver spread the CTAs (the trace's placement event: each CTA's %smid): SMs used, and
    how many SMs ran 1, 2, 3... of them (CTAs on one SM share its tensor core and shared memory)."""
    per_sm = torch.bincount(sms.long())
    per_sm = per_sm[per_sm > 0]
    hist = torch.bincount(per_sm)
    return {"sms_used": int(per_sm.numel()),
            "sms_by_ctas": {str(c): int(hist[c]) for c in range(1, hist.numel()) if hist[c]}}


def timeline(run, trace, launches=7) -> dict:
    """Where one launch's time goes: for each milestone of trace_timeline.EVENTS, the median, max, min
    and 90th percentile over CTAs of (CTA's time there - first CTA's load_start), in us of %globaltimer, and for the
    intra-CTA spans the median over CTAs in SM cycles (%clock64).  L2 flushed before each launch as
    do_bench does; the median launch (by span) is reported."""
    flush = torch.empty(256 << 20, dtype=torch.int8, device=trace.device)
    runs = []
    for _ in range(launches):
        trace.zero_()
        flush.zero_()
        torch.cuda.synchronize()
        run()
        torch.cuda.synchronize()
        runs.append(trace.cpu())
    from dgir.passes.trace_timeline import EVENTS, PLACEMENT
    names = [e[0] for e in EVENTS]
    t0s = [r[:, 0, 0][r[:, 0, 0] > 0].min() for r in runs]
    spans = [float(r[:, names.index("mma_end"), 0].max() - t0) / 1e3 for r, t0 in zip(runs, t0s)]
    i = sorted(range(launches), key=lambda j: spans[j])[launches // 2]
    r, t0 = runs[i], t0s[i]
    out = {"span_us": spans[i], "spans_us": [round(x, 3) for x in spans]}
    for e, name in enumerate(names):
        if name == PLACEMENT:
            continue
        ns = r[:, e, 0]
        ok = ns > 0
        if ok.any():
            rel = (ns[ok] - t0).double() / 1e3
            out[f"{name}_us_med"] = round(float(rel.median()), 3)
            out[f"{name}_us_max"] = round(float(rel.max()), 3)
            out[f"{name}_us_min"] = round(float(rel.min()), 3)     # min and p90: is a slow end a few
            out[f"{name}_us_p90"] = round(float(rel.quantile(0.9)), 3)   # CTAs or all of them (step 97)
    out.update(placement_summary(r[:, names.index(PLACEMENT), 0]))
    cyc = lambda a, b: r[:, names.index(b), 1] - r[:, names.index(a), 1]  # noqa: E731
    for a, b in (("load_start", "first_acquire"), ("mma_start", "first_full"), ("first_full", "first_kloop_end"),
                 ("first_kloop_end", "tile_end"), ("first_kloop_end", "first_stored"),
                 ("last_kloop_end", "last_store_free"), ("last_store_free", "last_stored"),
                 ("mma_start", "mma_end")):
        c = cyc(a, b)
        c = c[(r[:, names.index(a), 1] > 0) & (r[:, names.index(b), 1] > 0)]
        if c.numel():
            out[f"cycles_{a}__{b}_med"] = int(c.median())
    return out


def spec_config(n: int, k: int, keys: str, sms: int, math_order: str = "together") -> Fp8GemmConfig | None:
    """The config of a spec's middle part ("bm=128,bn=96,s=5,cl=2B", keys in the module doc), None
    for an empty one (the API's choice)."""
    kw = dict(x.split("=") for x in keys.split(",") if x)
    if not kw:
        return None
    return Fp8GemmConfig(n=n, k=k, block_m=int(kw.get("bm", 128)), block_n=int(kw.get("bn", 128)),
                         stages=int(kw.get("s", 4)), swizzle_group=int(kw.get("g", 16)),
                         split_k=int(kw.get("sk", 1)), epilogue=kw.get("ep", "tma"),
                         cluster=int(kw.get("cl", "1")[0]), multicast=kw.get("cl", "1A")[1:] or "A",
                         ctas_per_sm=int(kw.get("o", 1)), split_reduce="cluster" if kw.get("sr") == "cl" else "global",
                         math_order={suffix[1:]: o for o, suffix in MATH_ORDERS.items() if suffix}.get(
                             kw.get("mo"), math_order),
                         stream_k=kw.get("stk") == "1",
                         promotion="rescaled" if kw.get("pr") == "rs" else "fp32",
                         staging=kw.get("stg", "tile"),
                         m_tail={"sh": "shift", "au": "auto"}.get(kw.get("mt"), "fill"),
                         early_epilogue=kw.get("ee", "on"), partials=int(kw.get("p", 2)),
                         split_order="interleaved" if kw.get("so") == "il" else "contiguous",
                         refill_slots=int(kw.get("rf", 1)), num_sms=int(kw.get("sms", sms)))


def run_one(spec: str, device, spread=2.0, clocks=False):
    shape, cfgs, variant = (spec.split(":") + ["", ""])[:3]
    variant = variant or "default"
    variant_base, *flags = variant.split("+")      # suffixes: +sass (the SASS FFMA patch), +trace
    sass = "sass" in flags
    traced = "trace" in flags or variant_base == "trace"
    if variant_base == "trace":                    # = default+trace (the name of specs 27-88)
        variant_base = "default"
    m, n, k = map(int, shape.split(","))
    cfg = spec_config(n, k, cfgs, torch.cuda.get_device_properties(device).multi_processor_count,
                      "alternate" if variant_base == "pingpong" else "together")
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, device, 0, spread)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
    if variant_base in ("floor", "copyB"):    # references for the small-M fixed costs (step 21)
        if variant_base == "floor":
            x = torch.zeros(1, device=device)
            run, nbytes = (lambda: x.add_(1)), 8
        else:
            y = torch.empty_like(B)
            run, nbytes = (lambda: y.copy_(B)), 2 * B.numel()
        ms = do_bench(run)
        return {"spec": spec, "variant": variant, "m": m, "n": n, "k": k, "kernel": variant_base, "ms": ms,
                "gbps": nbytes / ms / 1e6}
    if variant_base == "cublas":              # the baseline in the same conditions (clocks included)
        run = cublas_fp8_gemm(A, sfa, B, sfb)
        diff = calc_diff(run().double(), ref)
        ms = do_bench(run)
        return {"spec": spec, "variant": variant, "m": m, "n": n, "k": k, "kernel": "cublas", "diff": diff, "ms": ms,
                "tflops": 2 * m * n * k / ms / 1e9, **(sustained_clocks(run) if clocks else {})}
    knob = EMITTER_KNOBS.get(variant_base, contextlib.nullcontext)
    with knob():
        passes = VARIANTS[variant_base]()
        if traced:
            passes = (passes or pipeline_with()) + [_trace_pass()]
        kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, device, passes=passes,
                                    variant=spec, config=cfg, sass_interleave=sass)
    tensors = kernel_tensors(A, sfa, B, sfb, d, kern)
    if traced:
        ctas = kernel_grid(kern.grid_attrs, m)
        from dgir.passes.trace_timeline import EVENTS
        tensors["TRACE"] = torch.zeros((ctas, len(EVENTS), 2), dtype=torch.int64, device=device)
    plan = kern.plan(tensors, m)   # the API's warm path
    stream = torch.cuda.current_stream(device).cuda_stream
    pdl = variant_base == "pdl"
    run = lambda: plan(stream, pdl)  # noqa: E731
    run()
    torch.cuda.synchronize()
    out = d.double()
    diff = calc_diff(out, ref) if bool(torch.isfinite(out).all()) else float("nan")
    ms = do_bench(run)
    nbytes = m * k + n * k + m * n * 2 + sfa.numel() * 4 + sfb.numel() * 4
    res = kern.result
    extra = timeline(run, tensors["TRACE"]) if traced else {}
    return {**extra, "spec": spec, "variant": variant, "m": m, "n": n, "k": k, "kernel": res.name, "diff": diff, "ms": ms,
            "tflops": 2 * m * n * k / ms / 1e9, "gbps": nbytes / ms / 1e6,
            "registers": getattr(res.resources, "registers", None), "ptxas_warnings": res.warnings,
            "sass_patch": getattr(res, "sass_patch", ""), "grid_ctas": getattr(kern, "grid_attrs", {}).get("num_sms"),
            "resident_clusters": getattr(kern, "grid_attrs", {}).get("resident_clusters"),
            **(sustained_clocks(run) if clocks else {})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--spread", type=float, default=2.0)
    ap.add_argument("--clocks", action="store_true", help="also sample SM clock and power under sustained load")
    ap.add_argument("specs", nargs="+")
    args = ap.parse_args()
    device = torch.device("cuda", 0)
    doc = header(device)
    doc["rows"] = []
    for spec in args.specs:
        t0 = time.time()
        try:
            r = run_one(spec, device, args.spread, args.clocks)
        except Exception as e:
            r = {"spec": spec, "error": f"{type(e).__name__}: {str(e)[:400]}"}
        r["wall_s"] = round(time.time() - t0, 2)
        print(r, flush=True)
        doc["rows"].append(r)
        write(args.out, doc)


if __name__ == "__main__":
    main()
