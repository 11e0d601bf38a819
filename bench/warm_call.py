"""Host cost of a warm fp8_gemm_nt call (cache warm, plan built), M=128 N=2112 K=7168.

    python bench/warm_call.py        # prints JSON

`per_call_us`: median host time of single calls, each made with the GPU queue drained (the
synchronize before it is not timed): what the call itself costs the CPU, independent of how long
the kernel runs.  `loop_us`: mean over back-to-back calls (the earlier method); when the kernel is
slower than the call, the launch queue fills and this measures the GPU instead.
"""
import json
import statistics
import time

import torch

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs


def measure(device, calls: int = 2000) -> dict:
    A, sfa, B, sfb, _ = fp8_inputs(128, 2112, 7168, device, 0)
    out = {}
    for layout, s in (("mn_major_sfa", deep_gemm.get_mn_major_tma_aligned_tensor(sfa)), ("row_major_sfa", sfa)):
        d = torch.empty(128, 2112, dtype=torch.bfloat16, device=device)
        call = lambda: deep_gemm.fp8_gemm_nt((A, s), (B, sfb), d)  # noqa: E731
        call()
        torch.cuda.synchronize(device)
        single = []
        for _ in range(calls):
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            call()
            single.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(calls // 2):
            call()
        loop = (time.perf_counter() - t0) / (calls // 2)
        torch.cuda.synchronize(device)
        out[layout] = {"per_call_us": statistics.median(single) * 1e6,
                       "per_call_p90_us": sorted(single)[int(0.9 * calls)] * 1e6, "loop_us": loop * 1e6}
    return out


if __name__ == "__main__":
    print(json.dumps(measure(torch.device("cuda", 0)), indent=1))
