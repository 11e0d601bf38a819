"""Host cost of fp8_gemm_nt calls by how much of the call is new (M=128 N=2112 K=7168; median of
single calls, the GPU queue drained before each, as bench/warm_call.py times them).

    python bench/fresh_tensor_calls.py       # prints JSON

`same_d_us`: the same tensors every call: one plan look-up and the launch (bench/warm_call.py's figure).
`fresh_d_us`: d = torch.empty(...) before every call and dropped after it.  The caching allocator
hands the same block back, so the call finds its launch plan cached (since step 111).
`new_address_us`: every call's d kept alive, so each d has a new address in a layout seen before:
a new plan from the validated layout with D's tensor map re-pointed (since step 112); includes the
torch.empty of the new d.
`all_new_addresses_us`: A, SFA, B, SFB and d all at new addresses (copies made beforehand), the same
layout: four maps re-pointed.  `all_new_addresses_row_major_sfa_us`: the same with SFA [M, KB]
row-major: read in place by the K-major kernel at this shape's 64-row tile since step 114 (SFA a
re-pointed pointer); before, each plan also made its SFA staging and transpose launch.
`new_layout_us`: the layout cache emptied before each call (new addresses too): every check, the
kernel look-up, maps encoded: what `new_address_us` cost before step 112.
Each `*_plans_cached` says how many plans the cache held after that series.
`capture_query_us`: the capture query (deep_gemm._stream_capturing) that a warm call whose plan owns
buffers (staged scales, split-K workspace) adds, so that a CUDA graph capture never takes the cached
plan's buffers (step 112); on the current device it is torch's own query (`torch_capture_query_us`),
elsewhere the driver's cuStreamIsCapturing through ctypes (`driver_capture_query_us`).
"""
import json
import statistics

import torch
from warm_call import single_call_us

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs
from dgir.runtime.driver import stream_capturing


def per_call_us(step, device, calls: int) -> float:
    return statistics.median(single_call_us(step, device, calls)) * 1e6


def main(calls: int = 500, copies: int = 200):
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

    # copies + 1: single_call_us makes one untimed call first
    sets = [(A.clone(), deep_gemm.get_mn_major_tma_aligned_tensor(sfa.clone()), B.clone(), sfb.clone(),
             torch.empty_like(d)) for _ in range(copies + 1)]
    sfa_rows = torch.empty(m, sfa.shape[1], device=dev).copy_(sfa)
    row_sets = [(a, sfa_rows.clone(), b, t, torch.empty_like(d)) for a, _, b, t, _ in sets]
    pending = iter(sets)

    def all_new():
        a, s, b, t, e = next(pending)
        deep_gemm.fp8_gemm_nt((a, s), (b, t), e)

    def new_layout():
        deep_gemm._layouts.clear()
        new_address()

    out = {"same_d_us": per_call_us(lambda: deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d), dev, calls),
           "fresh_d_us": per_call_us(fresh, dev, calls)}
    before = torch.cuda.memory_allocated(dev)
    out["new_address_us"] = per_call_us(new_address, dev, calls)
    out["new_address_plans_cached"] = len(deep_gemm._plans)
    out["memory_of_kept_outputs_mb"] = (torch.cuda.memory_allocated(dev) - before) / 2**20
    out["all_new_addresses_us"] = per_call_us(all_new, dev, copies)
    pending = iter(row_sets)
    out["all_new_addresses_row_major_sfa_us"] = per_call_us(all_new, dev, copies)
    out["new_layout_us"] = per_call_us(new_layout, dev, calls)
    out["new_layout_plans_cached"] = len(deep_gemm._plans)
    stream = deep_gemm._raw_stream(0)
    out["capture_query_us"] = per_call_us(lambda: deep_gemm._stream_capturing(stream, 0), dev, calls)
    out["driver_capture_query_us"] = per_call_us(lambda: stream_capturing(stream), dev, calls)
    out["torch_capture_query_us"] = per_call_us(torch._C._cuda_isCurrentStreamCapturing, dev, calls)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
