"""Split each small-M cell's time by operand traffic, from an experiments.py run of spec 282
(bench/specs/tune282.txt: default / noA / noB / noAB / floor / copyB per cell; TUNING.md step 115).

    python bench/operand_traffic.py bench/results/raw/tune282_exp.json     # prints a markdown table

Per cell (us): the kernel as the API runs it, without A's TMA loads (A is re-read from L2 by every N
tile), without B's (the DRAM stream), without both, the timer's floor for no work, a torch copy of
B and cuBLAS where the spec has it; then what dropping A and dropping B saved.  The ablations are
timing only (stale operands).  Then each explicit config of the run against the cell's API kernel
(spec 282's clusters sharing A; spec 284's 128-row splits over a cluster read the same way).
"""
import json
import statistics
import sys


def table(doc: dict) -> str:
    """The ablation table, then the explicit configs of the run (e.g. spec 282's clusters sharing A)
    beside each cell's API kernel.  A spec line "m,n,k::variant" times the API's kernel (or a
    reference); "m,n,k:bm=...:" an explicit config, whose rows are variant "default" too, so they are
    keyed by their kernel, never mixed into the API's column.  Medians over repeated lines."""
    cells: dict = {}
    explicit: dict = {}
    for r in doc["rows"]:
        if "ms" not in r:
            continue
        shape = (r["m"], r["n"], r["k"])
        configured = bool((r.get("spec", "").split(":") + [""])[1])      # "m,n,k:<config>:<variant>"
        into = explicit.setdefault(shape, {}).setdefault(r["kernel"], []) if configured else \
            cells.setdefault(shape, {}).setdefault(r["variant"], [])
        into.append(r["ms"] * 1e3)
    med = {shape: {v: statistics.median(t) for v, t in by.items()} for shape, by in cells.items()}
    cols = ["default", "noA", "noB", "noAB", "floor", "copyB", "cublas"]
    out = ["| M | N | K | " + " | ".join(cols) + " | A's loads cost | B's loads cost |",
           "|" + "---|" * (len(cols) + 5)]
    for (m, n, k), t in sorted(med.items()):
        row = [f"{t[c]:.2f}" if c in t else "-" for c in cols]
        cost = lambda c: f"{t['default'] - t[c]:.2f}" if "default" in t and c in t else "-"  # noqa: E731
        out.append(f"| {m} | {n} | {k} | " + " | ".join(row) + f" | {cost('noA')} | {cost('noB')} |")
    if explicit:
        out += ["", "| M | N | K | kernel | us | over the API's kernel |", "|---|---|---|---|---|---|"]
        for (m, n, k), kernels in sorted(explicit.items()):
            api = med.get((m, n, k), {}).get("default")
            for name, t in sorted(kernels.items(), key=lambda kv: statistics.median(kv[1])):
                us = statistics.median(t)
                out.append(f"| {m} | {n} | {k} | {name.removeprefix('fp8_gemm_nt_')} | {us:.2f} | "
                           + (f"{us / api:.3f}x |" if api else "- |"))
    return "\n".join(out)


if __name__ == "__main__":
    print(table(json.load(open(sys.argv[1]))))
