"""Helpers shared by the compiler-core tests (configs, pipeline runs, IR surgery)."""
from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from pathlib import Path
from dataclasses import replace

from dgir.ir import Node, Op
from dgir.ops.fp8_gemm import Fp8GemmConfig, legal_block_ns, lower, max_stages
from dgir.pipeline import pipeline, run_pipeline


# the sm90a pipeline in order: the tests that pin it (names, dump files, events) share this one list
SM90A_PASSES = ["promote_scales", "stage_b_scales", "prefetch_tma_descriptors", "assign_registers", "schedule_mma",
                "interleave_ffma", "overlap_epilogue", "stage_first_wave_early", "stage_in_ring_slot",
                "order_wgmma_issue", "multicast_tma", "group_tma_issue", "hint_l2_eviction",
                "uniform_warpgroup_index", "hoist_wait_arithmetic", "programmatic_dependent_launch",
                "allocate_smem"]


def _configs():
    """fp8_gemm_nt configs: block_m 64/128, block_n 16..192 (incl. tiles that straddle two 128-row
    B-scale blocks: 48, 80, 96, 112, 144, 160, 192), several ring depths, K with a ragged tail."""
    out = []
    for bm in (64, 128):
        for bn in (16, 48, 64, 80, 96, 112, 128, 144, 160, 192):
            assert bn in legal_block_ns(7168)
            for stages in sorted({2, 3, max_stages(bm, bn)}):
                for n, k in ((7168, 7168), (576, 640)):
                    out.append(Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages))
    return out


CONFIGS = _configs()
# a smaller set for the slower tests (still both block_m, straddling and non-straddling block_n)
SOME_CONFIGS = [c for c in CONFIGS if c.n == 576 and c.stages == 3 and c.block_n in (16, 96, 128, 160, 192)]


def cfg_id(c: Fp8GemmConfig) -> str:
    return f"bm{c.block_m}_bn{c.block_n}_s{c.stages}_n{c.n}_k{c.k}"


@functools.lru_cache(maxsize=None)
def stages_for(cfg: Fp8GemmConfig) -> tuple:
    """[(stem, kernel)] for the lowering and every pass of the sm90a pipeline (verified each step)."""
    out = []
    run_pipeline(lower(cfg), pipeline("sm90a"), [lambda ev: out.append((ev.stem, ev.after))],
                 verify_each=True, lowering_name="lower_gemm")
    return tuple(out)


def stage(cfg: Fp8GemmConfig, name: str) -> Node:
    for stem, k in stages_for(cfg):
        if stem.split("_", 1)[1] == name:
            return k
    raise KeyError(name)


DEFAULT = Fp8GemmConfig(n=576, k=640, block_m=128, block_n=128, stages=4)


def final(cfg: Fp8GemmConfig = DEFAULT) -> Node:
    return stages_for(cfg)[-1][1]


# --- IR surgery ---------------------------------------------------------------------------
def edit(kernel: Node, pred, fn, count: int | None = 1) -> Node:
    """Apply fn to the first `count` nodes (None: all) under the kernel matching pred."""
    done = [0]

    def visit(n: Node):
        if n.body:
            body = []
            for c in n.body:
                r = visit(c)
                if r is None:
                    continue
                body.extend(r if isinstance(r, list) else [r])
            n = n.with_body(body)
        if n is not kernel and pred(n) and (count is None or done[0] < count):
            done[0] += 1
            return fn(n)
        return n

    out = visit(kernel)
    assert done[0], "edit matched nothing"
    return out


def region(kernel: Node, role: str) -> Node:
    return next(n for n in kernel.body if n.op is Op.WARPGROUP and role in n.get("roles", ()))


def k_loops(kernel: Node) -> list[Node]:
    """Loops whose body issues MMAs directly."""
    return [n for n in kernel.walk() if n.op is Op.FOR and any(c.op in (Op.WGMMA, Op.MMA_SCALED) for c in n.body)]


__all__ = ["CONFIGS", "SOME_CONFIGS", "DEFAULT", "cfg_id", "stages_for", "stage", "final", "edit", "region",
           "k_loops", "replace"]


