"""Summaries of bench/results/fp8_gemm_nt.json: a markdown table and an SVG plot (one command).

    python bench/report.py [--json bench/results/fp8_gemm_nt.json] [--svg bench/results/fp8_gemm_nt.svg]

The plot has one group per (M, N, K) of DeepGEMM's table: TFLOPS of dgir, cuBLAS (same run) and
DeepGEMM (its published H200 figure from issue 4), with the roofline min(FP8 peak, copy bandwidth x
arithmetic intensity) as a tick; the lower panel shows dgir's effective bandwidth against the copy
bandwidth of the same run.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

PEAK_TFLOPS = 1979.0
ROOT = Path(__file__).resolve().parent


def cold_compile_text() -> str:
    """The CPU machine's cold-compile figure and its parts, per fresh process (ranges over the runs)."""
    lo, hi, runs, doc = cpu_cold_compile()

    def span(key):
        vals = [r[key] for r in doc["runs"]]
        return f"{min(vals):.2f}-{max(vals):.2f} s" if f"{min(vals):.2f}" != f"{max(vals):.2f}" else f"{min(vals):.3f} s"
    return (f"{lo:.2f}-{hi:.2f} s ({runs}): ptxas {span('ptxas_s')}, lowering, passes and emitter "
            f"{span('passes_emit_s')}, the modules the pipeline imports on first use {span('first_use_s')} (a second "
            f"shape compiled in the same process: {span('second_shape_s')})")


def cpu_cold_compile() -> tuple[float, float, str, dict]:
    """Issue 4's cold-compile figure is taken on the 2-core CPU machine (no GPU), not by the GPU run:
    bench/cold_compile.py's result file (lowering -> cubin of fp8_gemm_nt 4096x7168x16384 in fresh
    processes, empty cache, import excluded).  (min, max, what was run, the file)."""
    doc = json.loads((ROOT / "results" / "cold_compile.json").read_text())
    runs = f"{len(doc['runs'])} runs at rev {doc['git_rev']}, `bench/results/cold_compile.json`"
    return doc["first_s_min"], doc["first_s_max"], runs, doc


def rows(doc):
    return [r for r in doc["rows"] if r.get("variant") == "default" and "tflops" in r]


def roofline(r, copy_gbps):
    m, n, k = r["m"], r["n"], r["k"]
    nbytes = r["tflops"] and (2 * m * n * k / (r["tflops"] * 1e12)) * r["gbps"] * 1e9   # bytes counted in gbps
    return min(PEAK_TFLOPS, copy_gbps * 1e9 * (2 * m * n * k) / nbytes / 1e12)


