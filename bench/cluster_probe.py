"""Probe cluster kernels on the GPU: which part of the cluster protocol costs what.

    python bench/cluster_probe.py      (prints one line per variant)
Variants of one 4096x7168x16384 tile config: no cluster; cluster launch + cluster tile order with
CTA-local barriers (no cross-CTA traffic at all); + cross-CTA releases (nomc); + multicast (full)."""
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ablations import pipeline_with  # noqa: E402
from common import do_bench  # noqa: E402

from dgir import deep_gemm  # noqa: E402
from dgir.gpu_run import calc_diff, fp8_inputs, kernel_plan  # noqa: E402
from dgir.ir import Op, map_bodies  # noqa: E402
from dgir.ops.fp8_gemm import Fp8GemmConfig  # noqa: E402
from dgir.passes import Pass  # noqa: E402


class LocalBarriers(Pass):
    """Probe only: cluster launch and tile order, but every channel CTA-local and no drain."""
    name = "local_barriers"

    def run(self, kernel):
        kernel = map_bodies(kernel, lambda p, body: [c for c in body if c.op is not Op.DRAIN])
        return kernel.with_body([n.with_attrs(cluster=None) if n.op is Op.CHANNEL else n for n in kernel.body])


def main():
    dev = torch.device("cuda", 0)
    m, n, k = 4096, 7168, 16384
    if len(sys.argv) > 1:
        m, n, k = map(int, sys.argv[1].split(","))
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, 0, 2.0)
    d = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
    variants = [("plain", 1, None), ("cluster-local", 2, pipeline_with(drop=("multicast_tma",)) + [LocalBarriers()]),
                ("cluster-nomc", 2, pipeline_with(drop=("multicast_tma",))), ("cluster-mc", 2, None)]
    for bm, bn, s in ((256, 128, 3), (128, 128, 5)):
        for name, cl, passes in variants:
            cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=s, cluster=cl)
            kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg, variant="probe-" + name,
                                        passes=passes)
            plan = kernel_plan(kern, A, sfa, B, sfb, d, m)
            st = torch.cuda.current_stream(dev).cuda_stream
            d.fill_(float("nan"))
            plan(st)
            torch.cuda.synchronize()
            diff = calc_diff(d.double(), ref)
            ms = do_bench(lambda: plan(st))
            print(f"{bm}x{bn} s{s} {name:14s} grid={plan.cfg.gridDimX} diff={diff:.1e} {ms * 1e3:.1f} us "
                  f"{2 * m * n * k / ms / 1e9:.0f} TFLOPS", flush=True)


if __name__ == "__main__":
    main()
