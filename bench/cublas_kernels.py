"""Which cuBLAS kernel torch's block-scaled call runs at each shape, and its launch grid: the
kernel names of nvjet encode the tile (e.g. `nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_...`:
128x128 tile, K step 128, 6 stages, cluster 2x1), so where cuBLAS is ahead this says with what.
One torch.profiler trace per shape (three calls after a warm-up, back to back: L2 stays warm, so
the durations are the kernels' own, without the flushing timer's ~4 us).  With DGIR_OURS=1 the
API's kernel of the same shape is traced too (row key "ours"), for an in-kernel comparison.

    [DGIR_OURS=1] python bench/cublas_kernels.py --out $OUT/cublas_kernels.json [M,N,K ...]
"""
import json
import os
import tempfile

import torch

from common import cublas_fp8_gemm, header, out_and_shapes, write  # bench/ (this script's folder is on sys.path)

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs

# shapes where cuBLAS led ours in bench/TUNING.md step 103 (specs 218, 225, 228-230) and the coverage
# shapes below it (step 77)
SHAPES = ((5580, 384, 5632), (5252, 320, 10240), (3000, 576, 13824), (3672, 448, 11264), (4072, 448, 8704),
          (5508, 320, 11776), (8048, 256, 14848), (2500, 768, 10752), (2420, 704, 13824), (3072, 576, 7168),
          (512, 4096, 7168), (256, 7168, 16384), (1220, 1472, 12288), (320, 10880, 7680), (116, 32704, 14848))


def kernels_of(fn) -> list[dict]:
    """The GPU kernels one call of `fn` launches: name, grid, block (from the profiler's trace)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    seen = {}
    for e in events:
        if e.get("cat") == "kernel":
            args = e.get("args", {})
            seen.setdefault(e["name"], {"name": e["name"], "grid": args.get("grid"), "block": args.get("block"),
                                         "us": []})["us"].append(e.get("dur"))
    return list(seen.values())


def main():
    out, shapes = out_and_shapes(SHAPES)
    dev = torch.device("cuda", 0)
    rows = []
    for m, n, k in shapes:
        A, sfa, B, sfb, _ = fp8_inputs(m, n, k, dev, 0, 2.0)
        rows.append({"m": m, "n": n, "k": k, "kernels": kernels_of(cublas_fp8_gemm(A, sfa, B, sfb))})
        if os.environ.get("DGIR_OURS") == "1":
            d = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
            rows[-1]["ours"] = kernels_of(lambda: deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d))
        print(m, n, k, [(x["name"][:90], x["grid"], min(x["us"])) for x in rows[-1]["kernels"] + rows[-1].get("ours", [])],
              flush=True)
    write(out, {**header(dev), "method": "torch.profiler CUDA kernel events of torch._scaled_mm "
                     "(block scales 1x128 / 128x128), three calls after one warm-up; 'ours': the same for "
                     "deep_gemm.fp8_gemm_nt (the API's choice) where DGIR_OURS=1", "rows": rows})


if __name__ == "__main__":
    main()
