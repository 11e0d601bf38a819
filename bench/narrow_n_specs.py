"""Spec 162 (bench/TUNING.md step 85): narrow N at M = 192-512, where neither model proposes the
split-K over a cluster that the table measured fastest for N = 576 (step 84, "Noticed").  For each
held-out (N, K) (no table entry above M = 128) and M: the API's pick (`::default`), the config the
table measured for the nearest (N', K') above M = 128 carried over (`carry_config`, when there is
one), a small grid of cluster-reduced split-K tiles that fill one round, and cuBLAS; every line
twice, forward then reversed.

    python bench/narrow_n_specs.py > bench/specs/tune162.txt

Spec 163 (--held-out) checks the rule built on it (dgir.tuning: spec 162's winners in the table, and
analogous() answering up to M = 512) on (N, K) and M that spec 162 did not time: for each cell the
API's config now, the cost model's pick (the API's choice before, but at 160x512x7168), the same
cluster grid as spec 162 (the best known), and cuBLAS.

    python bench/narrow_n_specs.py --held-out > bench/specs/tune163.txt

(Specs 162 and 163 list the API's choices of the revision that generated them, d4ea8f8 and 8833ab4;
the rules added after them choose differently, so regenerating them now gives other lines.)

Spec 164 (--nearby-load) times the nearby rule's two scalings where they pick differently: a
measured time scaled by the persistent rounds (`walk_rounds`, the rule of step 46) or by the load of
the busiest SM (`sm_load`: two CTAs per SM count as more load even in one round), over the table's
(N, K) at M off its grid; each cell three times (forward, reversed, forward) with cuBLAS.

    python bench/narrow_n_specs.py --nearby-load > bench/specs/tune164.txt

Spec 165 (--unstraddle) times `tuning.unstraddled` on (N, K) and M no earlier spec timed: where the
API carries an analogous shape's config whose width straddles two B-scale blocks (40, 56, 72, 80),
the carried config as it was against the one moved to 32 or 64 columns; three passes, with cuBLAS.

    python bench/narrow_n_specs.py --unstraddle > bench/specs/tune165.txt
"""
import math
import sys

from dgir import tuning
from dgir.ops.fp8_gemm import BLOCK_K, Fp8GemmConfig, carry_config, ceil_div, check_config, max_stages_for
from dgir.ops import OpError

SHAPES = [(256, 7168), (384, 7168), (512, 7168), (768, 7168), (1024, 7168), (512, 4096), (1024, 4096),
          (384, 16384)]
MS = (192, 256, 384, 512)
HELD_OUT = [(320, 7168), (640, 7168), (448, 4096), (896, 5120), (256, 4096), (768, 16384), (576, 4096),
            (1152, 7168), (512, 7168), (384, 16384), (1024, 4096)]
HELD_OUT_MS = (160, 224, 320, 448)
H200 = ("NVIDIA H200", 132)


def spec(m, cfg: Fp8GemmConfig) -> str:
    kw = [f"bm={cfg.block_m}", f"bn={cfg.block_n}", f"s={cfg.stages}"]
    if cfg.split_k > 1:
        kw.append(f"sk={cfg.split_k}")
    if cfg.split_cluster:
        kw.append("sr=cl")
    if cfg.ctas_per_sm > 1:
        kw.append(f"o={cfg.ctas_per_sm}")
    if cfg.cluster > 1:
        kw.append(f"cl={cfg.cluster}{cfg.multicast}")
    return f"{m},{cfg.n},{cfg.k}:{','.join(kw)}"


def carried(m, n, k):
    """The nearest (N', K')'s measured config at the nearest measured M in 129-640, carried over."""
    rows = [e for e in tuning._measured_any("fp8_gemm_nt", *H200) if 128 < e["m"] <= 640
            and (e["n"], e["k"]) != (n, k)]
    near_m = min({e["m"] for e in rows}, key=lambda x: (abs(math.log(x / m)), -x))
    best = min((e for e in rows if e["m"] == near_m),
               key=lambda e: abs(math.log(n / e["n"])) + abs(math.log(k / e["k"])))
    if max(abs(math.log(n / best["n"])), abs(math.log(k / best["k"]))) > math.log(tuning.ANALOG_RATIO):
        return None
    return carry_config(tuning.valid_config(best["config"]), n, k)


