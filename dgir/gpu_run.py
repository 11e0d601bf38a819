"""Run one fp8_gemm_nt shape on the GPU with our kernel; print one JSON line."""
from __future__ import annotations

import json

THRESHOLDS = {"fp8_gemm_nt": 1e-3}


def calc_diff(x, y) -> float:
    """DeepGEMM's metric: 1 - 2 sum(xy) / sum(x^2 + y^2), float64."""
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denom) if denom > 0 else 0.0


def fp8_inputs(m: int, n: int, k: int, device, seed: int = 0, spread: float = 2.0, reference: bool = True):
    """Fresh per-token / per-128x128-block quantised operands, their scales and the float64 reference
    of the dequantised product (the unquantised-precision reference DeepGEMM's tests use; None with
    reference=False, for outputs too large to hold in float64 at once: `dequantised` gives the
    operands to build it in pieces)."""
    import torch
    from .ops.fp8_gemm import ceil_div
    g = torch.Generator(device=device).manual_seed(seed)
    kb, nb = ceil_div(k, 128), ceil_div(n, 128)
    a = torch.randn(m, kb * 128, device=device, generator=g)
    a = a * torch.exp(torch.randn(m, kb, 1, device=device, generator=g) * spread).view(m, kb, 1).expand(m, kb, 128).reshape(m, -1)
    b = torch.randn(nb * 128, kb * 128, device=device, generator=g)
    b = b * torch.exp(torch.randn(nb, 1, kb, 1, device=device, generator=g) * spread).expand(nb, 128, kb, 128).reshape(nb * 128, -1)
    a[:, k:] = 0
    b[:, k:] = 0
    av = a.view(m, kb, 128)
    sfa = av.abs().amax(-1).clamp(min=1e-6) / 448.0
    aq = (av / sfa.unsqueeze(-1)).to(torch.float8_e4m3fn)
    bv = b.view(nb, 128, kb, 128)
    sfb = bv.abs().amax(dim=(1, 3)).clamp(min=1e-6) / 448.0
    bq = (bv / sfb[:, None, :, None]).to(torch.float8_e4m3fn)
    A = aq.view(m, -1)[:, :k].contiguous()
    B = bq.view(nb * 128, -1)[:n, :k].contiguous()
    if not reference:
        return A, sfa.contiguous(), B, sfb.contiguous(), None
    a_deq = (aq.float() * sfa.unsqueeze(-1)).view(m, -1)[:, :k]
    b_deq = (bq.float() * sfb[:, None, :, None]).view(nb * 128, -1)[:n, :k]
    ref = a_deq.double() @ b_deq.double().T
    return A, sfa.contiguous(), B, sfb.contiguous(), ref


def dequantised(X, sf, rows_per_scale: int):
    """X (FP8, [R, K]) times its block scales sf ([ceil(R / rows_per_scale), ceil(K / 128)]) in float32:
    rows_per_scale 1 for A's per-token scales, 128 for B's 128x128 blocks."""
    import torch
    r, k = X.shape
    s = sf.repeat_interleave(rows_per_scale, 0)[:r].repeat_interleave(128, 1)[:, :k]
    return X.float() * s.to(torch.float32)


def kernel_tensors(A, sfa, B, sfb, d, kern=None) -> dict:
    """The tensors a loaded fp8_gemm_nt kernel launches with: SFA as the kernel reads it, the
    MN-major TMA-aligned copy viewed as [ceil(K/128), align(M, 4)] (what the public API passes too),
    or, for a kernel `kern` that reads SFA K-major (sfa_major="k"), [M, ceil(K/128)] contiguous."""
    import torch
    from . import deep_gemm
    if kern is not None and reads_sfa_k_major(kern):
        return {"A": A, "B": B, "SFA": sfa.contiguous(), "SFB": sfb, "D": d}
    sfa_mn = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    storage = torch.as_strided(sfa_mn, (sfa.shape[1], sfa_mn.stride(1)), (sfa_mn.stride(1), 1))
    return {"A": A, "B": B, "SFA": storage, "SFB": sfb, "D": d}


def reads_sfa_k_major(kern) -> bool:
    """Whether a loaded fp8_gemm_nt kernel reads SFA [M, ceil(K/128)] row-major (sfa_major="k")."""
    return kern.decls["SFA"].get("layout") == "rowmajor"


def kernel_plan(kern, A, sfa, B, sfb, d, m: int):
    """A prebuilt launch (LaunchPlan) of a loaded fp8_gemm_nt kernel on these tensors.  A plan holds
    addresses, not tensors: this one also keeps the SFA copy kernel_tensors may have made (the
    MN-major TMA-aligned one, or a contiguous one), which would otherwise be freed, and its memory
    reused by the next allocation of its size, while the plan still reads it.  The caller keeps A, B,
    D and SFB."""
    tensors = kernel_tensors(A, sfa, B, sfb, d, kern)
    plan = kern.plan(tensors, m)
    plan.workspace["SFA"] = tensors["SFA"]
    return plan


def launch_poisoned(kern, A, sfa, B, sfb):
    """One launch of a loaded fp8_gemm_nt kernel (deep_gemm.get_kernel) on torch's current stream,
    into a fresh D poisoned with NaN (an element the kernel never writes stays NaN); synchronised."""
    import torch
    dev = A.device
    d = torch.full((A.shape[0], B.shape[0]), float("nan"), dtype=torch.bfloat16, device=dev)
    kern.launch(kernel_tensors(A, sfa, B, sfb, d, kern), A.shape[0], torch.cuda.current_stream(dev).cuda_stream)
    torch.cuda.synchronize(dev)
    return d


def run_fp8_gemm_nt(m, n, k, device="cuda:0", seed=0, time_it=True) -> dict:
    import torch
    from . import deep_gemm
    device = torch.device(device)
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, device, seed)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)   # poisoned
    sfa_mn = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    fn = lambda: deep_gemm.fp8_gemm_nt((A, sfa_mn), (B, sfb), d)  # noqa: E731
    fn()
    torch.cuda.synchronize(device)
    out = d.double()
    finite = bool(torch.isfinite(out).all())
    row = {"op": "fp8_gemm_nt", "m": m, "n": n, "k": k, "diff": calc_diff(out, ref) if finite else float("inf"),
           "all_finite": finite, "kernel": deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, device).result.name}
    if time_it:
        from triton.testing import do_bench
        ms = do_bench(fn, warmup=25, rep=200, return_mode="median")
        nbytes = m * k + n * k + 2 * m * n + 4 * (sfa.numel() + sfb.numel())
        row.update(ms=ms, tflops=2 * m * n * k / ms / 1e9, gbps=nbytes / ms / 1e6)
    return row


def main(args) -> int:
    if args.op != "fp8_gemm_nt":
        from .cli import CLIError
        raise CLIError(f"run --target sm90a supports fp8_gemm_nt, not {args.op!r}")
    from .ops.fp8_gemm import check
    check(args.m, args.n, args.k)
    import torch
    if not torch.cuda.is_available():
        from .cli import CLIError
        raise CLIError("no CUDA GPU is visible: `dgir run --target sm90a` needs an sm_90 GPU (H100/H200)")
    row = run_fp8_gemm_nt(args.m, args.n, args.k, args.device, args.seed, not args.no_time)
    print(json.dumps(row))
    return 0 if row["diff"] < THRESHOLDS[args.op] else 1
