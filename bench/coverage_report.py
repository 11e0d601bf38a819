"""dgir against cuBLAS at the M between (and beyond) the issue's rows, from the committed sweeps.

    python bench/coverage_report.py      # writes bench/results/coverage_m.json and coverage_m.md

Sources: specs 42-43 (M = 256 .. 2048 and 4097: the model's top candidates, the neighbouring tuned
configs, cuBLAS) and spec 44 (M = 17 .. 8191 off the measured grid: the API's pick under the rule
of that commit, the model's pick, cuBLAS), each one device call on the H200, triton do_bench with
L2 flushed, median.  For every shape the row gives the config dgir's API takes *now* (tuned entry,
else a near measured M, else the model: dgir.tuning) with its time where a sweep timed it, the
fastest config timed, the model's pick, and cuBLAS from the same call.
"""
from __future__ import annotations

import json
import math
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from coverage_specs import api_pick, spec_of  # noqa: E402

from dgir.ops.fp8_gemm import choose_config  # noqa: E402

ROOT = Path(__file__).resolve().parent
SOURCES = ["results/raw/tune42_exp.json", "results/raw/tune43_exp.json", "results/raw/tune44_exp.json"]


def collect():
    timed = defaultdict(dict)      # (m, n, k) -> config part of the spec -> (ms, source)
    cublas = {}
    meta = {}
    for src in SOURCES:
        doc = json.loads((ROOT / src).read_text())
        meta[src] = {"git_rev": doc.get("git_rev"), "date": doc.get("date"), "device": doc.get("device")}
        for r in doc["rows"]:
            if "ms" not in r:
                continue
            key = (r["m"], r["n"], r["k"])
            if r["kernel"] == "cublas":
                if key not in cublas or r["ms"] < cublas[key][0]:
                    cublas[key] = (r["ms"], src)
                continue
            if not r.get("diff", 1) < 1e-3:
                continue
            part = r["spec"].split(":", 1)[1]
            if part not in timed[key] or r["ms"] < timed[key][part][0]:
                timed[key][part] = (r["ms"], src)
    return timed, cublas, meta


def main():
    timed, cublas, meta = collect()
    rows = []
    for (m, n, k), t in sorted(timed.items()):
        flops = 2 * m * n * k
        tf = lambda ms: round(flops / ms / 1e9, 1)  # noqa: E731
        best = min(t, key=lambda s: t[s][0])
        api = spec_of(m, api_pick(m, n, k)).split(":", 1)[1]
        model = spec_of(m, choose_config(m, n, k)).split(":", 1)[1]
        row = {"m": m, "n": n, "k": k, "api_config": api, "api_tflops": tf(t[api][0]) if api in t else None,
               "best_config": best, "best_tflops": tf(t[best][0]), "model_config": model,
               "model_tflops": tf(t[model][0]) if model in t else None, "configs_timed": len(t),
               "cublas_tflops": tf(cublas[(m, n, k)][0]) if (m, n, k) in cublas else None,
               "source": t[best][1]}
        if row["api_tflops"] and row["cublas_tflops"]:
            row["api_vs_cublas"] = round(row["api_tflops"] / row["cublas_tflops"], 3)
        rows.append(row)
    doc = {"sources": meta, "method": __doc__.strip().split("\n\n")[-1].replace("\n", " "), "rows": rows}
    (ROOT / "results" / "coverage_m.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = ["| M | N | K | API config | TFLOPS | fastest timed | TFLOPS | model's pick | cuBLAS | API / cuBLAS |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = lambda x: "—" if x is None else f"{x:.0f}"  # noqa: E731
        lines.append(f"| {r['m']} | {r['n']} | {r['k']} | {r['api_config']} | {f(r['api_tflops'])} | {r['best_config']} | "
                     f"{f(r['best_tflops'])} | {f(r['model_tflops'])} | {f(r['cublas_tflops'])} | "
                     f"{r.get('api_vs_cublas', '—')} |")
    vs = [r["api_vs_cublas"] for r in rows if "api_vs_cublas" in r]
    below = [r for r in rows if r.get("api_vs_cublas", 9) < 1]
    summary = (f"\n{len(vs)} shapes with the API's config and cuBLAS timed: geometric mean "
               f"{math.exp(sum(map(math.log, vs)) / len(vs)):.3f}x cuBLAS; {len(below)} below cuBLAS "
               "(" + ", ".join(f"{r['m']}x{r['n']}x{r['k']} {r['api_vs_cublas']}" for r in below) + ").\n")
    (ROOT / "results" / "coverage_m.md").write_text("\n".join(lines) + "\n" + summary)
    print(summary)


if __name__ == "__main__":
    main()
