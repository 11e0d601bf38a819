"""fp8_gemm_nt's argument checks: every bad input is a ValueError naming the argument, raised
before anything is compiled or launched.  These run on the CPU (tensors on the CPU are themselves
a bad input); the GPU file repeats the device-dependent ones on the H200."""
import pytest
import torch

from dgir import deep_gemm


def good(m=64, n=256, k=512, device="cpu"):
    A = torch.randn(m, k).to(torch.float8_e4m3fn).to(device)
    B = torch.randn(n, k).to(torch.float8_e4m3fn).to(device)
    sfa = torch.rand(m, (k + 127) // 128, device=device) + 0.5
    sfb = torch.rand((n + 127) // 128, (k + 127) // 128, device=device) + 0.5
    d = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    return A, sfa, B, sfb, d


def test_cpu_tensors_are_rejected_naming_the_argument():
    A, sfa, B, sfb, d = good()
    with pytest.raises(ValueError, match=r"`a\[0\]` must be a CUDA tensor"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)


def test_pairs_are_required():
    A, sfa, B, sfb, d = good()
    with pytest.raises(ValueError, match="`a` must be a pair"):
        deep_gemm.fp8_gemm_nt(A, (B, sfb), d)
    with pytest.raises(ValueError, match="`b` must be a pair"):
        deep_gemm.fp8_gemm_nt((A, sfa), [B], d)


def test_c_and_recipes_are_rejected_like_deepgemm_sm90():
    A, sfa, B, sfb, d = good()
    with pytest.raises(ValueError, match="`c` is not supported"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d, c=d)
    with pytest.raises(ValueError, match="`recipe` must be None or \\(1, 128, 128\\)"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d, recipe=(1, 1, 128))
    with pytest.raises(ValueError, match="compiled_dims"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d, compiled_dims="mn")


def test_transform_sf_gives_mn_major_tma_aligned_layout():
    sfa = torch.rand(37, 5)
    t = deep_gemm.transform_sf_into_required_layout(sfa, 37, 640)
    assert t.shape == (37, 5) and t.stride() == (1, 40)
    assert torch.equal(t, sfa)
    # already in the required layout: returned as is, no copy
    assert deep_gemm.get_mn_major_tma_aligned_tensor(t) is t


def test_set_pdl_takes_a_bool_and_get_pdl_reads_it_back():
    assert deep_gemm.get_pdl() is False                    # off by default, as in DeepGEMM
    try:
        deep_gemm.set_pdl(True)
        assert deep_gemm.get_pdl() is True
        with pytest.raises(ValueError, match="`enable` must be a bool"):
            deep_gemm.set_pdl(1)
        assert deep_gemm.get_pdl() is True                 # a rejected call changes nothing
    finally:
        deep_gemm.set_pdl(False)
    assert deep_gemm.get_pdl() is False
