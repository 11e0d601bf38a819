"""Where the API's kernel lost to another kernel timed beside it: every committed head-to-head.

    python bench/api_regret.py          # writes bench/results/api_regret.json and prints the losses
    python bench/api_regret.py --try dgir.tuning.NEARBY_OUTGROWN_NARROW=1.1   # a chooser setting, in sample

With `--try MODULE.NAME=VALUE` (repeatable; VALUE a Python literal, or an expression over the
module's names and dataclasses.replace, e.g. a model constant set) nothing is written: the same
head-to-heads rate the API with those settings beside the shipped ones, and the shapes whose kernel
changes are listed with their timings (None where the new kernel was never timed beside another).
An in-sample check of a candidate rule before a held-out draw times it.

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


def rate(shapes: dict) -> tuple[list, int, dict]:
    """(a row per shape whose API kernel was timed beside another, how many were not, every shape's
    API kernel) under the chooser's current settings."""
    rows, untimed, kernels = [], 0, {}
    for (m, n, k), runs in sorted(shapes.items()):
        if len({name for _, kernels_run in runs for name in kernels_run}) < 2:
            continue
        choice = tuning.choose("fp8_gemm_nt", m, n, k, DEVICE, NUM_SMS)
        api = kernels[(m, n, k)] = choice.config.kernel_name()
        duel = head_to_head(api, runs)
        if duel is None:
            untimed += 1
            continue
        spec, t_api, best, t_best = duel
        r = {"m": m, "n": n, "k": k, "source": choice.source, "api_kernel": api, "api_us": round(t_api * 1e6, 2),
             "fastest_kernel": best, "fastest_us": round(t_best * 1e6, 2), "regret": round(t_api / t_best, 4), "spec": spec}
        r["loss"] = r["regret"] > LOSS and r["api_us"] - r["fastest_us"] > MODE_GAP_US
        rows.append(r)
    return rows, untimed, kernels


def by_source(rows: list) -> dict:
    groups = defaultdict(list)
    for r in rows:
        groups[r["source"]].append(r)
    return {src: {"shapes": len(v), "geomean_regret": round(math.exp(statistics.mean(math.log(r["regret"]) for r in v)), 4),
                  "losses": sum(r["loss"] for r in v)} for src, v in sorted(groups.items())}


def _setting_value(module: str, text: str):
    """A --try VALUE: a Python literal, else an expression over the module's own names and
    dataclasses.replace (e.g. `replace(REFIT, tc_table=REFIT.tc_table + ((128, 136, 0.5),))` for
    dgir.ops.fp8_gemm_model.REFIT: a model constant is tried the way a rule's bound is)."""
    import ast
    import dataclasses
    import importlib
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        scope = {"replace": dataclasses.replace, **vars(importlib.import_module(module))}
        return eval(text, scope)    # a bench tool's command line, typed by its user


def try_settings(settings: list[str]) -> None:
    """Print the API's regret with `settings` (MODULE.NAME=VALUE) beside the shipped one, and the
    shapes whose kernel they change."""
    import importlib
    from unittest import mock
    patches = []
    for item in settings:
        target, _, value = item.partition("=")
        module, _, name = target.rpartition(".")
        if not module or not value or not hasattr(importlib.import_module(module), name):
            raise SystemExit(f"--try {item!r}: expected MODULE.NAME=VALUE naming an existing setting")
        patches.append(mock.patch.object(importlib.import_module(module), name, _setting_value(module, value)))
    shapes = timed_kernels()
    before = rate(shapes)
    for p in patches:
        p.start()
    try:
        after = rate(shapes)
    finally:
        for p in reversed(patches):
            p.stop()
    for label, (rows, untimed, _) in (("shipped", before), (" ".join(settings), after)):
        g = math.exp(statistics.mean(math.log(r["regret"]) for r in rows))
        print(f"{label}: {len(rows)} shapes rated, {untimed} untimed, geomean regret x{g:.4f}, "
              f"{sum(r['loss'] for r in rows)} losses")
    rated = [{(r["m"], r["n"], r["k"]): r for r in rows} for rows, _, _ in (before, after)]
    for shape, kernel in sorted(after[2].items()):
        if kernel != before[2][shape]:
            was, now = rated[0].get(shape), rated[1].get(shape)
            print(f"  {shape[0]}x{shape[1]}x{shape[2]}: {before[2][shape]} {was and was['api_us']} us -> "
                  f"{kernel} {now and now['api_us']} us (fastest timed {(now or was or {}).get('fastest_us')} us)")


def main() -> None:
    rows, untimed, _ = rate(timed_kernels())
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    summary = by_source(rows)
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
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--try", dest="settings", action="append", metavar="MODULE.NAME=VALUE",
                    help="rate the API with this setting beside the shipped one (repeatable); nothing is written")
    cli = ap.parse_args()
    if cli.settings:
        try_settings(cli.settings)
    else:
        main()
