"""The whole fp8_gemm_nt config space, sampled jointly (dgir_testlib.random_fp8_case): every knob drawn
at once, on shapes with ragged M, N and K edges.  The per-knob tests pin each knob on a few chosen
configs; this one looks for the combinations nobody chose (it found a tile walk that divided by zero
for a B-sharing cluster whose band was narrower than the cluster).

Each case: the sm90a pipeline with the verifier after every pass, the lowered IR and the final IR
on the CPU interpreter with the host's own grid and workspace, on fresh random inputs (the seed is
in the failure message): finite, close to the float64 reference, the two bitwise equal (passes
change no rounding), split-K tile counters back at zero; the PTX emitted, and every fourth case
assembled by ptxas.  `bench/config_fuzz_cpu.py` runs the same check over more seeds.  The same sampler at DeepGEMM's sizes runs on the H200 (test_gpu_fp8.py)."""
import random

import pytest
from dgir_testlib import check_sampled_case, random_fp8_case

CASES = [random_fp8_case(random.Random(seed)) for seed in range(240)]


def case_id(case) -> str:
    m, n, k, cfg = case
    return f"{m}x{n}x{k}_" + cfg.kernel_name().split("_", 5)[-1] + f"_sms{cfg.num_sms}_g{cfg.swizzle_group}"


@pytest.mark.parametrize("i", range(len(CASES)), ids=[case_id(c) for c in CASES])
def test_sampled_config_is_exact_through_the_pipeline(i):
    check_sampled_case(*CASES[i], assemble_ptx=i % 4 == 0)
