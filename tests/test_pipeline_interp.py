"""Every stage of the sm90a pipeline computes the same D as the lowered IR, on the CPU interpreter,
over a seeded sample of configs (ring depths 1-4 included: a pipelined k-loop needs two slots)."""
import random

import pytest
import torch

from dgir.interp import calc_diff, fp8_gemm_inputs, fp8_gemm_reference, run_kernel
from dgir.ops.fp8_gemm import Fp8GemmConfig, lower
from dgir.pipeline import pipeline, run_pipeline

rng = random.Random(7)
CASES = []
for _ in range(6):
    bm, bn = rng.choice([64, 128]), rng.choice([16, 48, 96, 128, 160])
    CASES.append((rng.choice([1, 17, 70, 130]), rng.choice([bn, 2 * bn + 8 * rng.randint(0, 3)]),
                  rng.choice([128, 272, 640]), bm, bn, rng.randint(1, 4)))
CASES += [(300, 256, 384, 256, 128, 3), (17, 136, 272, 256, 64, 2)]     # BLOCK_M 256: two waves


@pytest.mark.parametrize("m,n,k,bm,bn,stages", CASES)
def test_every_pass_preserves_the_result(m, n, k, bm, bn, stages):
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, num_sms=3)
    ins = fp8_gemm_inputs(m, n, k, seed=m + n + k)
    stages_ir = []
    run_pipeline(lower(cfg), pipeline("sm90a"), [lambda ev: stages_ir.append((ev.stem, ev.after))], verify_each=True)
    ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])
    first = None
    for stem, kern in stages_ir:
        out = run_kernel(kern, ins, seed=len(stem))["D"]
        assert torch.isfinite(out).all(), stem
        assert calc_diff(out.double(), ref) < 1e-5, stem
        if first is None:
            first = out
        # promotion, pipelining and layout change no rounding: bitwise equal to the lowered IR
        assert torch.equal(out.view(torch.int16), first.view(torch.int16)), stem
