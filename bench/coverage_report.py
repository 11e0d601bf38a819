"""dgir against cuBLAS at the M between (and beyond) the issue's rows.

    python bench/coverage_report.py      # writes bench/results/coverage_m.json, .md and .svg

The API and cuBLAS columns come from spec 50 (one device call at the revision it names: for every
shape the config dgir's API takes - tuned entry, else a near measured M, else the model:
dgir.tuning - and cuBLAS, side by side; triton do_bench with L2 flushed, median), with the four
shapes whose tuned entry spec 51 changed taken again, API and cuBLAS, from spec 52.  The "fastest
timed" and "model's pick" columns come from the config sweeps, specs 42-44 (M = 256 .. 2048 and
4097: the model's top candidates and the neighbouring tuned configs; M = 17 .. 8191 off the grid:
the nearest-M pick and the model's), which ran before the warpgroup-index broadcast (step 31)
made the kernels with two math warpgroups 2-9% faster: compare them with each other, not with
the API column.
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
SOURCES = ["results/raw/tune42_exp.json", "results/raw/tune43_exp.json", "results/raw/tune44_exp.json",
           # 192-row tiles (step 41)
           "results/raw/tune68_exp.json", "results/raw/tune69_exp.json", "results/raw/tune70_exp.json",
           "results/raw/tune72_exp.json", "results/raw/tune73_exp.json", "results/raw/tune75_exp.json",
           "results/raw/tune76_exp.json", "results/raw/tune78_exp.json", "results/raw/tune79_exp.json"]
# the API's config and cuBLAS, side by side; a later run replaces an earlier one's shapes (spec 52:
# the four shapes whose tuned entry spec 51 changed; spec 64: the N=32768 K=512 shapes step 38 changed;
# spec 66: the shapes whose entry step 39 added; specs 68-70: the 192-row tiles of step 41; spec 71:
# every entry step 41 moved, re-timed after the choice).  A row counts only while its config is the
# API's pick.
API_RUNS = ["results/raw/tune50_exp.json", "results/raw/tune52_exp.json", "results/raw/tune64_exp.json",
            "results/raw/tune66_exp.json", "results/raw/tune68_exp.json", "results/raw/tune69_exp.json",
            "results/raw/tune70_exp.json", "results/raw/tune71_exp.json", "results/raw/tune72_exp.json",
            "results/raw/tune73_exp.json",
            # spec 74: every shape's API pick and cuBLAS in one call (python coverage_specs.py --api)
            "results/raw/tune74_exp.json",
            # spec 75: 192-row tiles where their rounds hold no more work (three entries moved)
            "results/raw/tune75_exp.json",
            # spec 77: M = 8191 with the M = 8192 entries (cuBLAS rejects this M)
            "results/raw/tune77_exp.json",
            # spec 80: the shapes whose pick the bracketing-entries rule (step 46) changed
            "results/raw/tune80_exp.json",
            # spec 97: the shapes whose pick the deeper rings of step 54 changed
            "results/raw/tune97_exp.json",
            # spec 98: the three shapes whose kernel step 52 changed (96/128/384x32768x512), re-timed
            "results/raw/tune98_exp.json",
            # spec 100: the shapes whose pick step 56 moved
            "results/raw/tune100_exp.json",
            # spec 108: the shapes the L2 hint of step 61 can reach (B >= 24 MiB, M <= 1024), final form
            "results/raw/tune108_exp.json",
            # specs 110-111: the M = 128 entries step 63 moved, timed beside cuBLAS (the later spec's rows win)
            "results/raw/tune110_exp.json", "results/raw/tune111_exp.json",
            # spec 128: the shapes whose API pick is a 192-row kernel, re-timed after step 68's hoist
            # changed those kernels (their config strings did not change)
            "results/raw/tune128_exp.json",
            # spec 132: every shape's API pick and cuBLAS again after step 70 changed every kernel
            "results/raw/tune132_exp.json",
            # spec 139: every shape again, three passes in alternating order (step 77)
            "results/raw/tune139_exp.json",
            # spec 142: the 33 shapes whose pick is a 256x128 kernel, after step 78 hoisted those
            "results/raw/tune142_exp.json",
            # spec 146: the 5 shapes whose pick is a 128x192 kernel, after step 80 hoisted those
            "results/raw/tune146_exp.json",
            # spec 179: the grid points without an entry before step 87, and M = 4097, every config
            # beside cuBLAS (the API's new picks among them)
            "results/raw/tune179_exp.json",
            # specs 183, 184: the points 7 * 2^i (896 .. 7168) added to the grid in step 87
            "results/raw/tune183_exp.json", "results/raw/tune184_exp.json",
            # spec 185: the points 5 * 2^i (640 .. 5120)
            "results/raw/tune185_exp.json",
            # spec 195: the 31 shapes whose pick is a 256-row tile at K <= 2048, after steps 90-94
            # (early staging; off at M <= 1024)
            "results/raw/tune195_exp.json",
            # spec 197: the 7 of them at M <= 1024 again, with the early staging but not the early store
            # (step 95)
            "results/raw/tune197_exp.json",
            # step 96: the picks the early store's new bound and specs 198-200's entries changed,
            # with their neighbours' configs at 4097-5000 (three passes)
            "results/raw/tune201_exp.json",
            # step 97: the K = 1536-2048 entries at M > 1024 re-timed against 256x128 (three passes;
            # the picks it moved among them)
            "results/raw/tune203_exp.json",
            # spec 257: the N = 576 shapes whose pick step 105 turned into the tile alone walking N
            # first (fp8_gemm.settle_walk_order), beside the pick before it and cuBLAS (two passes)
            "results/raw/tune257_exp.json",
            # spec 260: the two N = 576 shapes whose pick step 106 turned into the tile alone walking N
            # first past one round (7168 and 8191; cuBLAS rejects M = 8191), with the pick before
            "results/raw/tune260_exp.json",
            # spec 314 (step 129, the H200): the coverage shapes whose pick step 125's three-CTA entries
            # moved, the three-CTA config and the one before it beside cuBLAS (two passes)
            "results/raw/tune314_exp.json"]
# runs whose "::default" lines (the API's pick as that revision's chooser made it) stand for the pick, at
# the shapes earlier runs listed (held-out random shapes beside them are not coverage shapes)
DEFAULT_LINE_RUNS = {"results/raw/tune260_exp.json"}
# Not used: spec 106 (bench/TUNING.md step 61) timed the API's picks with an earlier form of the L2
# hint (an evict_normal policy while the hint was off, up to 17% slower there), not today's kernels.
# Not used: spec 92 (those three shapes' first re-timing) - cuBLAS ran anomalously slow in that call
# (21-27 us in its first pass, 14-16 in its second, against 13-14.5 in every other run); spec 98
# timed them again (bench/TUNING.md step 54).


def collect():
    """The config sweeps: (m, n, k) -> config part of the spec -> (fastest ms, source), and each
    file's revision, date and device."""
    timed = defaultdict(dict)
    meta = {}
    for src in SOURCES:
        doc = json.loads((ROOT / src).read_text())
        meta[src] = {"git_rev": doc.get("git_rev"), "date": doc.get("date"), "device": doc.get("device")}
        for r in doc["rows"]:
            if "ms" not in r or r["kernel"] == "cublas" or not r.get("diff", 1) < 1e-3:
                continue
            key, part = (r["m"], r["n"], r["k"]), r["spec"].split(":", 1)[1]
            if part not in timed[key] or r["ms"] < timed[key][part][0]:
                timed[key][part] = (r["ms"], src)
    return timed, meta


