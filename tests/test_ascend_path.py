"""The Ascend path end to end, on the CPU: tile IR -> ascend950 / ascend910b pipelines -> AscendC C++ ->
g++ against the emulator (emitters/ascendc/emu/ascendc_emu.h) -> compared with torch (calc_diff), plus the
-fsyntax-only spelling check against ascendc_api_decls.h, bad input, the CLI JSON line and the dumps.
The emulator stands for documented AscendC semantics, not for hardware; timings are the cost MODEL's."""
import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
from dgir_testlib import ascend_emu_env

torch = pytest.importorskip("torch")

import dgir  # noqa: E402
from dgir import ascend_run  # noqa: E402
from dgir.ir import Op, map_bodies  # noqa: E402
from dgir.ops import OpError  # noqa: E402
from dgir.pipeline import pipeline  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")

TARGET = {"950": "ascend950", "910b": "ascend910b"}

# (op, chip, n, k, Ms): N and K are compiled in, M is a runtime value (one build serves every M).
# Tails everywhere: N, K not multiples of 16 or 64, M = 1, K smaller than one block (40 < BK, 40 < 128).
CASES = [
    ("bf16_gemm_nt", "950", 77, 40, (1, 33)),
    ("bf16_gemm_nt", "910b", 77, 40, (1, 130)),
    ("bf16_gemm_nt", "950", 200, 500, (300,)),
    ("bf16_gemm_nt", "910b", 129, 1111, (257, 5)),
    ("fp8_gemm_nt", "950", 77, 40, (1, 65)),
    ("fp8_gemm_nt", "950", 300, 1000, (129, 2)),
]


def _id(case):
    op, chip, n, k, _ = case
    return f"{op}-{chip}-n{n}-k{k}"


@pytest.fixture(scope="module", autouse=True)
def _emu_env(tmp_path_factory):
    with ascend_emu_env(tmp_path_factory.mktemp("ascend_emu_cache")):
        yield


@pytest.fixture(scope="module")
def built():
    """Compile every case and build its emulator binary, two g++ at a time."""
    def one(case):
        op, chip, n, k, ms = case
        res = dgir.compile(op, target=TARGET[chip], m=ms[0], n=n, k=k, verify=True)
        return _id(case), (res, ascend_run.build(res))

    with ThreadPoolExecutor(max_workers=2) as ex:
        return dict(ex.map(one, CASES))


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_emitted_kernel_matches_torch(case, built):
    op, chip, n, k, ms = case
    res, exe = built[_id(case)]
    for m in ms:
        inputs, ref = ascend_run.make_inputs(op, m, n, k, seed=m)
        d = ascend_run.run_kernel(res, exe, inputs, m)["D"]
        assert d.shape == (m, n)
        assert torch.isfinite(d.float()).all(), f"{op} {chip} m={m}: non-finite output (unwritten or poisoned)"
        diff = ascend_run.calc_diff(d.double(), ref)
        assert diff < ascend_run.THRESHOLDS[op], f"{op} on {chip}, m={m} n={n} k={k}: diff {diff}"


@pytest.mark.parametrize("chip", ["950", "910b"])
def test_emitted_kernels_pass_the_api_spelling_check(chip, built):
    sources = [res.ascendc for key, (res, _) in built.items() if f"-{chip}-" in key]
    assert sources
    with ThreadPoolExecutor(max_workers=2) as ex:
        for r in ex.map(lambda s: ascend_run.syntax_check(s, chip), sources):
            assert r.returncode == 0, r.stderr[-3000:]


def test_emitted_code_shape(built):
    res, _ = built[_id(CASES[4])]                       # fp8 on the 950: cube + vector cores
    src = res.ascendc
    assert f'extern "C" __global__ __aicore__ void {res.name}(GM_ADDR a, GM_ADDR sfa, GM_ADDR b, GM_ADDR sfb, ' \
           f'GM_ADDR d, GM_ADDR workspace, GM_ADDR tiling)' in src
    for comment in ("// copy_in %a_l1 <- %A", "// load_l0 %a_l0 <- %a_l1", "// mmad %acc", "// fixpipe %WS <- %acc",
                    "// vpromote %acc_ub", "// vcast %out_ub", "// copy_out %D <- %out_ub"):
        assert comment in src, comment
    for api in ("if ASCEND_IS_AIC {", "if ASCEND_IS_AIV {", "CrossCoreSetFlag<2, PIPE_FIX>(1)", "CrossCoreWaitFlag(1)",
                "SetFlag<HardEvent::MTE2_MTE1>(0)", "WaitFlag<HardEvent::M_FIX>(0)", "KERNEL_TYPE_MIX_AIC_1_2",
                "LoadData2DParamsV2", "Axpy("):
        assert api in src, api
    res910, _ = built[_id(CASES[1])]
    assert "LoadData2DParams(i, k1, r1" in res910.ascendc and "LoadData2DParamsV2" not in res910.ascendc
    assert "KERNEL_TYPE_AIC_ONLY" in res910.ascendc and "ASCEND_IS_AIV" not in res910.ascendc


def test_dumps_per_pass(tmp_path):
    res = dgir.compile("fp8_gemm_nt", target="ascend950", m=64, n=256, k=512, dump_dir=tmp_path)
    names = sorted(p.name for p in res.dump_dir.iterdir())
    want = ["00_lower_gemm.dgir"] + [f"{i:02d}_{p.name}.dgir" for i, p in enumerate(pipeline("ascend950"), 1)]
    assert names == sorted(want + ["kernel.cpp"])
    assert (res.dump_dir / "kernel.cpp").read_text() == res.ascendc
    text = (res.dump_dir / "01_ascend_promote_scales.dgir").read_text()
    assert "mmad_scaled" not in text and "vpromote(" in text and "xcore_set" in text
    assert "mmad_scaled(" in (res.dump_dir / "00_lower_gemm.dgir").read_text()
    res910 = dgir.compile("bf16_gemm_nt", target="ascend910b", m=64, n=256, k=512, dump_dir=tmp_path)
    assert len(list(res910.dump_dir.glob("*.dgir"))) == 1 + len(pipeline("ascend910b"))


