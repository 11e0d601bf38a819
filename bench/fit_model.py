"""Fit the cost model's constants (dgir.ops.fp8_gemm_model.ModelParams) to committed measurements.

    python bench/fit_model.py                 # report the current constants against the data
    python bench/fit_model.py --fit           # coordinate search; prints the fitted ModelParams

Data: every timed row of bench/results/raw/tune{10,11,12}_exp.json (current kernels, hand-picked
configs) and the default rows of bench/results/fp8_gemm_nt.json; a row's config is read back from its
kernel name.  Reported: the geometric-mean |log(measured / model)| error and, per shape with several
measured configs, the regret of the model's pick (its measured time over the best measured time).
"""
from __future__ import annotations

import argparse
import json
import math
import re
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path

from dgir.ops.fp8_gemm import MATH_ORDERS, Fp8GemmConfig
from dgir.ops.fp8_gemm_model import MODEL, ModelParams, config_seconds

ROOT = Path(__file__).resolve().parent / "results"
FILES = ["raw/tune10_exp.json", "raw/tune11_exp.json", "raw/tune12_exp.json", "fp8_gemm_nt.json"]
NAME = re.compile(r"fp8_gemm_nt_n(\d+)_k(\d+)_bm(\d+)_bn(\d+)_s(\d+)(?:_sk(\d+)(dsm)?)?(_direct)?(?:_c(\d)([AB]))?(?:_o(\d))?(" + "|".join(filter(None, MATH_ORDERS.values())) + ")?$")


def config_of(kernel: str) -> Fp8GemmConfig | None:
    g = NAME.match(kernel)
    if g is None:
        return None
    n, k, bm, bn, s, sk, dsm, direct, cl, mc, occ, alt = g.groups()
    return Fp8GemmConfig(n=int(n), k=int(k), block_m=int(bm), block_n=int(bn), stages=int(s),
                         split_k=int(sk or 1), epilogue="direct" if direct else "tma", cluster=int(cl or 1),
                         multicast=mc or "A", ctas_per_sm=int(occ or 1),
                         split_reduce="cluster" if dsm else "global",
                         math_order={suffix: o for o, suffix in MATH_ORDERS.items()}[alt or ""])


def load_rows() -> list[tuple[int, int, int, Fp8GemmConfig, float]]:
    rows = []
    for f in FILES:
        doc = json.loads((ROOT / f).read_text())
        for r in doc["rows"]:
            if r.get("variant", "default") != "default" or "ms" not in r or not r.get("kernel"):
                continue
            cfg = config_of(r["kernel"])
            if cfg is not None and cfg.epilogue == "tma":
                rows.append((r["m"], r["n"], r["k"], cfg, r["ms"] * 1e-3))
    return rows


def score(rows, params: ModelParams) -> tuple[float, float]:
    """(geomean |log error|, mean regret of the model's pick over shapes with several configs)."""
    err = sum(abs(math.log(t / config_seconds(m, n, k, c, params))) for m, n, k, c, t in rows) / len(rows)
    by_shape = defaultdict(list)
    for m, n, k, c, t in rows:
        by_shape[(m, n, k)].append((config_seconds(m, n, k, c, params), t))
    regrets = [min(v)[1] / min(t for _, t in v) for v in by_shape.values() if len(v) > 1]
    return math.exp(err), sum(regrets) / max(len(regrets), 1)


# measured directly (bench/TUNING.md step 10), not fitted; and physical bounds of the fitted ones
FIXED = {"multicast_gain"}
BOUNDS = {"shared_sm_chain": (1.0, 2.0)}


def fit(rows, params: ModelParams, rounds: int = 4) -> ModelParams:
    """Coordinate search, one constant at a time over multiplicative steps; objective: log error + regret."""
    objective = lambda p: math.log(score(rows, p)[0]) + 2 * (score(rows, p)[1] - 1)  # noqa: E731
    best, best_v = params, objective(params)
    for _ in range(rounds):
        for field, value in asdict(best).items():
            if field in FIXED:
                continue
            lo, hi = BOUNDS.get(field, (0.0, math.inf))
            for f in (0.5, 0.7, 0.85, 1.15, 1.4, 2.0):
                if not lo <= value * f <= hi:
                    continue
                cand = replace(best, **{field: value * f})
                v = objective(cand)
                if v < best_v - 1e-9:
                    best, best_v = cand, v
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true")
    args = ap.parse_args()
    rows = load_rows()
    e, r = score(rows, MODEL)
    print(f"{len(rows)} rows; current constants: error x{e:.3f}, mean regret of the pick x{r:.3f}")
    if args.fit:
        p = fit(rows, MODEL)
        e, r = score(rows, p)
        print(f"fitted: error x{e:.3f}, mean regret x{r:.3f}\n{p}")


if __name__ == "__main__":
    main()
