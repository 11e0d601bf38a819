"""Do the default passes still pay?  The full runs' ablations, read back across runs.

    python bench/ablation_trend.py [--since 2026-12-01T02:30] [--last N]

Every full run (bench/fp8_gemm_nt.py: bench/results/fp8_gemm_nt.json and the earlier runs kept as
raw/final_<rev>.json) times the same ablations back to back at five shapes, after the table.  One
run's ablation against the default says little (the default row is timed in another phase, between
cuBLAS calls, and single timings spread by a few %), but the ablations of one run share their
conditions.  So each ablation is rated against the median of the *other* ablations timed beside it
in the same run, and that ratio is followed over runs: its geometric mean and in how many runs it
was above 1 (the ablation faster, i.e. the pass it drops costs time).  A pass that does nothing at a
shape (e.g. `stage_b_scales` below 128x128 tiles) shows the order's bias there.  The ceiling rows
(no promotion: not a kernel anyone runs) are left out.  Found with it: step 119's B-scale staging.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
LEFT_OUT = ("default", "ceiling_no_promotion")


def runs(since: str = "", last: int | None = None) -> list[dict]:
    """The H200's full runs' documents, oldest first (by their date), from `since` on, the last `last`
    (a run on another card, e.g. raw/final_h100_*.json, is not one of the trend's)."""
    docs = [json.loads(p.read_text()) for p in sorted((RESULTS / "raw").glob("final_*.json"))]
    docs.append(json.loads((RESULTS / "fp8_gemm_nt.json").read_text()))
    docs = sorted((d for d in docs if d.get("date", "") >= since and "H200" in str(d.get("device", "H200"))),
                  key=lambda d: d.get("date", ""))
    return docs[-last:] if last else docs


def ratios(docs: list[dict]) -> dict:
    """(shape, ablation) -> [its TFLOPS over the median of the other ablations of its run, per run]."""
    out = defaultdict(list)
    for doc in docs:
        by_shape = defaultdict(dict)
        for r in doc["rows"]:
            if r.get("tflops") and r.get("variant") not in LEFT_OUT:
                by_shape[(r["m"], r["n"], r["k"])][r["variant"]] = r["tflops"]
        for shape, v in by_shape.items():
            if len(v) < 3:
                continue
            for name, t in v.items():
                out[(shape, name)].append(t / statistics.median(x for other, x in v.items() if other != name))
    return out


def table(docs: list[dict]) -> str:
    rated = ratios(docs)
    shapes = sorted({s for s, _ in rated}, key=lambda s: (-s[0], s))
    names = sorted({a for _, a in rated})
    head = "| ablation | " + " | ".join(f"{m}x{n}x{k}" for m, n, k in shapes) + " |"
    lines = [head, "|" + "---|" * (len(shapes) + 1)]
    for a in names:
        cells = []
        for s in shapes:
            r = rated.get((s, a))
            cells.append(f"{math.exp(statistics.mean(map(math.log, r))):.3f} ({sum(x > 1 for x in r)}/{len(r)})"
                         if r else "")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    dates = [d.get("date", "")[:16] for d in docs]
    return (f"{len(docs)} full runs, {dates[0]} .. {dates[-1]}; each ablation's TFLOPS over the median of the "
            f"other ablations of its run: geometric mean (runs above 1 / runs)\n\n" + "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--since", default="", help="ISO date: runs from then on (e.g. 2026-12-01T02:30)")
    ap.add_argument("--last", type=int, default=None, help="only the last N runs")
    args = ap.parse_args()
    print(table(runs(args.since, args.last)))


if __name__ == "__main__":
    main()
