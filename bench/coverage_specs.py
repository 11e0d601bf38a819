"""Experiment specs for shapes the issue's table does not list: the M between its rows (and M=4097).

    python bench/coverage_specs.py > bench/specs/tune42.txt
    python bench/coverage_specs.py --validate > bench/specs/tune44.txt   # after the table has them
    python bench/coverage_specs.py --api > bench/specs/tune50.txt        # the API's picks, cuBLAS
    python bench/coverage_specs.py --fill > bench/specs/tune179.txt      # grid points without an entry
    python bench/coverage_specs.py --wide > bench/specs/tune180.txt      # step 87's rule on fresh M
    python bench/coverage_specs.py --tail256 > bench/specs/tune181.txt   # 256-row tiles, short last block
    python bench/coverage_specs.py --at 896,1792 > bench/specs/tune183.txt   # between the grid's points
    python bench/coverage_specs.py --at 3584,7168 > bench/specs/tune184.txt
    python bench/coverage_specs.py --at 640,1280,2560,5120 > bench/specs/tune185.txt
    python bench/coverage_specs.py --fresh-m > bench/specs/tune186.txt     # the API at fresh M
    (spec 52: the four shapes whose tuned entry spec 51 changed, API pick and cuBLAS again)

The shipped table (dgir/tuned) holds measured configs for M = 64, 128 and 4096 only; any other M
falls to the cost model, which is x1.15 off on average and has never been checked between those
rows.  For each shape this lists, for bench/experiments.py: the model's top candidates
(dgir.autotune.candidates, cluster-reduced split-K twins included), the tuned configs of the
neighbouring measured M for the same (N, K), and cuBLAS, so that one device call says which config
each M wants and how far the model's pick is from it.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from dgir.autotune import candidates  # noqa: E402
from dgir.ops.fp8_gemm import MATH_ORDERS, Fp8GemmConfig, OpError, check_config, choose_config  # noqa: E402
from dgir.tuning import SHIPPED  # noqa: E402

NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048), (576, 7168)]
MS = (256, 512, 1024, 2048, 4097)
OFF_GRID = (17, 32, 96, 192, 384, 768, 1536, 3072, 6144, 8191)   # between / beyond the measured M


def spec_of(m: int, cfg: Fp8GemmConfig) -> str:
    """The bench/experiments.py spec that rebuilds `cfg` (the inverse of its parser)."""
    kw = [f"bm={cfg.block_m}", f"bn={cfg.block_n}", f"s={cfg.stages}"]
    if cfg.swizzle_group != 16:
        kw.append(f"g={cfg.swizzle_group}")
    if cfg.split_k > 1:
        kw.append(f"sk={cfg.split_k}")
    if cfg.epilogue != "tma":
        kw.append(f"ep={cfg.epilogue}")
    if cfg.cluster > 1:
        kw.append(f"cl={cfg.cluster}{cfg.multicast}")
    if cfg.ctas_per_sm > 1:
        kw.append(f"o={cfg.ctas_per_sm}")
    if cfg.split_reduce == "cluster":
        kw.append("sr=cl")
    if cfg.math_order != "together":
        kw.append(f"mo={MATH_ORDERS[cfg.math_order][1:]}")
    if cfg.m_tail != "fill":
        kw.append({"shift": "mt=sh", "auto": "mt=au"}[cfg.m_tail])
    if cfg.early_epilogue != "on":
        kw.append(f"ee={cfg.early_epilogue}")
    return f"{m},{cfg.n},{cfg.k}:{','.join(kw)}"


def shipped_configs(n: int, k: int) -> dict[int, Fp8GemmConfig]:
    out = {}
    for path in sorted(SHIPPED.glob("*.json")):
        for e in json.loads(path.read_text())["entries"]:
            if (e["n"], e["k"]) == (n, k):
                out[e["m"]] = Fp8GemmConfig(**e["config"])
    return out


def specs(ms=MS, top: int = 4) -> list[str]:
    out = []
    for m in ms:
        for n, k in NK:
            cfgs = [choose_config(m, n, k)] + candidates(m, n, k, 132, top)
            tuned = shipped_configs(n, k)
            below = [x for x in tuned if x <= m]
            above = [x for x in tuned if x >= m]
            for x in ([max(below)] if below else []) + ([min(above)] if above else []):
                cfgs.append(tuned[x])
            seen = []
            for c in cfgs:
                s = spec_of(m, c)
                if s not in seen:
                    seen.append(s)
            out += seen + [f"{m},{n},{k}::cublas"]
    return out


def api_pick(m: int, n: int, k: int) -> Fp8GemmConfig:
    """The config dgir's API takes on the H200 (measured entry, else nearest measured M, else model)."""
    from types import SimpleNamespace

    from dgir import deep_gemm
    return deep_gemm._config("fp8_gemm_nt", m, n, k, SimpleNamespace(name="NVIDIA H200", sms=132), 0)


