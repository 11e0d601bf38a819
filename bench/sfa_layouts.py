"""A call with SFA row-major [M, K/128] (what per-token quantisation gives, DeepGEMM's usual input):
staged MN-major by the transpose kernel with the GEMM launched after it plainly ("staged_serial", the
API's path before step 113) or with PDL ("staged", deep_gemm.OVERLAP_STAGING); read in place by the
sfa_major="k" kernel ("k_major", at any tile size); and SFA already MN-major ("mn_major", the result
file's mode).  `api_reads_in_place`: whether the API's default reads it in place at this shape (tiles
of <= deep_gemm.SFA_K_MAJOR_MAX_BLOCK_M rows), else it stages.

Each variant is the whole `deep_gemm.fp8_gemm_nt` call under the benchmark's timer (triton do_bench,
L2 flushed, median), so the staged ones include their transpose launch; they take turns, three rounds.
Every variant's D is poisoned before its call and checked against the float64 reference.

    python bench/sfa_layouts.py --out sfa_layouts.json [M,N,K ...]     # default: the issue's 21 cells
"""
import statistics

import torch

from common import calc_diff, do_bench, header, out_and_shapes, write

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs

NK = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
SHAPES = [(m, n, k) for m in (64, 128, 4096) for n, k in NK]


def cell(m, n, k, device, rounds=3) -> dict:
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, device, torch.randint(0, 2**31, ()).item())
    mn = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    calls, kernels, diffs = {}, {}, {}
    # the row-major layout is decided once per layout: the staged plan first (in-place reads off),
    # then the layout forgotten and decided again with them on; both plans stay cached (their D differ)
    limit = deep_gemm.SFA_K_MAJOR_MAX_BLOCK_M
    api_in_place = deep_gemm._k_major_pays(m, n, k, device)
    for name, s, k_major in (("staged", sfa, False), ("k_major", sfa, True), ("mn_major", mn, True)):
        deep_gemm.SFA_K_MAJOR_IN_PLACE = k_major
        deep_gemm.SFA_K_MAJOR_MAX_BLOCK_M = 256
        deep_gemm._layouts.clear()
        d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
        deep_gemm.fp8_gemm_nt((A, s), (B, sfb), d)
        torch.cuda.synchronize(device)
        diffs[name] = calc_diff(d, ref) if torch.isfinite(d).all() else float("inf")
        plan = deep_gemm._plans[deep_gemm._plan_key(A, s, B, sfb, d, None, None, "nk")]
        kernels[name] = plan.launch.fn.name + (" + transpose" if plan.transpose is not None else "")
        calls[name] = (lambda s=s, d=d: deep_gemm.fp8_gemm_nt((A, s), (B, sfb), d))
    deep_gemm.SFA_K_MAJOR_IN_PLACE, deep_gemm.SFA_K_MAJOR_MAX_BLOCK_M = False, limit
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
    calls["staged_serial"] = lambda: (setattr(deep_gemm, "OVERLAP_STAGING", False),
                                      deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d),
                                      setattr(deep_gemm, "OVERLAP_STAGING", True))
    calls["staged_serial"]()
    torch.cuda.synchronize(device)
    diffs["staged_serial"] = calc_diff(d, ref) if torch.isfinite(d).all() else float("inf")
    kernels["staged_serial"] = kernels["staged"]
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            times[name].append(do_bench(call))
    flops = 2 * m * n * k
    row = {"m": m, "n": n, "k": k, "api_reads_in_place": api_in_place}
    for name in calls:
        ms = statistics.median(times[name])
        row[name] = {"us": ms * 1e3, "tflops": flops / ms / 1e9, "us_repeats": [t * 1e3 for t in times[name]],
                     "diff": diffs[name], "kernel": kernels[name]}
    row["k_major_over_staged"] = row["k_major"]["us"] / row["staged"]["us"]
    row["staged_over_serial"] = row["staged"]["us"] / row["staged_serial"]["us"]
    row["k_major_over_mn_major"] = row["k_major"]["us"] / row["mn_major"]["us"]
    row["api_over_staged"] = row["k_major_over_staged"] if api_in_place else 1.0
    return row


def main():
    out, shapes = out_and_shapes(SHAPES)
    device = torch.device("cuda")
    doc = {**header(device), "method": __doc__.strip().splitlines()[0], "rows": []}
    for m, n, k in shapes:
        doc["rows"].append(cell(m, n, k, device))
        r = doc["rows"][-1]
        print(m, n, k, {v: round(r[v]["us"], 2) for v in ("staged_serial", "staged", "k_major", "mn_major")},
              round(r["staged_over_serial"], 3), round(r["k_major_over_staged"], 3), r["api_reads_in_place"], flush=True)
        write(out, doc)
    rows = doc["rows"]
    doc["geomean_k_major_over_staged"] = statistics.geometric_mean([r["k_major_over_staged"] for r in rows])
    doc["geomean_k_major_over_mn_major"] = statistics.geometric_mean([r["k_major_over_mn_major"] for r in rows])
    doc["geomean_staged_over_serial"] = statistics.geometric_mean([r["staged_over_serial"] for r in rows])
    doc["geomean_api_over_staged"] = statistics.geometric_mean([r["api_over_staged"] for r in rows])
    write(out, doc)
    print("geomean staged/serial", doc["geomean_staged_over_serial"], "k_major/staged",
          doc["geomean_k_major_over_staged"], "k_major/mn_major", doc["geomean_k_major_over_mn_major"],
          "api/staged", doc["geomean_api_over_staged"])


if __name__ == "__main__":
    main()
