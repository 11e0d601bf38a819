"""Host cost of fp8_gemm_nt calls on fresh output tensors, as a training or serving loop allocates a
new `d` every step (M=128 N=2112 K=7168; median of single calls, the GPU queue drained before each,
as bench/warm_call.py times them).

    python bench/fresh_tensor_calls.py       # prints JSON

`fresh_d_us`: d = torch.empty(...) before every call and dropped after it.  The caching allocator
hands the same block back, so the call finds its launch plan cached (since step 111, when a plan
stopped keeping the caller's tensors alive).
`new_address_us`: every call's d kept alive, so each call has a new address and takes the cold path
(validation, tensor maps, a new plan): what every fresh-tensor call cost before step 111, when each
cached plan kept its d alive and the allocator could never hand an address back.
`same_d_us`: the same d every call (bench/warm_call.py's figure).
"""
import json
import statistics

import torch
from warm_call import single_call_us

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs


def per_call_us(step, device, calls: int) -> float:
    return statistics.median(single_call_us(step, device, calls)) * 1e6


def main(calls: int = 500):
    dev = torch.device("cuda", 0)
    m, n, k = 128, 2112, 7168
    A, sfa, B, sfb, _ = fp8_inputs(m, n, k, dev, 0, reference=False)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    kept = []

    def fresh():
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), torch.empty(m, n, dtype=torch.bfloat16, device=dev))

    def new_address():
        kept.append(torch.empty(m, n, dtype=torch.bfloat16, device=dev))
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), kept[-1])

    out = {"same_d_us": per_call_us(lambda: deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d), dev, calls),
           "fresh_d_us": per_call_us(fresh, dev, calls)}
    before = torch.cuda.memory_allocated(dev)
    out["new_address_us"] = per_call_us(new_address, dev, calls)
    out["plans_cached"] = len(deep_gemm._plans)
    out["memory_of_kept_outputs_mb"] = (torch.cuda.memory_allocated(dev) - before) / 2**20
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
