"""Host cost of a warm fp8_gemm_nt call (cache warm, plan built), M=128 N=2112 K=7168.

    python bench/warm_call.py        # prints JSON

`per_call_us`: median host time of single calls, each made with the GPU queue drained (the
synchronize before it is not timed): what the call itself costs the CPU, independent of how long
the kernel runs.  `loop_us`: mean over back-to-back calls (the earlier method); when the kernel is
slower than the call, the launch queue fills and this measures the GPU instead.

`torch_reference`: torch's own calls on the same host, timed the same way: `scaled_mm_us` the
cuBLAS baseline's call on the same operands (torch._scaled_mm with the block scales), `zero__us` a
one-kernel `d.zero_()`.  The host decides most of the figure (6.8-12.7 us for the same warm path
across leases, bench/TUNING.md step 47); these say what any Python-launched kernel costs there.
"""
import json
import statistics
import time

import torch

from common import cublas_fp8_gemm

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs


def single_call_us(call, device, calls: int) -> list:
    """Host seconds of `calls` single calls of `call`, each after the GPU queue is drained."""
    call()
    torch.cuda.synchronize(device)
    single = []
    for _ in range(calls):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        call()
        single.append(time.perf_counter() - t0)
    torch.cuda.synchronize(device)
    return single


def measure(device, calls: int = 2000) -> dict:
    A, sfa, B, sfb, _ = fp8_inputs(128, 2112, 7168, device, 0)
    out = {}
    # row_major_sfa: staged by the transpose launch; row_major_sfa_in_place: read by the K-major kernel
    # (deep_gemm.SFA_K_MAJOR_IN_PLACE on for that layout, a copy of SFA so that it gets a plan of its own)
    for layout, s, in_place in (("mn_major_sfa", deep_gemm.get_mn_major_tma_aligned_tensor(sfa), False),
                                ("row_major_sfa", sfa, False), ("row_major_sfa_in_place", sfa.clone(), True)):
        kept, deep_gemm.SFA_K_MAJOR_IN_PLACE = deep_gemm.SFA_K_MAJOR_IN_PLACE, in_place
        deep_gemm._layouts.clear()
        d = torch.empty(128, 2112, dtype=torch.bfloat16, device=device)
        call = lambda: deep_gemm.fp8_gemm_nt((A, s), (B, sfb), d)  # noqa: E731
        call()
        deep_gemm.SFA_K_MAJOR_IN_PLACE = kept
        single = single_call_us(call, device, calls)
        t0 = time.perf_counter()
        for _ in range(calls // 2):
            call()
        loop = (time.perf_counter() - t0) / (calls // 2)
        torch.cuda.synchronize(device)
        out[layout] = {"per_call_us": statistics.median(single) * 1e6,
                       "per_call_p90_us": sorted(single)[int(0.9 * calls)] * 1e6, "loop_us": loop * 1e6}
    d = torch.empty(128, 2112, dtype=torch.bfloat16, device=device)
    out["torch_reference"] = {
        "scaled_mm_us": statistics.median(single_call_us(cublas_fp8_gemm(A, sfa, B, sfb), device, calls)) * 1e6,
        "zero__us": statistics.median(single_call_us(d.zero_, device, calls)) * 1e6}
    return out


def launch_cost(device, configs, calls: int = 2000) -> list:
    """Median host time of one prebuilt launch (LaunchPlan call, GPU queue drained before each) for
    explicit configs: what the driver's cuLaunchKernelEx costs for a kernel (e.g. a cluster kernel
    against a plain one of the same shape).  configs: [(m, Fp8GemmConfig)]."""
    from dgir.gpu_run import kernel_plan
    out = []
    for m, cfg in configs:
        A, sfa, B, sfb, _ = fp8_inputs(m, cfg.n, cfg.k, device, 0)
        d = torch.empty(m, cfg.n, dtype=torch.bfloat16, device=device)
        kern = deep_gemm.get_kernel("fp8_gemm_nt", m, cfg.n, cfg.k, device, config=cfg)
        plan = kernel_plan(kern, A, sfa, B, sfb, d, m)
        stream = torch.cuda.current_stream(device).cuda_stream
        single = single_call_us(lambda: plan(stream), device, calls)
        out.append({"m": m, "kernel": kern.result.name, "launch_us": statistics.median(single) * 1e6})
    return out


if __name__ == "__main__":
    import sys
    dev = torch.device("cuda", 0)
    if sys.argv[1:] == ["--launch"]:     # plain vs cluster kernels of the same shapes
        from dgir.ops.fp8_gemm import Fp8GemmConfig as C
        cfgs = [(128, C(n=2112, k=7168, block_m=64, block_n=32, stages=8)),
                (128, C(n=2112, k=7168, block_m=64, block_n=64, stages=8, split_k=2, split_reduce="cluster")),
                (64, C(n=576, k=7168, block_m=64, block_n=32, stages=8, split_k=7)),
                (64, C(n=576, k=7168, block_m=64, block_n=32, stages=6, split_k=8, split_reduce="cluster", ctas_per_sm=2)),
                (4096, C(n=7168, k=2048, block_m=256, block_n=128, stages=3)),
                (4096, C(n=7168, k=2048, block_m=256, block_n=128, stages=3, cluster=2))] * 2
        print(json.dumps({"launch": launch_cost(dev, cfgs), "warm_call": measure(dev)}, indent=1))
    else:
        print(json.dumps(measure(dev), indent=1))
