"""Where a warm fp8_gemm_nt call's host time goes (M=128 N=2112 K=7168): the plan key, the plan
lookup, torch's raw stream, and the prebuilt launch, each timed alone (median of many), next to
the whole call (bench/warm_call.py's method) and the host CPU's name.

    python bench/warm_call_parts.py     # prints JSON
"""
import json
import platform
import statistics
import time

import torch

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs


def median_us(fn, n=3000, sync=None) -> float:
    out = []
    for _ in range(n):
        if sync:
            sync()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e6


def main():
    dev = torch.device("cuda", 0)
    A, sfa, B, sfb, _ = fp8_inputs(128, 2112, 7168, dev, 0)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty(128, 2112, dtype=torch.bfloat16, device=dev)
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    torch.cuda.synchronize(dev)
    key = deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")
    plan = deep_gemm._plans[key]
    launch, index = plan.launch, plan.index
    stream = deep_gemm._raw_stream(index)
    sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    print(json.dumps({
        "cpu": cpu,
        "whole_call_us": median_us(lambda: deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d), sync=sync),
        "plan_key_us": median_us(lambda: deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")),
        "key_and_lookup_us": median_us(lambda: deep_gemm._plans.get(deep_gemm._plan_key(A, sfa, B, sfb, d, None,
                                                                                         None, "nk"))),
        "raw_stream_us": median_us(lambda: deep_gemm._raw_stream(index)),
        "launch_us": median_us(lambda: launch(stream), sync=sync),
    }, indent=1))


if __name__ == "__main__":
    main()
