"""Why the small-M cells stay far from the copy bandwidth under the benchmark's timer: the L2 flush.

triton's do_bench flushes L2 before every call by *writing* 256 MB (`cache.zero_()`), so the
kernel starts with L2 full of dirty lines; every line it brings in evicts one that must first be
written back, so a kernel that reads X bytes also costs DRAM X bytes of writes.  This probe times
the same calls four ways with the same event pattern as do_bench (flush, start event, call, end
event; median of `REPS`):

  write_flush  zero a 256 MB buffer before each call (do_bench's flush: dirty L2)
  write_touch  the same, then one 4-byte read every 64 KB of each operand and of D (the address
               translations of their pages warmed, ~0.1% of their bytes in L2): how much of a small
               call's first-data latency is page-table walks after the flush (step 131)
  read_flush   read a 256 MB buffer before each call (L2 as cold, but clean)
  no_flush     nothing (operands may still sit in L2 from the previous call)

write_touch and no_flush end with a ~30 us spin on the GPU (torch.cuda._sleep): without it their last
kernel finishes before the host has queued the start event and the call, and the span measures the
host's launch gap (step 132: the one-element kernel read 3.7-19.8 us in write_touch, 15-23 us in
no_flush on an H100, against 4.1 after the 256 MB flush).

for our kernel, cuBLAS, a plain copy of B's bytes and a one-element kernel (the timer's floor).
A diagnostic only: the result file keeps do_bench.

    python bench/flush_probe.py --out bench/results/raw/flush_probe_<rev>.json
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import cublas_fp8_gemm, header, write  # noqa: E402

from dgir import deep_gemm  # noqa: E402
from dgir.gpu_run import fp8_inputs  # noqa: E402

REPS = 200
SPIN_CYCLES = 60_000     # ~30 us at the clocks a short call runs at: longer than the host takes to queue it
SHAPES = [(64, 2112, 7168), (128, 4096, 7168), (64, 7168, 2048), (128, 7168, 16384), (64, 24576, 1536),
          (64, 576, 7168), (4096, 7168, 2048)]


def timed(fn, flush) -> float:
    """Median microseconds of fn between two events, flush() before each (do_bench's pattern)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    for _ in range(10):
        fn()
    for s, e in zip(starts, ends):
        flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def every_64k(t: torch.Tensor) -> torch.Tensor:
    """One 4-byte word every 64 KB of the storage under `t` (any layout), as float32: a sum over it reads
    one 32-byte sector per 64 KB."""
    raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
    return raw[: raw.numel() // 4 * 4].view(torch.float32)[::16384]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dev = torch.device("cuda", 0)
    buf = torch.empty(256 << 20, dtype=torch.int8, device=dev)
    sink = torch.empty((), dtype=torch.int64, device=dev)
    flushes = {"write_flush": lambda: buf.zero_(),
               "read_flush": lambda: torch.sum(buf.view(torch.int64), dim=0, out=sink),
               "no_flush": lambda: torch.cuda._sleep(SPIN_CYCLES)}
    doc = {**header(dev), "method": __doc__.split("\n\n")[1].replace("\n", " "), "rows": []}
    x = torch.zeros(1, device=dev)
    seed = torch.randint(0, 2**31, ()).item()
    for m, n, k in SHAPES:
        A, sfa, B, sfb, _ = fp8_inputs(m, n, k, dev, seed)
        sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
        d = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        y = torch.empty_like(B)
        calls = {"dgir": lambda: deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d),
                 "cublas": cublas_fp8_gemm(A, sfa, B, sfb),
                 "copyB": lambda: y.copy_(B),
                 "floor": lambda: x.add_(1)}
        row = {"m": m, "n": n, "k": k, "bytes": m * k + n * k + 2 * m * n}
        # one word every 64 KB of each tensor's bytes: its pages' translations, not its data
        pages = [every_64k(t) for t in (A, sfa, B, sfb, d)]
        touch_sink = torch.empty(len(pages), dtype=torch.float32, device=dev)
        flushes["write_touch"] = lambda: (buf.zero_(), [torch.sum(p, dim=0, out=touch_sink[i]) for i, p in enumerate(pages)],
                                          torch.cuda._sleep(SPIN_CYCLES))
        for name, fn in calls.items():
            row[name] = {f: round(timed(fn, fl), 2) for f, fl in flushes.items()}
        print(row, flush=True)
        doc["rows"].append(row)
        write(args.out, doc)


if __name__ == "__main__":
    main()
