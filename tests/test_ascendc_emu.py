"""Tests for the AscendC CPU emulator (emitters/ascendc/emu) and its hand-written test kernels.

The emulator implements *documented* AscendC semantics (see /work/shared/docs/ascendc.md); it is not
validated against Ascend hardware or CANN.  Every kernel is compiled with g++ against ascendc_emu.h,
run, and compared with torch; every kernel must also pass a -fsyntax-only check against
ascendc_api_decls.h (the "spelling check from public documentation").
"""
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

GXX = shutil.which("g++")
# Emulator tests skip cleanly without g++; the cost-model tests below need only Python.
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ not found")

ROOT = Path(__file__).resolve().parents[1]
EMU_DIR = ROOT / "emitters" / "ascendc" / "emu"
KDIR = ROOT / "tests" / "ascendc_kernels"
EMU_H = EMU_DIR / "ascendc_emu.h"
DECLS_H = EMU_DIR / "ascendc_api_decls.h"
KERNELS = ["matmul_cube.cpp", "deadlock.cpp", "vec_scaled_add.cpp", "mix_handoff.cpp"]

# name -> (source, extra flags)
BUILDS = {
    "mm_950": ("matmul_cube.cpp", ["-DEMU_ARCH=3510"]),
    "mm_910b": ("matmul_cube.cpp", ["-DEMU_ARCH=2201"]),
    "mm_fp8_950": ("matmul_cube.cpp", ["-DEMU_ARCH=3510", "-DIN_T=fp8_e4m3fn_t"]),
    "mm_fp8_910b": ("matmul_cube.cpp", ["-DEMU_ARCH=2201", "-DIN_T=fp8_e4m3fn_t"]),
    "mm_race_raw": ("matmul_cube.cpp", ["-DEMU_ARCH=3510", "-DDROP_WAIT_MTE2_MTE1"]),
    "mm_race_war": ("matmul_cube.cpp", ["-DEMU_ARCH=2201", "-DDROP_WAIT_MTE1_MTE2", "-DDROP_SET_MTE1_MTE2"]),
    "deadlock": ("deadlock.cpp", ["-DEMU_ARCH=3510"]),
    "vec_950": ("vec_scaled_add.cpp", ["-DEMU_ARCH=3510"]),
    "vec_910b": ("vec_scaled_add.cpp", ["-DEMU_ARCH=2201"]),
    "mix_950": ("mix_handoff.cpp", ["-DEMU_ARCH=3510"]),
    "fp_convert": ("fp_convert.cpp", ["-DEMU_ARCH=3510"]),
}


def calc_diff(x, y):
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denom)


