"""Read a variant A/B out of an experiments file: per shape and config, B's median over A's.

    python bench/variant_ab.py bench/results/raw/tune294_exp.json --a default --b wguni

A spec that times two variants of the same kernel lists each (shape, config) several times, in
alternating order (ABBA), because leases and the timer's two modes (bench/TUNING.md step 88) move a
single timing by more than most variants do.  Here each (shape, config) that has both variants gets
the median of each and their ratio (B / A < 1: B faster); a pair is *slower* / *faster* where B's
median is over LOSS x A's and MODE_GAP_US more (or the reverse), else a tie.  The verdict line is
the rule the specs state: B is adoptable where no pair is slower.  With `--mix`, the K loop's SASS
instructions a K block of each kernel under each variant are computed here (dgir.loop_mix; variants
the compile can reproduce: the default and the pass variants of bench/experiments.py).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from api_regret import LOSS, MODE_GAP_US     # the same rule: a repetition's spread, the timer's modes


def pairs(doc: dict, a: str, b: str) -> list[dict]:
    """One row per (shape, config) timed under both variants: medians, counts, ratio, verdict."""
    times = defaultdict(lambda: defaultdict(list))
    kernels = {}
    for r in doc["rows"]:
        if "ms" not in r or r.get("variant") not in (a, b):
            continue
        if r.get("diff") is not None and r["diff"] > 1e-3:
            raise ValueError(f"{r['spec']}: diff {r['diff']} - a wrong result is no timing")
        shape, config = (r["spec"].split(":") + [""])[:2]
        times[(shape, config)][r["variant"]].append(r["ms"] * 1e3)
        kernels.setdefault((shape, config), r.get("kernel"))
    out = []
    for key, v in times.items():
        if a not in v or b not in v:
            continue
        ta, tb = statistics.median(v[a]), statistics.median(v[b])
        verdict = ("slower" if tb > LOSS * ta and tb - ta > MODE_GAP_US else
                   "faster" if ta > LOSS * tb and ta - tb > MODE_GAP_US else "tie")
        out.append({"shape": key[0], "config": key[1], "kernel": kernels[key], f"{a}_us": round(ta, 3),
                    f"{b}_us": round(tb, 3), "runs": (len(v[a]), len(v[b])), "ratio": round(tb / ta, 4),
                    "verdict": verdict})
    return out


def summary(rows: list[dict], a: str, b: str) -> str:
    if not rows:
        return f"no (shape, config) timed under both {a} and {b}"
    g = math.exp(statistics.mean(math.log(r["ratio"]) for r in rows))
    count = {v: sum(r["verdict"] == v for r in rows) for v in ("faster", "tie", "slower")}
    rule = "no pair slower" if not count["slower"] else f"{count['slower']} slower: not adoptable as is"
    return (f"{b} / {a}: geomean x{g:.4f} over {len(rows)} pairs, {count['faster']} faster, {count['tie']} ties, "
            f"{count['slower']} slower (beyond x{LOSS} and {MODE_GAP_US} us); {rule}")


def _mix(row: dict, variant: str) -> float | None:
    """SASS instructions a K block executes (one copy of a straddling promotion) in the row's kernel
    (by its name) under `variant`, compiled here as bench/experiments.py builds it (its pass list
    inside its emitter knob; a `+sass` patch leaves the count); None for a row without a kernel of
    ours (cuBLAS, the references)."""
    import contextlib
    from experiments import EMITTER_KNOBS, VARIANTS
    from fit_model import config_of
    from dgir import compile as dgir_compile
    from dgir.loop_mix import k_loop_mix
    from dgir.toolchain import disassemble
    base = variant.split("+")[0]
    cfg = config_of(row["kernel"] or "")
    if cfg is None or base not in VARIANTS:
        return None
    m, n, k = map(int, row["shape"].split(","))
    with EMITTER_KNOBS.get(base, contextlib.nullcontext)():
        res = dgir_compile("fp8_gemm_nt", m=m, n=n, k=k, config=cfg, passes=VARIANTS[base]())
    mix = k_loop_mix(disassemble(res.cubin), res.ir)
    return None if mix is None else mix.executed_per_k_block()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--a", default="default")
    ap.add_argument("--b", required=True)
    ap.add_argument("--mix", action="store_true", help="add each kernel's K-loop SASS a K block under A and B")
    args = ap.parse_args()
    rows = pairs(json.loads(Path(args.file).read_text()), args.a, args.b)
    for r in rows:
        extra = ""
        if args.mix:
            ma, mb = (_mix(r, v) for v in (args.a, args.b))
            extra = f" | SASS a K block {ma} -> {mb}"
        print(f"{r['shape']:>16s} {r['config'] or '(API)':28s} {r[args.a + '_us']:9.3f} {r[args.b + '_us']:9.3f} "
              f"x{r['ratio']:.3f} {r['verdict']:6s} runs {r['runs'][0]}/{r['runs'][1]}{extra}")
    print(summary(rows, args.a, args.b))


if __name__ == "__main__":
    main()