def geomean(xs) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def markdown(doc) -> str:
    out = ["| M | N | K | dgir TFLOPS | cuBLAS TFLOPS | DeepGEMM TFLOPS | vs cuBLAS | vs DeepGEMM | dgir GB/s | % of copy | kernel |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios_cb, ratios_dg = [], []
    for r in rows(doc):
        cb, dg = r.get("cublas_tflops"), r.get("deepgemm_tflops_ref")
        vs_cb = r["tflops"] / cb if cb else None
        vs_dg = r["tflops"] / dg if dg else None
        if vs_cb:
            ratios_cb.append(vs_cb)
        if vs_dg:
            ratios_dg.append(vs_dg)
        f = lambda x, p=0: "—" if x is None else f"{x:.{p}f}"  # noqa: E731
        out.append(f"| {r['m']} | {r['n']} | {r['k']} | {f(r['tflops'])} | {f(cb)} | {f(dg)} | {f(vs_cb, 2)} | "
                   f"{f(vs_dg, 2)} | {f(r['gbps'])} | {f(100 * r['gbps'] / doc['copy_gbps'])} | "
                   f"{r.get('kernel', '').replace('fp8_gemm_nt_', '')} |")
    out.append("")
    out.append(f"Geometric mean over cuBLAS: {geomean(ratios_cb):.3f}x ({len(ratios_cb)} shapes); over DeepGEMM's "
               f"published figures: {geomean(ratios_dg):.3f}x ({len(ratios_dg)} shapes).  Copy bandwidth in the same run: "
               f"{doc['copy_gbps']:.0f} GB/s.")
    return "\n".join(out)


def _cells(doc):
    """Issue 4's cells: the default rows that have both a cuBLAS time and a DeepGEMM figure."""
    return [r for r in rows(doc) if r.get("cublas_tflops") and r.get("deepgemm_tflops_ref")]


def targets(doc, floor: dict | None = None) -> str:
    """Issue 4's targets against this run, one line each: what it asks, what the run shows, met or not.
    `floor` is bench/results/memory_floor.json (a kernel that only moves each small-M cell's bytes,
    step 26), quoted where the bandwidth target asks for less time than moving the bytes alone takes."""
    cells = _cells(doc)
    gm = geomean([r["tflops"] / r["cublas_tflops"] for r in cells])
    name = lambda r: f"{r['m']}x{r['n']}x{r['k']}"  # noqa: E731
    pct = lambda r: f"{100 * r['gbps'] / doc['copy_gbps']:.0f}%"  # noqa: E731
    vs_dg = sorted(cells, key=lambda r: r["tflops"] / r["deepgemm_tflops_ref"])
    dg_ok = [r for r in cells if r["tflops"] >= 1.1 * r["deepgemm_tflops_ref"]]
    cb_low = min(cells, key=lambda r: r["tflops"] / r["cublas_tflops"])
    bw = [r for r in cells if r["m"] <= 128 and r["n"] != 576]
    bw_ok = [r for r in bw if r["gbps"] >= 0.6 * doc["copy_gbps"]]
    n576 = [r for r in cells if r["n"] == 576 and r["m"] <= 128]
    big = next(r for r in cells if (r["m"], r["n"], r["k"]) == (4096, 7168, 16384))
    ceiling = next((r["tflops"] for r in doc["rows"] if r["variant"] == "ceiling_no_promotion"
                    and (r["m"], r["n"], r["k"]) == (4096, 7168, 16384)), None)
    warm = doc["warm_call"]["mn_major_sfa"]["per_call_us"]
    ref = doc["warm_call"].get("torch_reference")
    torch_call = f"; torch's own `_scaled_mm` call {ref['scaled_mm_us']:.1f} us on the same host" if ref else ""
    lo, hi, runs, _ = cpu_cold_compile()
    yes = lambda ok: "met" if ok else "**not met**"  # noqa: E731
    floor_note = geo_note = ""
    if floor:       # what the targets need, from the same run and the floors (bench/target_bounds.py)
        from target_bounds import bounds, timer_floor_us
        with_target = [f for f in floor["rows"] if f["n"] != 576]
        over = [f for f in with_target if f["floor_us"] > f["target_us"]]
        # the floor's copy kernels are a bound for ours only if they, too, read B evict-first (step 125)
        hinted = all("floor_us_evict_first" in f for f in with_target)
        how = ("B read plain or evict-first" if hinted else
               "B read plain, as before dgir's B loads carried the L2 evict-first hint, so not a bound for them")
        floor_note = (f"; a kernel that only moves the bytes ({how}) is slower than the 60% time in {len(over)} of "
                      f"{len(with_target)} (`bench/results/memory_floor.json`, steps 26, 125)")
        tf = timer_floor_us()
        bound = bounds(doc, floor, tf)
        beyond = [c for c in bound["cells"] if c.get("target_below_physical_bound")]
        if beyond:
            floor_note += (f", and in {len(beyond)} even the timer's empty-kernel floor ({tf:.2f} us) plus the "
                           f"bytes at the HBM peak exceeds it: no kernel timed this way can meet it there")
        at_floor = bound["geomean_vs_cublas"]["small_m_at_copy_floor"]
        geo_note = f"; {at_floor:.3f}x if every M <= 128 cell ran at its memory floor (`bench/target_bounds.py`)"
    ceiling_note = f" (the no-promotion ceiling, not a correct kernel: {ceiling:.0f} in the same run)" if ceiling else ""
    lines = [
        "| issue 4 target | this run | |",
        "|---|---|---|",
        f"| every cell >= 1.1x DeepGEMM's figure | {len(dg_ok)} of {len(cells)} cells; lowest {name(vs_dg[0])} "
        f"{vs_dg[0]['tflops'] / vs_dg[0]['deepgemm_tflops_ref']:.2f}x | {yes(len(dg_ok) == len(cells))} |",
        f"| no cell slower than cuBLAS | lowest {name(cb_low)} {cb_low['tflops'] / cb_low['cublas_tflops']:.3f}x "
        f"| {yes(cb_low['tflops'] >= cb_low['cublas_tflops'])} |",
        f"| geometric mean over cuBLAS >= 1.4x | {gm:.3f}x{geo_note} | {yes(gm >= 1.4)} |",
        f"| M <= 128, N != 576: >= 60% of the copy bandwidth | {len(bw_ok)} of {len(bw)} cells "
        f"({', '.join(pct(r) for r in bw)}){floor_note} | {yes(len(bw_ok) == len(bw))} |",
        "| N = 576, M <= 128: >= 2x DeepGEMM | "
        + ", ".join(f"{name(r)} {r['tflops'] / r['deepgemm_tflops_ref']:.2f}x" for r in n576)
        + f" | {yes(all(r['tflops'] >= 2 * r['deepgemm_tflops_ref'] for r in n576))} |",
        f"| stretch: 4096x7168x16384 >= 1400 TFLOPS | {big['tflops']:.0f}{ceiling_note} | {yes(big['tflops'] >= 1400)} |",
        f"| cold compile <= 1 s on the 2-core CPU machine | {lo:.2f}-{hi:.2f} s there ({runs}); "
        f"{doc['cold_compile_s_gpu_host']:.2f} s on this run's GPU host | {yes(hi <= 1.0)} |",
        f"| CPU cost of a warm call <= 10 us | {warm:.1f} us (median of 2000 calls){torch_call} | {yes(warm <= 10.0)} |",
        "| deterministic by default | bitwise-equal outputs run to run, split-K included (GPU test "
        "`test_deterministic_bitwise`) | met |",
    ]
    return "\n".join(lines)


def _memory_floor() -> dict | None:
    p = ROOT / "results" / "memory_floor.json"
    return json.loads(p.read_text()) if p.exists() else None


def svg(doc) -> str:
    rs = [r for r in rows(doc) if r.get("deepgemm_tflops_ref")]
    W, H, left, top = 60 + 46 * len(rs), 560, 60, 30
    plot_h, bw_h = 300, 120
    ymax = PEAK_TFLOPS
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="10">',
             f'<text x="{left}" y="16" font-size="13">fp8_gemm_nt on {doc["device"]} ({doc["date"][:10]}, rev {str(doc.get("git_rev"))[:8]}): TFLOPS (log scale)</text>']
    y = lambda v: top + plot_h - plot_h * math.log10(max(v, 1)) / math.log10(ymax)  # noqa: E731
    for t in (1, 10, 100, 1000):
        parts.append(f'<line x1="{left}" x2="{W - 10}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{y(t) + 3:.1f}" text-anchor="end">{t}</text>')
    colors = {"dgir": "#1f77b4", "cuBLAS": "#ff7f0e", "DeepGEMM": "#2ca02c"}
    for i, r in enumerate(rs):
        x0 = left + 10 + 46 * i
        vals = [("dgir", r["tflops"]), ("cuBLAS", r.get("cublas_tflops") or 0), ("DeepGEMM", r["deepgemm_tflops_ref"])]
        for j, (name, v) in enumerate(vals):
            if v:
                parts.append(f'<rect x="{x0 + 12 * j}" y="{y(v):.1f}" width="11" height="{top + plot_h - y(v):.1f}" '
                             f'fill="{colors[name]}"><title>{name} {v:.0f} TFLOPS</title></rect>')
        rf = roofline(r, doc["copy_gbps"])
        parts.append(f'<line x1="{x0 - 2}" x2="{x0 + 37}" y1="{y(rf):.1f}" y2="{y(rf):.1f}" stroke="black" stroke-width="2">'
                     f'<title>roofline {rf:.0f}</title></line>')
        parts.append(f'<text x="{x0 + 17}" y="{top + plot_h + 12}" text-anchor="middle">{r["m"]}</text>'
                     f'<text x="{x0 + 17}" y="{top + plot_h + 23}" text-anchor="middle">{r["n"]}</text>'
                     f'<text x="{x0 + 17}" y="{top + plot_h + 34}" text-anchor="middle">{r["k"]}</text>')
        # bandwidth panel
        frac = r["gbps"] / doc["copy_gbps"]
        by = top + plot_h + 50 + bw_h * (1 - min(frac, 1))
        parts.append(f'<rect x="{x0 + 6}" y="{by:.1f}" width="24" height="{top + plot_h + 50 + bw_h - by:.1f}" fill="#9467bd">'
                     f'<title>{r["gbps"]:.0f} GB/s = {100 * frac:.0f}% of copy</title></rect>')
    base = top + plot_h + 50
    for f_ in (0, 0.6, 1.0):
        yy = base + bw_h * (1 - f_)
        parts.append(f'<line x1="{left}" x2="{W - 10}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#bbb" stroke-dasharray="3,3"/>'
                     f'<text x="{left - 6}" y="{yy + 3:.1f}" text-anchor="end">{int(100 * f_)}%</text>')
    parts.append(f'<text x="{left}" y="{base - 6}">dgir bandwidth, % of the copy bandwidth ({doc["copy_gbps"]:.0f} GB/s)</text>')
    lx = W - 260
    for j, (name, c) in enumerate(list(colors.items()) + [("roofline", "black")]):
        parts.append(f'<rect x="{lx + 62 * j}" y="{H - 16}" width="10" height="10" fill="{c}"/>'
                     f'<text x="{lx + 62 * j + 13}" y="{H - 7}">{name}</text>')
    parts.append(f'<text x="{left}" y="{H - 7}">columns: M / N / K</text></svg>')
    return "\n".join(parts)