def validation_specs(ms=OFF_GRID) -> list[str]:
    """For M off the measured grid: the API's pick (nearest measured M) and the model's, and cuBLAS."""
    out = []
    for m in ms:
        for n, k in NK:
            picks = [spec_of(m, api_pick(m, n, k)), spec_of(m, choose_config(m, n, k))]
            out += list(dict.fromkeys(picks)) + [f"{m},{n},{k}::cublas"]
    return out


def api_specs() -> list[str]:
    """The API's config and cuBLAS for every shape the coverage report lists, one pair per shape
    (bench/coverage_report.py takes its API and cuBLAS columns from this run)."""
    out = []
    for m in sorted(set(MS) | set(OFF_GRID) | {64, 128, 4096}):
        for n, k in NK:
            out += [spec_of(m, api_pick(m, n, k)), f"{m},{n},{k}::cublas"]
    return out


def missing_grid_points() -> list[tuple[int, int, int]]:
    """(M, N, K) of the table's grid (make_tuned_table.on_grid, 96..8192) at the seven (N, K) that
    the shipped table has no entry for: their timings so far came from files that timed one config
    there, so the M beside them take a farther entry's config (bench/TUNING.md step 87)."""
    from make_tuned_table import on_grid
    out = []
    for n, k in NK:
        have = shipped_configs(n, k)
        out += [(m, n, k) for m in range(96, 8193) if on_grid(m) and m not in have]
    return out


def alternating_passes(groups: list[list[str]], passes: int) -> list[str]:
    """The spec lines of `groups` (one list per shape) `passes` times, every second pass with the
    shapes and each shape's lines reversed (so no config is always timed first or last)."""
    out = []
    for p in range(passes):
        for group in (groups if p % 2 == 0 else groups[::-1]):
            out += group if p % 2 == 0 else group[::-1]
    return out


def off_grid_draw(rng) -> tuple[int, int, int] | None:
    """One draw of a fresh shape: M log-uniform in 516..8188 rounded to a multiple of 4, one of the
    issue's seven (N, K); None when M is a point of the table's grid."""
    import math

    from make_tuned_table import on_grid
    m = 4 * round(math.exp(rng.uniform(math.log(516), math.log(8188))) / 4)
    n, k = NK[rng.randrange(len(NK))]
    return None if on_grid(m) else (m, n, k)


def fill_specs(passes: int = 2, shapes: list | None = None) -> list[str]:
    """Step 87: at every grid point without an entry the model's top candidates, the neighbouring
    entries' configs, the API's present pick and 128x128 over a B-sharing / A-sharing cluster; and
    off the grid, M just past 4096 (the last 256-row block nearly empty) and between 4096 and 6144,
    the same kinds of config, each with the m_tail the API settles for that M.  Every config `passes`
    times, in reverse order the second time, with cuBLAS beside (it refuses M = 4097: not a multiple
    of 4).  `shapes`: these (M, N, K) instead (spec 183: M = 896 and 1792 at the seven (N, K),
    `--at 896,1792`)."""
    from dgir.ops.fp8_gemm import settle_m_tail
    if shapes is None:
        shapes = missing_grid_points()
        for n, k in ((4096, 7168), (24576, 1536), (32768, 512), (7168, 2048)):
            shapes += [(m, n, k) for m in (4097, 4500, 5000)]
    one = []
    for m, n, k in shapes:
        cfgs = [api_pick(m, n, k), choose_config(m, n, k)] + candidates(m, n, k, 132, 3)
        tuned = shipped_configs(n, k)
        below = [x for x in tuned if x <= m]
        above = [x for x in tuned if x >= m]
        cfgs += [tuned[x] for x in ([max(below)] if below else []) + ([min(above)] if above else [])]
        if m >= 768:
            cfgs += [Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=128, stages=s, cluster=2, multicast=mc)
                     for bm, s, mc in ((128, 5, "A"), (128, 5, "B"), (192, 4, "A"), (256, 3, "A"))]
        legal = []
        for c in cfgs:
            try:
                check_config(c)             # e.g. an A-sharing pair needs an even count of n blocks
            except OpError:
                continue
            legal.append(c)
        one.append(list(dict.fromkeys(spec_of(m, settle_m_tail(c, m)) for c in legal)) + [f"{m},{n},{k}::cublas"])
    return alternating_passes(one, passes)


