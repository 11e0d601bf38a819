"""Split each small-M cell's time by operand traffic, from an experiments.py run of spec 282
(bench/specs/tune282.txt: default / noA / noB / noAB / floor / copyB per cell; TUNING.md step 115).

    python bench/operand_traffic.py bench/results/raw/tune282_exp.json     # prints a markdown table

Per cell (us): the kernel as the API runs it, without A's TMA loads (A is re-read from L2 by every N
tile), without B's (the DRAM stream), without both, the timer's floor for no work and a torch copy of
B; then what dropping A and dropping B saved.  The ablations are timing only (stale operands).
"""
import json
import sys


def table(doc: dict) -> str:
    cells: dict = {}
    for r in doc["rows"]:
        if "ms" in r:
            cells.setdefault((r["m"], r["n"], r["k"]), {})[r["variant"]] = r["ms"] * 1e3
    cols = ["default", "noA", "noB", "noAB", "floor", "copyB"]
    out = ["| M | N | K | " + " | ".join(cols) + " | A's loads cost | B's loads cost |",
           "|" + "---|" * (len(cols) + 5)]
    for (m, n, k), t in sorted(cells.items()):
        row = [f"{t[c]:.2f}" if c in t else "-" for c in cols]
        cost = lambda c: f"{t['default'] - t[c]:.2f}" if "default" in t and c in t else "-"  # noqa: E731
        out.append(f"| {m} | {n} | {k} | " + " | ".join(row) + f" | {cost('noA')} | {cost('noB')} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(table(json.load(open(sys.argv[1]))))
