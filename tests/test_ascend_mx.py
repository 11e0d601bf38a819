"""OCP MX GEMMs on the Ascend 950 path: mx_fp8_gemm_nt (e4m3) and mx_fp4_gemm_nt (e2m1, two per byte), one
e8m0 scale per 32 K for A and B.  Tile IR -> ascend950 pipeline -> AscendC (DataCopy Dn2Nz of the scale
pairs, InitConstValue of the K tail, LoadData with LoadData2DMxParams, MmadMx) -> g++ against the emulator
-> calc_diff against the float64 product of the dequantised operands.  Also: the input quantisers, the
-fsyntax-only spelling check, the 910B rejection, the CLI JSON line and emulator error paths.

Layout chosen here (documented in dgir/ops/ascend_gemm.py): SFA [M, 2*ceil(K/64)], SFB [N, 2*ceil(K/64)] (the
950 scale fractal is 16 rows x 2 scales = 64 K; when ceil(K/32) is odd the last column is padding); any
K >= 1 for FP8, even K for FP4 (rows start on a byte).  The emulator is documented semantics, not hardware."""
import dataclasses
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from dgir_testlib import ascend_emu_env

torch = pytest.importorskip("torch")

import dgir  # noqa: E402
from dgir import ascend_run  # noqa: E402
from dgir.ir import Op, map_bodies  # noqa: E402
from dgir.ops import OpError  # noqa: E402
from dgir.ops.ascend_gemm import MX_FP8, mx_fill_cols  # noqa: E402
from dgir.pipeline import pipeline  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")

FP8, FP4 = "mx_fp8_gemm_nt", "mx_fp4_gemm_nt"

# (op, n, k, Ms): N, K compiled in, M at run time.  Tails: N, K not multiples of 16/64, M = 1, K smaller than
# one 32-block (20) and than one tile block, ceil(K/32) odd (20, 280, 1110 -> padded scale pair), K tails that
# need the fp8 InitConstValue fill (20, 280) and ones that do not (1000).
CASES = [
    (FP8, 77, 20, (1, 33)),
    (FP8, 200, 280, (65,)),
    (FP8, 129, 1000, (130, 1)),
    (FP4, 77, 40, (1, 17)),
    (FP4, 300, 290, (65,)),
    (FP4, 48, 1110, (257,)),
]


def _id(case):
    op, n, k, _ = case
    return f"{op}-n{n}-k{k}"


@pytest.fixture(scope="module", autouse=True)
def _emu_env(tmp_path_factory):
    with ascend_emu_env(tmp_path_factory.mktemp("ascend_mx_cache")):
        yield


@pytest.fixture(scope="module")
def built():
    def one(case):
        op, n, k, ms = case
        res = dgir.compile(op, target="ascend950", m=ms[0], n=n, k=k, verify=True)
        return _id(case), (res, ascend_run.build(res))

    with ThreadPoolExecutor(max_workers=4) as ex:
        return dict(ex.map(one, CASES))


def _run(res, exe, op, m, n, k, seed):
    inputs, ref = ascend_run.make_inputs(op, m, n, k, seed=seed)
    d = ascend_run.run_kernel(res, exe, inputs, m)["D"]
    assert d.shape == (m, n)
    return d, ref


# ------------------------------------------------------------------------------------------------ quantisers
def test_e2m1_encoder_rounds_to_nearest_even_and_saturates():
    x = torch.tensor([0.0, 0.24, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.1, 7.0, 1e9, -1.5, -0.0, -6.0])
    want = [0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 6.0, -1.5, -0.0, -6.0]
    codes = ascend_run.e2m1_encode(x)
    got = ascend_run.e2m1_decode(codes)
    assert got.tolist() == want
    assert int(codes[-2]) == 8 and int(codes[-3]) == 0b1011          # -0 keeps its sign; -1.5 = sign | code 3
    assert ascend_run.e2m1_decode(torch.arange(16, dtype=torch.uint8)).tolist() == \
        [0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6]
    packed = ascend_run.pack_e2m1(torch.tensor([[1, 2, 15, 7]], dtype=torch.uint8))
    assert packed.tolist() == [[0x21, 0x7F]]                          # element 2j in the low nibble


