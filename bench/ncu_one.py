"""Launch one fp8_gemm_nt config a few times (for `ncu`): python bench/ncu_one.py M,N,K bm,bn,stages[,cl]"""
import sys

import torch

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs
from dgir.ops.fp8_gemm import Fp8GemmConfig, ceil_div

m, n, k = map(int, sys.argv[1].split(","))
bm, bn, s, *cl = sys.argv[2].split(",")
dev = torch.device("cuda", 0)
cfg = Fp8GemmConfig(n=n, k=k, block_m=int(bm), block_n=int(bn), stages=int(s),
                    cluster=int(cl[0][0]) if cl else 1, multicast=cl[0][1:] if cl else "A")
A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, 0, 2.0)
sfa_mn = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
storage = torch.as_strided(sfa_mn, (ceil_div(k, 128), sfa_mn.stride(1)), (sfa_mn.stride(1), 1))
d = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg)
plan = kern.plan({"A": A, "B": B, "SFA": storage, "SFB": sfb, "D": d}, m)
for _ in range(3):
    plan(torch.cuda.current_stream(dev).cuda_stream)
torch.cuda.synchronize()