def narrow_nearby(m: int, n: int, k: int):
    """The nearby pick as before step 87: the bracketing two entries only, a 5% margin."""
    from dgir import tuning
    saved = tuning.WIDE_NEARBY_M, tuning.NEARBY_MARGIN
    tuning.WIDE_NEARBY_M, tuning.NEARBY_MARGIN = 1 << 40, 0.95
    try:
        near = tuning.nearby_config("fp8_gemm_nt", m, n, k, "NVIDIA H200", 132)
    finally:
        tuning.WIDE_NEARBY_M, tuning.NEARBY_MARGIN = saved
    return near and near[0]


def wide_specs(seed: int = 180, count: int = 24, passes: int = 2) -> list[str]:
    """Spec 180: step 87's rule judged on M it was not chosen on.  M drawn log-uniform in 516..8188
    (multiples of 4, off the table's grid; a fixed seed) at the issue's seven (N, K); kept where the
    API's nearby pick differs from the pick before step 87.  Each shape: both picks (m_tail settled)
    and cuBLAS, `passes` times, reversed every second pass."""
    import random

    from dgir.ops.fp8_gemm import settle_m_tail
    rng = random.Random(seed)
    one = []
    for _ in range(20000):
        if len(one) == count:
            break
        shape = off_grid_draw(rng)
        if shape is None:
            continue
        m, n, k = shape
        new, old = api_pick(m, n, k), narrow_nearby(m, n, k)
        if old is None or settle_m_tail(old, m) == new:
            continue
        group = [spec_of(m, new), spec_of(m, settle_m_tail(old, m)), f"{m},{n},{k}::cublas"]
        if group not in one:
            one.append(group)
    return alternating_passes(one, passes)


def tail256_specs(passes: int = 2) -> list[str]:
    """Spec 181: 256x128 tiles whose last m block holds a few rows, filled (the API's m_tail for
    256-row tiles since step 86) against shifted, with B shared along M (c2B) and A along N (c2A),
    beside the 192x128 c2A tile the API settles and cuBLAS.  Spec 180 ran 256x128 c2B at
    788x24576x1536 (20 rows in the last block) in 76.8 us where M = 1024 takes 65.7."""
    from dgir.ops.fp8_gemm import settle_m_tail
    shapes = [(m, 24576, 1536) for m in (532, 560, 788, 828, 880)] + [(m, 32768, 512) for m in (532, 560, 788)] \
        + [(m, 4096, 7168) for m in (788, 1044, 1084)] + [(m, 7168, 2048) for m in (788, 1044)]
    one = []
    for m, n, k in shapes:
        group = []
        for mc in ("B", "A"):
            c = Fp8GemmConfig(n=n, k=k, block_m=256, block_n=128, stages=3, cluster=2, multicast=mc)
            group += [spec_of(m, c), spec_of(m, c) + ",mt=sh"]
        group.append(spec_of(m, settle_m_tail(Fp8GemmConfig(n=n, k=k, block_m=192, block_n=128, stages=4, cluster=2,
                                                             multicast="A"), m)))
        one.append(group + [f"{m},{n},{k}::cublas"])
    return alternating_passes(one, passes)


def fresh_m_specs(seed: int = 186, count: int = 28, passes: int = 2) -> list[str]:
    """Spec 186: the API at fresh M between the grid's points after step 87 (M log-uniform in
    516..8188, multiples of 4, off the grid, at the issue's seven (N, K); a fixed seed): its config,
    the cost model's own pick where it differs, and cuBLAS, `passes` times, reversed every second."""
    import random

    from dgir.ops.fp8_gemm import settle_m_tail
    rng = random.Random(seed)
    one = []
    while len(one) < count:
        shape = off_grid_draw(rng)
        if shape is None:
            continue
        m, n, k = shape
        group = list(dict.fromkeys([spec_of(m, api_pick(m, n, k)), spec_of(m, settle_m_tail(choose_config(m, n, k), m))]))
        one.append(group + [f"{m},{n},{k}::cublas"])
    return alternating_passes(one, passes)


# the configs the four entries step 125 moved to three CTAs an SM had before (spec 306), by (N, K, entry M)
BEFORE_THREE_CTAS = {(576, 7168, 64): "bm=64,bn=32,s=8,sk=8,o=2,sr=cl", (2112, 7168, 64): "bm=64,bn=48,s=6,sk=4,o=2,sr=cl",
                     (576, 7168, 128): "bm=64,bn=64,s=5,sk=8,o=2,sr=cl", (24576, 1536, 128): "bm=64,bn=128,s=8,cl=2B"}


