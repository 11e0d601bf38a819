"""Host cost of a warm fp8_gemm_nt call: mean over 1000 calls, cache warm, M=128 N=2112 K=7168."""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from dgir import deep_gemm  # noqa: E402
from dgir.gpu_run import fp8_inputs  # noqa: E402


def main(calls=1000):
    dev = torch.device("cuda", 0)
    A, sfa, B, sfb, _ = fp8_inputs(128, 2112, 7168, dev, 0)
    out = {}
    for layout, s in (("mn_major_sfa", deep_gemm.get_mn_major_tma_aligned_tensor(sfa)), ("row_major_sfa", sfa)):
        d = torch.empty(128, 2112, dtype=torch.bfloat16, device=dev)
        deep_gemm.fp8_gemm_nt((A, s), (B, sfb), d)
        torch.cuda.synchronize()
        best = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(calls):
                deep_gemm.fp8_gemm_nt((A, s), (B, sfb), d)
            best.append((time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
        out[layout] = {"us_per_call_min_of_3": min(best), "runs": best}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