@pytest.mark.parametrize("fmt,tol", [("e4m3", 1e-3), ("e2m1", 2e-2)])
def test_mx_quantize_blocks_scales_and_padding(fmt, tol):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(7, 70, generator=g) * torch.exp2(torch.randint(-20, 20, (7, 1), generator=g).float())
    x[3, 32:64] = 0                                                   # an all-zero block: scale 2^0
    q, sf, deq = ascend_run.mx_quantize(x, fmt)
    assert sf.shape == (7, 4) and sf.dtype == torch.uint8             # ceil(70/32) = 3 blocks, padded to a pair
    assert (sf[:, 3] == 127).all() and int(sf[3, 1]) == 127
    e = sf[:, :3].double() - 127
    fmax = 448.0 if fmt == "e4m3" else 6.0
    blocks = torch.nn.functional.pad(x.double(), (0, 26)).view(7, 3, 32).abs().amax(-1)
    nz = blocks > 0
    assert (blocks[nz] <= fmax * torch.exp2(e[nz])).all()           # nothing saturates ...
    assert (blocks[nz] > fmax * torch.exp2(e[nz] - 1)).all()        # ... and the scale is the smallest that fits
    if fmt == "e4m3":
        assert q.dtype == torch.float8_e4m3fn and q.shape == (7, 70)
        vals = q.double()
    else:
        assert q.dtype == torch.uint8 and q.shape == (7, 35)
        codes = torch.stack([q & 0xF, q >> 4], dim=-1).view(7, 70)
        vals = ascend_run.e2m1_decode(codes)
    assert torch.equal(deq, vals * torch.exp2(e).repeat_interleave(32, dim=1)[:, :70])
    assert ascend_run.calc_diff(deq, x.double()) < tol


# ------------------------------------------------------------------------------------------------ kernels
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_emitted_mx_kernel_matches_torch(case, built):
    op, n, k, ms = case
    res, exe = built[_id(case)]
    for m in ms:
        d, ref = _run(res, exe, op, m, n, k, seed=m + k)
        assert torch.isfinite(d.float()).all(), f"{op} m={m}: non-finite output (unwritten or poisoned)"
        diff = ascend_run.calc_diff(d.double(), ref)
        assert diff < ascend_run.THRESHOLDS[op], f"{op} m={m} n={n} k={k}: diff {diff}"


def test_scales_matter(built):
    """The same kernel with every scale reset to 1.0 no longer matches: the cube really applies SFA / SFB."""
    op, n, k, ms = CASES[1]
    res, exe = built[_id(CASES[1])]
    inputs, ref = ascend_run.make_inputs(op, 65, n, k, seed=1)
    inputs = dict(inputs, SFA=torch.full_like(inputs["SFA"], 127))
    d = ascend_run.run_kernel(res, exe, inputs, 65)["D"]
    assert ascend_run.calc_diff(d.double(), ref) > 0.01


def test_k_tail_fill_inside_the_k_loop():
    """Several K blocks and an fp8 tail of 88 (pads to 96 < 128): the InitConstValue fill of K columns [96, 128)
    runs in the last K block only (an `if` in the K loop), and the result stays exact."""
    cfg = MX_FP8.choose_config("950", 40, 70, 600)
    cfg = dataclasses.replace(cfg, block_m=32, block_n=32, block_k=128)
    assert mx_fill_cols(cfg) == (96, 32)
    res = dgir.compile(FP8, target="ascend950", m=40, n=70, k=600, config=cfg, verify=True)
    (kloop,) = [n for n in res.ir.walk() if n.op is Op.FOR and n.name == "kb"]
    ifs = [n for n in kloop.body if n.op is Op.IF]
    assert len(ifs) == 1 and [n.op for n in ifs[0].body] == [Op.FILL_L1, Op.FILL_L1]
    exe = ascend_run.build(res)
    d, ref = _run(res, exe, FP8, 40, 70, 600, seed=9)
    assert ascend_run.calc_diff(d.double(), ref) < ascend_run.THRESHOLDS[FP8]
    # fp4 needs no fill: ND -> Nz pads 32 B = 64 e2m1, the MmadMx granule
    assert "fill_l1" not in str([n.op.value for n in dgir.compile(FP4, target="ascend950", m=8, n=32, k=40).ir.walk()])


