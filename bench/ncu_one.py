"""Launch one fp8_gemm_nt config a few times (for `ncu`): python bench/ncu_one.py M,N,K bm,bn,stages[,cl]
(or `cublas` instead of the config: torch._scaled_mm on the same inputs; `api`: the config the API
chooses for the shape; or a config in bench/experiments.py's spec keys, e.g.
bm=256,bn=128,s=3,cl=2A,sms=130,ee=staging)."""
import sys

import torch

from common import cublas_fp8_gemm  # bench/ (this script's folder is on sys.path)

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs, kernel_plan
from dgir.ops.fp8_gemm import Fp8GemmConfig

m, n, k = map(int, sys.argv[1].split(","))
dev = torch.device("cuda", 0)
A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, 0, 2.0)
if sys.argv[2] == "cublas":
    cublas = cublas_fp8_gemm(A, sfa, B, sfb)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()          # ncu --profile-from-start off: only these launches
    for _ in range(3):
        cublas()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    sys.exit(0)
if sys.argv[2] == "api":
    cfg = None
elif "=" in sys.argv[2]:
    from experiments import spec_config
    cfg = spec_config(n, k, sys.argv[2], torch.cuda.get_device_properties(dev).multi_processor_count)
else:
    bm, bn, s, *cl = sys.argv[2].split(",")
    cfg = Fp8GemmConfig(n=n, k=k, block_m=int(bm), block_n=int(bn), stages=int(s),
                        cluster=int(cl[0][0]) if cl else 1, multicast=cl[0][1:] if cl else "A")
d = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg)
plan = kernel_plan(kern, A, sfa, B, sfb, d, m)
torch.cuda.synchronize()
torch.cuda.profiler.start()
for _ in range(3):
    plan(torch.cuda.current_stream(dev).cuda_stream)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
