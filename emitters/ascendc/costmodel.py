"""First-order GEMM cost MODEL for Ascend 950 and 910B (AscendC cube path).

THIS IS A MODEL, NOT A MEASUREMENT.  It was built without Ascend hardware from the unit rates and
capacities collected in /work/shared/docs/ascendc.md (sections 1.1, 1.3, 4.3); several inputs are marked
there as unconfirmed (clock, GM bandwidth, b4 cube rate).  Use it to rank tile configurations, not to
promise performance.  Calibrate against msprof on real hardware before trusting absolute numbers.

Per AI core (AIC) and per K step of a (base_m x base_n x base_k) tile:
    T_m    = ceil(bm/16) * ceil(bn/16) * ceil(bk/k0)            cycles (k0 = 16 b16, 32 b8, 64 b4)
    T_mte1 = bytes(A_k) / BW_L1->L0A + bytes(B_k) / BW_L1->L0B   cycles
    T_mte2 = bytes(A_k + B_k + mx scales) / (BW_GM * l2_reuse / active cores) / dma_eff   cycles
             (dma_eff = min(1, DMA bytes / 16 KB): small DMAs do not reach full bandwidth)
    steady = max(T_mte2, T_mte1, T_m) + step overhead when L1 and L0 are double buffered, sums otherwise
Per output tile: k_steps * steady, plus the Fixpipe epilogue T_fix = bm*bn*out_bytes / min(128 B/cycle,
GM share), overlapped with the next tile only when L0C holds >= 2 tiles.  Kernel:
    T = waves * T_tile + fill + launch,  waves = ceil(tiles / cores)  (wave quantisation)
then clamped below by the GM roofline (unique bytes / BW_GM) and the compute peak.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

MODEL_LABEL = "MODEL (ascendc costmodel; not measured, see ascendc.md §4.3)"

KB = 1024


@dataclass(frozen=True)
class Chip:
    name: str
    arch: int
    aic: int
    clock_ghz: float  # ⚠ derived (950) / assumed (910B)
    gm_bw: float  # bytes/s ⚠ press figures
    l1: int
    l0a: int
    l0b: int
    l0c: int
    ub: int
    l0a_bpc: int  # L1 -> L0A bytes/cycle
    l0b_bpc: int  # L1 -> L0B bytes/cycle
    fix_bpc: int  # L0C -> out bytes/cycle
    dtypes: tuple  # cube input dtypes supported
    launch_us: float = 3.0  # ⚠ assumption
    step_overhead_cycles: int = 64  # ⚠ assumption: per-K-step issue/sync overhead (SetFlag/WaitFlag, instruction issue)
    dma_full_bw_bytes: int = 16 * KB  # ">=16 KB per DMA reaches full BW" (ascendc.md §4.3); linear below is ⚠ assumed

    def peak_tflops(self, dtype: str) -> float:
        """Modelled dense peak: AIC count x cube MAC rate x clock (950: 432 / 865 / 1730 for bf16 / fp8 / fp4)."""
        return self.aic * 2 * _MACS_PER_CYCLE[dtype] * self.clock_ghz * 1e9 / 1e12


# 16x16x16 MACs/cycle for b16; b8 2x; b4 4x (⚠ inferred from the 16x64 b4 fractal)
_MACS_PER_CYCLE = {"bf16": 16 * 16 * 16, "fp16": 16 * 16 * 16, "fp8": 16 * 32 * 16, "fp4": 16 * 64 * 16}
_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}
_K0 = {"bf16": 16, "fp16": 16, "fp8": 32, "fp4": 64}
_OUT_BYTES = {"bf16": 2, "fp32": 4, "fp16": 2}

CHIPS = {
    # 950DT / 950PR_9589: 32 AIC (bishengir target spec); clock 1.65 GHz is what makes 32 x 8192 FLOP/cycle = 432 TFLOPS bf16.
    "950": Chip("Ascend 950DT (arch 3510, 32 AIC)", 3510, 32, 1.65, 4.0e12, 512 * KB, 64 * KB, 64 * KB, 256 * KB, 248 * KB,
                256, 256, 128, ("bf16", "fp16", "fp8", "fp4")),
    "950PR": Chip("Ascend 950PR_9589 (arch 3510, 32 AIC)", 3510, 32, 1.65, 1.6e12, 512 * KB, 64 * KB, 64 * KB, 256 * KB,
                  248 * KB, 256, 256, 128, ("bf16", "fp16", "fp8", "fp4")),
    # 910B1/B2: 24 AIC; L0C 128 KB, L1->L0B 128 B/cycle.  Clock and HBM bandwidth are ⚠ assumptions (not in ascendc.md).
    "910B": Chip("Ascend 910B1/B2 (arch 2201, 24 AIC)", 2201, 24, 1.65, 1.6e12, 512 * KB, 64 * KB, 64 * KB, 128 * KB,
                 192 * KB - 256 - 8 * KB, 256, 128, 128, ("bf16", "fp16")),
}
_ALIASES = {"950dt": "950", "ascend950": "950", "ascend950dt": "950", "950pr": "950PR", "ascend950pr": "950PR",
            "910b": "910B", "ascend910b": "910B", "a2": "910B", "2201": "910B", "3510": "950"}


def get_chip(chip) -> Chip:
    if isinstance(chip, Chip):
        return chip
    key = _ALIASES.get(str(chip).lower(), str(chip))
    if key not in CHIPS:
        raise ValueError(f"unknown chip {chip!r}; known: {sorted(CHIPS)}")
    return CHIPS[key]


@dataclass(frozen=True)
class TileConfig:
    base_m: int
    base_n: int
    base_k: int
    l1_stages: int = 2  # L1 ring depth (A+B K-slices resident)
    l0_stages: int = 2  # L0A/L0B double buffering
    l0c_stages: int = 1  # output tiles resident in L0C (>= 2 overlaps the epilogue)
    cores: int | None = None  # None = all AICs of the chip


@dataclass
class CostResult:
    time_us: float
    utilization: float  # modelled fraction of the chip's dtype peak
    tflops: float
    bound: str
    config: TileConfig
    details: dict = field(default_factory=dict)
    label: str = MODEL_LABEL

    def __str__(self):
        c = self.config
        return (f"[{self.label}] {self.time_us:.2f} us, {self.tflops:.1f} TFLOPS, util {self.utilization:.1%}, "
                f"{self.bound}-bound, tile {c.base_m}x{c.base_n}x{c.base_k} L1x{c.l1_stages} L0x{c.l0_stages} "
                f"L0Cx{c.l0c_stages} cores={self.details.get('cores')}")


def _check_dtype(dtype: str, chip: Chip):
    if dtype not in _BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_BYTES)}")
    if dtype not in chip.dtypes:
        raise ValueError(f"{dtype} GEMM is not supported on {chip.name}: the arch-{chip.arch} Cube accepts only "
                         f"{'/'.join(chip.dtypes)} inputs (FP8/FP4 Cube inputs need arch 3510, Ascend 950; ascendc.md §1.5-1.6)")


def _mx_scale_bytes(dtype: str, rows: int, bk: int, mx: bool) -> float:
    return rows * math.ceil(bk / 32) if (mx and dtype in ("fp8", "fp4")) else 0.0


def footprint(cfg: TileConfig, dtype: str, mx: bool | None = None) -> dict:
    """Bytes each on-chip buffer needs for this config (MODEL of the kernel's allocation)."""
    mx = (dtype == "fp4") if mx is None else mx
    b = _BYTES[dtype]
    a_k = cfg.base_m * cfg.base_k * b
    b_k = cfg.base_n * cfg.base_k * b
    sc = _mx_scale_bytes(dtype, cfg.base_m, cfg.base_k, mx) + _mx_scale_bytes(dtype, cfg.base_n, cfg.base_k, mx)
    return {"L0A": a_k * cfg.l0_stages, "L0B": b_k * cfg.l0_stages, "L0C": cfg.base_m * cfg.base_n * 4 * cfg.l0c_stages,
            "L1": (a_k + b_k + sc) * cfg.l1_stages}


def check_config(cfg: TileConfig, dtype: str, chip, mx: bool | None = None):
    """Raise ValueError naming the violated limit if cfg is not legal on chip."""
    chip = get_chip(chip)
    _check_dtype(dtype, chip)
    k0 = _K0[dtype]
    mx = (dtype == "fp4") if mx is None else mx
    if cfg.base_m <= 0 or cfg.base_n <= 0 or cfg.base_k <= 0:
        raise ValueError("tile sizes must be positive")
    if cfg.base_m % 16 or cfg.base_n % 16:
        raise ValueError(f"base_m/base_n must be multiples of 16 (fractal), got {cfg.base_m}x{cfg.base_n}")
    if cfg.base_k % k0:
        raise ValueError(f"base_k={cfg.base_k} must be a multiple of k0={k0} for {dtype}")
    if mx and cfg.base_k % 64:
        raise ValueError(f"base_k={cfg.base_k}: MmadMx needs K a multiple of 64")
    if max(cfg.base_m, cfg.base_n, cfg.base_k) > 4095:
        raise ValueError("Mmad m/n/k limit is 4095")
    if min(cfg.l1_stages, cfg.l0_stages, cfg.l0c_stages) < 1:
        raise ValueError("stage counts must be >= 1")
    if cfg.cores is not None and not (1 <= cfg.cores <= chip.aic):
        raise ValueError(f"cores={cfg.cores} outside [1, {chip.aic}] AICs of {chip.name}")
    fp = footprint(cfg, dtype, mx)
    cap = {"L0A": chip.l0a, "L0B": chip.l0b, "L0C": chip.l0c, "L1": chip.l1}
    for buf, need in fp.items():
        if need > cap[buf]:
            raise ValueError(f"{buf} capacity exceeded on {chip.name}: config needs {int(need)} bytes, limit {cap[buf]} bytes")


def estimate(M: int, N: int, K: int, dtype: str = "bf16", chip="950", cfg: TileConfig | None = None,
             out_dtype: str = "bf16", mx: bool | None = None, l2_reuse: float = 1.0) -> CostResult:
    """MODEL of the run time of C[M,N] = A[M,K] x B[K,N] with the given tile config (see module docstring)."""
    chip = get_chip(chip)
    _check_dtype(dtype, chip)
    if cfg is None:
        cfg = TileConfig(128, 256, 64 if dtype in ("bf16", "fp16") else 128)
    check_config(cfg, dtype, chip, mx)
    mx = (dtype == "fp4") if mx is None else mx
    if min(M, N, K) <= 0:
        raise ValueError("M, N, K must be positive")
    f = chip.clock_ghz * 1e9
    b = _BYTES[dtype]
    ob = _OUT_BYTES[out_dtype]
    bm, bn, bk = cfg.base_m, cfg.base_n, cfg.base_k
    tiles = math.ceil(M / bm) * math.ceil(N / bn)
    cores = min(cfg.cores or chip.aic, tiles)
    waves = math.ceil(tiles / cores)
    k_steps = math.ceil(K / bk)
    if l2_reuse <= 0:
        raise ValueError("l2_reuse must be > 0")
    gm_bpc_core = chip.gm_bw * l2_reuse / cores / f  # bytes/cycle share of one active core (l2_reuse > 1: L2 hits)

    t_m = math.ceil(bm / 16) * math.ceil(bn / 16) * math.ceil(bk / _K0[dtype])
    a_k, b_k = bm * bk * b, bn * bk * b
    sc = _mx_scale_bytes(dtype, bm, bk, mx) + _mx_scale_bytes(dtype, bn, bk, mx)
    t_mte1 = a_k / chip.l0a_bpc + b_k / chip.l0b_bpc
    dma_eff = min(1.0, min(a_k, b_k) / chip.dma_full_bw_bytes)
    t_mte2 = (a_k + b_k + sc) / gm_bpc_core / dma_eff
    if cfg.l1_stages >= 2 and cfg.l0_stages >= 2:
        t_k = max(t_mte2, t_mte1, t_m)
    elif cfg.l1_stages >= 2:
        t_k = max(t_mte2, t_mte1 + t_m)
    elif cfg.l0_stages >= 2:
        t_k = t_mte2 + max(t_mte1, t_m)
    else:
        t_k = t_mte2 + t_mte1 + t_m
    t_k += chip.step_overhead_cycles
    t_fix = bm * bn * ob / min(chip.fix_bpc, gm_bpc_core)
    t_main = k_steps * t_k
    t_tile = max(t_main, t_fix) if cfg.l0c_stages >= 2 else t_main + t_fix
    fill = t_mte2 + t_mte1 + (t_fix if cfg.l0c_stages >= 2 else 0.0)
    cycles = waves * t_tile + fill
    t_pipe = cycles / f * 1e6 + chip.launch_us

    flops = 2.0 * M * N * K
    peak = chip.peak_tflops(dtype) * 1e12
    unique_bytes = (M * K + N * K) * b + M * N * ob
    t_roof = unique_bytes / chip.gm_bw * 1e6 + chip.launch_us
    t_comp = flops / peak * 1e6 + chip.launch_us
    time_us = max(t_pipe, t_roof, t_comp)
    parts = {"cube": t_m, "mte2": t_mte2, "mte1": t_mte1}
    bound = max(parts, key=parts.get)
    if t_fix > t_main and cfg.l0c_stages >= 2:
        bound = "fixpipe"
    if time_us == t_roof and t_roof > t_pipe:
        bound = "gm-roofline"
    util = flops / (time_us * 1e-6) / peak
    details = dict(chip=chip.name, dtype=dtype, tiles=tiles, cores=cores, waves=waves, k_steps=k_steps,
                   dma_eff=dma_eff, l2_reuse=l2_reuse, t_m_cycles=t_m, t_mte1_cycles=t_mte1, t_mte2_cycles=t_mte2, t_fix_cycles=t_fix, t_k_cycles=t_k,
                   peak_tflops=chip.peak_tflops(dtype), footprint=footprint(cfg, dtype, mx), roofline_us=t_roof)
    return CostResult(time_us, util, flops / (time_us * 1e-6) / 1e12, bound, cfg, details)


def candidate_configs(dtype: str, chip, mx: bool | None = None, cores: int | None = None):
    chip = get_chip(chip)
    k0 = _K0[dtype]
    for bm, bn, kmul, l1s, l0s, l0cs in itertools.product((16, 32, 64, 128, 256), (16, 32, 64, 128, 256, 512),
                                                          (1, 2, 4, 8, 16), (1, 2, 3, 4), (1, 2), (1, 2)):
        cfg = TileConfig(bm, bn, k0 * kmul, l1s, l0s, l0cs, cores)
        try:
            check_config(cfg, dtype, chip, mx)
        except ValueError:
            continue
        yield cfg


def choose_tiles(M: int, N: int, K: int, dtype: str = "bf16", chip="950", out_dtype: str = "bf16",
                 mx: bool | None = None, cores: int | None = None, l2_reuse: float = 1.0) -> CostResult:
    """Pick the legal tile config (L0A/L0B/L0C/L1 capacities respected) with the lowest MODELLED time.
    Ties go to the smaller on-chip footprint.  Returns the CostResult (its .config is the choice)."""
    chip = get_chip(chip)
    _check_dtype(dtype, chip)
    best = None
    for cfg in candidate_configs(dtype, chip, mx, cores):
        r = estimate(M, N, K, dtype, chip, cfg, out_dtype, mx, l2_reuse)
        key = (round(r.time_us, 6), sum(footprint(cfg, dtype, mx).values()))
        if best is None or key < best[0]:
            best = (key, r)
    if best is None:
        raise ValueError(f"no legal tile config for {dtype} on {chip.name}")
    return best[1]


if __name__ == "__main__":  # pragma: no cover
    import sys

    M, N, K = (int(x) for x in sys.argv[1:4]) if len(sys.argv) >= 4 else (4096, 4096, 4096)
    for chip_name, dt in (("950", "bf16"), ("950", "fp8"), ("950", "fp4"), ("910B", "bf16")):
        print(chip_name, dt, choose_tiles(M, N, K, dt, chip_name))
