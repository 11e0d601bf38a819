"""Two cost-model constant sets, judged on one spec's timings: where their API choices differ, the
time of the one over the other's (same file, medians of its passes), and each against cuBLAS.

    python bench/chooser_ab.py bench/results/raw/tune283_exp.json        # shipped REFIT vs refit_116
    python bench/chooser_ab.py bench/results/raw/tune296_exp.json --before without_128x136 --after entry_128x136

(--before / --after: a constant set of bench/random_shapes_specs.py by its function's name.)

For each shape above M = 320 in the file, the API's kernel (dgir.tuning.choose, today's m-tail rule)
under the shipped REFIT ("before") and under `random_shapes_specs.refit_116` ("after") is looked up
among the file's timed kernels; shapes where both kernels were timed and differ are rated.  The
verdict the cost model's refits have been held to (bench/TUNING.md steps 84, 110): the geomean of
after / before over those shapes, how many got slower, the worst, and the count behind cuBLAS.
"""
from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from fit_model import config_of, spec_number
from random_shapes_specs import above_first_fit, api_choice, refit_116, shipped_refit


def timings(path: Path) -> dict:
    """(m, n, k) -> {kernel name as today's kernels spell it, or "cublas": median seconds}."""
    spec = spec_number(path)
    found = defaultdict(lambda: defaultdict(list))
    for r in json.loads(path.read_text())["rows"]:
        if "ms" not in r or (r.get("variant", "default") not in ("default", "cublas")):
            continue
        if r.get("variant") == "cublas" or r.get("kernel") == "cublas":
            found[(r["m"], r["n"], r["k"])]["cublas"].append(r["ms"] * 1e-3)
            continue
        if r.get("diff") is None or r["diff"] > 1e-3 or r.get("all_finite") is False:
            continue
        cfg = config_of(r.get("kernel") or "", spec)
        if cfg is not None:
            found[(r["m"], r["n"], r["k"])][cfg.kernel_name()].append(r["ms"] * 1e-3)
    return {shape: {name: statistics.median(t) for name, t in kernels.items()} for shape, kernels in found.items()}


def compare(path: Path, before=None, after=None) -> dict:
    before, after = before or shipped_refit(), after or refit_116()
    rated = []
    for (m, n, k), med in sorted(timings(path).items()):
        if not above_first_fit(m):
            continue
        old, new = (api_choice(m, n, k, p, above_first_fit, tail_pairs=None).kernel_name() for p in (before, after))
        if old != new and old in med and new in med:
            rated.append({"m": m, "n": n, "k": k, "before": old, "after": new, "before_us": med[old] * 1e6,
                          "after_us": med[new] * 1e6, "ratio": med[new] / med[old],
                          "cublas_us": med["cublas"] * 1e6 if "cublas" in med else None})
    ratios = [r["ratio"] for r in rated]
    behind = lambda key: sum(r["cublas_us"] is not None and r[key] > r["cublas_us"] for r in rated)  # noqa: E731
    return {"shapes": len(rated), "geomean_after_over_before": math.exp(statistics.mean(map(math.log, ratios))) if ratios else None,
            "slower": sum(x > 1.0 for x in ratios), "worst": max(rated, key=lambda r: r["ratio"]) if rated else None,
            "behind_cublas_before": behind("before_us"), "behind_cublas_after": behind("after_us"), "rows": rated}


def main(path: str, before=None, after=None) -> None:
    out = compare(Path(path), before, after)
    if not out["shapes"]:
        print("no shape where both choices were timed")
        return
    w = out["worst"]
    print(f"{out['shapes']} shapes where the choices differ and both were timed: after / before "
          f"x{out['geomean_after_over_before']:.3f}, {out['slower']} slower, worst x{w['ratio']:.3f} at "
          f"{w['m']}x{w['n']}x{w['k']} ({w['after']} {w['after_us']:.1f} us against {w['before']} {w['before_us']:.1f}); "
          f"behind cuBLAS {out['behind_cublas_before']} -> {out['behind_cublas_after']}")


if __name__ == "__main__":
    import argparse
    import random_shapes_specs
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", default=str(Path(__file__).resolve().parent / "results" / "raw" / "tune283_exp.json"))
    ap.add_argument("--before", default="shipped_refit", help="a constant set of random_shapes_specs.py, by name")
    ap.add_argument("--after", default="refit_116")
    cli = ap.parse_args()
    main(cli.file, getattr(random_shapes_specs, cli.before)(), getattr(random_shapes_specs, cli.after)())
