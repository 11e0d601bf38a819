"""Does a tile that reaches past M cost more than a full one?  (bench/TUNING.md step 86)

    python bench/oob_probe.py --out oob.json "588,768,12416,5632:bm=192,bn=128,s=4,cl=2B" ...

A spec is "M,M_PAD,N,K:config" (config keys as in experiments.py; m_tail="fill" but in `shift`).  The operands are drawn with M_PAD
rows; the kernel always computes M rows (its M parameter is M), so it walks the same tiles in every
variant, and only what the tensor maps say lies beyond row M changes:
  plain        A, SFA and D have M rows: the last m block's loads and store reach past the maps' ends
               (TMA fills zeros / clips rows), as in any call with M not a multiple of BLOCK_M;
  a_inbounds   A and SFA have M_PAD rows (the same first M rows): the loads stay inside the maps;
  a_only       only A has M_PAD rows (SFA's loads still reach past its end);
  sfa_only     only SFA has M_PAD rows;
  ad_inbounds  D also has M_PAD rows: the store stays inside too;
  full         the kernel computes all M_PAD rows (the same tile walk when M_PAD <= the padded grid);
  shift        the config with m_tail="shift" (the last m block's tile moved up to end at row M),
               plain tensors; `same_bits`: its D equals plain's bit for bit;
  b_inbounds   with a fifth number N_PAD in the spec ("M,M_PAD,N,K,N_PAD"): B and SFB have N_PAD
               rows (the same first N), so the last n block's B loads stay inside B.
Each variant's first M rows are checked against the reference; passes in alternating order.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import replace
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import calc_diff, do_bench, header, write  # noqa: E402
from experiments import spec_config  # noqa: E402

from dgir import deep_gemm  # noqa: E402
from dgir.gpu_run import fp8_inputs, kernel_tensors  # noqa: E402
from dgir.ops.fp8_gemm import NUM_SMS, Fp8GemmConfig  # noqa: E402

VARIANTS = ("plain", "a_inbounds", "a_only", "sfa_only", "ad_inbounds", "full", "shift", "b_inbounds")


def parse(spec: str):
    shape, cfgs = (spec.split(":") + [""])[:2]
    m, pad, n, k, *n_pad = map(int, shape.split(","))
    cfg = spec_config(n, k, cfgs, NUM_SMS) or Fp8GemmConfig(n=n, k=k)
    return m, pad, n, k, replace(cfg, m_tail="fill"), (n_pad or [n])[0]


def runs(spec: str, device, variants):
    m, pad, n, k, cfg, n_pad = parse(spec)
    A, sfa, B, sfb, ref = fp8_inputs(pad, n_pad, k, device, 0, 2.0)
    ref = ref[:, :n]
    stream = torch.cuda.current_stream(device).cuda_stream
    out, plain_d = {}, None
    for v in ("plain",) + tuple(x for x in variants if x != "plain"):
        c = replace(cfg, m_tail="shift") if v == "shift" else cfg
        kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, device, config=c, variant=f"{spec}:{c.m_tail}")
        rows_a = m if v in ("plain", "sfa_only") else pad
        rows_sfa = m if v in ("plain", "a_only") else pad
        rows_d = pad if v in ("ad_inbounds", "full") else m
        d = torch.full((rows_d, n), float("nan"), dtype=torch.bfloat16, device=device)
        rows_b = n_pad if v == "b_inbounds" else n
        tensors = kernel_tensors(A[:rows_a], sfa[:rows_sfa].contiguous(), B[:rows_b],
                                 sfb[:-(-rows_b // 128)].contiguous(), d)
        m_run = pad if v == "full" else m
        plan = kern.plan(tensors, m_run)
        run = (lambda p: lambda: p(stream, False))(plan)
        run()
        torch.cuda.synchronize()
        got = d[:m_run].double()
        diff = calc_diff(got, ref[:m_run]) if bool(torch.isfinite(got).all()) else float("nan")
        same = None
        if v == "plain":
            plain_d = d[:m].clone()
        elif m_run == m:
            same = bool(torch.equal(d[:m].view(torch.int16), plain_d.view(torch.int16)))
        out[v] = (run, diff, kern.result.name, same, d)
    return m, pad, n, k, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--variants", default="", help="comma-separated subset of VARIANTS")
    ap.add_argument("specs", nargs="+")
    args = ap.parse_args()
    device = torch.device("cuda", 0)
    doc = {**header(device), "method": "triton do_bench, L2 flushed, median; variants in alternating order",
           "rows": []}
    variants = tuple(args.variants.split(",")) if args.variants else VARIANTS
    for spec in args.specs:
        t0 = time.time()
        try:
            m, pad, n, k, out = runs(spec, device, variants)
            for p in range(args.passes):
                order = variants if p % 2 == 0 else variants[::-1]
                for v in order:
                    run, diff, name, same, _ = out[v]
                    ms = do_bench(run)
                    r = {"spec": spec, "variant": v, "pass": p, "m": pad if v == "full" else m, "n": n, "k": k,
                         "kernel": name, "diff": diff, "same_bits": same, "ms": ms}
                    print(r, flush=True)
                    doc["rows"].append(r)
            if "shift" in out:    # after a few hundred launches, still the plain kernel's bits
                d_shift, d_plain = out["shift"][4], out["plain"][4]
                doc["rows"][-1]["same_bits_after_timing"] = bool(torch.equal(d_shift[:m].view(torch.int16),
                                                                             d_plain[:m].view(torch.int16)))
        except Exception as e:
            r = {"spec": spec, "error": f"{type(e).__name__}: {str(e)[:400]}"}
            print(r, flush=True)
            doc["rows"].append(r)
        doc["rows"][-1]["wall_s"] = round(time.time() - t0, 2)
        write(args.out, doc)


if __name__ == "__main__":
    main()
