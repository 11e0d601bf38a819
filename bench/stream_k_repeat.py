"""Is the opt-in stream-K kernel bitwise stable?  tests/test_gpu_fp8.py's stream-K check failed once at
14e95e6 (300x1000x4096, 256x128 tiles, no cluster: a later launch's D differed from the first's).
This launches that kernel (and the test's other stream-K configs) many times on one plan, D
poisoned before each launch, and records per launch: elements differing from the first launch, NaN
elements (never written), the 128-row x 128-column tiles they fall in, and tile counters left off
zero.

    python bench/stream_k_repeat.py [launches]      # prints JSON
"""
import json
import sys

import torch

from dgir import deep_gemm
from dgir.gpu_run import calc_diff, fp8_inputs, kernel_plan
from dgir.ops.fp8_gemm import Fp8GemmConfig

CONFIGS = [(300, 1000, 4096, 256, 128, 3, "1A"), (768, 7168, 2048, 128, 128, 5, "2A"),
           (1024, 576, 7168, 128, 144, 5, "1A")]


def repeat(m, n, k, bm, bn, stages, cl, launches):
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, cluster=int(cl[0]), multicast=cl[1],
                        stream_k=True)
    dev = torch.device("cuda:0")
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, 1234)
    kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg, variant="stream_k")
    d = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
    plan = kernel_plan(kern, A, sfa, B, sfb, d, m)
    locks = plan.workspace["LOCKS"]
    first, bad = None, []
    for i in range(launches):
        d.fill_(float("nan"))
        plan(torch.cuda.current_stream(dev).cuda_stream)
        torch.cuda.synchronize(dev)
        out = d.clone()
        if first is None:
            first = out
            diff0 = calc_diff(out.double(), ref) if torch.isfinite(out).all() else float("inf")
        differ = out.view(torch.int16) != first.view(torch.int16)
        nan = torch.isnan(out.float())
        off = int((locks != 0).sum())
        if differ.any() or nan.any() or off:
            rows, cols = torch.nonzero(differ | nan, as_tuple=True)
            tiles = sorted({(int(r) // bm, int(c) // bn) for r, c in zip(rows.tolist(), cols.tolist())})
            bad.append({"launch": i, "differing": int(differ.sum()), "nan": int(nan.sum()),
                        "tiles": tiles[:20], "counters_off_zero": off})
    return {"config": kern.result.name, "launches": launches, "first_diff": diff0, "unstable_launches": len(bad),
            "details": bad[:10]}


def main():
    launches = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    print(json.dumps([repeat(*c, launches) for c in CONFIGS], indent=1))


if __name__ == "__main__":
    main()
