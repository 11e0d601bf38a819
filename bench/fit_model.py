"""Fit the cost model's constants (dgir.ops.fp8_gemm_model.ModelParams) to committed measurements.

    python bench/fit_model.py                 # report the constant sets against the data
    python bench/fit_model.py --fit           # coordinate search from REFIT on M > 128; prints the result

Data: every timed row of the current kernels, variant "default" (no ablation), read back to its config
from the kernel name: bench/results/raw/tune{110..}_exp.json (since the L2 hint of step 61 and the
re-sweep of step 63; not RULE_SPECS) and the default rows of bench/results/fp8_gemm_nt.json; repeated timings of a
config at a shape count once, by their median.  Reported per regime (M <= FIRST_FIT_MAX_M, where
the API's choice uses FIRST_FIT, or at 128 < M <= 192 ONE_BLOCK_192, and above, REFIT; REFIT is
fitted on every row above M = 128) for each constant set: the geometric-mean |log(measured /
model)| error, and over the shapes with several measured configs, the regret of the chooser's pick
(its measured time over the best measured time) and how many of its picks were never measured
(the fit cannot vouch for those: time them, add the spec here, refit; bench/TUNING.md steps 45
and 84).
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import re
import statistics
from collections import defaultdict
from dataclasses import fields, replace
from pathlib import Path

from dgir.ops.fp8_gemm import MATH_ORDERS, NUM_SMS, Fp8GemmConfig, settle
from dgir.ops.fp8_gemm_model import (FIRST_FIT, FIRST_FIT_MAX_M, ONE_BLOCK_192, ONE_BLOCK_192_MAX_M, REFIT, ModelParams,
                                     choose_config, config_seconds, least, tc_efficiency)

ROOT = Path(__file__).resolve().parent / "results"
FIRST_SPEC = 110
# specs that time the chooser's rules against each other at shapes where the model's own pick was
# not a candidate (180: step 87's nearby rule against the one before it; 181: 256-row tiles filled
# against shifted): they would count as shapes whose model pick was never timed, which says nothing
# about the fit
RULE_SPECS = (180, 181)
# specs timed at revisions whose default m_tail was "auto" (508306f..647f5d6, bench/TUNING.md step 86):
# there a kernel name without an m_tail suffix is the kernel that decides at run time
AUTO_M_TAIL_SPECS = range(173, 178)
# the fields a kernel name adds to its tile's, in names the tables of the first steps never had
VARIANT_FIELDS = ("swizzle_group", "m_tail", "early_epilogue", "sfa_major")


def config_of(kernel: str, spec: int = 0, tile_only: bool = False) -> Fp8GemmConfig | None:
    """The config a kernel name spells (Fp8GemmConfig.from_kernel_name), as timed in spec `spec`;
    None for names with opt-in suffixes (stream-K, rescaled, ring staging), which no chooser picks.
    tile_only: also None for a name with a variant suffix (tile order, m_tail, early epilogue, SFA
    read in place): what bench/make_tuned_table.py reads, so that its table stays the one built from
    the tiles alone."""
    cfg = Fp8GemmConfig.from_kernel_name(kernel, legacy_m_tail="auto" if spec in AUTO_M_TAIL_SPECS else "fill")
    if cfg is None or cfg.stream_k or cfg.promotion != "fp32" or cfg.staging != "tile":
        return None
    defaults = Fp8GemmConfig.__dataclass_fields__
    if tile_only and (kernel.endswith("_tfill") or any(getattr(cfg, f) != defaults[f].default for f in VARIANT_FIELDS)):
        return None
    return cfg


def spec_number(path) -> int:
    """The spec a raw result file holds (results/raw/tune198_exp.json -> 198); 0 for any other file
    (the full runs)."""
    found = re.fullmatch(r"tune(\d+)_exp\.json", Path(path).name)
    return int(found[1]) if found else 0


# the device every fitted timing comes from: the tuned table's and the model's (dgir/tuned/*.json); a
# spec run on another card (step 120's lease gave an H100) is kept beside them but never fitted
DEVICE = "NVIDIA H200"


def on_device(doc) -> bool:
    """Whether a result document was timed on DEVICE (files from before the field was written were)."""
    return not isinstance(doc, dict) or (doc.get("device") or DEVICE).startswith(DEVICE)


def data_files(exclude: tuple = RULE_SPECS) -> list[Path]:
    raw = [p for p in (ROOT / "raw").glob("tune*_exp.json")
           if spec_number(p) >= FIRST_SPEC and spec_number(p) not in exclude and on_device(json.loads(p.read_text()))]
    return sorted(raw) + [ROOT / "fp8_gemm_nt.json"]


def load_rows(exclude: tuple = RULE_SPECS, keep=None) -> list[tuple[int, int, int, Fp8GemmConfig, float]]:
    """(m, n, k, config, seconds): the median of each config's correct timings at each shape;
    keep(spec, config): which timings count (default all)."""
    times = defaultdict(list)
    for f in data_files(exclude):
        for r in json.loads(f.read_text())["rows"]:
            if r.get("variant", "default") != "default" or "ms" not in r or not r.get("kernel"):
                continue
            if r.get("diff") is None or r["diff"] > 1e-3 or r.get("all_finite") is False:
                continue
            cfg = config_of(r["kernel"], spec_number(f))
            if cfg is not None and cfg.epilogue == "tma" and (keep is None or keep(spec_number(f), cfg)):
                times[(r["m"], r["n"], r["k"], cfg)].append(r["ms"] * 1e-3)
    return [(m, n, k, c, statistics.median(t)) for (m, n, k, c), t in times.items()]


def _tile(c: Fp8GemmConfig) -> tuple:
    """A config without its ring depth (the chooser takes the deepest ring that fits): the tile, its
    split, cluster, occupancy and math order, and the variant its name spells (tile order, m_tail,
    early epilogue, SFA read)."""
    return (c.block_m, c.block_n, c.split_k, c.split_reduce if c.split_k > 1 else "", c.cluster,
            c.multicast if c.cluster > 1 else "", c.ctas_per_sm, c.math_order) + tuple(getattr(c, f) for f in VARIANT_FIELDS)


def score(rows, params: ModelParams) -> tuple[float, float]:
    """(geomean |log error|, mean regret of the model's pick among the measured configs of a shape)."""
    err = sum(abs(math.log(t / config_seconds(m, n, k, c, params))) for m, n, k, c, t in rows) / len(rows)
    by_shape = defaultdict(list)
    for m, n, k, c, t in rows:
        by_shape[(m, n, k)].append((config_seconds(m, n, k, c, params), t))
    regrets = [min(v)[1] / min(t for _, t in v) for v in by_shape.values() if len(v) > 1]
    return math.exp(err), sum(regrets) / max(len(regrets), 1)


UNMEASURED_REGRET = 1.10    # what fit() charges for a pick no spec has timed (bench/TUNING.md step 84)


def picks(rows, params: ModelParams | None = None) -> tuple[int, int, float]:
    """Over shapes with several measured configs: (the chooser's picks that were measured, those never
    measured, the mean regret of the measured ones).  The chooser: the least modelled time under
    `params`, or (None) the API's own `choose_config` (both constant sets, by M).  A pick is rated by
    the kernel a call runs (fp8_gemm.settle: its order, m_tail and early epilogue for that M), else,
    where that variant was never timed (shapes timed before the rule that settles it), by its tile
    as named."""
    by_shape = defaultdict(dict)
    for m, n, k, c, t in rows:
        by_shape[(m, n, k)][_tile(c)] = min(t, by_shape[(m, n, k)].get(_tile(c), math.inf))
    measured, regrets = 0, []
    shapes = [s for s, v in by_shape.items() if len(v) > 1]
    for s in shapes:
        v = by_shape[s]
        pick = least(*s, NUM_SMS, params) if params is not None else choose_config(*s)
        t = v.get(_tile(settle(pick, s[0])), v.get(_tile(pick)))
        if t is not None:
            measured += 1
            regrets.append(t / min(v.values()))
    return measured, len(shapes) - measured, sum(regrets) / max(len(regrets), 1)


# measured directly (bench/TUNING.md step 10), not fitted; and physical bounds of the fitted ones
FIXED = {"multicast_gain", "tc_scale"}
# the candidate rules' bounds: each was set by a held-out experiment (steps 85, 103, 104), not by a fit
RULES = {"cluster_min_rounds", "narrow_cluster_max_n", "narrow_cluster_min_k", "narrow_b_cluster_max_n",
         "one_round_b_max_n", "one_round_b_min_k", "one_round_b_min_fill"}
TABLE_MIN_ROWS = 8      # tiles with at least this many measured configs get their own efficiency entry
BOUNDS = {"shared_sm_chain": (1.0, 2.0)}


def with_table(rows, params: ModelParams) -> ModelParams:
    """params with an efficiency entry (from the formula, to be fitted) for every tile measured in at
    least TABLE_MIN_ROWS configs that has none yet."""
    count = defaultdict(int)
    for _, _, _, c, _ in rows:
        count[(c.block_m, c.block_n)] += 1
    have = {(bm, bn) for bm, bn, _ in params.tc_table}
    new = tuple((bm, bn, tc_efficiency(bm, bn, params)) for (bm, bn), n in sorted(count.items())
                if n >= TABLE_MIN_ROWS and (bm, bn) not in have)
    return replace(params, tc_table=params.tc_table + new)


def objective(rows, p: ModelParams) -> float:
    """What the fits minimise: log error + 2 x (mean regret of the chooser's picks - 1), a pick no
    spec timed charged UNMEASURED_REGRET."""
    e, _ = score(rows, p)
    measured, unmeasured, regret = picks(rows, p)
    mean = (measured * regret + unmeasured * UNMEASURED_REGRET) / (measured + unmeasured)
    return math.log(e) + 2 * (mean - 1)


def search(rows, params: ModelParams, variants, rounds: int = 3) -> ModelParams:
    """Coordinate search: `rounds` times over multiplicative steps f, keep each of variants(best, f)
    that lowers the objective."""
    best, best_v = params, objective(rows, params)
    for _ in range(rounds):
        for f in (0.8, 0.9, 0.95, 1.05, 1.1, 1.25):
            for cand in variants(best, f):
                v = objective(rows, cand)
                if v < best_v - 1e-9:
                    best, best_v = cand, v
    return best


def fit(rows, params: ModelParams, rounds: int = 3) -> ModelParams:
    """Coordinate search, one constant at a time over multiplicative steps (each BLOCK_M factor of
    tc_block_m and each tile's entry of tc_table on its own); objective: log error + 2 x (mean
    regret of the chooser's picks - 1), a pick no spec timed charged UNMEASURED_REGRET.  Without that
    charge a lower error bought picks of never-timed tiles at most shapes (steps 45 and 84), the
    ones that then measured slower."""
    params = with_table(rows, params)

    def variants(p: ModelParams, f: float):
        for fl in fields(p):
            value = getattr(p, fl.name)
            if fl.name in FIXED | RULES:
                continue
            if fl.name == "tc_block_m":
                for i, (bm, v) in enumerate(value):
                    if bm != 128:     # 128 is the unit: tc_scale carries it
                        yield replace(p, tc_block_m=value[:i] + ((bm, v * f),) + value[i + 1:])
                continue
            if fl.name in ("tc_table", "single_cta_table"):
                for i, (bm, bn, v) in enumerate(value):
                    yield replace(p, **{fl.name: value[:i] + ((bm, bn, v * f),) + value[i + 1:]})
                continue
            lo, hi = BOUNDS.get(fl.name, (0.0, math.inf))
            if lo <= value * f <= hi:
                yield replace(p, **{fl.name: value * f})

    return search(rows, params, variants, rounds)


# the first spec that timed the tiles of steps 120-121's promotion by indexed jumps in that form (the
# full runs since d1fddf2 too); before it their kernels selected a scale per column group
JUMP_FORM_SPEC = 298


@functools.cache
def promoted_by_jumps(block_m: int, block_n: int) -> bool:
    """Whether the default pipeline promotes this tile by indexed jumps (the lowered and passed IR's
    promote says so), as every kernel timed from JUMP_FORM_SPEC on does."""
    from dgir.compiler import compile
    from dgir.ir import Op
    cfg = Fp8GemmConfig(n=16 * block_n, k=2048, block_m=block_m, block_n=block_n, stages=2)
    ir = compile("fp8_gemm_nt", m=4096, n=cfg.n, k=cfg.k, config=cfg, assemble=False).ir
    return any(n.get("straddle") == "jump" for n in ir.walk() if n.op is Op.PROMOTE)


def jump_form(spec: int, cfg: Fp8GemmConfig) -> bool:
    """load_rows' keep: a timing of a kernel as the pipeline builds it today as far as the
    promotion's form goes (a jump tile's timings before JUMP_FORM_SPEC timed its select form)."""
    return spec == 0 or spec >= JUMP_FORM_SPEC or not promoted_by_jumps(cfg.block_m, cfg.block_n)


def fit_jump_entries(rows, params: ModelParams, rounds: int = 3) -> ModelParams:
    """fit() restricted to the efficiency entries of the tiles promoted by jumps: each such tile with
    at least TABLE_MIN_ROWS jump-form timings gets an entry (from the formula, or the one it has, which
    was fitted on its select form), searched as fit() searches; every other constant stays."""
    count = defaultdict(int)
    for _, _, _, c, _ in rows:
        if promoted_by_jumps(c.block_m, c.block_n):
            count[(c.block_m, c.block_n)] += 1
    tiles = sorted(t for t, n in count.items() if n >= TABLE_MIN_ROWS)
    have = {(bm, bn): v for bm, bn, v in params.tc_table}
    table = tuple(e for e in params.tc_table if (e[0], e[1]) not in tiles)
    params = replace(params, tc_table=table + tuple((bm, bn, have.get((bm, bn)) or tc_efficiency(bm, bn, params))
                                                    for bm, bn in tiles))

    def variants(p: ModelParams, f: float):
        for i, (bm, bn, v) in enumerate(p.tc_table):
            if (bm, bn) in tiles:
                yield replace(p, tc_table=p.tc_table[:i] + ((bm, bn, round(v * f, 4)),) + p.tc_table[i + 1:])

    return search(rows, params, variants, rounds)


def report(rows, label: str, params: ModelParams) -> None:
    e, r = score(rows, params)
    measured, unmeasured, regret = picks(rows, params)
    print(f"  {label}: error x{e:.3f}, mean regret x{r:.3f} among measured configs; the chooser's picks: "
          f"{measured} measured (regret x{regret:.3f}), {unmeasured} never measured")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--fit-jumps", action="store_true",
                    help="fit only the entries of the tiles promoted by jumps, on their jump-form timings")
    args = ap.parse_args()
    if args.fit_jumps:
        rows = [r for r in load_rows(keep=jump_form) if r[0] > 128]
        report(rows, "REFIT on jump-form timings (M > 128)", REFIT)
        p = fit_jump_entries(rows, REFIT)
        report(rows, "jump entries refitted", p)
        print("tc_table:", p.tc_table)
        return
    rows = load_rows()
    small = [r for r in rows if r[0] <= FIRST_FIT_MAX_M]
    large = [r for r in rows if r[0] > FIRST_FIT_MAX_M]
    one_block = [r for r in rows if 128 < r[0] <= ONE_BLOCK_192_MAX_M]
    print(f"{len(rows)} configs at {len({r[:3] for r in rows})} shapes from {len(data_files())} files")
    for label, part in ((f"M <= {FIRST_FIT_MAX_M}", small), (f"of them 128 < M <= {ONE_BLOCK_192_MAX_M}", one_block),
                        (f"M > {FIRST_FIT_MAX_M}", large)):
        print(f"{label} ({len(part)} configs):")
        report(part, "FIRST_FIT", FIRST_FIT)
        if part is one_block:
            report(part, "ONE_BLOCK_192", ONE_BLOCK_192)
        report(part, "REFIT", REFIT)
        measured, unmeasured, regret = picks(part)
        print(f"  choose_config (the API's model choice): {measured} picks measured (regret x{regret:.3f}), "
              f"{unmeasured} never measured")
    if args.fit:
        above_128 = [r for r in rows if r[0] > 128]
        p = fit(above_128, REFIT)
        report(above_128, "refitted (M > 128)", p)
        print(p)


if __name__ == "__main__":
    main()