class DropOps:
    """Test pass: remove every node of one op (or the first WaitFlag of one event)."""

    def __init__(self, op, event=None):
        self.op, self.event = op, event
        self.name = f"drop_{op.value}"

    def run(self, kernel):
        done = []

        def fn(parent, body):
            out = []
            for n in body:
                if n.op is self.op and (self.event is None or (not done and n.get("event") == self.event)):
                    done.append(n)
                    continue
                out.append(n)
            return out
        return map_bodies(kernel, fn)


def _with_pass(op, extra, after="ascend_insert_sync", **dims):
    passes = pipeline("ascend950")
    i = [p.name for p in passes].index(after)
    return dgir.compile(op, target="ascend950", passes=passes[:i + 1] + [extra] + passes[i + 1:], **dims)


def test_without_the_k_fill_the_poison_shows():
    """K = 20 pads to 32 in ND -> Nz but MmadMx reads 64: without fill_l1 the poisoned L1 (NaN) reaches D."""
    res = _with_pass(FP8, DropOps(Op.FILL_L1), m=16, n=32, k=20)
    d, _ = _run(res, ascend_run.build(res), FP8, 16, 32, 20, seed=0)
    assert not torch.isfinite(d.float()).all()


def test_race_checker_covers_the_mx_loads():
    res = _with_pass(FP4, DropOps(Op.WAIT_FLAG, "MTE2_MTE1"), m=16, n=32, k=128)
    exe = ascend_run.build(res)
    inputs, _ = ascend_run.make_inputs(FP4, 16, 32, 128)
    with pytest.raises(ascend_run.EmuError, match=r"race \(RAW\).*MTE2_MTE1"):
        ascend_run.run_kernel(res, exe, inputs, 16)


def test_mx_kernels_pass_the_api_spelling_check(built):
    sources = [res.ascendc for res, _ in built.values()]
    with ThreadPoolExecutor(max_workers=4) as ex:
        for r in ex.map(lambda s: ascend_run.syntax_check(s, "950"), sources):
            assert r.returncode == 0, r.stderr[-3000:]


def test_emitted_mx_code_shape(built):
    res, _ = built[_id(CASES[0])]
    src = res.ascendc
    assert f'extern "C" __global__ __aicore__ void {res.name}(GM_ADDR a, GM_ADDR sfa, GM_ADDR b, GM_ADDR sfb, ' \
           f'GM_ADDR d, GM_ADDR tiling)' in src
    for frag in ("KERNEL_TYPE_AIC_ONLY", "GlobalTensor<fp8_e8m0_t> sfa_gm", "GlobalTensor<uint16_t> sfa_pairs_gm",
                 "Dn2NzParams(", "InitConstValue(", "LoadData2DMxParams(0, 0, r1, kp, kp, kp)", "MmadMx(acc, a_l0, b_l0",
                 "CeilAlign(kl, 64)", "// copy_in %sfa_l1 <- %SFA", "// load_l0_mx %a_l0", "// mmad_mx %acc",
                 "// fill_l1 %a_l1", "// fixpipe %D <- %acc"):
        assert frag in src, frag
    assert "ASCEND_IS_AIV" not in src and "Mmad(" not in src
    res4, _ = built[_id(CASES[3])]
    assert "LocalTensor<fp4x2_e2m1_t> a_l1(TPosition::A1, 0, " in res4.ascendc
    assert "(two e2m1 per byte, low nibble first)" in res4.ascendc and "InitConstValue(" not in res4.ascendc


