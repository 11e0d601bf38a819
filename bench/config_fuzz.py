"""Sampled configs of fp8_gemm_nt on the GPU, beyond the test suite's 96: the same sampler
(tests/dgir_testlib.random_fp8_case, every knob drawn jointly, ragged M / N / K), more seeds.

    python bench/config_fuzz.py --out fuzz.json --first 2000 --count 400 --budget 300

Each case: compiled, launched twice on fresh inputs with D poisoned (NaN) before each launch,
checked finite, against the float64 reference (calc_diff < 1e-3) and bitwise between the launches.
Writes every case (config, shape, diff, stable, error) and stops at the time budget; a CUDA error
that poisons the context ends the run (it is the last row).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import asdict

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))
from common import header, write  # noqa: E402
from dgir_testlib import random_fp8_case  # noqa: E402

from dgir import deep_gemm  # noqa: E402
from dgir.gpu_run import calc_diff, fp8_inputs, launch_poisoned  # noqa: E402


def run_case(m, n, k, cfg, dev) -> dict:
    row = {"m": m, "n": n, "k": k, "kernel": cfg.kernel_name(), "config": asdict(cfg)}
    kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg, variant="fuzz")
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, int.from_bytes(os.urandom(4), "little"))
    outs = [launch_poisoned(kern, A, sfa, B, sfb) for _ in range(2)]
    row["finite"] = bool(torch.isfinite(outs[0]).all())
    row["diff"] = calc_diff(outs[0].double(), ref)
    row["stable"] = bool(torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)))
    row["ok"] = row["finite"] and row["diff"] < 1e-3 and row["stable"]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--first", type=int, default=2000, help="first sampler seed")
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--budget", type=float, default=300.0, help="seconds")
    args = ap.parse_args()
    dev = torch.device("cuda:0")
    doc = header(dev) | {"sampler": "tests/dgir_testlib.random_fp8_case(gpu=True)", "first_seed": args.first,
                         "rows": []}
    t0 = time.time()
    for seed in range(args.first, args.first + args.count):
        if time.time() - t0 > args.budget:
            break
        m, n, k, cfg = random_fp8_case(random.Random(seed), gpu=True)
        try:
            row = run_case(m, n, k, cfg, dev)
        except Exception as e:      # recorded: a compile error, or a CUDA error (which ends the run)
            row = {"m": m, "n": n, "k": k, "kernel": cfg.kernel_name(), "config": asdict(cfg), "ok": False,
                   "error": f"{type(e).__name__}: {e}"[:2000]}
        row["seed"] = seed
        doc["rows"].append(row)
        if not row["ok"]:
            print("FAIL", seed, m, n, k, row["kernel"], row.get("error", row.get("diff")), flush=True)
            if "CUDA" in row.get("error", ""):
                break
    doc["cases"], doc["failed"] = len(doc["rows"]), sum(not r["ok"] for r in doc["rows"])
    write(args.out, doc)
    print(f"{doc['cases']} cases, {doc['failed']} failed, {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
