"""Programmatic dependent launch (deep_gemm.set_pdl) on a chain of GEMMs, as a model's layers issue them.

Per shape, LAYERS GEMMs with their own B, scales and D (so the weights stream from DRAM as they
would, not from L2) run back to back on one stream; the chain is timed with the benchmark timer (L2
flushed before each chain, median) with PDL off and on, beside the same chain of cuBLAS calls.
The per-GEMM figure is the chain's time / LAYERS.  Every D of the PDL chain is checked against the
float64 reference and must equal the PDL-off chain's bitwise.

Also timed: one call per measurement with PDL off and on (the figure the result file records), to
show whether the timer's single-call numbers move (the flush kernel and an event sit before each
call there).

    python bench/pdl_chain.py --out bench/results/raw/pdl_chain_<rev>.json [M,N,K ...]
"""
from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import calc_diff, cublas_fp8_gemm, do_bench, header, out_and_shapes, write  # noqa: E402

from dgir import deep_gemm  # noqa: E402
from dgir.gpu_run import fp8_inputs  # noqa: E402

LAYERS = 8
# the cells at M <= 128, where a kernel lasts 9-45 us and its launch and prologue are a
# visible share, and three M = 4096 cells
SHAPES = [(m, n, k) for m in (64, 128) for n, k in ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384),
                                                    (4096, 7168), (7168, 2048), (576, 7168))] + \
         [(4096, 2112, 7168), (4096, 7168, 2048), (4096, 576, 7168)]


def chain(m, n, k, device, seed):
    """LAYERS GEMMs sharing A (a batch of tokens), each with its own weights and output."""
    layers = []
    for i in range(LAYERS):
        A, sfa, B, sfb, ref = fp8_inputs(m, n, k, device, seed + i)
        layers.append({"B": B, "sfb": sfb, "ref": ref, "A": A,
                       "sfa": deep_gemm.get_mn_major_tma_aligned_tensor(sfa),
                       "d": torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)})
    return layers


def run_chain(layers):
    for x in layers:
        deep_gemm.fp8_gemm_nt((x["A"], x["sfa"]), (x["B"], x["sfb"]), x["d"])


def one_shape(m, n, k, device, seed) -> dict:
    layers = chain(m, n, k, device, seed)
    deep_gemm.set_pdl(False)
    run_chain(layers)                                 # compile, plan
    torch.cuda.synchronize()
    plain = [x["d"].clone() for x in layers]
    for x in layers:
        x["d"].fill_(float("nan"))
    deep_gemm.set_pdl(True)
    try:
        run_chain(layers)
        torch.cuda.synchronize()
        diffs = [calc_diff(x["d"].double(), x["ref"]) if bool(torch.isfinite(x["d"]).all()) else float("nan")
                 for x in layers]
        same = all(torch.equal(x["d"].view(torch.int16), p.view(torch.int16)) for x, p in zip(layers, plain))
        chain_pdl = do_bench(lambda: run_chain(layers))
        x0 = layers[0]
        single_pdl = do_bench(lambda: deep_gemm.fp8_gemm_nt((x0["A"], x0["sfa"]), (x0["B"], x0["sfb"]), x0["d"]))
    finally:
        deep_gemm.set_pdl(False)
    chain_plain = do_bench(lambda: run_chain(layers))
    single_plain = do_bench(lambda: deep_gemm.fp8_gemm_nt((x0["A"], x0["sfa"]), (x0["B"], x0["sfb"]), x0["d"]))
    calls = [cublas_fp8_gemm(x["A"], x["sfa"], x["B"], x["sfb"]) for x in layers]
    chain_cublas = do_bench(lambda: [c() for c in calls])
    flop = 2 * m * n * k
    us = lambda ms: ms * 1e3 / LAYERS  # noqa: E731 - per GEMM in a chain
    return {"m": m, "n": n, "k": k, "layers": LAYERS, "max_diff": max(diffs), "pdl_bitwise_equal": same,
            "chain_us_per_gemm": {"plain": us(chain_plain), "pdl": us(chain_pdl), "cublas": us(chain_cublas)},
            "chain_tflops": {"plain": flop / (us(chain_plain) * 1e6), "pdl": flop / (us(chain_pdl) * 1e6),
                             "cublas": flop / (us(chain_cublas) * 1e6)},
            "pdl_speedup": chain_plain / chain_pdl,
            "single_us": {"plain": single_plain * 1e3, "pdl": single_pdl * 1e3}}


def main():
    out, shapes = out_and_shapes(SHAPES)
    device = torch.device("cuda", 0)
    doc = {**header(device), "method": __doc__.split("\n\n")[1].replace("\n", " "), "rows": []}
    seed = torch.randint(0, 2**31 - 64, ()).item()    # fresh inputs every run
    for m, n, k in shapes:
        t0 = time.time()
        try:
            r = one_shape(m, n, k, device, seed)
        except Exception as e:                        # noqa: BLE001 - recorded in the row
            r = {"m": m, "n": n, "k": k, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        r["wall_s"] = round(time.time() - t0, 2)
        print(r, flush=True)
        doc["rows"].append(r)
        write(out, doc)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
