"""The CPU config fuzz (tests/test_config_fuzz.py's check) over more sampler seeds than the suite's 240:
each case through the sm90a pipeline and the interpreter, against the float64 reference and
bitwise against the lowered IR; every case's PTX assembled by ptxas.

    python bench/config_fuzz_cpu.py --first 240 --count 2000 --out fuzz_cpu.json

Writes one row per case (seed, shape, kernel name, ok, the error's first line) and prints the failures.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import os
import random
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from dgir_testlib import check_sampled_case, random_fp8_case  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--first", type=int, default=240, help="first sampler seed (the suite runs 0-239)")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows, t0 = [], time.time()
    for seed in range(args.first, args.first + args.count):
        m, n, k, cfg = random_fp8_case(random.Random(seed))
        row = {"seed": seed, "m": m, "n": n, "k": k, "kernel": cfg.kernel_name(), "num_sms": cfg.num_sms,
               "swizzle_group": cfg.swizzle_group}
        try:
            check_sampled_case(m, n, k, cfg, assemble_ptx=True)
            row["ok"] = True
        except Exception as e:      # noqa: BLE001 - every failure is a row, the run goes on
            row["ok"], row["error"] = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            row["where"] = traceback.format_exc().splitlines()[-3].strip()
            print(f"seed {seed}: {m}x{n}x{k} {row['kernel']}: {row['error']}", flush=True)
        rows.append(row)
    bad = [r for r in rows if not r["ok"]]
    with open(args.out, "w") as f:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        json.dump({"git_rev": rev, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "machine": "CPU (the interpreter and ptxas; no GPU)",
                   "sampler": "tests/dgir_testlib.random_fp8_case", "first_seed": args.first,
                   "cases": len(rows), "failures": len(bad), "seconds": round(time.time() - t0, 1),
                   "rows": rows}, f, indent=0)
    print(f"{len(rows)} cases, {len(bad)} failures, {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