# ------------------------------------------------------------------------------------------------ bad input / CLI
@pytest.mark.parametrize("op", [FP8, FP4])
def test_mx_on_910b_is_rejected(op):
    with pytest.raises(OpError, match=r"not supported on ascend910b.*MmadMx.*arch 3510"):
        dgir.compile(op, target="ascend910b", m=128, n=256, k=512)


def test_mx_bad_shapes_are_named():
    with pytest.raises(OpError, match=r"k=41 must be even.*two per byte"):
        dgir.compile(FP4, target="ascend950", m=16, n=64, k=41)
    with pytest.raises(OpError, match="m must be >= 1"):
        dgir.compile(FP8, target="ascend950", m=0, n=64, k=64)
    with pytest.raises(OpError, match="no sm90a lowering"):
        dgir.compile(FP8, target="sm90a", m=16, n=64, k=64)


@pytest.mark.parametrize("op", [FP8, FP4])
def test_cli_run_mx_prints_one_json_line(op, capsys):
    from dgir.cli import main
    rc = main(["run", op, "--target", "ascend-emu", "--chip", "950", "--m", "20", "--n", "48", "--k", "72"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and len(out) == 1
    rec = json.loads(out[0])
    for key in ("op", "m", "n", "k", "diff", "model_us", "model_util"):
        assert key in rec
    assert rec["op"] == op and (rec["m"], rec["n"], rec["k"]) == (20, 48, 72)
    assert rec["threshold"] == {FP8: 1e-3, FP4: 2e-2}[op] and rec["diff"] < rec["threshold"]
    assert rec["model_us"] > 0 and 0 < rec["model_util"] < 1 and "MODEL" in rec["model_label"]
    rc = main(["run", op, "--target", "ascend-emu", "--chip", "910b", "--m", "20", "--n", "48", "--k", "72"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "not supported on ascend910b" in err[0]


# ------------------------------------------------------------------------------------------------ emulator
_KERNEL = r"""
using namespace AscendC;
extern "C" __global__ __aicore__ void probe(GM_ADDR x) {
  if ASCEND_IS_AIC {
    LocalTensor<fp8_e4m3fn_t> a(TPosition::A2, 0, 1024);
    LocalTensor<fp8_e4m3fn_t> b(TPosition::B2, 0, 1024);
    LocalTensor<float> c(TPosition::CO1, 0, 256);
#if PROBE == 1
    MmadParams p(16, 16, 32, 0, false, true);   // k = 32: not a whole scale fractal
    p.disableGemv = true;
    MmadMx(c, a, b, p);
#elif PROBE == 2
    InitConstValue(a.ReinterpretCast<uint16_t>(), InitConstValueParams<uint16_t>(1, 1, 0, 0));   // no L0A init on 3510
#elif PROBE == 3
    MmadParams p(1, 16, 64, 0, false, true);    // m = 1 in GEMV mode
    MmadMx(c, a, b, p);
#endif
  }
}
int main() { uint8_t x[64]; emu::Launch(probe, 1, emu::Mode::AIC_ONLY, x); return 0; }
"""


@pytest.mark.parametrize("probe,msg", [(1, "k=32 is not a multiple of 64"), (2, "no L0A/L0B initialisation"),
                                       (3, "GEMV mode")])
def test_emulator_mx_error_paths(probe, msg, tmp_path):
    src = tmp_path / "probe.cpp"
    src.write_text(_KERNEL)
    exe = tmp_path / "probe"
    r = subprocess.run(["g++", "-std=c++17", "-O0", "-pthread", "-DEMU_ARCH=3510", f"-DPROBE={probe}", "-include",
                        str(ascend_run.EMU_H), str(src), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("ASCENDC_EMU_ERROR:")]
    assert r.returncode == 3 and len(lines) == 1 and msg in lines[0], r.stderr


def test_mmadmx_does_not_exist_on_the_910b(tmp_path):
    src = tmp_path / "probe.cpp"
    src.write_text(_KERNEL.replace("#if PROBE == 1", "#if 1"))
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-DEMU_ARCH=2201", "-include", str(ascend_run.EMU_H),
                        str(src)], capture_output=True, text=True)
    assert r.returncode != 0 and "MmadMx" in r.stderr