@contextlib.contextmanager
def ascend_emu_env(cache_dir):
    """Environment for emulator runs: a private binary cache, and strict cross-core flag checking
    (flag credits must balance at kernel end); restored afterwards."""
    old = {k: os.environ.get(k) for k in ("DGIR_ASCEND_EMU_CACHE", "ASCENDC_EMU_STRICT_XFLAG")}
    os.environ["DGIR_ASCEND_EMU_CACHE"] = str(cache_dir)
    os.environ["ASCENDC_EMU_STRICT_XFLAG"] = "1"
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def bench_module(name: str):
    """A module of bench/ (research passes such as bench/ablations.py), imported by name."""
    bench = str(Path(__file__).resolve().parents[1] / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    return importlib.import_module(name)


def interpret_as_launched(kern: Node, m: int, inputs: dict, seed: int = 0, stats: dict | None = None) -> dict:
    """The CPU interpreter's outputs of one launch as the host makes it: its grid (kernel_grid) and its
    workspace (workspace_shapes: NaN-poisoned partials, zeroed tile counters) beside `inputs`
    (`stats`: run_kernel's)."""
    import torch
    from dgir.interp import run_kernel
    from dgir.ops.fp8_gemm import kernel_grid, workspace_shapes
    grid = kernel_grid(dict(kern.attrs), m)
    ins = dict(inputs)
    for name, shape in workspace_shapes(kern, m, grid).items():
        ins[name] = torch.zeros(shape, dtype=torch.int32) if name == "LOCKS" else torch.full(shape, float("nan"))
    return run_kernel(kern, ins, grid=grid, seed=seed, stats=stats)


def assert_bitwise_like_lowered(cfg, kern: Node, inputs: dict, seeds=(1, 2)) -> None:
    """A transformed kernel's D equals, bit for bit, the lowered IR's on the interpreter, under
    several interleavings (seeds) of its warpgroups."""
    import torch
    from dgir.interp import run_kernel
    ref = run_kernel(lower(cfg), {k: v.clone() for k, v in inputs.items()}, seed=0)["D"]
    for seed in seeds:
        out = run_kernel(kern, {k: v.clone() for k, v in inputs.items()}, seed=seed)["D"]
        assert torch.equal(out.view(torch.int16), ref.view(torch.int16)), seed


# --- the whole config space, sampled ------------------------------------------------------------
def random_fp8_case(rng, gpu: bool = False):
    """(m, n, k, cfg): every knob of Fp8GemmConfig drawn at random and jointly (tile, ring depth,
    split-K and its reduction, clusters and the multicast operand, two CTAs per SM, math order,
    epilogue, stream-K, promotion, staging, the m tail, persistent grid size, tile-order band, how SFA
    is read, 128-row cluster splits, the early epilogue of two-wave tiles, the partials in flight, the split's
    K order, the refills grouped), with a shape
    that fits the config's constraints and has ragged edges: M not a multiple of BLOCK_M, an N tail,
    a K tail.  Drawn until check_config accepts it (each knob's own tests cover the rejections).
    gpu=False keeps shapes small enough for the CPU interpreter; gpu=True draws DeepGEMM-sized K
    and the H200's grid (sometimes a partial one, so that tiles take several rounds)."""
    from dgir.ops.fp8_gemm import max_stages_for, ring_staging_panels
    from dgir.ops.fp8_gemm_config import refill_ring_slots
    while True:
        bm = rng.choice([64, 64, 128, 128, 192, 256])
        bn = rng.choice([rng.choice([16, 32, 64, 96, 128, 144, 160, 192]), 8 * rng.randint(1, 32)])
        cluster = rng.choice([1, 1, 1, 2, 2, 4])
        multicast = rng.choice("AB")
        stream_k = rng.random() < 0.08
        split_k = 1 if cluster > 1 or stream_k or rng.random() < 0.55 else rng.choice([2, 3, 4, 7, 8])
        split_reduce = rng.choice(["global", "cluster"])
        if split_reduce == "cluster" and split_k > 1:
            bm = 64
        occ = 2 if bm == 64 and cluster == 1 and rng.random() < 0.35 else 1
        epilogue = "direct" if not stream_k and cluster == 1 and rng.random() < 0.15 else "tma"
        staging = "ring" if (split_k == 1 and epilogue == "tma" and not stream_k and bm <= 128
                             and ring_staging_panels(bm, bn) is not None and rng.random() < 0.25) else "tile"
        promotion = "rescaled" if rng.random() < 0.12 else "fp32"
        m_tail = rng.choice(["auto", "auto", "fill", "shift"])
        order = rng.choice(["together", "together", "alternate", "pingpong"]) if bm >= 128 else "together"
        kb = split_k * rng.randint(1, (56 if gpu else 6) // split_k or 1)
        k = 128 * kb - rng.choice([0, 0, 0, 16 * rng.randint(1, 7)])
        n_blocks = rng.randint(1, 24 if gpu else 3) * (cluster if multicast == "A" else 1)
        n = (n_blocks - 1) * bn + 8 * rng.randint(1, bn // 8)
        m = rng.choice([1, 17, bm - 1, bm + 1, rng.randint(1, (12 if gpu else 3) * bm)])
        m = max(1, m)
        sms = rng.choice([132, 132, 132, 16, 66]) if gpu else rng.choice([1, 2, 3, 8])
        sms -= sms % cluster
        cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=1,
                            num_sms=max(sms, cluster), swizzle_group=rng.choice([1, 2, 16]), split_k=split_k,
                            epilogue=epilogue, cluster=cluster, multicast=multicast, ctas_per_sm=occ,
                            split_reduce=split_reduce, math_order=order, stream_k=stream_k,
                            promotion=promotion, staging=staging, m_tail=m_tail)
        most = max_stages_for(cfg)      # the ring that fits beside the config's other buffers
        if most < 1:
            continue
        cfg = replace(cfg, stages=rng.randint(min(2, most), most))
        if _rejected(cfg):
            continue
        # drawn last, so the cases drawn before these knobs existed keep every other knob
        cfg = replace(cfg, sfa_major=rng.choice(["mn", "mn", "k"]))
        if cfg.split_cluster and rng.random() < 0.5:
            # a 128-row tile's slices: each math warpgroup exchanges its own fragment (step 116)
            tall = replace(cfg, block_m=128)
            tall = replace(tall, stages=min(tall.stages, max_stages_for(tall)))
            if not _rejected(tall):
                cfg = tall
        if cfg.waves > 1:       # the API settles it per call; draw every form
            cfg = replace(cfg, early_epilogue=rng.choice(["on", "staging", "off"]))
        cfg = replace(cfg, partials=rng.choice([2, 2, 3, 4]))
        # the split's K order from the shape, not from rng: the cases drawn before it existed stay the same
        if cfg.split_k > 1 and (m + n + k) % 3 == 0:
            cfg = replace(cfg, split_order="interleaved")
        # the refills grouped (two or four ring slots together), likewise from the shape
        group = {1: 2, 2: 4}.get((m + 2 * n + 3 * k) % 7, 1)
        if group > 1 and cfg.stages >= refill_ring_slots(group, cfg.partials, cfg.staging == "ring"):
            cfg = replace(cfg, refill_slots=group)
        return m, n, k, cfg


def _rejected(cfg) -> bool:
    """check_config refuses it (each knob's own tests cover the rejections)."""
    from dgir.ops.fp8_gemm import OpError, check_config
    try:
        check_config(cfg)
    except OpError:
        return True
    return False


def _interpret_checked(kern, m, inputs, seed):
    """D from one launch as the host makes it; the split-K tile counters must be back at zero."""
    out = interpret_as_launched(kern, m, inputs, seed)
    if "LOCKS" in out:
        assert int(out["LOCKS"].abs().sum()) == 0, "tile counters not reset"
    return out["D"]


def check_sampled_case(m, n, k, cfg, assemble_ptx: bool = False) -> None:
    """One sampled case on the CPU: the sm90a pipeline with the verifier after every pass; the lowered
    IR (from promote_scales on for the rescaled promotion, which changes the arithmetic there) and the
    final IR on the interpreter, as the host launches them, on fresh random inputs (the seed is in
    the failure message): finite, close to the float64 reference, bitwise equal to each other; the
    PTX emitted and, with `assemble_ptx`, assembled by ptxas."""
    import os

    import torch
    from dgir.emitters.ptx import emit_ptx
    from dgir.interp import calc_diff, fp8_gemm_inputs, fp8_gemm_reference
    stages = []     # the sampler's ring depth is within max_stages_for: the allocator must agree
    run_pipeline(lower(cfg), pipeline("sm90a"), [lambda ev: stages.append(ev.after)], verify_each=True)
    first = next(i for i, k in enumerate(stages) if any(n.op is Op.RESCALE for n in k.walk())) \
        if cfg.promotion == "rescaled" else 0
    seed = int.from_bytes(os.urandom(4), "little")
    inputs = fp8_gemm_inputs(m, n, k, seed=seed)
    ref = fp8_gemm_reference(inputs["A"], inputs["B"], inputs["SFA"], inputs["SFB"])
    if cfg.sfa_major == "k":     # the kernel reads the caller's [M, K/128] row-major scales
        inputs["SFA"] = inputs["SFA"][:, :m].t().contiguous()
    base = _interpret_checked(stages[first], m, inputs, seed=1)
    d = _interpret_checked(stages[-1], m, inputs, seed=2)
    assert torch.isfinite(d).all(), f"unwritten elements (input seed {seed})"
    diff = calc_diff(d.double(), ref)
    assert diff < (1e-4 if cfg.promotion == "rescaled" else 1e-5), f"calc_diff {diff} (input seed {seed})"
    assert torch.equal(d.view(torch.int16), base.view(torch.int16)), f"a pass changed the result (input seed {seed})"
    ptx = emit_ptx(stages[-1])
    if assemble_ptx:
        from dgir.toolchain import assemble
        assert assemble(ptx).cubin[:4] == b"\x7fELF"
