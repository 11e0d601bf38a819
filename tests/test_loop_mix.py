"""dgir.loop_mix: the K loop's SASS instruction mix (CPU: ptxas and nvdisasm only)."""
import pytest

from dgir import compile
from dgir.loop_mix import k_loop_mix
from dgir.runtime.sass import parse_sass
from dgir.ops.fp8_gemm import Fp8GemmConfig
from dgir.toolchain import ToolchainError, disassemble


def _listing(name: str, body: list[str]) -> str:
    """An nvdisasm -c -hex listing of `body` ("label:" lines and instructions, 16 bytes apart)."""
    out, off = [f"\t.section\t.text.{name},\"ax\",@progbits", f".text.{name}:"], 0
    for line in body:
        if line.endswith(":"):
            out.append(line)
            continue
        out.append(f"        /*{off:04x}*/                   {line} ;   /* 0x0000000000000000 */")
        out.append("                                                  /* 0x000fe20000000000 */")
        off += 16
    return "\n".join(out) + "\n"


class _Kernel:
    """The attributes k_loop_mix reads from a kernel IR."""
    def __init__(self, name, block_m, threads, block_n=64):
        self.name, self.attrs = name, {"block_m": block_m, "block_n": block_n, "block_k": 128, "threads": threads}

    def get(self, key):
        return self.attrs.get(key)

    def walk(self):           # no IR: no K loop known to be one pass
        return iter(())


def test_the_k_loop_is_the_innermost_conditional_loop_that_issues_wgmma():
    body = ["MOV R1, 0x1",
            ".L_x_1:",                                       # the persistent loop
            "UIADD3 UR4, UR4, 0x1, URZ",
            ".L_x_2:",                                       # the K loop: two K blocks of a 64-row tile
            "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR5], R2",
            "@!P1 BRA `(.L_x_9)",                            # to the wait's retry stub (forward)
            ".L_x_3:",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24, gsb0",
            "@P2 BRA `(.L_x_4)",                             # an arm inside the body
            "FFMA R0, R24, R3, R0",
            ".L_x_4:",
            "FFMA R0, R25, R3, R0",
            "R2UR UR9, R7",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24, gsb0",
            "@!P0 BRA `(.L_x_2)",                            # the K loop's back edge
            "@!P3 BRA `(.L_x_1)",                            # the persistent loop's
            "EXIT",
            ".L_x_9:",                                       # the retry stub: spins, then jumps back
            "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR5], R2",
            "@!P1 BRA `(.L_x_9)",
            "BRA `(.L_x_3)"]
    sass = _listing("k", body)
    code = parse_sass(sass, "k")
    assert len(code) == sum(not line.endswith(":") for line in body)
    assert code[2].labels == (".L_x_2",) and code[2].label_before and not code[3].labels
    mix = k_loop_mix(sass, _Kernel("k", 64, 256))
    assert (mix.start, mix.end, mix.k_blocks, mix.instructions) == (0x20, 0x100, 2, 15)
    assert dict(mix.opcodes) == {"QGMMA": 8, "BRA": 3, "FFMA": 2, "SYNCS": 1, "R2UR": 1}
    assert mix.per_k_block() == 7.5 and mix.per_k_block("QGMMA") == 4
    assert mix.inner_branches == 1                 # the arm; the stub's branch leaves the body
    assert mix.executed_ffma is None               # 1 FFMA a K block written, 32 would run: no arms' copies
    assert mix.groups() == {"wgmma": 4, "FFMA": 1, "R2UR": 0.5, "uniform": 0, "sync": 0.5, "memory": 0, "other": 1.5}
    # a 256-row tile's two math warpgroups issue two 64-row waves a K block: these 8 wgmmas are one
    assert k_loop_mix(sass, _Kernel("k", 256, 384)).k_blocks == 1
    # wgmmas that are not whole K blocks (a 192-row tile alone in one warpgroup: 12 a K block)
    assert k_loop_mix(sass, _Kernel("k", 192, 256)) is None
    assert k_loop_mix(_listing("k", ["MOV R1, 0x1", "EXIT"]), _Kernel("k", 64, 256)) is None