def main(out_dir: Path | None = None):
    out_dir = out_dir or ROOT / "results"
    timed, meta = collect()
    api_ms, cublas, revs, listed = {}, {}, [], set()
    for run in API_RUNS:
        api_doc = json.loads((ROOT / run).read_text())
        meta[run] = {"git_rev": api_doc.get("git_rev"), "date": api_doc.get("date"), "device": api_doc.get("device")}
        revs.append(str(api_doc.get("git_rev"))[:8])
        # per shape of this call: each config's time and cuBLAS's, the faster of its repeats for
        # both (a call may time a shape in two passes, and several configs besides the API's)
        here_api, here_cublas = defaultdict(dict), {}
        for r in api_doc["rows"]:
            if "ms" not in r:
                continue
            key = (r["m"], r["n"], r["k"])
            if r["kernel"] == "cublas":
                here_cublas[key] = min(r["ms"], here_cublas.get(key, float("inf")))
            elif r.get("variant", "default") == "default" and r.get("diff", 1) < 1e-3 and r.get("all_finite", True):
                # (ablation variants of the same config, e.g. spec 106's nohint, are not the API's kernel)
                cfg = r["spec"].split(":")[1]
                if not cfg:
                    pick = api_pick(*key)
                    if run not in DEFAULT_LINE_RUNS or key not in listed or r["kernel"] != pick.kernel_name():
                        continue
                    cfg = spec_of(key[0], pick).split(":", 1)[1]
                here_api[key][cfg] = min(r["ms"], here_api[key].get(cfg, float("inf")))
        listed |= here_api.keys()
        for key, configs in here_api.items():     # a shape's API and cuBLAS times come from one call
            pick = spec_of(key[0], api_pick(*key)).split(":", 1)[1]
            if pick not in configs:
                continue               # the API's pick was not timed here (or the table moved on): an earlier run stands
            api_ms[key] = (pick, configs[pick])
            if key in here_cublas:
                cublas[key] = here_cublas[key]
            else:
                cublas.pop(key, None)
    rows = []
    for (m, n, k), (api, ms) in sorted(api_ms.items()):
        flops = 2 * m * n * k
        tf = lambda ms: round(flops / ms / 1e9, 1)  # noqa: E731
        t = timed.get((m, n, k), {})
        best = min(t, key=lambda s: t[s][0]) if t else None
        model = spec_of(m, choose_config(m, n, k)).split(":", 1)[1]
        row = {"m": m, "n": n, "k": k, "api_config": api, "api_tflops": tf(ms),
               "cublas_tflops": tf(cublas[(m, n, k)]) if (m, n, k) in cublas else None,
               "sweep_best_config": best, "sweep_best_tflops": tf(t[best][0]) if best else None,
               "sweep_model_tflops": tf(t[model][0]) if model in t else None,
               "sweep_configs_timed": len(t)}
        if row["cublas_tflops"]:
            row["api_vs_cublas"] = round(row["api_tflops"] / row["cublas_tflops"], 3)
        rows.append(row)
    doc = {"sources": meta, "method": __doc__.strip().split("\n\n")[-1].replace("\n", " "), "rows": rows}
    (out_dir / "coverage_m.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = ["| M | N | K | API config | TFLOPS | cuBLAS | API / cuBLAS | sweep: fastest timed | TFLOPS | model's pick |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = lambda x: "—" if x is None else f"{x:.0f}"  # noqa: E731
        lines.append(f"| {r['m']} | {r['n']} | {r['k']} | {r['api_config']} | {f(r['api_tflops'])} | "
                     f"{f(r['cublas_tflops'])} | {r.get('api_vs_cublas', '—')} | {r['sweep_best_config'] or '—'} | "
                     f"{f(r['sweep_best_tflops'])} | {f(r['sweep_model_tflops'])} |")
    vs = [r["api_vs_cublas"] for r in rows if "api_vs_cublas" in r]
    below = [r for r in rows if r.get("api_vs_cublas", 9) < 1]
    specs = ", ".join(Path(run).stem.removeprefix("tune").removesuffix("_exp") for run in API_RUNS)
    summary = (f"\nSpecs {specs} (revs {', '.join(revs)}): {len(vs)} shapes with the API's config and cuBLAS timed: geometric mean "
               f"{math.exp(sum(map(math.log, vs)) / len(vs)):.3f}x cuBLAS; {len(below)} below cuBLAS "
               "(" + ", ".join(f"{r['m']}x{r['n']}x{r['k']} {r['api_vs_cublas']}" for r in below) + ").\n")
    (out_dir / "coverage_m.md").write_text("\n".join(lines) + "\n" + summary)
    (out_dir / "coverage_m.svg").write_text(svg(rows, ", ".join(revs)))
    print(summary)


def svg(rows, rev: str) -> str:
    """Small multiples, one panel per (N, K): TFLOPS against M (log scales) of the API's config and
    of cuBLAS from the same call; a red mark where dgir is below cuBLAS."""
    nk = sorted({(r["n"], r["k"]) for r in rows}, key=lambda x: (x[1], x[0]))
    cols, pw, ph, pad = 4, 230, 170, 46
    W, H = cols * (pw + pad) + pad, math.ceil(len(nk) / cols) * (ph + 60) + 50
    ms = sorted({r["m"] for r in rows})
    lx = lambda m, x0: x0 + pw * (math.log2(m) - math.log2(ms[0])) / (math.log2(ms[-1]) - math.log2(ms[0]))  # noqa: E731
    ly = lambda v, y0: y0 + ph - ph * math.log10(max(v, 10) / 10) / math.log10(200)  # noqa: E731  (10..2000)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="10">',
           f'<text x="{pad}" y="16" font-size="13">fp8_gemm_nt on the H200, dgir\'s API config (blue) and cuBLAS (orange), '
           f'TFLOPS against M; specs 50, 52 (revs {rev})</text>']
    for i, (n, k) in enumerate(nk):
        x0, y0 = pad + (i % cols) * (pw + pad), 40 + (i // cols) * (ph + 60)
        out.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>'
                   f'<text x="{x0}" y="{y0 - 4}">N={n} K={k}</text>')
        for t in (20, 50, 100, 200, 500, 1000):
            out.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{ly(t, y0):.1f}" y2="{ly(t, y0):.1f}" stroke="#eee"/>'
                       f'<text x="{x0 - 3}" y="{ly(t, y0) + 3:.1f}" text-anchor="end">{t}</text>')
        for m in (32, 128, 512, 2048, 8192):
            if ms[0] <= m <= ms[-1]:
                out.append(f'<text x="{lx(m, x0):.1f}" y="{y0 + ph + 12}" text-anchor="middle">{m}</text>')
        pts = sorted((r["m"], r) for r in rows if (r["n"], r["k"]) == (n, k))
        for key, color in (("api_tflops", "#1f77b4"), ("cublas_tflops", "#ff7f0e")):
            xy = [(lx(m, x0), ly(r[key], y0)) for m, r in pts if r.get(key)]
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="'
                       + " ".join(f"{x:.1f},{y:.1f}" for x, y in xy) + '"/>')
        for m, r in pts:
            if r.get("api_vs_cublas", 9) < 1:
                out.append(f'<circle cx="{lx(m, x0):.1f}" cy="{ly(r["api_tflops"], y0):.1f}" r="3" fill="#d62728">'
                           f'<title>M={m}: {r["api_tflops"]:.0f} vs cuBLAS {r["cublas_tflops"]:.0f}</title></circle>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", type=Path, default=None, help="default: bench/results")
    main(ap.parse_args().out_dir)
