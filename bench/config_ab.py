"""Every config a spec timed at a shape against the kernel the API runs there, from one file.

    python bench/config_ab.py bench/results/raw/tune306_exp.json
    python bench/config_ab.py bench/results/raw/tune306_exp.json --match _o3 --match _o4

Per shape: the medians of each timed kernel (its repetitions in that file, as chooser_ab.timings
reads them), each over the median of the API's kernel (dgir.tuning.choose on the H200's 132 SMs,
as bench/api_regret.py looks it up); then, over the kernels whose name contains every --match string, the geomean of the best such kernel
per shape over the API's, and how many shapes it beat by more than the spread between repetitions
(SPREAD) or lost by more.  Shapes where the API's kernel was not timed are listed, not rated.
"""
from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from chooser_ab import timings

from dgir import tuning
from dgir.ops.fp8_gemm import NUM_SMS

SPREAD = 0.02     # repetitions of one kernel in one file spread by 1-2% (bench/TUNING.md step 88)


def best_over_api(path: Path, match: tuple = (), api_then: dict | None = None) -> dict:
    """(m, n, k) -> (the API's kernel, its median, [(median / the API's, median, kernel)] fastest
    first, the best ratio among kernels whose name holds every `match` string or None); shapes whose
    API kernel the file did not time map to (the API's kernel, None, [], None).  `api_then`: (m, n,
    k) -> kernel name, the API's pick at a past revision where it differs from today's (a verdict
    read as it was made)."""
    out = {}
    for (m, n, k), kernels in sorted(timings(path).items()):
        kernels = {name: t for name, t in kernels.items() if name != "cublas"}
        api = (api_then or {}).get((m, n, k)) or \
            tuning.choose("fp8_gemm_nt", m, n, k, "NVIDIA H200", NUM_SMS).config.kernel_name()
        if api not in kernels:
            out[(m, n, k)] = (api, None, [], None)
            continue
        t_api = kernels[api]
        others = sorted((t / t_api, t, name) for name, t in kernels.items() if name != api)
        rated = [r for r, _, name in others if all(s in name for s in match)]
        out[(m, n, k)] = (api, t_api, others, min(rated) if rated else None)
    return out


def summary(ratios: list) -> dict:
    """The geomean of the best matching kernel over the API's, and how many shapes beat it by more
    than SPREAD, lost by more, or tied."""
    g = math.exp(statistics.mean(math.log(r) for r in ratios))
    faster, slower = sum(r < 1 - SPREAD for r in ratios), sum(r > 1 + SPREAD for r in ratios)
    return {"shapes": len(ratios), "geomean": g, "faster": faster, "slower": slower,
            "ties": len(ratios) - faster - slower, "lo": min(ratios), "hi": max(ratios)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path)
    ap.add_argument("--match", action="append", default=[], help="rate the kernels whose name contains this")
    args = ap.parse_args()
    rated = best_over_api(args.file, tuple(args.match))
    for (m, n, k), (api, t_api, others, _) in rated.items():
        if t_api is None:
            print(f"{m}x{n}x{k}: the API's {api} not timed")
            continue
        print(f"{m}x{n}x{k}: API {api.removeprefix('fp8_gemm_nt_')} {t_api * 1e6:.2f} us")
        for ratio, t, name in others:
            print(f"    {ratio:.3f}  {t * 1e6:8.2f} us  {name.removeprefix('fp8_gemm_nt_')}")
    ratios = [best for *_, best in rated.values() if best is not None]
    if ratios:
        s = summary(ratios)
        print(f"best matching kernel / API's kernel over {s['shapes']} shapes: geomean {s['geomean']:.3f}, "
              f"{s['faster']} faster, {s['slower']} slower, {s['ties']} within {SPREAD:.0%}; "
              f"range {s['lo']:.3f}-{s['hi']:.3f}")


if __name__ == "__main__":
    main()