def three_cta_specs(passes: int = 2) -> list[str]:
    """Spec 314 (step 125): every coverage shape whose API pick is a three-CTA kernel, the pick, the
    config its entry held before step 125, and cuBLAS; `passes` passes in alternating order.  The
    API rows feed coverage_report (the M = 17 / 32 / 96 rows take those entries through the nearby
    rules and were never timed with them); the before rows say whether the move held off the grid."""
    groups = []
    for m in sorted(set(MS) | set(OFF_GRID) | {64, 128, 4096}):
        for n, k in NK:
            cfg = api_pick(m, n, k)
            if cfg.ctas_per_sm != 3:
                continue
            before = [f"{m},{n},{k}:{v}" for (bn, bk, _), v in sorted(BEFORE_THREE_CTAS.items())
                      if (bn, bk) == (n, k)]
            groups.append(list(dict.fromkeys([spec_of(m, cfg)] + before)) + [f"{m},{n},{k}::cublas"])
    return alternating_passes(groups, passes)


def three_cta_carried_specs(passes: int = 2, ms=(64, 128)) -> list[str]:
    """Spec 315 (step 125): the analogous rule (dgir.tuning.analogous_config) now carries the
    three-CTA entries of (576, 7168) and (2112, 7168) to nearby (N, K) that no file timed.  At every
    such (N, K) of a grid around them and M in `ms` where the API's pick is a carried three-CTA
    kernel: that kernel and the one carried from the table before step 125 (git c7ea9a4~1, the same
    rule), `passes` passes in alternating order.  Held out: neither kernel was timed at these shapes."""
    import subprocess
    import tempfile
    from pathlib import Path
    from types import SimpleNamespace

    from dgir import deep_gemm, tuning
    h200 = SimpleNamespace(name="NVIDIA H200", sms=132)
    shapes = [(m, n, k) for m in ms for n in list(range(576, 833, 64)) + list(range(1984, 2273, 96))
              for k in (4096, 7168, 8192) if (n, k) not in NK]

    def picks() -> dict:
        deep_gemm._choice_for.cache_clear()
        return {s: deep_gemm._choice("fp8_gemm_nt", *s, h200, 0) for s in shapes}
    now = {s: c for s, c in picks().items() if c.source == "analogous" and c.config.ctas_per_sm == 3}
    old_table = subprocess.run(["git", "show", "c7ea9a4~1:dgir/tuned/fp8_gemm_nt_h200.json"], capture_output=True,
                               text=True, check=True, cwd=Path(__file__).resolve().parent).stdout
    shipped = tuning.SHIPPED
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "fp8_gemm_nt_h200.json").write_text(old_table)
        tuning.SHIPPED = Path(tmp)
        try:
            before = picks()
        finally:
            tuning.SHIPPED = shipped
            deep_gemm._choice_for.cache_clear()
    groups = [[spec_of(m, now[(m, n, k)].config), spec_of(m, before[(m, n, k)].config)]
              for m, n, k in sorted(now) if before[(m, n, k)].config != now[(m, n, k)].config]
    return alternating_passes(groups, passes)


def residency_widened_specs(passes: int = 2) -> list[str]:
    """Spec 316 (step 125): where the measured residency of 8-slice clusters at three CTAs an SM
    (fp8_gemm_walk.RESIDENT_CLUSTERS_MEASURED) widens an analogous carry to stay in one round (at
    spec 315's shapes: 64x2176x7168 / 8192, 48 -> 56 columns), the widened carry, the carry as spec 315
    timed it (48 columns, two rounds on an H100) and the spec's other kernel (the carry of the table
    before step 125), `passes` passes in alternating order."""
    from collections import defaultdict
    from pathlib import Path
    from types import SimpleNamespace

    from dgir import deep_gemm
    h200 = SimpleNamespace(name="NVIDIA H200", sms=132)
    timed = defaultdict(list)
    for line in (Path(__file__).resolve().parent / "specs" / "tune315.txt").read_text().split():
        shape, keys = line.split(":")[:2]
        timed[tuple(map(int, shape.split(",")))].append(line)
    groups = []
    for (m, n, k), lines in sorted(timed.items()):
        deep_gemm._choice_for.cache_clear()
        pick = deep_gemm._choice("fp8_gemm_nt", m, n, k, h200, 0)
        now = spec_of(m, pick.config)
        if pick.config.ctas_per_sm == 3 and now not in lines:
            groups.append(list(dict.fromkeys([now] + lines)))
    return alternating_passes(groups, passes)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "--at":     # fill_specs at these M for the seven (N, K)
        print("\n".join(fill_specs(shapes=[(int(m), n, k) for m in sys.argv[2].split(",") for n, k in NK])))
        raise SystemExit
    print("\n".join({"--validate": validation_specs, "--api": api_specs, "--fill": fill_specs, "--wide": wide_specs, "--tail256": tail256_specs, "--fresh-m": fresh_m_specs, "--three-ctas": three_cta_specs, "--three-ctas-carried": three_cta_carried_specs, "--residency-widened": residency_widened_specs}.get(mode, specs)()))
