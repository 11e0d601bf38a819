"""Where a cell's two timing modes come from: the allocation of its operands, or the call.

    python bench/mode_probe.py --out modes.json [--allocations 12] [--repeats 4]

64x576x7168's benchmark median reads 8.1 us in some runs and 8.6-8.8 in others with the same kernel
(bench/TUNING.md steps 86, 87).  A run times one set of operands (one allocation) with many calls.
Here each shape gets `allocations` fresh operand sets (new tensors, new seeds), and each set is
timed `repeats` times with the benchmark's timer (`common.do_bench`: L2 flushed, median): if the
modes follow the allocation, the medians of one set agree and the sets differ; if they follow the
call, every set spreads alike.  The operands' addresses are recorded with each set.  cuBLAS's call
on the same operands is timed beside ours for 64x576x7168, and a split of 7 (126 CTAs, none
sharing an SM) beside the table's split of 8 (144 CTAs on 132 SMs).
"""
from __future__ import annotations

import argparse
import statistics

import torch

from common import cublas_fp8_gemm, do_bench, header, write

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs, kernel_plan
from dgir.ops.fp8_gemm import Fp8GemmConfig

# (m, n, k, config): None is the API's config; the split of 7 puts 126 CTAs on the 132 SMs where the
# table's split of 8 puts 144 (12 SMs hold two)
SPLIT7 = Fp8GemmConfig(n=576, k=7168, block_m=64, block_n=32, stages=8, split_k=7, split_reduce="cluster", ctas_per_sm=2)
SHAPES = ((64, 576, 7168, None), (64, 576, 7168, SPLIT7), (128, 576, 7168, None), (64, 2112, 7168, None))


def probe(m: int, n: int, k: int, config, device, allocations: int, repeats: int) -> dict:
    kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, device, config=config)
    stream = torch.cuda.current_stream(device).cuda_stream
    sets = []
    for a in range(allocations):
        A, sfa, B, sfb, _ = fp8_inputs(m, n, k, device, seed=1000 + a)
        d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
        plan = kernel_plan(kern, A, sfa, B, sfb, d, m)
        run = lambda: plan(stream, False)  # noqa: E731
        run()
        torch.cuda.synchronize(device)
        assert bool(torch.isfinite(d).all()), "the kernel left NaN in D"
        ours = [do_bench(run) * 1e3 for _ in range(repeats)]
        entry = {"ours_us": ours, "a_ptr": A.data_ptr(), "b_ptr": B.data_ptr(), "d_ptr": d.data_ptr()}
        if (m, n) == (64, 576) and config is None:
            ref = cublas_fp8_gemm(A, sfa, B, sfb)
            entry["cublas_us"] = [do_bench(ref) * 1e3 for _ in range(repeats)]
        sets.append(entry)
        del A, sfa, B, sfb, d
    medians = [statistics.median(s["ours_us"]) for s in sets]
    within = statistics.median(max(s["ours_us"]) - min(s["ours_us"]) for s in sets)
    return {"m": m, "n": n, "k": k, "kernel": kern.result.name, "sets": sets,
            "set_medians_us": medians, "between_sets_range_us": max(medians) - min(medians),
            "within_set_range_us": within}


def per_call(device) -> list:
    """Every call's time (the benchmark's timer, return_mode="all") for kernels of a few kinds: a
    split over a cluster (64x576x7168), a plain tile walk (64x7168x2048 64x56), a B-sharing pair
    (128x24576x1536 64x128 c2B), cuBLAS and a torch elementwise kernel of similar length."""
    from triton.testing import do_bench as tdb
    stream = torch.cuda.current_stream(device).cuda_stream
    out = []
    for m, n, k in ((64, 576, 7168), (64, 7168, 2048), (128, 24576, 1536)):
        A, sfa, B, sfb, _ = fp8_inputs(m, n, k, device, seed=7)
        d = torch.empty((m, n), dtype=torch.bfloat16, device=device)
        kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, device)
        plan = kernel_plan(kern, A, sfa, B, sfb, d, m)
        for rep in range(3):
            out.append({"what": kern.result.name, "rep": rep,
                        "us": [t * 1e3 for t in tdb(lambda: plan(stream, False), warmup=25, rep=200, return_mode="all")]})
        if (m, n) == (64, 576):
            ref = cublas_fp8_gemm(A, sfa, B, sfb)
            for rep in range(3):
                out.append({"what": "cublas 64x576x7168", "rep": rep,
                            "us": [t * 1e3 for t in tdb(ref, warmup=25, rep=200, return_mode="all")]})
    x = torch.randn(1 << 22, device=device)
    for rep in range(3):
        out.append({"what": "torch x.mul_(1.0001), 16 MB", "rep": rep,
                    "us": [t * 1e3 for t in tdb(lambda: x.mul_(1.0001), warmup=25, rep=200, return_mode="all")]})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--allocations", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--calls", action="store_true", help="only the per-call times of a few kernel kinds")
    args = ap.parse_args()
    device = torch.device("cuda", 0)
    doc = header(device)
    if args.calls:
        doc["calls"] = per_call(device)
        write(args.out, doc)
        return
    doc["rows"] = []
    for m, n, k, config in SHAPES:
        row = probe(m, n, k, config, device, args.allocations, args.repeats)
        print({key: row[key] for key in ("m", "n", "k", "kernel", "set_medians_us", "between_sets_range_us",
                                          "within_set_range_us")}, flush=True)
        doc["rows"].append(row)
        write(args.out, doc)


if __name__ == "__main__":
    main()