def cluster_grid(m, n, k, limit=4):
    """Cluster-reduced split-K tiles 64 rows high, 32 or 64 wide, 2-8 slices of >= 3 K blocks, whose
    CTAs fit one round (two per SM when over 132); the `limit` that fill the most slots."""
    out = []
    for bn in (32, 64):
        for sk in (2, 4, 8):
            ctas = ceil_div(m, 64) * ceil_div(n, bn) * sk
            if ceil_div(k, BLOCK_K) < 3 * sk or ctas > 264:
                continue
            cfg = Fp8GemmConfig(n=n, k=k, block_m=64, block_n=bn, stages=4, split_k=sk, split_reduce="cluster",
                                ctas_per_sm=2 if ctas > 132 else 1)
            cfg = Fp8GemmConfig(**{**cfg.__dict__, "stages": min(max_stages_for(cfg), ceil_div(k, BLOCK_K * sk), 12)})
            try:
                check_config(cfg)
            except OpError:
                continue
            out.append((-ctas, cfg))
    return [c for _, c in sorted(out, key=lambda x: x[0])[:limit]]


def lines():
    out = []
    for n, k in SHAPES:
        for m in MS:
            cell = [f"{m},{n},{k}::default"]
            extra = [c for c in [carried(m, n, k)] if c is not None] + cluster_grid(m, n, k)
            for c in extra:
                if spec(m, c) not in cell:
                    cell.append(spec(m, c))
            cell.append(f"{m},{n},{k}::cublas")
            out += cell
    return out


def held_out_lines():
    from dgir.ops import get_operator
    out = []
    for n, k in HELD_OUT:
        for m in HELD_OUT_MS:
            api = tuning.choose("fp8_gemm_nt", m, n, k, *H200).config
            model = get_operator("fp8_gemm_nt").choose_config(m=m, n=n, k=k, num_sms=H200[1])
            cell = []
            for c in [api, model] + cluster_grid(m, n, k, limit=3):
                if spec(m, c) not in cell:
                    cell.append(spec(m, c))
            out += cell + [f"{m},{n},{k}::cublas"]
    return out


NEARBY_MS = (136, 160, 176, 224, 288, 320, 352, 448, 576, 640, 704, 896, 1100, 1280, 1792, 2560, 3584, 5000, 7000)


def nearby_load_lines():
    from dgir.ops.fp8_gemm import sm_load, walk_rounds
    nks = sorted({(e["n"], e["k"]) for e in tuning._measured_any("fp8_gemm_nt", *H200)})
    out = []
    for n, k in nks:
        for m in NEARBY_MS:
            by_rounds = tuning.nearby_config("fp8_gemm_nt", m, n, k, *H200, load=walk_rounds)
            by_load = tuning.nearby_config("fp8_gemm_nt", m, n, k, *H200, load=sm_load)
            if by_rounds and by_load and by_rounds[0] != by_load[0]:
                out += [spec(m, by_rounds[0]), spec(m, by_load[0]), f"{m},{n},{k}::cublas"]
    return out


UNSTRADDLE_SHAPES = [(448, 7168), (704, 7168), (896, 7168), (640, 4096), (320, 4096), (1152, 4096), (768, 5120),
                     (576, 2048), (960, 7168), (352, 7168), (640, 16384), (448, 2048)]
UNSTRADDLE_MS = (144, 176, 288, 416, 480)


def carried_change(m, n, k, **rule_off):
    """Spec lines (the carried config without the rule, with it, cuBLAS) for a shape that the API
    answers with an analogous shape's config, where switching the rule off (`rule_off`, e.g.
    unstraddle=False) changes that config; [] otherwise."""
    from dgir.ops import get_operator
    if tuning.lookup("fp8_gemm_nt", *H200, m, n, k) or tuning.nearby_config("fp8_gemm_nt", m, n, k, *H200):
        return []
    model = get_operator("fp8_gemm_nt").choose_config(m=m, n=n, k=k, num_sms=H200[1])
    before = tuning.analogous_config("fp8_gemm_nt", m, n, k, *H200, model, **rule_off)
    after = tuning.analogous_config("fp8_gemm_nt", m, n, k, *H200, model)
    if before and after and before[0] != after[0]:
        return [spec(m, before[0]), spec(m, after[0]), f"{m},{n},{k}::cublas"]
    return []


def unstraddle_lines():
    return [line for n, k in UNSTRADDLE_SHAPES for m in UNSTRADDLE_MS
            for line in carried_change(m, n, k, unstraddle=False)]


if __name__ == "__main__":
    if "--unstraddle" in sys.argv[1:]:
        fwd = unstraddle_lines()
        print("\n".join(fwd + fwd[::-1] + fwd))
    elif "--nearby-load" in sys.argv[1:]:
        fwd = nearby_load_lines()
        print("\n".join(fwd + fwd[::-1] + fwd))
    else:
        fwd = held_out_lines() if "--held-out" in sys.argv[1:] else lines()
        print("\n".join(fwd + fwd[::-1]))
