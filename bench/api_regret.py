"""Where the API's kernel lost to another kernel timed beside it: every committed head-to-head.

    python bench/api_regret.py          # writes bench/results/api_regret.json and prints the losses

For every shape of the config sweeps (bench/results/raw/tune{110..}_exp.json, as bench/fit_model.py
reads them: correct rows of the default variant, opt-in kernels left out), the kernel the API runs
today (dgir.tuning.choose on the H200's 132 SMs: the tuned entry, a nearby or analogous one, or the
model; its order, m_tail and early epilogue settled for M) is looked up among the kernels timed
there.  Leases differ by up to ~10%, so a comparison stays inside one file: the newest file that
timed the API's kernel and at least one other at that shape decides, by the medians of its
repetitions.  regret = the API kernel's median / the fastest median in that file (1.0: the API's
kernel was the fastest timed); a loss is a regret over LOSS by more than MODE_GAP_US.  Shapes where the API's kernel was never timed are counted, not
rated.  The rows are measurements at the revisions the files name; a kernel changed since (e.g. by
step 114's SFA read) is rated by its timing then.
"""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from fit_model import config_of, data_files, spec_number

from dgir import tuning
from dgir.ops.fp8_gemm import NUM_SMS

OUT = Path(__file__).resolve().parent / "results" / "api_regret.json"
DEVICE = "NVIDIA H200"
LOSS = 1.03          # regrets above this are losses (repetitions of one kernel spread by 1-4%) ...
MODE_GAP_US = 0.7    # ... when also this much slower: every timing under the flushing timer falls in one of
                     # two modes ~0.7 us apart (bench/TUNING.md step 88), which decides a 10 us kernel's 3%


def timed_kernels() -> dict:
    """(m, n, k) -> [(spec, {kernel name: [seconds]})] in file order (oldest first)."""
    shapes = defaultdict(list)
    for f in data_files():
        spec = spec_number(f)
        here = defaultdict(lambda: defaultdict(list))
        for r in json.loads(f.read_text())["rows"]:
            if r.get("variant", "default") != "default" or "ms" not in r or not r.get("kernel"):
                continue
            if r.get("diff") is None or r["diff"] > 1e-3 or r.get("all_finite") is False:
                continue
            cfg = config_of(r["kernel"], spec)
            if cfg is None or cfg.epilogue != "tma":
                continue
            # names as today's kernels spell them (a legacy "_tfill" or an "auto" default read back)
            here[(r["m"], r["n"], r["k"])][cfg.kernel_name()].append(r["ms"] * 1e-3)
        for shape, kernels in here.items():
            shapes[shape].append((spec, kernels))
    return shapes


def head_to_head(api: str, runs: list) -> tuple | None:
    """(spec, api median, fastest kernel, its median) from the newest file that timed `api` and another
    kernel at the shape; None if none did."""
    for spec, kernels in reversed(runs):
        if api in kernels and len(kernels) > 1:
            med = {name: statistics.median(t) for name, t in kernels.items()}
            best = min(med, key=med.get)
            return spec, med[api], best, med[best]
    return None


def main() -> None:
    rows, untimed = [], 0
    for (m, n, k), runs in sorted(timed_kernels().items()):
        if len({name for _, kernels in runs for name in kernels}) < 2:
            continue
        choice = tuning.choose("fp8_gemm_nt", m, n, k, DEVICE, NUM_SMS)
        api = choice.config.kernel_name()
        duel = head_to_head(api, runs)
        if duel is None:
            untimed += 1
            continue
        spec, t_api, best, t_best = duel
        rows.append({"m": m, "n": n, "k": k, "source": choice.source, "api_kernel": api, "api_us": round(t_api * 1e6, 2),
                     "fastest_kernel": best, "fastest_us": round(t_best * 1e6, 2),
                     "regret": round(t_api / t_best, 4), "spec": spec})
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    by_source = defaultdict(list)
    for r in rows:
        r["loss"] = r["regret"] > LOSS and r["api_us"] - r["fastest_us"] > MODE_GAP_US
        by_source[r["source"]].append(r)
    summary = {src: {"shapes": len(v), "geomean_regret": round(math.exp(statistics.mean(math.log(r["regret"]) for r in v)), 4),
                     "losses": sum(r["loss"] for r in v)} for src, v in sorted(by_source.items())}
    doc = {"git_rev": rev, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "method": __doc__.strip().splitlines()[0] + f" Losses: regret > {LOSS} and > {MODE_GAP_US} us slower.",
           "shapes_rated": len(rows), "shapes_api_kernel_untimed": untimed, "by_source": summary,
           "rows": sorted(rows, key=lambda r: -r["regret"])}
    rows = doc.pop("rows")      # one line a row: the file is read by people too
    head = json.dumps(doc, indent=1)[:-2]
    OUT.write_text(head + ',\n "rows": [\n' + ",\n".join("  " + json.dumps(r) for r in rows) + "\n ]\n}\n")
    print(f"{len(rows)} shapes rated, {untimed} where the API's kernel was never timed beside another")
    for src, s in summary.items():
        print(f"  {src:10s} {s['shapes']:4d} shapes, geomean regret x{s['geomean_regret']:.4f}, {s['losses']} losses")
    for r in rows:
        if r["loss"]:
            print(f"  x{r['regret']:.3f} {r['m']}x{r['n']}x{r['k']} ({r['source']}, spec {r['spec']}): "
                  f"{r['api_kernel']} {r['api_us']} us, {r['fastest_kernel']} {r['fastest_us']} us")
    print(f"-> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
