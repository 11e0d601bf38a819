"""Measuring conventions shared by the benchmark scripts (../shared/docs/baselines.md)."""
from __future__ import annotations

import datetime
import json
import os
import subprocess

import torch


def do_bench(fn) -> float:
    """Median milliseconds with L2 flushed before each call (triton's timer)."""
    from triton.testing import do_bench as tdb
    return tdb(fn, warmup=25, rep=200, return_mode="median")


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """DeepGEMM's metric: 1 - 2 sum(xy) / sum(x^2 + y^2), in float64."""
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denom) if denom > 0 else 0.0


def cublas_fp8_gemm(A, sfa, B, sfb):
    """The cuBLAS baseline on our operands: torch._scaled_mm with the same 1x128 (A) and 128x128 (B)
    block scales, bf16 out; returns the zero-argument call that is timed."""
    scale_a = sfa.t().contiguous().t()
    return lambda: torch._scaled_mm(A, B.t(), scale_a=scale_a, scale_b=sfb.t(), out_dtype=torch.bfloat16)


def copy_gbps(device) -> float:
    src = torch.empty(2 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src))     # both 2 GiB buffers are freed when this returns
    return 2 * (2 << 30) / ms / 1e6


def header(device) -> dict:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        rev = ""
    rev = os.environ.get("DGIR_GIT_REV") or (rev if len(rev) == 40 else None)
    return {"device": torch.cuda.get_device_name(device), "git_rev": rev,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def out_and_shapes(default) -> tuple[str, list]:
    """The command line of the device scripts that take a result path and shapes:
    `--out PATH [M,N,K ...]` (no shapes: `default`)."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("shapes", nargs="*", help="M,N,K (default: the script's SHAPES)")
    args = ap.parse_args()
    return args.out, [tuple(map(int, s.split(","))) for s in args.shapes] or list(default)


def write(path, doc) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