def _mix(m, n, k, cfg, passes=None):
    res = compile("fp8_gemm_nt", m=m, n=n, k=k, config=cfg, passes=passes)
    try:
        return k_loop_mix(disassemble(res.cubin), res.ir)
    except ToolchainError as e:       # nvdisasm comes with the package's dependencies
        pytest.fail(f"nvdisasm: {e}")


def test_the_k_loop_mix_of_compiled_kernels():
    """One math warp's share of a K block: a 64-row wave is four m64nNk32 wgmmas and N / 2 FFMAs of
    promotion; a 256x128 tile's warpgroup runs two waves a K block.  The uniform warpgroup index
    (passes/uniform_warpgroup_index.py, forced on the one-warpgroup 64x64) takes every R2UR out of
    the loop, and with it about a sixth of its instructions (bench/TUNING.md step 119)."""
    from dgir.passes.uniform_warpgroup_index import UniformWarpgroupIndex
    from dgir.pipeline import pipeline
    small = Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=64, stages=11)
    mix = _mix(128, 4096, 7168, small)
    assert mix.per_k_block("QGMMA") == 4 and mix.per_k_block("FFMA") == 32 and mix.per_k_block("R2UR") > 0
    forced = [UniformWarpgroupIndex(force=True) if p.name == "uniform_warpgroup_index" else p for p in pipeline("sm90a")]
    uniform = _mix(128, 4096, 7168, small, forced)
    assert uniform.per_k_block("R2UR") == 0 and uniform.per_k_block("FFMA") == 32
    assert uniform.per_k_block() < 0.9 * mix.per_k_block()
    big = _mix(4096, 7168, 16384, Fp8GemmConfig(n=7168, k=16384, block_m=256, block_n=128, stages=3, cluster=2))
    assert big.per_k_block("QGMMA") == 8 and big.per_k_block("FFMA") == 128
    assert not mix.tile_loop and not big.tile_loop
    # K = 512: the K loop is one pass of four K blocks, unrolled; the loop found is the tile loop
    short = _mix(64, 32768, 512, Fp8GemmConfig(n=32768, k=512, block_m=64, block_n=64, stages=6, ctas_per_sm=2))
    assert short.tile_loop and short.k_blocks == 4 and "epilogue included" in short.describe()


def test_a_straddling_tiles_arms_are_counted_once_as_executed():
    """192x96 tiles cross a B-scale block at one of two columns: the promotion is written three
    times (one branch arm each, and the tile inside one block), 144 FFMAs a K block, of which a
    warp runs its wave's 48; the executed estimate counts those."""
    mix = _mix(1600, 2624, 2560, Fp8GemmConfig(n=2624, k=2560, block_m=192, block_n=96, stages=5))
    assert mix.inner_branches == 2 and mix.per_k_block("FFMA") == 3 * 48 and mix.executed_ffma == 48
    assert mix.executed_per_k_block() == mix.per_k_block() - 96
    assert "48 of the 144 FFMAs run" in mix.describe()
    plain = _mix(128, 4096, 7168, Fp8GemmConfig(n=4096, k=7168, block_m=64, block_n=64, stages=11))
    assert plain.executed_ffma is None and plain.executed_per_k_block() == plain.per_k_block()


def test_the_dump_reports_the_k_loop(tmp_path):
    res = compile("fp8_gemm_nt", m=128, n=4096, k=7168, dump_dir=tmp_path)
    assert res.loop_mix is not None and res.loop_mix.k_blocks >= 1
    assert f"k-loop   {res.loop_mix.describe()}" in res.summary().splitlines()
    resources = (res.dump_dir / "resources.txt").read_text().splitlines()
    assert f"k_loop_instructions_per_k_block {res.loop_mix.per_k_block():g}" in resources
    assert f"k_loop_instructions_executed_per_k_block {res.loop_mix.executed_per_k_block():g}" in resources
    assert compile("fp8_gemm_nt", m=128, n=4096, k=7168).loop_mix is None     # no listing, no mix
