"""Inputs, reference and metric for the tests: fp8_gemm_inputs, fp8_gemm_reference, calc_diff (DeepGEMM's)."""
from __future__ import annotations

import torch

from .state import BLOCK_K, _align, _ceil_div


def fp8_gemm_inputs(m: int, n: int, k: int, seed: int = 0, scale_exp: float = 8.0,
                    device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Random inputs of fp8_gemm_nt: A e4m3[m, k], B e4m3[n, k], SFA f32[ceil(k/128), align(m, 4)]
    (MN-major, TMA-aligned; the padding columns m..align(m,4) are NaN: a kernel must not let them
    leak into real rows), SFB f32[ceil(n/128), ceil(k/128)], and D bf16[m, n] poisoned with NaN
    so that any element a kernel fails to write is caught.  Scales are positive, log-uniform over
    2^[-scale_exp, scale_exp]."""
    g = torch.Generator().manual_seed(seed)
    nkb = _ceil_div(k, BLOCK_K)
    a = torch.randn(m, k, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=g).to(torch.float8_e4m3fn)

    def scales(*shape):
        e = (torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1) * scale_exp
        return torch.exp2(e).to(torch.float32)

    sfa = torch.full((nkb, _align(m, 4)), float("nan"), dtype=torch.float32)
    sfa[:, :m] = scales(nkb, m)
    sfb = scales(_ceil_div(n, 128), nkb)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    out = {"A": a, "B": b, "SFA": sfa, "SFB": sfb, "D": d}
    return {key: v.to(device) for key, v in out.items()}


def fp8_gemm_reference(A: torch.Tensor, B: torch.Tensor, SFA: torch.Tensor, SFB: torch.Tensor) -> torch.Tensor:
    """Exact-ish float64 reference of fp8_gemm_nt: (A * sfa) @ (B * sfb)^T, [M, N] float64."""
    m, k = A.shape
    n = B.shape[0]
    sfa = SFA[:, :m].double().T.repeat_interleave(BLOCK_K, dim=1)[:, :k]             # [m, k]
    sfb = SFB.double().repeat_interleave(128, dim=0).repeat_interleave(BLOCK_K, dim=1)[:n, :k]
    return (A.double() * sfa) @ (B.double() * sfb).T


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """DeepGEMM's similarity metric: 1 - 2 sum(xy) / sum(x^2 + y^2), in float64 (0 = identical)."""
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    if denom == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denom)
