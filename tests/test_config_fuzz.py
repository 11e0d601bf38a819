"""The whole fp8_gemm_nt config space, sampled jointly (dgir_testlib.random_fp8_case): every knob drawn
at once, on shapes with ragged M, N and K edges.  The per-knob tests pin each knob on a few chosen
configs; this one looks for the combinations nobody chose (it found a tile walk that divided by zero
for a B-sharing cluster whose band was narrower than the cluster).

Each case: the sm90a pipeline with the verifier after every pass, the lowered IR and the final IR
on the CPU interpreter with the host's own grid and workspace, on fresh random inputs (the seed is
in the failure message): finite, close to the float64 reference, the two bitwise equal (passes
change no rounding), split-K tile counters back at zero; the PTX emitted, and every fourth case
assembled by ptxas.  The same sampler at DeepGEMM's sizes runs on the H200 (test_gpu_fp8.py)."""
import os
import random

import pytest
import torch
from dgir_testlib import interpret_as_launched, random_fp8_case

from dgir.emitters.ptx import emit_ptx
from dgir.interp import calc_diff, fp8_gemm_inputs, fp8_gemm_reference
from dgir.ir import Op
from dgir.ops.fp8_gemm import lower
from dgir.pipeline import pipeline, run_pipeline

CASES = [random_fp8_case(random.Random(seed)) for seed in range(240)]


def case_id(case) -> str:
    m, n, k, cfg = case
    return f"{m}x{n}x{k}_" + cfg.kernel_name().split("_", 5)[-1] + f"_sms{cfg.num_sms}_g{cfg.swizzle_group}"


def run_on_interpreter(kern, m, inputs, seed):
    """D from one launch as the host makes it; the split-K tile counters must be back at zero."""
    out = interpret_as_launched(kern, m, inputs, seed)
    if "LOCKS" in out:
        assert int(out["LOCKS"].abs().sum()) == 0, "tile counters not reset"
    return out["D"]


@pytest.mark.parametrize("i", range(len(CASES)), ids=[case_id(c) for c in CASES])
def test_sampled_config_is_exact_through_the_pipeline(i):
    m, n, k, cfg = CASES[i]
    stages = []     # the sampler's ring depth is within max_stages_for: the allocator must agree
    run_pipeline(lower(cfg), pipeline("sm90a"), [lambda ev: stages.append(ev.after)], verify_each=True)
    # the rescaled promotion changes the arithmetic in promote_scales: compare from there on
    first = next(i for i, k in enumerate(stages) if any(n.op is Op.RESCALE for n in k.walk())) \
        if cfg.promotion == "rescaled" else 0
    seed = int.from_bytes(os.urandom(4), "little")
    inputs = fp8_gemm_inputs(m, n, k, seed=seed)
    ref = fp8_gemm_reference(inputs["A"], inputs["B"], inputs["SFA"], inputs["SFB"])
    if cfg.sfa_major == "k":     # the kernel reads the caller's [M, K/128] row-major scales
        inputs["SFA"] = inputs["SFA"][:, :m].t().contiguous()
    base = run_on_interpreter(stages[first], m, inputs, seed=1)
    d = run_on_interpreter(stages[-1], m, inputs, seed=2)
    assert torch.isfinite(d).all(), f"unwritten elements (input seed {seed})"
    diff = calc_diff(d.double(), ref)
    assert diff < (1e-4 if cfg.promotion == "rescaled" else 1e-5), f"calc_diff {diff} (input seed {seed})"
    assert torch.equal(d.view(torch.int16), base.view(torch.int16)), f"a pass changed the result (input seed {seed})"
    ptx = emit_ptx(stages[-1])
    if i % 4 == 0:
        from dgir.toolchain import assemble
        assert assemble(ptx).cubin[:4] == b"\x7fELF"
