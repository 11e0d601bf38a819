"""PTX "process replay": the PTX of a fixed set of kernels is committed (tests/golden/); any change to
lowering, passes or emitter that alters it fails here and shows the diff, so a review sees what the
change does to the generated code.  Regenerate on purpose with DGIR_UPDATE_GOLDEN=1 pytest -k replay."""
import difflib
import os
from pathlib import Path

import pytest

from dgir.compiler import compile
from dgir.ops.fp8_gemm import Fp8GemmConfig

GOLDEN = Path(__file__).parent / "golden"
KERNELS = {
    "bm128_bn128_interleaved": Fp8GemmConfig(n=7168, k=2048, block_m=128, block_n=128, stages=5),
    "bm256_bn128_waves": Fp8GemmConfig(n=7168, k=16384, block_m=256, block_n=128, stages=3),
    # K = 512: wave 0 staged inside the last K block (stage_first_wave_early)
    "bm256_bn128_short_k_c2A": Fp8GemmConfig(n=32768, k=512, block_m=256, block_n=128, stages=3, cluster=2),
    "bm64_bn64_splitk4": Fp8GemmConfig(n=2112, k=7168, block_m=64, block_n=64, stages=8, split_k=4),
    "bm128_bn144_straddle": Fp8GemmConfig(n=576, k=7168, block_m=128, block_n=144, stages=5),
    "bm192_bn128_three_warpgroups": Fp8GemmConfig(n=7168, k=16384, block_m=192, block_n=128, stages=4, cluster=2),
    "bm64_bn32_splitk8_cluster": Fp8GemmConfig(n=576, k=7168, block_m=64, block_n=32, stages=6, split_k=8,
                                               split_reduce="cluster", ctas_per_sm=2),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_ptx_replay(name):
    cfg = KERNELS[name]
    ptx = compile("fp8_gemm_nt", m=4096, n=cfg.n, k=cfg.k, config=cfg, assemble=False).ptx
    path = GOLDEN / f"{name}.ptx"
    if os.environ.get("DGIR_UPDATE_GOLDEN"):
        path.write_text(ptx)
    golden = path.read_text()
    if ptx != golden:
        diff = "".join(difflib.unified_diff(golden.splitlines(True), ptx.splitlines(True),
                                            f"golden/{name}.ptx", "now", n=2))
        pytest.fail(f"the PTX of {name} changed (DGIR_UPDATE_GOLDEN=1 to accept):\n{diff[:4000]}")