def test_fp8_on_910b_is_rejected():
    with pytest.raises(OpError, match=r"not supported on ascend910b.*arch-3510 Cube"):
        dgir.compile("fp8_gemm_nt", target="ascend910b", m=128, n=256, k=512)


def test_shape_limits_are_named():
    with pytest.raises(OpError, match="65535"):
        dgir.compile("bf16_gemm_nt", target="ascend910b", m=16, n=64, k=70000)
    with pytest.raises(OpError, match="m must be >= 1"):
        dgir.compile("bf16_gemm_nt", target="ascend950", m=0, n=64, k=64)
    with pytest.raises(OpError, match="no sm90a lowering"):
        dgir.compile("bf16_gemm_nt", target="sm90a", m=16, n=64, k=64)


def test_allocation_rejects_what_does_not_fit():
    from dgir.ops.ascend_gemm import BF16
    cfg = BF16.choose_config("910b", 256, 256, 256)
    import dataclasses
    big = dataclasses.replace(cfg, block_m=256, block_n=256, block_k=64)   # L0C 256 KB > 128 KB on the 910B
    with pytest.raises(dgir.PassError, match=r"L0C"):
        dgir.compile("bf16_gemm_nt", target="ascend910b", m=256, n=256, k=256, config=big)


class DropWait:
    """Test pass: remove the first WaitFlag of one event (the emulator's race checker must notice)."""
    name = "drop_wait"

    def __init__(self, event):
        self.event = event

    def run(self, kernel):
        done = []

        def fn(parent, body):
            out = []
            for n in body:
                if not done and n.op is Op.WAIT_FLAG and n.get("event") == self.event:
                    done.append(n)
                    continue
                out.append(n)
            return out
        return map_bodies(kernel, fn)


def test_race_checker_catches_a_missing_flag():
    passes = pipeline("ascend950")
    i = [p.name for p in passes].index("ascend_insert_sync")
    res = dgir.compile("bf16_gemm_nt", target="ascend950", m=32, n=64, k=256,
                       passes=passes[:i + 1] + [DropWait("MTE2_MTE1")] + passes[i + 1:])
    exe = ascend_run.build(res)
    inputs, _ = ascend_run.make_inputs("bf16_gemm_nt", 32, 64, 256)
    with pytest.raises(ascend_run.EmuError, match=r"race \(RAW\).*MTE2_MTE1"):
        ascend_run.run_kernel(res, exe, inputs, 32)


def test_cli_run_prints_one_json_line(capsys, monkeypatch):
    from dgir.cli import main
    rc = main(["run", "bf16_gemm_nt", "--target", "ascend-emu", "--chip", "910b", "--m", "20", "--n", "48", "--k", "72"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and len(out) == 1
    rec = json.loads(out[0])
    for key in ("op", "m", "n", "k", "diff", "model_us", "model_util"):
        assert key in rec
    assert rec["op"] == "bf16_gemm_nt" and (rec["m"], rec["n"], rec["k"]) == (20, 48, 72)
    assert rec["diff"] < 1e-5 and rec["model_us"] > 0 and 0 < rec["model_util"] < 1
    assert "MODEL" in rec["model_label"]
    # over the threshold -> exit 1 (same JSON line)
    monkeypatch.setitem(ascend_run.THRESHOLDS, "bf16_gemm_nt", 0.0)
    rc = main(["run", "bf16_gemm_nt", "--target", "ascend-emu", "--chip", "910b", "--m", "20", "--n", "48", "--k", "72"])
    rec = json.loads(capsys.readouterr().out.strip())
    assert rc == 1 and rec["ok"] is False


def test_cli_bad_input_is_one_line_exit_2(capsys):
    from dgir.cli import main
    rc = main(["run", "fp8_gemm_nt", "--target", "ascend-emu", "--chip", "910b", "--m", "20", "--n", "48", "--k", "72"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "not supported on ascend910b" in err[0]
    rc = main(["compile", "fp8_gemm_nt", "--target", "ascend910b", "--m", "20", "--n", "48", "--k", "72"])
    assert rc == 2


def test_m_grouped_fp8_contiguous():
    """Groups of 128-row blocks (some empty), padding rows MI = -1 skipped; M = 1 and a K tail too."""
    op = "m_grouped_fp8_gemm_nt_contiguous"
    for m, n, k, groups in ((700, 200, 300, 4), (1, 77, 40, 2)):
        res = dgir.compile(op, target="ascend950", m=m, n=n, k=k, groups=groups, verify=True)
        assert res.ir.get("groups") == groups and 128 % res.ir.get("block_m") == 0
        exe = ascend_run.build(res)
        inputs, ref = ascend_run.make_inputs(op, m, n, k, seed=3, groups=groups)
        d, ref = ascend_run.valid_rows(inputs, ascend_run.run_kernel(res, exe, inputs, m)["D"], ref)
        assert ascend_run.calc_diff(d.double(), ref) < ascend_run.THRESHOLDS[op]
    assert ascend_run.syntax_check(res.ascendc, "950").returncode == 0
    with pytest.raises(OpError, match="not supported on ascend910b"):
        dgir.compile(op, target="ascend910b", m=128, n=64, k=128, groups=2)
    with pytest.raises(OpError, match="missing groups"):
        dgir.compile(op, target="ascend950", m=128, n=64, k=128)
