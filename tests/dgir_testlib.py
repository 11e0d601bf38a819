"""Helpers shared by the compiler-core tests (configs, pipeline runs, IR surgery)."""
from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from pathlib import Path
from dataclasses import replace

import pytest

from dgir.ir import Node, Op
from dgir.ops.fp8_gemm import Fp8GemmConfig, legal_block_ns, lower, max_stages
from dgir.pipeline import pipeline, run_pipeline


# the sm90a pipeline in order: the tests that pin it (names, dump files, events) share this one list
SM90A_PASSES = ["promote_scales", "stage_b_scales", "prefetch_tma_descriptors", "assign_registers", "schedule_mma",
                "interleave_ffma", "overlap_epilogue", "stage_in_ring_slot", "order_wgmma_issue", "multicast_tma", "hint_l2_eviction",
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


@pytest.fixture
def emitter():
    """The PTX emitter (always the real one: a test must not pass on a stand-in)."""
    from dgir.emitters.ptx import emit_ptx
    return emit_ptx


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
           "k_loops", "replace", "emitter"]


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
