"""Read an ABBA experiment file (specs 331-335): each cell's config A against its rival B.

    python bench/abba_report.py results/raw/tune333_h100_exp.json [--json]

A block is one cell's spec lines in the order A B B A, repeated (random_shapes_specs.py
--runner-up-abba).  Per block: each config's median, its fastest-mode mean (make_tuned_table's
duel_seconds, what the table decides by) and its range; B/A by both; and the verdict the table's
rule draws: "B" or "A" where that config is >= 1% faster (make_tuned_table.MARGIN), "tie" otherwise.
On a tie the table holds whichever config has the fastest single timing in any of the device's
files (make_tuned_table.table_entries starts from that one), which may be B: two H200 entries moved
so in step 135.  The timer's
two modes (step 88) are why both statistics are shown: the median counts how often a config drew the
slow mode, the fastest-mode mean compares like with like.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tuned_table import MARGIN, duel_seconds  # noqa: E402


def blocks(rows: list) -> list[dict]:
    """The file's cells in order: {m, n, k, a, b, a_us, b_us} (the timings in microseconds), A being the
    first spec of a cell and B the other one."""
    cells: dict[tuple, dict] = {}
    for r in rows:
        key = (r["m"], r["n"], r["k"])
        cell = cells.setdefault(key, {"m": r["m"], "n": r["n"], "k": r["k"], "a": r["spec"], "b": None,
                                      "a_us": [], "b_us": []})
        if r["spec"] != cell["a"]:
            if cell["b"] not in (None, r["spec"]):
                raise SystemExit(f"{key}: more than two configs in one block ({cell['a']}, {cell['b']}, {r['spec']})")
            cell["b"] = r["spec"]
        cell["a_us" if r["spec"] == cell["a"] else "b_us"].append(r["ms"] * 1e3)
    return list(cells.values())


def verdicts(rows: list) -> list[dict]:
    out = []
    for c in blocks(rows):
        # duel_seconds works in seconds (its mode gap is 0.6e-6)
        a_mode, b_mode = (duel_seconds([t * 1e-6 for t in c[x]]) * 1e6 for x in ("a_us", "b_us"))
        a_med, b_med = statistics.median(c["a_us"]), statistics.median(c["b_us"])
        out.append({**c, "a_mode_us": a_mode, "b_mode_us": b_mode, "a_median_us": a_med, "b_median_us": b_med,
                    "b_over_a_mode": b_mode / a_mode, "b_over_a_median": b_med / a_med,
                    "verdict": "B" if b_mode <= MARGIN * a_mode else "A" if a_mode <= MARGIN * b_mode else "tie"})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file", help="an experiments.py output of ABBA rounds")
    ap.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    args = ap.parse_args()
    doc = json.loads(Path(args.file).read_text())
    rows = verdicts(doc["rows"])
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{args.file}: {doc.get('device')}, rev {doc.get('git_rev')}; us, A = the table's config")
    for v in rows:
        print(f"{v['m']}x{v['n']}x{v['k']}: A {v['a'].split(':')[1]} {v['a_mode_us']:.2f} "
              f"(median {v['a_median_us']:.2f}, {min(v['a_us']):.2f}-{max(v['a_us']):.2f}); "
              f"B {v['b'].split(':')[1]} {v['b_mode_us']:.2f} (median {v['b_median_us']:.2f}, "
              f"{min(v['b_us']):.2f}-{max(v['b_us']):.2f}); B/A {v['b_over_a_mode']:.3f} "
              f"(medians {v['b_over_a_median']:.3f}) -> {v['verdict']}")


if __name__ == "__main__":
    main()