def _compile(name, out_dir):
    src, flags = BUILDS[name]
    exe = out_dir / name
    cmd = [GXX, "-std=c++17", "-O1", "-pthread", *flags, "-include", str(EMU_H), str(KDIR / src), "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return name, exe, r


@pytest.fixture(scope="module")
def bins(tmp_path_factory):
    if GXX is None:
        pytest.skip("g++ not found")
    out = tmp_path_factory.mktemp("ascendc_emu")
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        results = list(ex.map(lambda n: _compile(n, out), BUILDS))
    exes = {}
    for name, exe, r in results:
        assert r.returncode == 0, f"compile {name} failed:\n{r.stderr[-4000:]}"
        exes[name] = exe
    return exes


def run(exe, *args, cwd=None, timeout=60):
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def emu_error(r):
    lines = [l for l in r.stderr.splitlines() if l.startswith("ASCENDC_EMU_ERROR:")]
    assert len(lines) == 1, f"expected exactly one ASCENDC_EMU_ERROR line, stderr:\n{r.stderr}"
    return lines[0]


def to_bin(t, path):
    t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t.view(torch.int16).numpy().tofile(path)
    elif t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t.view(torch.uint8).numpy().tofile(path)
    else:
        t.numpy().tofile(path)


def from_bin(path, dtype, shape):
    if dtype == torch.bfloat16:
        return torch.from_numpy(np.fromfile(path, dtype=np.int16)).view(torch.bfloat16).reshape(shape)
    return torch.from_numpy(np.fromfile(path, dtype=np.float32)).reshape(shape)


# ----------------------------------------------------------------------------- spelling check
@needs_gxx
@pytest.mark.parametrize("arch", [3510, 2201])
def test_kernels_pass_decls_syntax_check(arch):
    def check(k):
        cmd = [GXX, "-std=c++17", "-fsyntax-only", f"-D__NPU_ARCH__={arch}", "-include", str(DECLS_H), str(KDIR / k)]
        return k, subprocess.run(cmd, capture_output=True, text=True)

    with ThreadPoolExecutor(max_workers=4) as ex:
        for k, r in ex.map(check, KERNELS):
            assert r.returncode == 0, f"{k} fails the API spelling check on {arch}:\n{r.stderr[-3000:]}"


def test_decls_header_is_labelled():
    head = DECLS_H.read_text().splitlines()[0]
    assert "spelling check from public documentation; not verified against CANN" in head


# ----------------------------------------------------------------------------- numeric types
def test_fp_conversions_match_torch(bins, tmp_path):
    g = torch.Generator().manual_seed(1)
    x = torch.cat([
        torch.randn(4000, generator=g) * torch.exp2(torch.randint(-20, 20, (4000,), generator=g).float()),
        torch.tensor([0.0, -0.0, 1.0, float('inf'), -float('inf'), 3.0, 0.75, 2.0 ** -127 * 1.5, -1.5, 448.0, 464.0, 465.0, 480.0, 57344.0, 61440.0, 65504.0, 65520.0, 1e-8,
                      2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -16, 2.0 ** -17, 0.25, 0.75, 1.25, 2.5, 5.0, 6.0, 7.0]),
        # exact ties at bf16 / fp8 granularity
        (torch.randint(-2000, 2000, (500,), generator=g).float() + 0.5) * 2.0 ** -7,
    ]).float()
    x.numpy().tofile(tmp_path / "x.bin")
    r = run(bins["fp_convert"], tmp_path / "x.bin", tmp_path / "o.bin")
    assert r.returncode == 0, r.stderr
    o = torch.from_numpy(np.fromfile(tmp_path / "o.bin", dtype=np.uint8)).view(-1, 8)
    u16 = lambda lo: (o[:, lo].int() | (o[:, lo + 1].int() << 8))
    assert torch.equal(u16(0), x.bfloat16().view(torch.int16).int() & 0xFFFF)
    assert torch.equal(u16(2), x.half().view(torch.int16).int() & 0xFFFF)
    assert torch.equal(o[:, 4], x.to(torch.float8_e4m3fn).view(torch.uint8))
    assert torch.equal(o[:, 5], x.to(torch.float8_e5m2).view(torch.uint8))
    assert torch.equal(o[:, 6], x.to(torch.float8_e8m0fnu).view(torch.uint8))
    # e2m1 (no torch cast): values {0,.5,1,1.5,2,3,4,6}, RNE, saturating
    grid = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    ax = x.abs().clamp(max=6.0)
    idx = (o[:, 7] & 7).long()
    got = grid[idx] * torch.where((o[:, 7] & 8) > 0, -1.0, 1.0)
    err = (got.abs() - ax).abs()
    best = (grid[None, :] - ax[:, None]).abs().min(dim=1).values
    assert torch.allclose(err, best)


# ----------------------------------------------------------------------------- (a) cube GEMM
def _mm(exe, tmp_path, M, N, K, bm, bn, bk, out_bf16, blocks, dtype=torch.bfloat16):
    torch.manual_seed(M * 7 + N * 3 + K)
    a = torch.randn(M, K).to(dtype)
    bt = torch.randn(N, K).to(dtype)
    to_bin(a, tmp_path / "a.bin")
    to_bin(bt, tmp_path / "b.bin")
    r = run(exe, M, N, K, bm, bn, bk, int(out_bf16), blocks, tmp_path / "a.bin", tmp_path / "b.bin", tmp_path / "c.bin")
    ref = a.float() @ bt.float().T
    return r, ref


@pytest.mark.parametrize("arch", ["950", "910b"])
@pytest.mark.parametrize("out_bf16", [False, True])
def test_matmul_bf16(bins, tmp_path, arch, out_bf16):
    M, N, K = 200, 136, 200  # tails in M (72), N (8) and K (8)
    r, ref = _mm(bins[f"mm_{arch}"], tmp_path, M, N, K, 128, 128, 64, out_bf16, 3)
    assert r.returncode == 0, r.stderr
    c = from_bin(tmp_path / "c.bin", torch.bfloat16 if out_bf16 else torch.float32, (M, N))
    assert torch.isfinite(c.float()).all()
    d = calc_diff(c, ref)
    assert d < 1e-5, d
    if not out_bf16:
        assert torch.allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_matmul_fp8_950(bins, tmp_path):
    M, N, K = 96, 80, 320
    r, ref = _mm(bins["mm_fp8_950"], tmp_path, M, N, K, 64, 64, 128, False, 2, dtype=torch.float8_e4m3fn)
    assert r.returncode == 0, r.stderr
    c = from_bin(tmp_path / "c.bin", torch.float32, (M, N))
    assert calc_diff(c, ref) < 1e-9


def test_matmul_fp8_rejected_on_910b(bins, tmp_path):
    r, _ = _mm(bins["mm_fp8_910b"], tmp_path, 64, 64, 128, 64, 64, 128, False, 1, dtype=torch.float8_e4m3fn)
    assert r.returncode == 3
    msg = emu_error(r)
    assert "FP8" in msg and "2201" in msg


def test_capacity_check(bins, tmp_path):
    # baseM=baseN=256, baseK=128 bf16: L0A tile = 64 KB fits, L0C = 256 KB exceeds the 910B's 128 KB
    r, _ = _mm(bins["mm_910b"], tmp_path, 256, 256, 128, 256, 256, 128, False, 1)
    assert r.returncode == 3
    msg = emu_error(r)
    assert "capacity" in msg and "L0C" in msg and "131072" in msg


# ----------------------------------------------------------------------------- (b) race checker
def test_race_missing_waitflag_raw(bins, tmp_path):
    r, _ = _mm(bins["mm_race_raw"], tmp_path, 64, 64, 64, 64, 64, 64, False, 1)
    assert r.returncode == 3
    msg = emu_error(r)
    assert "race (RAW)" in msg and "LoadData" in msg and "pipe MTE1" in msg and "pipe MTE2" in msg
    assert "MTE2_MTE1" in msg and "L1[" in msg


def test_race_missing_waitflag_war(bins, tmp_path):
    r, _ = _mm(bins["mm_race_war"], tmp_path, 64, 64, 128, 64, 64, 64, False, 1)
    assert r.returncode == 3
    msg = emu_error(r)
    assert "race (WAR)" in msg and "DataCopy(GM->L1,Nd2Nz)" in msg and "MTE1_MTE2" in msg


def test_race_is_deterministic(bins, tmp_path):
    msgs = {emu_error(_mm(bins["mm_race_raw"], tmp_path, 64, 64, 64, 64, 64, 64, False, 2)[0]) for _ in range(3)}
    assert len(msgs) == 1


# ----------------------------------------------------------------------------- (c) watchdog
def test_deadlock_intra_core(bins):
    r = run(bins["deadlock"], 0, 2)
    assert r.returncode == 3
    msg = emu_error(r)
    assert "deadlock" in msg and "AIC" in msg and "MTE2_MTE1" in msg and "eventID=1" in msg


def test_deadlock_cross_core(bins):
    r = run(bins["deadlock"], 1, 2, timeout=30)
    assert r.returncode == 3
    msg = emu_error(r)
    assert "deadlock" in msg and "AIV0" in msg and "CrossCoreWaitFlag(flagId=3)" in msg


# ----------------------------------------------------------------------------- (d) vector kernel
@pytest.mark.parametrize("arch", ["950", "910b"])
@pytest.mark.parametrize("op", [0, 1, 2])
def test_vector_scaled_add(bins, tmp_path, arch, op):
    total, tile, blocks, alpha = 4 * 3 * 512, 512, 4, 0.75
    torch.manual_seed(op)
    x = torch.randn(total).bfloat16()
    y = torch.randn(total).bfloat16()
    to_bin(x, tmp_path / "x.bin")
    to_bin(y, tmp_path / "y.bin")
    r = run(bins[f"vec_{arch}"], total, tile, op, alpha, blocks, tmp_path / "x.bin", tmp_path / "y.bin", tmp_path / "z.bin")
    assert r.returncode == 0, r.stderr
    z = from_bin(tmp_path / "z.bin", torch.bfloat16, (total,))
    ref = (alpha * x.float() + y.float()).bfloat16()
    assert calc_diff(z.float(), ref.float()) < 1e-5
    assert (z.float() - ref.float()).abs().max() <= 2 ** -6 * ref.float().abs().max()


# ----------------------------------------------------------------------------- (e) cube -> vector handoff (950)
def _mix(exe, tmp_path, skip_set=0, blocks=2):
    M, N, K, scale = 128, 128, 96, 0.5
    torch.manual_seed(5)
    a = torch.randn(M, K).bfloat16()
    bt = torch.randn(N, K).bfloat16()
    to_bin(a, tmp_path / "a.bin")
    to_bin(bt, tmp_path / "b.bin")
    r = run(exe, M, N, K, 64, scale, blocks, skip_set, tmp_path / "a.bin", tmp_path / "b.bin", tmp_path / "d.bin", timeout=30)
    return r, (scale * (a.float() @ bt.float().T)), (M, N)


def test_mix_cube_to_vector_handoff(bins, tmp_path):
    r, ref, shape = _mix(bins["mix_950"], tmp_path)
    assert r.returncode == 0, r.stderr
    d = from_bin(tmp_path / "d.bin", torch.bfloat16, shape)
    assert calc_diff(d.float(), ref) < 1e-5


def test_mix_missing_crosscore_set_deadlocks(bins, tmp_path):
    r, _, _ = _mix(bins["mix_950"], tmp_path, skip_set=1)
    assert r.returncode == 3
    msg = emu_error(r)
    assert "deadlock" in msg and "CrossCoreWaitFlag(flagId=1)" in msg


# ----------------------------------------------------------------------------- cost MODEL
def _costmodel():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ascendc_costmodel", ROOT / "emitters" / "ascendc" / "costmodel.py")
    mod = importlib.util.module_from_spec(spec)
    import sys

    sys.modules[spec.name] = mod  # dataclasses need the module registered
    spec.loader.exec_module(mod)
    return mod


cm = _costmodel()


def test_costmodel_labelled_model():
    assert "MODEL" in cm.__doc__ and "MODEL" in cm.choose_tiles.__doc__
    r = cm.estimate(1024, 1024, 1024, "bf16", "950")
    assert "MODEL" in str(r) and "MODEL" in r.label


def test_costmodel_peaks():
    c = cm.get_chip("950")
    for dt, peak in (("bf16", 432), ("fp8", 865), ("fp4", 1730)):
        assert abs(c.peak_tflops(dt) - peak) / peak < 0.01
    assert cm.get_chip("910B").aic == 24 and cm.get_chip("910B").l0c == 128 * 1024


@pytest.mark.parametrize("chip,dtype", [("950", "bf16"), ("950", "fp8"), ("950", "fp4"), ("910B", "bf16")])
def test_costmodel_monotonic_in_k(chip, dtype):
    cfg = cm.TileConfig(128, 256, 64 if dtype == "bf16" else 128)
    ks = [64, 128, 512, 1000, 2048, 4096, 8192, 16384]
    fixed = [cm.estimate(2048, 2048, k, dtype, chip, cfg).time_us for k in ks]
    best = [cm.choose_tiles(2048, 2048, k, dtype, chip).time_us for k in ks]
    assert all(a <= b for a, b in zip(fixed, fixed[1:])), fixed
    assert all(a <= b * (1 + 1e-9) for a, b in zip(best, best[1:])), best
    for k in ks:
        r = cm.estimate(2048, 2048, k, dtype, chip, cfg)
        assert 0 < r.utilization <= 1.0


@pytest.mark.parametrize("chip,dtype", [("950", "bf16"), ("950", "fp8"), ("950", "fp4"), ("910B", "bf16")])
def test_costmodel_capacity_respected(chip, dtype):
    c = cm.get_chip(chip)
    cap = {"L0A": c.l0a, "L0B": c.l0b, "L0C": c.l0c, "L1": c.l1}
    n = 0
    for cfg in cm.candidate_configs(dtype, chip):
        fp = cm.footprint(cfg, dtype)
        assert all(fp[b] <= cap[b] for b in cap), (cfg, fp)
        n += 1
    assert n > 50
    r = cm.choose_tiles(4096, 4096, 4096, dtype, chip)
    cm.check_config(r.config, dtype, chip)
    assert r.utilization > 0.2


def test_costmodel_rejects_over_capacity():
    # 256x256 fp32 accumulator = 256 KB: fits the 950's L0C, not the 910B's 128 KB
    cfg = cm.TileConfig(256, 256, 64, 2, 1, 1)
    cm.check_config(cfg, "bf16", "950")
    with pytest.raises(ValueError, match=r"L0C capacity exceeded.*131072"):
        cm.check_config(cfg, "bf16", "910B")
    with pytest.raises(ValueError, match=r"L0A capacity exceeded.*65536"):
        cm.estimate(1024, 1024, 1024, "bf16", "950", cm.TileConfig(256, 128, 128, 2, 2, 1))


@pytest.mark.parametrize("dtype", ["fp8", "fp4"])
def test_costmodel_fp8_fp4_rejected_on_910b(dtype):
    with pytest.raises(ValueError, match=rf"{dtype} GEMM is not supported on Ascend 910B.*arch-2201.*bf16"):
        cm.estimate(1024, 1024, 1024, dtype, "910B")
    with pytest.raises(ValueError, match="arch 3510"):
        cm.choose_tiles(1024, 1024, 1024, dtype, "910B")


def test_costmodel_wave_quantisation():
    cfg = cm.TileConfig(128, 128, 64)
    one = cm.estimate(128 * 32, 128, 4096, "bf16", "950", cfg)  # 32 tiles on 32 cores: 1 wave
    two = cm.estimate(128 * 33, 128, 4096, "bf16", "950", cfg)  # 33 tiles: 2 waves
    assert one.details["waves"] == 1 and two.details["waves"] == 2
    assert two.time_us > 1.6 * one.time_us
    assert two.utilization < one.utilization
