"""Where the host time of an fp8_gemm_nt call with new tensors goes, M=128 N=2112 K=7168 (MN-major
SFA): cProfile over calls that each bring a new `d`, the top functions by own time and by cumulative
time; first in a layout seen before (a new plan from the validated layout, D's map re-pointed), then
with the layout cache emptied before each call (every check, the kernel look-up, maps encoded).

    python bench/cold_path_profile.py        # prints text
"""
import cProfile
import io
import pstats
import time

import torch

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs


def main(calls: int = 300, new_layout: bool = False):
    dev = torch.device("cuda", 0)
    m, n, k = 128, 2112, 7168
    A, sfa, B, sfb, _ = fp8_inputs(m, n, k, dev, 0, reference=False)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    outs = [torch.empty(m, n, dtype=torch.bfloat16, device=dev) for _ in range(calls + 1)]
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), outs[-1])
    torch.cuda.synchronize(dev)
    deep_gemm._plans.clear()         # a second run gets the first one's addresses back
    t0 = time.perf_counter()
    for d in outs[:calls // 2]:
        if new_layout:
            deep_gemm._layouts.clear()
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    per_call = (time.perf_counter() - t0) / (calls // 2) * 1e6
    torch.cuda.synchronize(dev)
    prof = cProfile.Profile()
    prof.enable()
    for d in outs[calls // 2:calls]:
        if new_layout:
            deep_gemm._layouts.clear()
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    prof.disable()
    torch.cuda.synchronize(dev)
    what = "new layout" if new_layout else "known layout, new address"
    print(f"{what}: call unprofiled {per_call:.1f} us (mean of {calls // 2})")
    for key in ("tottime", "cumtime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(30)
        print(s.getvalue())


if __name__ == "__main__":
    main()
    main(new_layout=True)
