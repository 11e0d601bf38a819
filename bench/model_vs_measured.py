"""The cost model's prediction against the committed result file, per default row (markdown table).

    python bench/model_vs_measured.py [bench/results/fp8_gemm_nt.json]

For each shape: the kernel the run used (from its name), `config_seconds` for that config, the
measured time, their ratio; and which config the model alone would pick (`choose_config`) with its
own prediction, so the table also shows where the measured table overrides the model.
"""
import json
import math
import sys
from pathlib import Path

from fit_model import config_of

from dgir.ops.fp8_gemm_model import choose_config, config_seconds

ROOT = Path(__file__).resolve().parent


def tile(c) -> str:
    extra = (f" sk{c.split_k}" if c.split_k > 1 else "") + (f" c{c.cluster}{c.multicast}" if c.cluster > 1 else "") \
        + (f" o{c.ctas_per_sm}" if c.ctas_per_sm > 1 else "") + ("" if c.math_order == "together" else f" {c.math_order}") \
        + (f" g{c.swizzle_group}" if c.swizzle_group != 16 else "")
    return f"{c.block_m}x{c.block_n}{extra}"


def main(path: str) -> None:
    doc = json.loads(Path(path).read_text())
    print("| M | N | K | kernel run | model us | measured us | measured/model | model's own pick | its model us |")
    print("|---|---|---|---|---|---|---|---|---|")
    logs = []
    for r in doc["rows"]:
        if r.get("variant") != "default" or r["m"] not in (64, 128, 4096) or "ms" not in r:
            continue
        cfg = config_of(r["kernel"])
        model = config_seconds(r["m"], r["n"], r["k"], cfg) * 1e6
        own = choose_config(r["m"], r["n"], r["k"])
        meas = r["ms"] * 1e3
        logs.append(abs(math.log(meas / model)))
        print(f"| {r['m']} | {r['n']} | {r['k']} | {tile(cfg)} | {model:.1f} | {meas:.1f} | {meas / model:.2f} | "
              f"{tile(own)} | {config_seconds(r['m'], r['n'], r['k'], own) * 1e6:.1f} |")
    print(f"\nGeometric-mean error x{math.exp(sum(logs) / len(logs)):.2f} over {len(logs)} shapes "
          f"(rev {str(doc.get('git_rev'))[:8]}).")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "results" / "fp8_gemm_nt.json"))
