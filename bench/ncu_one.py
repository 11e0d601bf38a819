"""Launch one fp8_gemm_nt config a few times (for `ncu`): python bench/ncu_one.py M,N,K bm,bn,stages[,cl]"""
import sys

import torch

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs, kernel_tensors
from dgir.ops.fp8_gemm import Fp8GemmConfig

m, n, k = map(int, sys.argv[1].split(","))
bm, bn, s, *cl = sys.argv[2].split(",")
dev = torch.device("cuda", 0)
cfg = Fp8GemmConfig(n=n, k=k, block_m=int(bm), block_n=int(bn), stages=int(s),
                    cluster=int(cl[0][0]) if cl else 1, multicast=cl[0][1:] if cl else "A")
A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, 0, 2.0)
d = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg)
plan = kern.plan(kernel_tensors(A, sfa, B, sfb, d), m)
for _ in range(3):
    plan(torch.cuda.current_stream(dev).cuda_stream)
torch.cuda.synchronize()
