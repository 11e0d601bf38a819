"""Strength-reduced u32 division / remainder by constants (emitters/ptx/arith.py)."""
import random

import pytest

from dgir.emitters.ptx.arith import divide, magic


@pytest.mark.parametrize("d", list(range(1, 300)) + [641, 1000, 6700417, (1 << 31) + 1, (1 << 32) - 1])
def test_division_by_constant_is_exact_for_every_u32(d):
    rng = random.Random(d)
    xs = [0, 1, d - 1, d, d + 1, (1 << 32) - 1, (1 << 31), (1 << 31) - 1]
    xs += [k * d + r for k in (1, 7, ((1 << 32) - 1) // d) for r in (-1, 0, 1)]
    xs += [rng.randrange(1 << 32) for _ in range(200)]
    for x in xs:
        if 0 <= x < 1 << 32:
            assert divide(x, d) == x // d, (x, d, magic(d))


def test_every_method_is_used_and_bad_divisors_raise():
    assert magic(8) == ("shift", 3) and magic(3)[0] == "mulhi" and magic(7)[0] == "mulhi_add"
    for d in (0, 1 << 32):
        with pytest.raises(ValueError):
            magic(d)


def test_ring_slots_never_use_the_generic_division():
    import dgir
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    res = dgir.compile("fp8_gemm_nt", m=4096, n=7168, k=16384, assemble=False,
                       config=Fp8GemmConfig(n=7168, k=16384, block_m=256, block_n=128, stages=3, cluster=2))
    ptx = res.ptx
    assert "div.u32" not in "".join(l for l in ptx.splitlines() if ", 3;" in l)
    assert "mul.hi.u32" in ptx
