"""fp8_gemm_nt on the GPU: correctness over DeepGEMM's shapes, timing against cuBLAS, pass ablations.

    python bench/fp8_gemm_nt.py --out bench/results/fp8_gemm_nt.json [--quick]

Every row runs a dgir-generated kernel on fresh random inputs with D poisoned (NaN) before the
launch; `diff` is DeepGEMM's calc_diff against the unquantized reference (bf16-exact dequantised
operands multiplied in float64).  cuBLAS: torch._scaled_mm with the same block scales, same timer.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import calc_diff, copy_gbps, do_bench, header, write  # noqa: E402

from dgir import deep_gemm  # noqa: E402
from dgir.ops.fp8_gemm import ceil_div  # noqa: E402

NK = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
MS = [1, 64, 128, 4096]
ODD_MS = [17, 4097, 8191]


def make_inputs(m, n, k, device, scale_spread=2.0, gen=None):
    """Per-token / per-block quantised e4m3 operands with their f32 scales, and the reference."""
    kb = ceil_div(k, 128)
    a = torch.randn(m, k, device=device) * torch.exp(torch.randn(m, 1, device=device) * scale_spread)
    b = torch.randn(n, k, device=device) * torch.exp(torch.randn(ceil_div(n, 128), 1, device=device).repeat_interleave(128, 0)[:n] * scale_spread)
    ap = torch.nn.functional.pad(a, (0, kb * 128 - k)).view(m, kb, 128)
    sfa = ap.abs().amax(-1).clamp(min=1e-4) / 448.0
    aq = (ap / sfa.unsqueeze(-1)).to(torch.float8_e4m3fn)
    bp = torch.nn.functional.pad(b, (0, kb * 128 - k, 0, ceil_div(n, 128) * 128 - n)).view(ceil_div(n, 128), 128, kb, 128)
    sfb = bp.abs().amax(dim=(1, 3)).clamp(min=1e-4) / 448.0
    bq = (bp / sfb[:, None, :, None]).to(torch.float8_e4m3fn)
    A = aq.view(m, kb * 128)[:, :k].contiguous()
    B = bq.view(ceil_div(n, 128) * 128, kb * 128)[:n, :k].contiguous()
    # the reference multiplies the dequantised operands exactly (no FP8 accumulation shortcuts)
    a_deq = (aq.float() * sfa.unsqueeze(-1)).view(m, kb * 128)[:, :k]
    b_deq = (bq.float() * sfb[:, None, :, None]).view(ceil_div(n, 128) * 128, kb * 128)[:n, :k]
    ref = (a_deq.double() @ b_deq.double().T)
    return A, sfa.contiguous(), B, sfb.contiguous(), ref


def cublas_fn(A, sfa, B, sfb):
    scale_a = sfa.t().contiguous().t()
    return lambda: torch._scaled_mm(A, B.t(), scale_a=scale_a, scale_b=sfb.t(), out_dtype=torch.bfloat16)


def row_for(m, n, k, device, variant="default", gen_spread=2.0, time_it=True, kernel_kwargs=None):
    A, sfa, B, sfb, ref = make_inputs(m, n, k, device, gen_spread)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
    if variant == "default":
        run = lambda: deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)  # noqa: E731
    else:
        kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, device, **kernel_kwargs, variant=variant)
        sfa_mn = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
        storage = torch.as_strided(sfa_mn, (ceil_div(k, 128), sfa_mn.stride(1)), (sfa_mn.stride(1), 1))
        stream = torch.cuda.current_stream(device).cuda_stream
        run = lambda: kern.launch({"A": A, "B": B, "SFA": storage, "SFB": sfb, "D": d}, m, stream)  # noqa: E731
    run()
    torch.cuda.synchronize(device)
    out = d.double()
    finite = bool(torch.isfinite(out).all())
    diff = calc_diff(out, ref) if finite else float("nan")
    row = {"variant": variant, "m": m, "n": n, "k": k, "diff": diff, "all_finite": finite}
    if time_it:
        ms = do_bench(run)
        nbytes = m * k + n * k + m * n * 2 + sfa.numel() * 4 + sfb.numel() * 4
        row.update(ms=ms, tflops=2 * m * n * k / ms / 1e9, gbps=nbytes / ms / 1e6)
        try:
            cb = cublas_fn(A, sfa, B, sfb)
            cb_out = cb()
            row["cublas_diff"] = calc_diff(cb_out.double(), ref)
            cms = do_bench(cb)
            row.update(cublas_ms=cms, cublas_tflops=2 * m * n * k / cms / 1e9)
        except Exception as e:  # cuBLAS refuses some shapes (M = 1): record, don't drop the row
            row.update(cublas_ms=None, cublas_tflops=None, cublas_err=f"{type(e).__name__}: {str(e)[:160]}")
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    args = ap.parse_args()
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    doc = header(device)
    doc["method"] = ("do_bench(warmup=25, rep=200, return_mode='median'), L2 flushed; cuBLAS = torch._scaled_mm "
                     "with the same 1x128 / 128x128 scales in the same run; diff = calc_diff vs float64 reference "
                     "on the dequantised operands; D poisoned with NaN before each launch")
    doc["rows"] = rows = []

    def flush():
        write(args.out, doc)

    if not args.quick:
        doc["copy_gbps"] = copy_gbps(device)
    shapes = [(m, n, k) for m in MS for n, k in NK] + [(m, n, k) for m in ODD_MS for n, k in NK[:3]]
    if args.quick:
        shapes = [(256, 256, 512), (1, 2112, 7168), (17, 576, 7168), (4096, 7168, 2048)]
    for m, n, k in shapes:
        t0 = time.time()
        try:
            r = row_for(m, n, k, device, time_it=not args.no_time)
        except Exception as e:
            r = {"variant": "default", "m": m, "n": n, "k": k, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        r["wall_s"] = round(time.time() - t0, 2)
        rows.append(r)
        print(r, flush=True)
        flush()
    flush()


if __name__ == "__main__":
    main()