def torch_reference(warm: dict) -> str:
    """The same host's cost of torch's own calls (runs from before warm_call.py recorded them have none)."""
    ref = warm.get("torch_reference")
    if not ref:
        return ""
    return (f"  On the same host, timed the same way, torch's call of the cuBLAS baseline (`torch._scaled_mm`, "
            f"same operands) costs {ref['scaled_mm_us']:.1f} us and a one-kernel `d.zero_()` {ref['zero__us']:.1f} us.")


def in_place(warm: dict) -> str:
    """The row-major call read in place by the K-major kernel (runs before step 114 have none)."""
    k = warm.get("row_major_sfa_in_place")
    return f" and {k['per_call_us']:.1f} us when the K-major kernel reads it row-major in place" if k else ""


def readme_section(doc, warm: dict) -> str:
    """The README's `## Results` section, from the result files."""
    table = markdown(doc).split("\n")
    keep = table[:2] + [l for l in table[2:] if l.split("|")[1:2] and l.split("|")[1].strip() in ("64", "128", "4096")]
    foot = [l for l in table if l.startswith("Geometric")]
    rows = {(r["variant"], r["m"], r["n"], r["k"]): r for r in doc["rows"]}
    t = lambda v, m, n, k: rows[(v, m, n, k)]["tflops"]  # noqa: E731
    acc = {(r["variant"], r.get("scale_spread")): r["diff"] for r in doc["rows"] if r["variant"].startswith("accuracy")}
    big, mid, short = (4096, 7168, 16384), (128, 7168, 16384), (4096, 7168, 2048)
    n_rep = max((len(r.get("ms_repeats", ())) for r in doc["rows"]), default=0)
    repeats = (f"  Each cell: ours and cuBLAS timed alternately {n_rep} times, the median of each (all "
               "timings are in the file)." if n_rep > 1 else "")
    return f"""## Results

All numbers: `bench/results/fp8_gemm_nt.json`, one run on the H200 (rev {str(doc['git_rev'])[:8]}, {doc['date'][:10]}),
made by `python bench/fp8_gemm_nt.py --out bench/results/fp8_gemm_nt.json` (timer: triton `do_bench`,
L2 flushed, median; cuBLAS = `torch._scaled_mm` with the same block scales in the same run; DeepGEMM =
its figures on this H200 quoted in issue 4, not re-measured).{repeats}  Every row is checked: D poisoned with
NaN before the launch, all elements finite, calc_diff against the float64 reference < 1e-3 (all are
about 1.3e-6).  This section, the table and the plot: `python bench/report.py --update-readme`.

![fp8_gemm_nt TFLOPS and bandwidth](bench/results/fp8_gemm_nt.svg)

{chr(10).join(keep)}

{foot[0] if foot else ''}

{targets(doc, _memory_floor())}

Pass ablations in the same run (TFLOPS): `prefetch_tma_descriptors` off {t('no_prefetch', *big):.0f} vs
{t('default', *big):.0f} on at {big[0]}x{big[1]}x{big[2]} (no effect beyond the ~4% spread between runs of the same kernel); `interleave_ffma` off
{t('no_interleave', *mid):.0f} vs {t('default', *mid):.0f} on at {mid[0]}x{mid[1]}x{mid[2]} (BLOCK_M 256 tiles share one partial across
their two waves and skip the pass); the SASS-level FFMA yield/reuse patch (`DGIR_SASS_INTERLEAVE=1`)
{t('sass_interleave', *big):.0f} and {t('sass_interleave', *mid):.0f} on the same two shapes (within noise).  `promote_scales` costs
{100 * (1 - t('default', *big) / t('ceiling_no_promotion', *big)):.0f}% against the no-promotion ceiling ({t('ceiling_no_promotion', *big):.0f} TFLOPS, not a correct kernel) and is
what makes per-block scales usable: applying the scales once at the end gives calc_diff
{acc[('accuracy_scale_at_end', 2.0)]:.3f} when the per-block scales vary (e^±2), against {acc[('accuracy_default', 2.0)]:.1e} with promotion
(with scales constant along K both give {acc[('accuracy_scale_at_end', 0.0)]:.1e} / {acc[('accuracy_default', 0.0)]:.1e}).
At {big[0]}x{big[1]}x{big[2]} (a 2-CTA cluster kernel): `multicast_tma` off {t('no_multicast', *big):.0f}, `stage_b_scales`
off {t('no_stage_b_scales', *big):.0f}, both on {t('default', *big):.0f} TFLOPS.  `overlap_epilogue` off / on: {t('no_overlap_epilogue', *big):.0f} / {t('default', *big):.0f}
at {big[0]}x{big[1]}x{big[2]}, {t('no_overlap_epilogue', *short):.0f} / {t('default', *short):.0f} at {short[0]}x{short[1]}x{short[2]}.

Host cost of a warm `deep_gemm.fp8_gemm_nt` call (same run, `bench/warm_call.py`, M=128 N=2112
K=7168; median of 2000 single calls made with the GPU queue drained): {warm['mn_major_sfa']['per_call_us']:.1f} us with SFA already
MN-major (90th percentile {warm['mn_major_sfa']['per_call_p90_us']:.1f} us), {warm['row_major_sfa']['per_call_us']:.1f} us when SFA needs the layout kernel{in_place(warm)}; back-to-back
calls average {warm['mn_major_sfa']['loop_us']:.1f} us (there the launch queue fills whenever the kernel is slower than the call).{torch_reference(warm)}  Cold compile of
fp8_gemm_nt 4096x7168x16384 (lowering -> cubin, empty cache, import excluded) on the 2-core CPU
machine: {cold_compile_text()}; on the GPU host {doc["cold_compile_s_gpu_host"]:.2f} s.  Tuning log with the cost model's predictions
against measurements: `bench/TUNING.md`.
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=str(ROOT / "results" / "fp8_gemm_nt.json"))
    ap.add_argument("--svg", default=str(ROOT / "results" / "fp8_gemm_nt.svg"))
    ap.add_argument("--update-readme", action="store_true", help="rewrite the README's Results section")
    args = ap.parse_args()
    doc = json.loads(Path(args.json).read_text())
    Path(args.svg).write_text(svg(doc))
    md = markdown(doc)
    (ROOT / "results" / "fp8_gemm_nt.md").write_text(md + "\n")
    print(md)
    if args.update_readme:
        readme = ROOT.parent / "README.md"
        text = readme.read_text()
        i = text.index("## Results")
        j = text.find("\n## ", i + 1)
        readme.write_text(text[:i] + readme_section(doc, doc["warm_call"]) + (text[j:] if j >= 0 else ""))


if __name__ == "__main__":
    main()
