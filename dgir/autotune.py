"""Autotuning (GPU): time the cost model's best candidates for one shape, record the fastest.

    DG_AUTOTUNE=1 python app.py          # every new shape is tuned on first use, then cached
    dgir.autotune.autotune("fp8_gemm_nt", m, n, k, device_index=0)

Candidates are the operator's legal configs ranked by the cost model (plus the cluster-reduced twin
of each 64-row split-K config among them, less the global-workspace splits of taller tiles); the
top `top` are compiled,
checked against the float64 reference (a config that is wrong is never recorded) and timed with
CUDA events (median of `reps` launches after a warm-up).  The winner goes to the user cache of
dgir.tuning, keyed by device name, SM count and exact shape.
"""
from __future__ import annotations

import datetime
import statistics


def candidates(m: int, n: int, k: int, num_sms: int, top: int, one_cta_per_sm: bool = False) -> list:
    """The model's `top` best legal configs, best first, each split-K config with 64-row tiles
    followed by its twin reduced over a cluster, with the stages its receive buffer leaves room for
    (the model does not rank those: its small-M error
    made it pick slow ones, bench/TUNING.md step 23; timing them here costs nothing but a compile).
    Split-K through the global workspace with tiles of 128 rows or more is left out (the next
    ranked configs take its places): no such config won a head-to-head in the table's sources, and
    at M = 256-1024 they ran 1.5-3.5x slower than the model's first pick (spec 153, step 83).  Where
    the model ranked such a split of 128-row tiles among the first, its twin over a cluster is timed
    instead, after the others (each warpgroup exchanges its own fragment, step 116).  Last come the
    interleaved twins (`split_order="interleaved"`) of every split over a cluster among them: the
    order won at some shapes and lost at others (0.958-1.078x over 16 held-out split shapes, spec
    328; 1.094x at 64x576x7168 in ABBA rounds, spec 331), which no model term predicts, so only
    timing can choose it."""
    from dataclasses import replace

    from .ops.fp8_gemm import CLUSTER_SPLIT_BLOCK_MS, max_stages_for
    from .ops.fp8_gemm_config import PORTABLE_CLUSTER_SIZE      # larger splits measured slower (step 127)
    from .ops.fp8_gemm_model import candidate_configs, config_seconds
    ranked = sorted(candidate_configs(m, n, k, num_sms, one_cta_per_sm=one_cta_per_sm),
                    key=lambda c: config_seconds(m, n, k, c))

    def twin(c):           # the split reduced over a cluster: its receive buffer may leave fewer stages
        t = replace(c, split_reduce="cluster")
        return replace(t, stages=min(c.stages, max_stages_for(t)))

    best, tall_twins = [], []
    for c in ranked:
        if len(best) == top:
            break
        if c.split_k > 1 and c.split_reduce == "global" and c.block_m >= 128:
            if c.block_m in CLUSTER_SPLIT_BLOCK_MS and c.split_k <= PORTABLE_CLUSTER_SIZE and c.cluster == 1:
                tall_twins.append(twin(c))
            continue
        best.append(c)
    out = []
    for c in best:
        out.append(c)
        if 1 < c.split_k <= PORTABLE_CLUSTER_SIZE and c.block_m == 64 and c.cluster == 1 and c.split_reduce == "global":
            out.append(twin(c))
    out += tall_twins
    return out + [replace(c, split_order="interleaved") for c in out if c.split_cluster]


def time_plan(run, reps: int = 20) -> float:
    """Median seconds of `run()` over `reps` launches, each between two CUDA events."""
    import torch
    for _ in range(3):
        run()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return statistics.median(times)


def autotune(op: str, m: int, n: int, k: int, device_index: int = 0, top: int = 6, record: bool = True,
             num_sms: int | None = None):
    """Time the top candidates on the GPU; returns the fastest correct config (and records it).
    num_sms: a launch limited to that many of the device's SMs (deep_gemm.set_num_sms): candidates
    for that count with one CTA per SM, recorded under it."""
    import torch

    from . import deep_gemm, tuning
    from .gpu_run import calc_diff, fp8_inputs, kernel_tensors
    from .ops import OpError
    from .runtime.device import properties
    if op != "fp8_gemm_nt":
        raise OpError(f"autotune: {op} has no GPU kernel to time (fp8_gemm_nt has)")
    props = properties(device_index)
    dev = torch.device("cuda", device_index)
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, seed=0)
    d = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
    tensors = kernel_tensors(A, sfa, B, sfb, d)
    stream = torch.cuda.current_stream(dev).cuda_stream
    timed = []
    sms = props.sms if num_sms is None else num_sms
    for cfg in candidates(m, n, k, sms, top, one_cta_per_sm=sms < props.sms):
        kern = deep_gemm.get_kernel(op, m, n, k, dev, config=cfg, variant="autotune")
        plan = kern.plan(tensors, m)
        d.fill_(float("nan"))
        plan(stream)
        torch.cuda.synchronize(dev)
        if not bool(torch.isfinite(d).all()) or calc_diff(d.double(), ref) >= 1e-3:
            continue                                  # never record a config that computes wrong
        timed.append((time_plan(lambda: plan(stream)), cfg))
    if not timed:
        raise RuntimeError(f"autotune: no candidate of {op} m={m} n={n} k={k} computed a correct result")
    seconds, best = min(timed, key=lambda x: x[0])
    if record:
        tuning.record({"device": props.name, "sms": sms, "op": op, "m": m, "n": n, "k": k,
                       "config": best.as_dict(), "us": round(seconds * 1e6, 2), "source": "autotune",
                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "timed": {c.kernel_name(): round(t * 1e6, 2) for t, c in timed}})
    return best
