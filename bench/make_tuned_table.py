"""Build dgir's shipped table of measured configs from the committed measurements.

    python bench/make_tuned_table.py          # writes dgir/tuned/fp8_gemm_nt_h200.json and _h100.json

For every shape with M a power of two that bench/results holds timings of two or more configs for (the tuning
experiments bench/results/raw/tune10..14 and the default rows of the full run at 2683681), the fastest
correct one (calc_diff < 1e-3, every element finite where recorded) becomes an entry of
dgir.tuning's table, with its time and the file it came from.  Configs are read back from kernel
names; rows of ablation variants are skipped.

The H100 SXM's entries come from its own files (H100_SOURCES: the sweep of the grid at the issue's
seven (N, K), specs 310-311, the hold-out 312, and the H100 runs beside them) into their own file; where the H100 has
no entry, dgir.tuning lets the H200's stand in (bench/TUNING.md step 124).

Cross-file fastest samples compare leases that differ by up to ~10%, so a head-to-head within one
file outranks them: when the newest file that timed the chosen config at least twice also timed
other configs at least twice each, the config with the lowest median there replaces the choice if
it is at least 1% faster (step 56); that winner then meets its own newest head-to-head, if a newer file
timed one (step 125).

The schedule knob math_order is decided head-to-head: when a file timed the chosen config with
"together" and another order (same run, same machine; best of the file's repetitions), the newest
such file decides, and another order replaces "together" only when it is at least 1% faster there
(leases differ by up to ~10%, repetitions by 1-4%: more than the knob's effect on most shapes).
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from fit_model import config_of, spec_number

from dgir.ops.fp8_gemm import MATH_ORDERS, settle_early_epilogue

ROOT = Path(__file__).resolve().parent
# frozen inputs (the rolling bench/results/fp8_gemm_nt.json is not one: regenerating must reproduce
# the committed table until these are deliberately extended); runs on several H200 leases
SOURCES = ([f"results/raw/tune{i}_exp.json" for i in (10, 11, 12, 13, 14)] + ["results/raw/final_2683681.json"]
           + [f"results/raw/tune{i}_exp.json" for i in (17, 18, 19, 20, 21, 22, 23, 24, 25)]
           # cluster split-K in its final protocol (st.async pushes); tune32-34 timed earlier versions
           + [f"results/raw/tune{i}_exp.json" for i in (35, 36, 37)]
           # the M between the issue's rows (256..2048) and M=4097: model candidates, neighbours' configs
           + [f"results/raw/tune{i}_exp.json" for i in (42, 43)]
           # 128x128 against the tuned configs after the warpgroup-index broadcast (step 31)
           + ["results/raw/tune51_exp.json"]
           # the K=512 small-M cells re-timed after step 31, and their repeat A/B (step 38)
           + [f"results/raw/tune{i}_exp.json" for i in (62, 63)]
           # the points 3 * 2^i between the powers of two: model's and nearest entry's configs, a few
           # more at the shapes below cuBLAS, and the API's configs as timed for the coverage report
           # (more samples of the same configs: a two-config choice from one file was not enough)
           + [f"results/raw/tune{i}_exp.json" for i in (44, 50, 52, 64, 65, 66)]
           # 192-row tiles (three math warpgroups) against the API's configs and cuBLAS (step 41)
           + [f"results/raw/tune{i}_exp.json" for i in (68, 69, 70, 72, 73, 75)]
           # M = 8192: the grid's last point was 6144 (M = 8191 took the model's pick)
           + ["results/raw/tune76_exp.json"]
           # rings as deep as a split-K slice's K blocks at small M (step 54)
           + ["results/raw/tune95_exp.json"]
           # the N=7168 small-M cells in 128 tiles instead of 112 (step 56), and the coverage shapes
           # that moved with them, next to their previous picks
           + ["results/raw/tune99_exp.json", "results/raw/tune100_exp.json"]
           # the small-M cells the L2 hint reaches, re-swept with it (step 63), two leases
           + ["results/raw/tune110_exp.json", "results/raw/tune111_exp.json"]
           # (N, K) outside the seven (DeepSeek-V3 and dense-model layers): the model's pick,
           # configs carried over from measured neighbours, the autotuner's candidates (steps 82, 83)
           + [f"results/raw/tune{i}_exp.json" for i in (149, 150, 151, 152, 153)]
           # narrow N (256-1024) at M = 192-512: the API's pick against split-K over a cluster (step 85)
           + ["results/raw/tune162_exp.json"]
           # the grid points that had no entry (one config timed there before) and M just past 4096,
           # the model's candidates, the neighbours' configs and 128- to 256-row cluster tiles (step 87)
           + ["results/raw/tune179_exp.json"]
           # the points 7 * 2^i (896 .. 7168): the same kinds of candidate (step 87)
           + ["results/raw/tune183_exp.json", "results/raw/tune184_exp.json"]
           # and the points 5 * 2^i (640 .. 5120)
           + ["results/raw/tune185_exp.json"]
           # K <= 1536 picks that were not 256-row tiles, against 256x128 with the early epilogue, and
           # the early staging without the early store at M = 1280-1792 (step 96)
           + [f"results/raw/tune{i}_exp.json" for i in (198, 199, 200, 201)]
           # the K = 1536-2048 entries at M > 1024 that still had 192-row or older picks, against
           # 256x128 with the early epilogue (step 97)
           + ["results/raw/tune203_exp.json"]
           # three and four CTAs per SM for 64-row tiles at the 14 small-M cells, against the API's configs
           # (step 125: three CTAs win at the N = 576 cells and 128x24576x1536)
           + ["results/raw/tune306_exp.json"]
           # the H200 lease of step 129: the three-CTA picks at the coverage shapes beside their previous
           # configs (314), the three-CTA carries (315), the widened carry (316), the one table entry the
           # driver's residency puts in two rounds beside one that is not (318), the moved random shapes'
           # old and new configs (319-320), 14-slice splits (321) and the N = 576 timelines' timings (322-323)
           + [f"results/raw/tune{i}_exp.json" for i in (314, 315, 316, 318, 319, 320, 321, 322, 323)]
           # step 135: each small-M entry of the cells against its closest rival, ABBA x3 (332);
           # the entries below 60 us the fastest-mode reading of the short files would move, ABBA x3 (335)
           + ["results/raw/tune332_exp.json", "results/raw/tune335_exp.json"])
# the H100 SXM's own timings (every H100 run of the fp8_gemm_nt sweeps and full tables committed)
H100 = "NVIDIA H100 80GB HBM3"
H100_SOURCES = (["results/raw/final_h100_21da683.json", "results/raw/final_h100_7dd42bd.json"]
                + [f"results/raw/tune{i}_h100_exp.json" for i in (298, 299, 306, 307, 308, 309, 310, 311, 312, 313)]
                # steps 126-129 on H100s: the residency moves, 14-slice splits, the N = 576 timelines' timings
                + [f"results/raw/tune{i}_h100_exp.json" for i in (315, 316, 317, 319, 320, 321, 322, 323)]
                # step 132: the interleaved split order at the split cells and 16 held-out split shapes
                + [f"results/raw/tune{i}_h100_exp.json" for i in (327, 328)]
                # step 133: the N = 576 cells, table against the interleaved order, three ABBA rounds
                + ["results/raw/tune331_h100_exp.json"]
                # step 134: each small-M entry of the cells against its closest rival, ABBA x3;
                # the entries the fastest-mode rule would have moved on short files, ABBA x3
                + ["results/raw/tune333_h100_exp.json", "results/raw/tune334_h100_exp.json"])
H100_OUT = ROOT.parent / "dgir" / "tuned" / "fp8_gemm_nt_h100.json"
EARLY_EPILOGUE_SPEC = 191             # the first spec timed with the early epilogue in the default pipeline
MARGIN = 0.99                          # another order must take <= 99% of "together"'s time
OUT = ROOT.parent / "dgir" / "tuned" / "fp8_gemm_nt_h200.json"


def on_grid(m: int) -> bool:
    """The table's M: powers of two, from 96 on the points 3 * 2^i between them (spec 44 timed the
    model's and the nearest entry's configs there, spec 65 a few more), and the points 5 * 2^i from
    640 and 7 * 2^i from 896 (specs 183-185: between the other points the neighbours' tiles can fit
    badly: 1792x2112x7168 ran 1.75x the best timed config with the 2048 entry's, 640x2112x7168 1.34x).  M = 17 and 32 stay
    off it: both <= 128, they take the nearest measured M's entry, which spec 44 checked."""
    def times_power(f: int) -> bool:
        return m % f == 0 and (m // f) & (m // f - 1) == 0
    return ((m >= 64 and times_power(1)) or (m >= 96 and times_power(3)) or (m >= 640 and times_power(5))
            or (m >= 896 and times_power(7)))


def sources_of(device: str) -> list[str]:
    """The device's own files, oldest first (the order in which a newer head-to-head overrules)."""
    return H100_SOURCES if device == H100 else SOURCES


def newest_duel(samples, key, baseline: str, among=None, repeats: int = 1, stat=min):
    """The newest file of the key's device that timed `baseline` beside other kernels (those in
    `among`, when given), each at least `repeats` times, decides: (stat of its seconds, kernel,
    source) of that file's fastest, or of `baseline` when the fastest is not >= 1% faster than it;
    None when no file timed both."""
    decided = None
    for src in sources_of(key[0]):
        here = {kern: stat(t) for kern, t in samples.get(key + (src,), {}).items()
                if len(t) >= repeats and (among is None or kern in among)}
        if baseline in here and len(here) > 1:
            decided = src, here
    if decided is None:
        return None
    src, t = decided
    best = min(t, key=t.get)
    if t[best] > MARGIN * t[baseline]:
        best = baseline
    return t[best], best, src


TIMER_MODE_GAP = 0.6e-6    # the L2-flushed timer's two modes (step 88): the same call reads ~0.6 us apart
ROUNDS_SAMPLES = 6         # a file with this many timings of each config ran ABBA rounds (specs 331 on)


def duel_seconds(seconds: list, rounds_samples: int = ROUNDS_SAMPLES) -> float:
    """What a head-to-head compares of one config's timings in one file: the median, except for ABBA
    rounds (six or more timings) of a call short enough that the timer's modes can decide it: there
    the mean of the fastest mode, the samples within half the modes' gap of the fastest.

    Every call lands in one of the timer's two modes whatever the kernel, so below ~60 us (where the
    gap is more than the 1% a config must win by) a median of six says how often each config drew the
    slow mode, not which is faster: in spec 333 the table's 64x2112x7168 config was 1.3-1.5% faster
    than its rival within each mode, yet its median was 2.8% slower (four of its six samples in the
    slow mode, two of the rival's).  Longer calls spread by more than the gap for other reasons
    (clocks), and there the fastest mode is just the fastest sample; spec 334's 3584x7168x16384 ran
    675-717 us.  Shorter files keep the median their entries were decided by: spec 334 timed the
    H100 entries that the fastest mode would have moved there, and the median had been right at
    three of four below 60 us (the fourth a tie)."""
    median = statistics.median(seconds)
    if len(seconds) < rounds_samples or median > TIMER_MODE_GAP / (1 - MARGIN):
        return median
    fastest_mode = [t for t in seconds if t <= min(seconds) + TIMER_MODE_GAP / 2]
    return sum(fastest_mode) / len(fastest_mode)


def settled_by_duels(samples, key, runs, choice, stat=duel_seconds):
    """(seconds, config, source) after the head-to-heads: the newest file that timed the choice beside
    other configs, each at least twice, decides (by medians; ABBA rounds by their fastest mode,
    duel_seconds); its winner then meets its own newest
    head-to-head, as long as that file is newer than the one that just decided (spec 306 timed
    tune95's winner at 64x576x7168 against three CTAs an SM, not the fastest sample tune95 beat)."""
    decided_in = -1
    order = sources_of(key[0])
    while (duel := newest_duel(samples, key, choice[1].kernel_name(), repeats=2, stat=stat)) \
            and duel[1] != choice[1].kernel_name() and order.index(duel[2]) > decided_in:
        choice, decided_in = (duel[0], runs[duel[1]][1], duel[2]), order.index(duel[2])
    return choice


def settled_kernel(kernel: str, m: int, src: str) -> str | None:
    """The table's name for a kernel timed at M = m, None for one the API does not run there.  The
    API settles a config's early_epilogue per M (fp8_gemm.settle_early_epilogue): where it settles
    to "staging", that config's early-staging-only kernel (suffix `_estg`) is the one a call runs,
    and the plain name timed in a file from spec 191 on (the early store in the default pipeline) is
    not.  Any other name stays (config_of then skips the opt-in and variant suffixes)."""
    estg = kernel.endswith("_estg")
    base = config_of(kernel[:-len("_estg")] if estg else kernel, tile_only=True)
    if base is None:
        return kernel if not estg else None
    staging = settle_early_epilogue(base, m).early_epilogue == "staging"
    if estg:
        return base.kernel_name() if staging else None
    if staging and spec_number(src) >= EARLY_EPILOGUE_SPEC:
        return None
    return kernel


def read_timings():
    """Every usable timing of the sources: ({(device, m, n, k): {kernel: (fastest seconds, config,
    its source)}}, {(device, m, n, k, source): {kernel: [seconds]}}).  Usable: a default-variant row
    of a correct kernel (calc_diff < 1e-3, every element finite where recorded) that the API runs
    at that M (settled_kernel), named so that config_of reads its config back."""
    timed = defaultdict(dict)
    samples = defaultdict(lambda: defaultdict(list))
    for src in SOURCES + H100_SOURCES:
        doc = json.loads((ROOT / src).read_text())
        device = doc["device"]["name"] if isinstance(doc.get("device"), dict) else doc.get("device")
        if (device == H100) != (src in H100_SOURCES):
            raise SystemExit(f"{src}: timed on {device}, listed as {'an H100' if src in H100_SOURCES else 'an H200'} source")
        for r in doc["rows"]:
            if r.get("variant", "default") != "default" or "ms" not in r or not r.get("kernel"):
                continue
            if not (r.get("diff", 1) < 1e-3) or r.get("all_finite") is False:
                continue
            kernel = settled_kernel(r["kernel"], r["m"], src)
            cfg = config_of(kernel, tile_only=True) if kernel else None
            if cfg is None:
                continue
            key = (device, r["m"], r["n"], r["k"])
            samples[key + (src,)][kernel].append(r["ms"] * 1e-3)
            best = timed[key].get(kernel)
            if best is None or r["ms"] < best[0] * 1e3:
                timed[key][kernel] = (r["ms"] * 1e-3, cfg, src)
    return timed, samples


def table_entries(timed, samples, stat=duel_seconds) -> list[dict]:
    """Both devices' entries from read_timings' output: at each grid shape where two or more configs
    were timed, the fastest, then as the head-to-heads settle it (comparing `stat` of each config's
    timings in a file), then its best math order."""
    entries = []
    for (device, m, n, k), runs in sorted(timed.items()):
        if len(runs) < 2:
            continue                   # one config timed: nothing was chosen
        if not on_grid(m):
            continue                   # other M (4097, 17, 32) take the nearest grid point's entry
                                       # (dgir.tuning.nearest)
        seconds, cfg, src = min(runs.values(), key=lambda x: x[0])
        key = (device, m, n, k)
        # configs: medians of repeated timings; math orders: best of a file's repetitions
        seconds, cfg, src = settled_by_duels(samples, key, runs, (seconds, cfg, src), stat)
        orders = {replace(cfg, math_order=o).kernel_name(): replace(cfg, math_order=o) for o in MATH_ORDERS}
        together = replace(cfg, math_order="together").kernel_name()
        duel = newest_duel(samples, key, together, among=orders)
        if duel is not None and orders[duel[1]] != cfg:   # that file's time is the evidence
            seconds, cfg, src = duel[0], orders[duel[1]], duel[2]
        entries.append({"device": device, "sms": cfg.num_sms, "op": "fp8_gemm_nt", "m": m, "n": n, "k": k,
                        "config": cfg.as_dict(), "us": round(seconds * 1e6, 2), "source": f"bench/{src}",
                        "configs_timed": len(runs)})
    return entries


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT, help="the H200's entries")
    ap.add_argument("--h100-out", type=Path, default=H100_OUT, help="the H100 SXM's entries")
    args = ap.parse_args()
    entries = table_entries(*read_timings())
    for path, mine in ((args.out, [e for e in entries if e["device"] != H100]),
                       (args.h100_out, [e for e in entries if e["device"] == H100])):
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"version": 1, "entries": mine}, indent=1, sort_keys=True) + "\n")
        print(f"{len(mine)} shapes -> {path}")


if __name__ == "__main__":
    main()
