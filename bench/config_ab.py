"""Every config a spec timed at a shape against the kernel the API runs there, from one file.

    python bench/config_ab.py bench/results/raw/tune306_exp.json
    python bench/config_ab.py bench/results/raw/tune306_exp.json --match _o3 --match _o4

Per shape: the medians of each timed kernel (its repetitions in that file), each over the median of
the API's kernel (dgir.tuning.choose on the H200's 132 SMs, as bench/api_regret.py looks it up);
then, over the kernels whose name contains every --match string, the geomean of the best such kernel
per shape over the API's, and how many shapes it beat by more than the spread between repetitions
(SPREAD) or lost by more.  Shapes where the API's kernel was not timed are listed, not rated.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from fit_model import config_of, spec_number

from dgir import tuning
from dgir.ops.fp8_gemm import NUM_SMS

SPREAD = 0.02     # repetitions of one kernel in one file spread by 1-2% (bench/TUNING.md step 88)


def medians(path: Path) -> dict:
    """(m, n, k) -> {kernel name as today's kernels spell it: median seconds} over correct rows."""
    spec, found = spec_number(path), defaultdict(lambda: defaultdict(list))
    for r in json.loads(path.read_text())["rows"]:
        if r.get("variant", "default") != "default" or "ms" not in r or not r.get("kernel"):
            continue
        if r.get("diff") is None or r["diff"] > 1e-3 or r.get("all_finite") is False:
            continue
        cfg = config_of(r["kernel"], spec)
        if cfg is not None:
            found[(r["m"], r["n"], r["k"])][cfg.kernel_name()].append(r["ms"] * 1e-3)
    return {s: {k: statistics.median(t) for k, t in v.items()} for s, v in found.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path)
    ap.add_argument("--match", action="append", default=[], help="rate the kernels whose name contains this")
    args = ap.parse_args()
    best_ratios = []
    for (m, n, k), kernels in sorted(medians(args.file).items()):
        api = tuning.choose("fp8_gemm_nt", m, n, k, "NVIDIA H200", NUM_SMS).config.kernel_name()
        if api not in kernels:
            print(f"{m}x{n}x{k}: the API's {api} not timed")
            continue
        t_api = kernels[api]
        print(f"{m}x{n}x{k}: API {api.removeprefix('fp8_gemm_nt_')} {t_api * 1e6:.2f} us")
        for name, t in sorted(kernels.items(), key=lambda kv: kv[1]):
            if name != api:
                print(f"    {t / t_api:.3f}  {t * 1e6:8.2f} us  {name.removeprefix('fp8_gemm_nt_')}")
        rated = [t for name, t in kernels.items() if name != api and all(s in name for s in args.match)]
        if rated:
            best_ratios.append(min(rated) / t_api)
    if best_ratios:
        g = math.exp(statistics.mean(math.log(r) for r in best_ratios))
        faster = sum(r < 1 - SPREAD for r in best_ratios)
        slower = sum(r > 1 + SPREAD for r in best_ratios)
        print(f"best matching kernel / API's kernel over {len(best_ratios)} shapes: geomean {g:.3f}, "
              f"{faster} faster, {slower} slower, {len(best_ratios) - faster - slower} within {SPREAD:.0%}; "
              f"range {min(best_ratios):.3f}-{max(best_ratios):.3f}")


if __name__ == "__main__":
    main()
