"""fp8_gemm_nt on the H200: correctness over DeepGEMM's shapes, timing against cuBLAS, pass ablations.

    python bench/fp8_gemm_nt.py --out bench/results/fp8_gemm_nt.json [--quick]

Every row runs a dgir-generated kernel on fresh random inputs with D poisoned (NaN) before the
launch; `diff` is DeepGEMM's calc_diff against the float64 product of the dequantised operands.
cuBLAS: torch._scaled_mm with the same 1x128 / 128x128 scales, same timer, same run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from ablations import CeilingNoPromotion, ScaleAtEnd, pipeline_with  # noqa: E402
from common import calc_diff, copy_gbps, cublas_fp8_gemm, do_bench, header, write  # noqa: E402
import cold_compile  # noqa: E402
import warm_call  # noqa: E402

from dgir import deep_gemm  # noqa: E402
from dgir.gpu_run import fp8_inputs, kernel_plan  # noqa: E402
from dgir.ops.fp8_gemm import ceil_div  # noqa: E402

NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048), (576, 7168)]
# DeepGEMM's TFLOPS on this H200 (issue 4's table), for the side-by-side columns
DEEPGEMM = {64: [124, 217, 132, 314, 188, 136, 34], 128: [222, 419, 277, 586, 368, 249, 71],
            4096: [1174, 1176, 999, 1266, 1216, 1198, 847]}
VARIANTS = {   # name -> (passes, sass_interleave)
    "no_prefetch": (lambda: pipeline_with(drop=("prefetch_tma_descriptors",)), False),
    "no_stage_b_scales": (lambda: pipeline_with(drop=("stage_b_scales",)), False),
    "no_multicast": (lambda: pipeline_with(drop=("multicast_tma",)), False),   # same tiles, no multicast
    "no_overlap_epilogue": (lambda: pipeline_with(drop=("overlap_epilogue",)), False),
    "no_interleave": (lambda: pipeline_with(drop=("schedule_mma", "interleave_ffma")), False),
    "sass_interleave": (lambda: None, True),
    "ceiling_no_promotion": (lambda: pipeline_with({"promote_scales": CeilingNoPromotion()}), False),
}


def nbytes(m, n, k):
    return m * k + n * k + 2 * m * n + 4 * (ceil_div(m, 4) * 4 * ceil_div(k, 128) + ceil_div(n, 128) * ceil_div(k, 128))


def launcher(m, n, k, device, A, sfa, B, sfb, d, passes=None, variant="default", sass=False):
    """A zero-overhead launch closure for one kernel variant (the timed thing is the kernel)."""
    kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, device, passes=passes, variant=variant, sass_interleave=sass)
    stream = torch.cuda.current_stream(device).cuda_stream
    # one prebuilt plan (its own split-K workspace, encoded tensor maps), as the API's warm path:
    # kern.launch would allocate and zero a fresh workspace inside every timed call
    plan = kernel_plan(kern, A, sfa, B, sfb, d, m)
    return kern, (lambda: plan(stream))


def measure(m, n, k, device, variant="default", passes=None, sass=False, spread=2.0, seed=0, cublas=True, repeats=1):
    """One row.  With `repeats` > 1 ours and cuBLAS are timed alternately that many times and `ms` /
    `cublas_ms` are the medians (every timing kept in `ms_repeats` / `cublas_ms_repeats`): one
    do_bench of either can land 10-35% off its usual level on a lease (bench/TUNING.md steps 63, 66),
    and a single such reading moves the geomean by ~1.5%."""
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, device, seed, spread)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
    if variant == "default":
        sfa_mn = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
        run = lambda: deep_gemm.fp8_gemm_nt((A, sfa_mn), (B, sfb), d)  # noqa: E731  the public API
        kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, device)
    else:
        kern, run = launcher(m, n, k, device, A, sfa, B, sfb, d, passes, variant, sass)
    run()
    torch.cuda.synchronize(device)
    out = d.double()
    finite = bool(torch.isfinite(out).all())
    cb, cublas_err = None, None
    if cublas:
        try:
            cb = cublas_fp8_gemm(A, sfa, B, sfb)
            cublas_out = cb().double()
        except Exception as e:  # cuBLAS refuses some shapes (M = 1): keep the row, say why
            cb, cublas_err = None, f"{type(e).__name__}: {str(e)[:120]}"
    times, cublas_times = [], []
    for _ in range(repeats):
        times.append(do_bench(run))
        if cb is not None:
            cublas_times.append(do_bench(cb))
    ms = statistics.median(times)
    row = {"variant": variant, "m": m, "n": n, "k": k, "diff": calc_diff(out, ref) if finite else None,
           "all_finite": finite, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9, "gbps": nbytes(m, n, k) / ms / 1e6,
           "kernel": kern.result.name}
    if sass:
        row["sass_patch"] = getattr(kern.result, "sass_patch", "")
    if repeats > 1:
        row["ms_repeats"] = times
    if cb is not None:
        cms = statistics.median(cublas_times)
        row.update(cublas_diff=calc_diff(cublas_out, ref), cublas_ms=cms, cublas_tflops=2 * m * n * k / cms / 1e9)
        if repeats > 1:
            row["cublas_ms_repeats"] = cublas_times
    elif cublas:
        row.update(cublas_ms=None, cublas_tflops=None, cublas_err=cublas_err)
    if m in DEEPGEMM and (n, k) in NK:
        row["deepgemm_tflops_ref"] = DEEPGEMM[m][NK.index((n, k))]
    return row


def cold_compile_seconds() -> dict:
    """Lowering -> cubin in a fresh process with an empty cache, import excluded, with its parts
    (bench/cold_compile.py: the same child the CPU machine's figure comes from)."""
    try:
        return cold_compile.one_run()
    except RuntimeError as e:
        return {"error": str(e)[-300:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3, help="alternate timings of ours and cuBLAS per default row")
    args = ap.parse_args()
    device = torch.device("cuda", 0)
    doc = header(device)
    doc["method"] = ("triton do_bench(warmup=25, rep=200, return_mode='median'), L2 flushed before each call; "
                     f"default rows: ours and cuBLAS timed alternately {args.repeats} times, ms / cublas_ms the "
                     "median of those (each timing in ms_repeats / cublas_ms_repeats); "
                     "cuBLAS = torch._scaled_mm with the same 1x128 / 128x128 scales in the same run; "
                     "diff = DeepGEMM calc_diff vs the float64 product of the dequantised operands; D poisoned "
                     "with NaN before the launch; gbps counts A, B, D and both scale tensors as stored; "
                     "deepgemm_tflops_ref = DeepGEMM's figure on this H200 from issue 4 (not re-measured here)")
    doc["rows"] = rows = []

    def add(r):
        rows.append(r)
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)
        write(args.out, doc)

    doc["copy_gbps"] = copy_gbps(device)
    shapes = [(m, n, k) for m in (1, 64, 128, 4096) for n, k in NK] + [(m, n, k) for m in (17, 4097, 8191) for n, k in NK]
    if args.quick:
        shapes = [(4096, 7168, 2048), (128, 7168, 16384)]
    for m, n, k in shapes:
        try:
            add(measure(m, n, k, device, repeats=args.repeats))
        except Exception as e:
            add({"variant": "default", "m": m, "n": n, "k": k, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    ablation_shapes = [(4096, 7168, 16384), (4096, 7168, 2048), (4096, 32768, 512), (128, 7168, 16384),
                       (64, 2112, 7168)]
    for m, n, k in ablation_shapes[: 2 if args.quick else None]:
        for name, (passes, sass) in VARIANTS.items():
            try:
                add(measure(m, n, k, device, name, passes(), sass, cublas=False))
            except Exception as e:
                add({"variant": name, "m": m, "n": n, "k": k, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    # what promote_scales buys: scales applied once at the end are exact only when they do not vary
    # along K; with per-block scales spread over e^(+-2) they are not
    for spread in (0.0, 2.0):
        for name, passes in (("default", None), ("scale_at_end", pipeline_with({"promote_scales": ScaleAtEnd()}))):
            m, n, k = 4096, 4096, 7168
            A, sfa, B, sfb, ref = fp8_inputs(m, n, k, device, 7, spread)
            if spread == 0.0:      # uniform scales along K (per row / per n block only)
                sfa[:] = sfa[:, :1]
                sfb[:] = sfb[:, :1]
                deq_a = A.float() * sfa.repeat_interleave(128, 1)[:, :k]
                deq_b = B.float() * sfb.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
                ref = deq_a.double() @ deq_b.double().T
            d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
            _, run = launcher(m, n, k, device, A, sfa, B, sfb, d, passes, f"accuracy_{name}")
            run()
            torch.cuda.synchronize()
            add({"variant": f"accuracy_{name}", "m": m, "n": n, "k": k, "scale_spread": spread,
                 "diff": calc_diff(d.double(), ref)})
    doc["warm_call"] = warm_call.measure(device)
    doc["warm_call_us"] = doc["warm_call"]["mn_major_sfa"]["per_call_us"]
    doc["cold_compile_gpu_host"] = cold_compile_seconds()
    doc["cold_compile_s_gpu_host"] = doc["cold_compile_gpu_host"].get("first_s")
    write(args.out, doc)
    print("warm_call_us", doc["warm_call_us"], "cold_compile_s", doc["cold_compile_s_gpu_host"], "copy_gbps", doc["copy_gbps"])


if __name__ == "__main__":
    main()
