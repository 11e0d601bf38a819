"""How many clusters of dgir's kernels the device holds at once, as its driver answers
(cuOccupancyMaxActiveClusters), against what the CPU-side walk assumes.

    python bench/cluster_residency.py --out cluster_residency.json        # on the GPU

Why (bench/TUNING.md step 125): a split over a cluster (one CTA per K slice, `sr=cl`) walks output
tiles with as many clusters as are resident, and the launcher asks the driver for that number; the
CPU side (`fp8_gemm_walk.walk_rounds`, which the tuned table's carry rules use to keep a measured
config in one round) assumes num_sms * ctas_per_sm // cluster.  Clusters live inside one GPC, so the
real count is lower wherever a GPC's slots do not divide by the cluster: on an H100, 64x2080x7168 (44
output tiles of 8-CTA clusters at three CTAs an SM) ran as fast as two CTAs an SM, 64x2176x7168 (46)
1.19x slower (spec 315), where the CPU side assumed 49 resident.  Since step 126 the CPU side
counts an H100's answers (`fp8_gemm_walk.RESIDENT_CLUSTERS_MEASURED`, from this script's
`raw/cluster_residency_h100_0d153c1.json`); `cpu_counted_clusters` is that count, so a run on
another card shows at once where its driver disagrees.

Rows: every kind of cluster kernel (split clusters of 2-8, 14 and 16 slices at one to four CTAs an SM;
2-CTA multicast clusters at one) and every cluster config of the shipped tables, each compiled,
loaded, and asked; beside it the CPU-side assumption.  Nothing is launched.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from common import header, write  # noqa: E402

from dgir.compiler import compile  # noqa: E402
from dgir.ops.fp8_gemm import Fp8GemmConfig, check_config, max_stages_for  # noqa: E402
from dgir.ops.fp8_gemm_walk import resident_split_clusters  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "dgir" / "tuned"


def kinds() -> list[tuple[int, Fp8GemmConfig]]:
    """(M, config): a 64x32 split over a cluster of every slice count a split may take (2-8, the
    autotuner's twins included; 14 and 16, non-portable sizes) at 1-4 CTAs an SM, and the 2-CTA
    multicast clusters.  K = 8192 (64 K blocks) where the slices divide it, else 8 K blocks a slice:
    the count depends on the CTA's threads and shared memory, not on K."""
    out = []
    for occ in (1, 2, 3, 4):
        for sk in (2, 3, 4, 5, 6, 7, 8, 14, 16):
            k = 8192 if 64 % sk == 0 else 128 * 8 * sk
            cfg = Fp8GemmConfig(n=4096, k=k, block_m=64, block_n=32, stages=2, split_k=sk,
                                split_reduce="cluster", ctas_per_sm=occ)
            out.append((64, replace(cfg, stages=max_stages_for(cfg))))
    for mc in ("A", "B"):
        cfg = Fp8GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=2, cluster=2, multicast=mc)
        out.append((4096, replace(cfg, stages=max_stages_for(cfg))))
    return out


def shipped() -> list[tuple[int, Fp8GemmConfig]]:
    """(M, config) of every cluster entry of the shipped tables (one per kernel name)."""
    seen, out = set(), []
    for path in sorted(SHIPPED.glob("fp8_gemm_nt_*.json")):
        for e in json.loads(path.read_text())["entries"]:
            cfg = Fp8GemmConfig(**e["config"])
            if (cfg.cluster > 1 or cfg.split_cluster) and cfg.kernel_name() not in seen:
                seen.add(cfg.kernel_name())
                out.append((e["m"], cfg))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch

    from dgir.runtime import driver
    from dgir.runtime.launcher import LoadedKernel
    doc = header(torch.device("cuda", 0))
    doc["method"] = __doc__.split("\n\n")[2]
    doc["rows"] = []
    for source, cases in (("kind", kinds()), ("shipped", shipped())):
        for m, cfg in cases:
            check_config(cfg)
            cluster = cfg.split_k if cfg.split_cluster else cfg.cluster
            try:
                result = compile("fp8_gemm_nt", m=m, n=cfg.n, k=cfg.k, config=cfg)
                loaded = LoadedKernel(result, 0)
                resident = driver.max_active_clusters(loaded.fn, loaded.threads, loaded.smem, cluster)
            except Exception as exc:      # one kernel's failure is a row, not the end of the run
                doc["rows"].append({"source": source, "kernel": cfg.kernel_name(), "m": m, "cluster": cluster,
                                    "error": f"{type(exc).__name__}: {exc}"[:300]})
                write(args.out, doc)
                continue
            occ = loaded.grid_attrs.get("ctas_per_sm", cfg.ctas_per_sm)
            # persistent_grid's slots without the driver's answer (resident_clusters=None), and what the
            # CPU side counts since step 126 (the H100's answers): a device that answers otherwise
            # needs its own entries in RESIDENT_CLUSTERS_MEASURED
            assumed = (cfg.num_sms * cfg.ctas_per_sm) // cluster
            counted = resident_split_clusters(cfg.num_sms, cluster, cfg.ctas_per_sm) if cfg.split_cluster else assumed
            row = {"source": source, "kernel": cfg.kernel_name(), "m": m, "cluster": cluster,
                   "ctas_per_sm_asked": cfg.ctas_per_sm, "ctas_per_sm_fit": occ, "threads": loaded.threads,
                   "smem_bytes": loaded.smem, "resident_clusters": resident,
                   "cpu_assumed_clusters": assumed, "cpu_counted_clusters": counted}
            print(row, flush=True)
            doc["rows"].append(row)
            write(args.out, doc)


if __name__ == "__main__":
    main()
