"""The `dgir` command line: compile (dump layout, --from, --plugin, --time-passes), passes, diff,
schedule, and one-line errors with exit code 2."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from dgir_testlib import SM90A_PASSES

from dgir import cli
from dgir.pipeline import unregister_all

MAIN_JOB = ["compile", "fp8_gemm_nt", "--m", "4096", "--n", "7168", "--k", "16384"]
SMALL = ["compile", "fp8_gemm_nt", "--m", "2048", "--n", "1024", "--k", "640",
         "--config", "block_m=128,block_n=128,stages=5"]   # pinned: the tests read its passes, not the model
STAGES = [f"{i:02d}_{name}" for i, name in enumerate(["lower_gemm"] + SM90A_PASSES)]


@pytest.fixture(autouse=True)
def _isolate(monkeypatch):
    unregister_all()
    monkeypatch.setattr(sys, "path", list(sys.path))      # plug-in loading may add the cwd
    monkeypatch.delenv("DGIR_TRACEBACK", raising=False)
    yield
    unregister_all()


def run(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def kernel_dir(root: Path) -> Path:
    dirs = [d for d in root.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.fixture(scope="module")
def small_dump(tmp_path_factory):
    """One --no-assemble compile of a small shape, shared by the read-only tests."""
    root = tmp_path_factory.mktemp("dumps")
    assert cli.main(SMALL + ["--dump-dir", str(root), "--no-assemble"]) == 0
    return kernel_dir(root)


def _have_ptxas() -> bool:
    from dgir import toolchain
    try:
        toolchain.find_tool("ptxas")
        return True
    except Exception:
        return False


# --- compile ---------------------------------------------------------------------------------------
@pytest.mark.skipif(not _have_ptxas(), reason="ptxas not found (the set-up command installs nvidia-cuda-nvcc)")
def test_compile_main_job_dump_layout(tmp_path, capsys, emitter):
    rc, out, err = run(capsys, *MAIN_JOB, "--dump-dir", tmp_path / "dumps")
    assert rc == 0, err
    d = kernel_dir(tmp_path / "dumps")
    assert re.fullmatch(r"fp8_gemm_nt_n7168_k16384_[0-9a-f]{8}", d.name)
    files = sorted(p.name for p in d.iterdir())
    assert files == sorted([f"{s}.dgir" for s in STAGES] + ["kernel.ptx", "kernel.cubin", "kernel.sass",
                                                             "resources.txt"])
    for s in STAGES:
        assert (d / f"{s}.dgir").read_text().splitlines()[0] == f"// dgir v1 target=sm90a position={s}"
    assert ".target sm_90a" in (d / "kernel.ptx").read_text()
    assert (d / "kernel.cubin").read_bytes()[:4] == b"\x7fELF"
    assert (d / "kernel.sass").read_text().strip()
    res = dict(line.split(" ", 1) for line in (d / "resources.txt").read_text().splitlines())
    assert int(res["registers"]) > 0 and res["spill_stores"] == "0" and res["spill_loads"] == "0"
    assert not list((tmp_path / "dumps").glob(".*"))       # no temp directory left behind
    # the one-screen summary
    assert len(out.splitlines()) <= 24
    assert out.startswith("kernel   fp8_gemm_nt_n7168_k16384_")
    assert "stages   " + "  ".join(STAGES) in out
    assert re.search(r"ptxas    \d+ registers, 0 B spill stores, 0 B spill loads", out)
    assert f"dumps    {d}" in out


def test_compile_no_assemble_and_time_passes(tmp_path, capsys, emitter):
    rc, out, err = run(capsys, *SMALL, "--dump-dir", tmp_path, "--no-assemble", "--time-passes")
    assert rc == 0, err
    d = kernel_dir(tmp_path)
    names = {p.name for p in d.iterdir()}
    assert "kernel.ptx" in names and "kernel.cubin" not in names and "resources.txt" not in names
    table = out[out.index("===== pass timing ====="):].splitlines()
    stages = [line.split()[0] for line in table[2:]]
    assert stages[:len(STAGES)] == ["lower"] + STAGES[1:]
    assert "emit" in stages and stages[-1] == "total"
    for line in table[2:]:
        float(line.split()[1])


def test_compile_without_dump_dir_prints_summary(capsys, emitter):
    rc, out, err = run(capsys, *SMALL, "--no-assemble")
    assert rc == 0 and err == ""
    assert "config   n=1024, k=640" in out and "dumps" not in out


def test_compile_summary_lists_each_pass_decision(capsys):
    """The `decided` lines: what each pass recorded on the kernel and its loops, in pipeline order
    (read off the stages: CompileResult.decisions()), e.g. an 88-wide tile's promotion form and why."""
    rc, out, err = run(capsys, "compile", "fp8_gemm_nt", "--m", "176", "--n", "11328", "--k", "15360",
                       "--config", "block_m=192,block_n=88,stages=5", "--no-assemble")
    assert rc == 0, err
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("decided  "))
    assert lines[first] == ("decided  promote_scales: straddle_promotion='selects: 10 columns where a tile can "
                            "cross a B-scale block (> 4 arms, jumps only from 104 columns on 128 or 192 rows)'")
    assert lines[first + 1] == "         stage_b_scales: b_scales='staged by the load role'"
    assert "         allocate_smem: smem_bytes=218576" in lines
    # ... and on its loops, by region role: its selects leave no room for a second partial, so the
    # K loop is promoted by jumps instead and interleaved
    assert any(line.startswith("         interleave_ffma: mma %kbl.interleave='double_buffer x4 (promotion by jumps: "
                               "selects leave no room)'") for line in lines)
    from dgir import compile as dgir_compile
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    res = dgir_compile("fp8_gemm_nt", m=176, n=11328, k=15360, assemble=False,
                       config=Fp8GemmConfig(n=11328, k=15360, block_m=192, block_n=88, stages=5))
    decided = dict(res.decisions())
    assert decided["01_promote_scales"] == {"straddle_promotion": lines[first].split("'")[1]}
    assert [stem for stem, _ in res.decisions()] == sorted(decided)        # pipeline order
    assert all(k not in res.stages[0][1].a for changed in decided.values() for k in changed)


def test_compile_from_hand_edited_dump(tmp_path, capsys, emitter):
    assert run(capsys, *SMALL, "--dump-dir", tmp_path / "a", "--no-assemble")[0] == 0
    d = kernel_dir(tmp_path / "a")
    f = d / "04_assign_registers.dgir"
    text = f.read_text()
    assert "regs=232" in text
    f.write_text(text.replace("regs=232", "regs=216"))          # hand edit: a smaller math budget
    rc, out, err = run(capsys, *SMALL, "--from", f, "--dump-dir", tmp_path / "b", "--no-assemble")
    assert rc == 0, err
    e = kernel_dir(tmp_path / "b")
    assert e.name == d.name                                       # same kernel, same config
    assert sorted(p.stem for p in e.glob("*.dgir")) == STAGES      # the earlier stages come along
    final = (e / f"{STAGES[-1]}.dgir").read_text()
    assert "regs=216" in final and "regs=232" not in final
    assert (e / "04_assign_registers.dgir").read_text() == f.read_text()
    assert (e / "01_promote_scales.dgir").read_text() == (d / "01_promote_scales.dgir").read_text()
    # assign_registers did not run again: only the passes after the dump's position did
    assert "stages   " + "  ".join(STAGES) in out


def test_compile_from_in_place_without_dims(tmp_path, capsys, emitter):
    assert run(capsys, *SMALL, "--dump-dir", tmp_path, "--no-assemble")[0] == 0
    d = kernel_dir(tmp_path)
    f = d / "05_schedule_mma.dgir"
    f.write_text(f.read_text().replace("latency=512", "latency=600"))
    rc, out, err = run(capsys, "compile", "fp8_gemm_nt", "--from", f, "--dump-dir", tmp_path, "--no-assemble")
    assert rc == 0, err
    assert kernel_dir(tmp_path) == d
    assert sorted(p.stem for p in d.glob("*.dgir")) == STAGES
    assert "latency=600" in (d / "06_interleave_ffma.dgir").read_text()


def test_compile_from_invalid_edit_is_one_line(tmp_path, capsys, emitter):
    assert run(capsys, *SMALL, "--dump-dir", tmp_path, "--no-assemble")[0] == 0
    f = kernel_dir(tmp_path) / "04_assign_registers.dgir"
    f.write_text(f.read_text().replace("regs=40", "regs=100"))
    rc, out, err = run(capsys, *SMALL, "--from", f, "--no-assemble")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"dgir: error: {f}: regs=100: setmaxnreg takes a multiple of 8 in [24, 256] at `warpgroup")


def test_compile_plugin_pass_shows_up(tmp_path, capsys, monkeypatch, emitter):
    (tmp_path / "cli_tag_plugin.py").write_text(textwrap.dedent('''
        import dgir

        class Tag(dgir.Pass):
            """Marks the kernel (CLI plug-in test)."""
            name = "cli_tag"

            def run(self, kernel):
                return kernel.with_attrs(cli_tag="yes")

        dgir.register_pass(Tag(), "sm90a", after="promote_scales")
    '''))
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, *SMALL, "--plugin", "cli_tag_plugin", "--dump-dir", "d", "--no-assemble")
    assert rc == 0, err
    d = kernel_dir(tmp_path / "d")
    last = f"{len(STAGES):02d}_allocate_smem.dgir"              # one more stage: the plug-in pass
    assert (d / "02_cli_tag.dgir").exists() and (d / last).exists()
    assert 'cli_tag="yes"' in (d / last).read_text()
    rc, out, err = run(capsys, "passes", "--target", "sm90a")
    assert rc == 0 and re.search(r"^  02 cli_tag\b", out, re.M)
    assert "Marks the kernel (CLI plug-in test)." in out


# --- errors: one line on stderr, exit code 2 ------------------------------------------------------
def _plugin_breaking_ir(tmp_path):
    p = tmp_path / "bad_plugin_file.py"
    p.write_text(textwrap.dedent('''
        import dgir
        from dgir.ir import Op, map_bodies

        class Retag(dgir.Pass):
            """Tags TMA loads as the mma role (the verifier must reject it)."""
            name = "retag_tma"

            def run(self, kernel):
                return map_bodies(kernel, lambda parent, body: tuple(
                    n.with_attrs(role="mma") if n.op is Op.TMA_LOAD else n for n in body))

        dgir.register_pass(Retag(), "sm90a", after="prefetch_tma_descriptors")
    '''))
    return p


def _malformed(tmp_path):
    p = tmp_path / "bad.dgir"
    p.write_text("// dgir v1 target=sm90a position=04_assign_registers\n%k = kernel {\n  zero(%acc) ]\n}\n")
    return p


ERRORS = [
    (lambda t: ["compile", "fp8_gemm_tn", "--m", "1", "--n", "8", "--k", "16"],
     "dgir: error: unknown operator 'fp8_gemm_tn'; known: "),
    (lambda t: ["compile", "fp8_gemm_nt", "--m", "1", "--n", "100", "--k", "16"],
     "dgir: error: fp8_gemm_nt: n must be a positive multiple of 8"),
    (lambda t: ["compile", "fp8_gemm_nt", "--m", "1", "--n", "128", "--k", "100"],
     "dgir: error: fp8_gemm_nt: k must be a positive multiple of 16"),
    (lambda t: ["compile", "fp8_gemm_nt", "--m", "-1", "--n", "128", "--k", "128"],
     "dgir: error: fp8_gemm_nt: m must be >= 0"),
    (lambda t: ["compile", "fp8_gemm_nt", "--m", "1", "--n", "128"],
     "dgir: error: fp8_gemm_nt takes dimensions m, n, k; missing k"),
    (lambda t: ["compile", "fp8_gemm_nt", "--m", "1", "--n", "128", "--k", "x"],
     "dgir: error: compile: argument --k: invalid int value: 'x'"),
    (lambda t: ["compile", "fp8_gemm_nt", "--m", "1", "--n", "128", "--k", "128", "--target", "sm100"],
     "dgir: error: unknown target 'sm100'; known: sm90a, ascend950, ascend910b"),
    (lambda t: ["compile", "fp8_gemm_nt", "--from", _malformed(t)],
     "dgir: error: {t}/bad.dgir: line 3, column 14: unexpected ']'"),
    (lambda t: ["compile", "fp8_gemm_nt", "--from", t / "nope.dgir"],
     "dgir: error: no such dump file: {t}/nope.dgir"),
    (lambda t: ["compile", "fp8_gemm_nt", "--m", "4096", "--n", "1024", "--k", "640", "--no-assemble",
                "--plugin", _plugin_breaking_ir(t)],
     "dgir: error: pass 'retag_tma' produced invalid IR: "),
    (lambda t: ["compile", "fp8_gemm_nt", "--m", "1", "--n", "128", "--k", "128", "--plugin", "no.such.plugin"],
     "dgir: error: plugin 'no.such.plugin': cannot import it (No module named 'no')"),
    (lambda t: ["schedule", t / "missing.dgir", "--svg", t / "x.svg"],
     "dgir: error: no such dump file: {t}/missing.dgir"),
    (lambda t: ["schedule", _malformed(t)], "dgir: error: {t}/bad.dgir: line 3, column 14"),
    (lambda t: ["diff", t / "no_dumps_here", "promote_scales"],
     "dgir: error: no dump directory '{t}/no_dumps_here'"),
    (lambda t: ["frobnicate"], "dgir: error: argument COMMAND: invalid choice: 'frobnicate'"),
    (lambda t: [], "dgir: error: the following arguments are required: COMMAND"),
    (lambda t: ["passes", "--bogus"], "dgir: error: unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("argv,msg", ERRORS, ids=range(len(ERRORS)))
def test_errors_are_one_line_exit_2(argv, msg, tmp_path, capsys, emitter):
    rc, out, err = run(capsys, *argv(tmp_path))
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(msg.format(t=tmp_path)), err


def test_plugin_verifier_error_names_pass_and_op(tmp_path, capsys, emitter):
    rc, out, err = run(capsys, *SMALL, "--no-assemble", "--plugin", _plugin_breaking_ir(tmp_path))
    assert rc == 2
    assert "pass 'retag_tma' produced invalid IR" in err
    assert "only the load role may issue tma_load (this op is tagged 'mma') at `tma_load(%ab, %ctr, %a_ring" in err


def test_failed_compile_leaves_no_dump(tmp_path, capsys, emitter):
    rc, out, err = run(capsys, *SMALL, "--no-assemble", "--dump-dir", tmp_path,
                       "--plugin", _plugin_breaking_ir(tmp_path))
    assert rc == 2
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]     # never a partial dump presented as complete


# --- passes ---------------------------------------------------------------------------------------
def test_passes_lists_pipeline_with_docs(capsys):
    rc, out, err = run(capsys, "passes", "--target", "sm90a")
    assert rc == 0
    listed = re.findall(r"^  (\d\d) (\w+)", out, re.M)
    assert listed == [(f"{i:02d}", s.split("_", 1)[1]) for i, s in enumerate(STAGES) if i]
    assert "per 128-wide K block, `wgmma` into a fresh partial accumulator" in out    # docstrings
    assert "the partial accumulator in\n" in out and "`partials` (D) buffers" in out


def test_passes_all_targets(capsys):
    rc, out, err = run(capsys, "passes")
    assert rc == 0
    for t in ("sm90a", "ascend950", "ascend910b"):
        assert re.search(rf"^{t}: ", out, re.M)


# --- diff -----------------------------------------------------------------------------------------
def test_diff_two_passes(small_dump, capsys):
    rc, out, err = run(capsys, "diff", small_dump, "promote_scales", "interleave_ffma")
    assert rc == 0
    assert out.startswith("--- a/01_promote_scales.dgir\n+++ b/06_interleave_ffma.dgir\n@@ ")
    assert "+  prefetch_tmap(%A)" in out.replace("    ", "  ")       # 02 is inside the range
    assert re.search(r"^\+.*regs=232", out, re.M)                   # 03
    assert re.search(r"^\+.*interleave=\"double_buffer x\d\"", out, re.M)
    assert "// dgir" not in out                                     # headers are not diffed


def test_diff_one_pass_is_its_input_vs_output(small_dump, capsys):
    rc, out, err = run(capsys, "diff", small_dump, "promote_scales")
    assert rc == 0
    assert out.startswith("--- a/00_lower_gemm.dgir\n+++ b/01_promote_scales.dgir\n")
    assert re.search(r"^-\s+mma_scaled\(", out, re.M)
    assert re.search(r"^\+\s+wgmma\(%part, ", out, re.M)
    assert re.search(r"^\+\s+%part = regs", out, re.M)
    assert not re.search(r"^[-+]\s+prefetch_tmap", out, re.M)        # that is the next pass
    # the same stage by stem, by number, and by file name
    for key in ("01_promote_scales", "1", "01_promote_scales.dgir"):
        assert run(capsys, "diff", small_dump, key)[1] == out
    # the dump root works when it holds one kernel
    assert run(capsys, "diff", small_dump.parent, "promote_scales")[1] == out


def test_compile_result_diff_is_dgir_diff_in_memory(small_dump, capsys):
    """CompileResult.diff: the text `dgir diff` prints for the same stages, without a dump."""
    import dgir
    from dgir import DiffError
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    res = dgir.compile("fp8_gemm_nt", m=2048, n=1024, k=640, assemble=False,     # SMALL, from Python
                       config=Fp8GemmConfig(n=1024, k=640, block_m=128, block_n=128, stages=5))
    for keys in (("promote_scales",), ("promote_scales", "interleave_ffma"), ("6",), ("05_schedule_mma", "2")):
        out = run(capsys, "diff", small_dump, *keys)[1]
        assert out and res.diff(*keys) == out, keys
    assert res.diff("promote_scales", "promote_scales") == ""
    with pytest.raises(DiffError, match="no dump for 'no_such_pass'"):
        res.diff("no_such_pass")


def test_diff_html(small_dump, tmp_path, capsys):
    page = tmp_path / "out" / "diff.html"
    rc, out, err = run(capsys, "diff", small_dump, "interleave_ffma", "--html", page)
    assert rc == 0 and out.startswith("--- a/05_schedule_mma.dgir")
    html = page.read_text()
    assert html.lstrip().startswith("<!DOCTYPE html")
    assert "<title>dgir diff 05_schedule_mma → 06_interleave_ffma</title>" in html
    assert "05_schedule_mma.dgir" in html and "06_interleave_ffma.dgir" in html
    assert 'class="diff_add"' in html or 'class="diff_chg"' in html


def test_diff_identical_and_unknown(small_dump, capsys):
    rc, out, err = run(capsys, "diff", small_dump, "promote_scales", "promote_scales")
    assert rc == 0 and out == "" and "identical" in err
    rc, out, err = run(capsys, "diff", small_dump, "no_such_pass")
    assert rc == 2 and err.startswith("dgir: error: no dump for 'no_such_pass'; stages: 00_lower_gemm, ")
    rc, out, err = run(capsys, "diff", small_dump, "lower_gemm")
    assert rc == 2 and "is the first dump" in err
    rc, out, err = run(capsys, "diff", small_dump, "promote_scales#2")
    assert rc == 2 and "ran 1 time(s)" in err


# --- schedule -------------------------------------------------------------------------------------
SVG = "{http://www.w3.org/2000/svg}"


def _svg(path: Path):
    root = ET.parse(path).getroot()          # well-formed XML
    assert root.tag == f"{SVG}svg"
    ops = [r for r in root.iter(f"{SVG}rect") if "op" in (r.get("class") or "").split()]
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    return root, ops, texts


def test_schedule_svg_of_scheduled_dump(small_dump, tmp_path, capsys):
    out_svg = tmp_path / "s.svg"
    rc, out, err = run(capsys, "schedule", small_dump / "05_schedule_mma.dgir", "--svg", out_svg)
    assert rc == 0
    root, ops, texts = _svg(out_svg)
    kinds = {r.get("class").split()[1] for r in ops}
    assert {"tma", "wait", "wgmma", "promote", "store"} <= kinds
    assert "warpgroup 2" in texts and "warpgroup 0,1" in texts          # one lane per region
    assert "load · 40 regs" in texts and "mma+store · 232 regs" in texts
    assert "stage 0" in texts and "stage 1" in texts
    assert any("05_schedule_mma" in t for t in texts)
    # in the k-loop, boxes follow stage then order: the wgmma (stage 0) left of the promote (stage 1)
    x = {r.get("data-op"): float(r.get("x")) for r in ops if r.get("data-op") in ("wgmma", "promote")}
    assert x["wgmma"] < x["promote"]
    widths = {r.get("data-op"): float(r.get("width")) for r in ops}
    assert widths["wgmma"] > widths["release"]                          # latency 512 vs 0


def test_schedule_svg_program_order_without_attrs(small_dump, tmp_path, capsys):
    out_svg = tmp_path / "s0.svg"
    assert run(capsys, "schedule", small_dump / "01_promote_scales.dgir", "--svg", out_svg)[0] == 0
    root, ops, texts = _svg(out_svg)
    assert "stage 0" not in texts
    order = [r.get("data-op") for r in ops]
    i = order.index("wgmma")
    assert order[i:i + 4] == ["wgmma", "wgmma_wait", "release", "promote"]


def test_schedule_text(small_dump, capsys):
    rc, out, err = run(capsys, "schedule", small_dump / "06_interleave_ffma.dgir")
    assert rc == 0
    assert out.splitlines()[0] == "warpgroup 2 · load · 40 regs"
    assert re.search(r"\[k-loop %kbl \(double_buffer x\d\)\]", out)
    assert "wgmma n128 d=0" in out


# --- the installed command ------------------------------------------------------------------------
def test_entry_point_and_subprocess(tmp_path):
    from importlib.metadata import entry_points
    eps = [e for e in entry_points(group="console_scripts") if e.name == "dgir"]
    assert eps and eps[0].value == "dgir.cli:main"
    env = dict(os.environ)
    env.pop("DGIR_TRACEBACK", None)
    p = subprocess.run([sys.executable, "-m", "dgir.cli", "compile", "nope", "--m", "1", "--n", "8", "--k", "16"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("dgir: error: unknown operator 'nope'; known: ") and p.stderr.count("\n") == 1
    assert "fp8_gemm_nt" in p.stderr
    p = subprocess.run([sys.executable, "-m", "dgir.cli", "--version"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("dgir 0.1.0")


def test_import_dgir_is_cheap():
    code = "import sys, dgir; dgir.Node; print(sorted(m for m in ('torch', 'lark', 'networkx') if m in sys.modules))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_compile_config_override(capsys, tmp_path):
    rc, out, err = run(capsys, *MAIN_JOB, "--config", "block_m=128,block_n=192,stages=4,cluster=2,multicast=B",
                       "--no-assemble")
    assert rc == 0, err
    multicast = next(s for s in STAGES if s.endswith("_multicast_tma"))
    assert "fp8_gemm_nt_n7168_k16384_bm128_bn192_s4_c2B" in out and multicast in out
    rc, out, err = run(capsys, *MAIN_JOB, "--config", "block_q=3")
    assert rc == 2 and "block_q=3" in err and "FIELD=VALUE" in err
    rc, out, err = run(capsys, *MAIN_JOB, "--config", "stages=three")
    assert rc == 2 and "stages takes a int" in err
    rc, out, err = run(capsys, *MAIN_JOB, "--config", "block_m=96")
    assert rc == 2 and "block_m must be 64, 128, 192 or 256" in err
    # the overrides apply to the config the API would run (the table's entry for the main job)
    rc, out, err = run(capsys, *MAIN_JOB, "--config", "stages=3", "--no-assemble")
    assert rc == 0 and "chosen   measured (NVIDIA H200, 132 SMs, M=4096; overridden: stages=3)" in out
    # Ascend targets override their own config type (this used to die on the GPU config's fields)
    rc, out, err = run(capsys, "compile", "fp8_gemm_nt", "--target", "ascend950", "--m", "64", "--n", "256",
                       "--k", "512", "--config", "block_n=128", "--no-assemble")
    assert rc == 0, err
    assert "fp8_gemm_nt_950_n256_k512_bm64_bn128" in out and "chosen   model (950; overridden: block_n=128)" in out


def test_choose_shows_each_step_and_the_models_candidates(capsys, monkeypatch):
    """`dgir choose`: the API's order, one line per step asked, the choice, the model's best."""
    monkeypatch.delenv("DGIR_TUNED", raising=False)
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "224", "--n", "640", "--k", "7168", "--top", "3")
    assert rc == 0, err
    steps = [line.split(":")[0].strip() for line in out.splitlines() if line.startswith("  ") and ":" in line]
    assert steps[:6] == ["measured", "nearby", "model", "analogous", "walk", "m_tail"]
    assert "m_tail: fill (the last m block holds 32 of its 64 rows)" in out      # 32 rows: no shift
    walk = next(line for line in out.splitlines() if line.startswith("  walk:"))
    assert "rows of m blocks in bands of" in walk and "keeps" not in walk
    assert "width 72 -> 64" in out and "chosen   analogous (NVIDIA H200, 132 SMs, carried from N=576" in out
    assert "cost model (FIRST_FIT at M=224), best 3:" in out and out.count(" us  fp8_gemm_nt_n640") == 4
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "4096", "--n", "7168", "--k", "16384")
    assert rc == 0 and "  measured: fp8_gemm_nt_n7168_k16384_bm256_bn128" in out and "nearby" not in out
    assert "(REFIT at M=4096)" in out
    # row-major SFA: staged for a 256-row tile, read in place for a 64-row one (TUNING.md step 114)
    assert "sfa      row-major contiguous SFA staged MN-major by a transpose launch (256-row tile, > 128)" in out
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "64", "--n", "2112", "--k", "7168")
    assert rc == 0 and "SFA read in place (64-row tile, <= 128): no transpose launch" in out
    from dgir import deep_gemm
    monkeypatch.setattr(deep_gemm, "SFA_K_MAJOR_IN_PLACE", False)
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "64", "--n", "2112", "--k", "7168")
    assert rc == 0 and "SFA staged MN-major by a transpose launch (in-place read off)" in out
    monkeypatch.setattr(deep_gemm, "SFA_K_MAJOR_IN_PLACE", True)
    # 128 < M <= 192: the first fit with the single-CTA 192-row entries (bench/TUNING.md step 102)
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "176", "--n", "7552", "--k", "11776", "--top", "2")
    assert rc == 0 and "(ONE_BLOCK_192 at M=176)" in out and "  model: fp8_gemm_nt_n7552_k11776_bm192_bn64_s6" in out
    # a nearby pick lists every entry it weighed, with its time scaled by the load at this M (step 87)
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "4097", "--n", "32768", "--k", "512")
    weighed = [line for line in out.splitlines() if line.startswith("    entry at M=")]
    assert rc == 0 and [line.split(":")[0].split("=")[1] for line in weighed] == ["3072", "3584", "4096", "5120", "6144"]
    # since step 96 the 4096 entry's re-timed 256x128 (estimate x33/32) beats the 3072 entry's 192x128 (x43/32)
    assert [line.endswith("<- taken") for line in weighed] == [False, False, True, False, False]
    assert "x43/32 load" in weighed[0] and "x33/32 load" in weighed[2]
    assert "  nearby: fp8_gemm_nt_n32768_k512_bm256_bn128_s3_c2A, the entry at M=4096" in out
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "580", "--n", "7168", "--k", "16384")
    assert rc == 0 and "  m_tail: shift (the last m block holds 4 of its 192 rows)" in out and "_tsh" in out
    monkeypatch.setenv("DGIR_TUNED", "0")
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "64", "--n", "576", "--k", "7168")
    assert rc == 0 and "not asked (DGIR_TUNED=0)" in out and "chosen   model (132 SMs)" in out
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "64", "--n", "576", "--k", "7000")
    assert rc == 2 and "k must be a positive multiple of 16" in err


def test_passes_lists_the_optional_research_passes(capsys, monkeypatch):
    import dgir.passes.order_wgmma_issue as research
    from dgir.passes.pipelines import sm90a
    # a pass module whose PASS no pipeline runs is listed under "optional passes"
    monkeypatch.setattr(sm90a, "PIPELINE", [p for p in sm90a.PIPELINE if p is not research.PASS])
    rc, out, err = run(capsys, "passes", "--target", "sm90a")
    assert rc == 0
    tail = out[out.index("optional passes"):]
    assert "order_wgmma_issue" in tail and "two or three warpgroups" in tail
    assert "  interleave_ffma" not in tail                      # pipeline passes are not repeated
    monkeypatch.undo()
    rc, out, err = run(capsys, "passes", "--target", "sm90a")
    tail = out[out.index("optional passes"):]                   # the measuring pass stays optional
    assert "order_wgmma_issue" not in tail and "order_wgmma_issue" in out and "trace_timeline" in tail


def test_traceback_variable(monkeypatch, capsys):
    """DGIR_TRACEBACK (read through dgir.env like every variable) turns the one-line error back into
    the exception; "0" means off, and a malformed value keeps the one-line form."""
    argv = ["compile", "fp8_gemm_nt", "--m", "1", "--n", "100", "--k", "16"]
    monkeypatch.setenv("DGIR_TRACEBACK", "1")
    with pytest.raises(Exception, match="n must be a positive multiple of 8"):
        cli.main(argv)
    for value in ("0", "maybe"):
        monkeypatch.setenv("DGIR_TRACEBACK", value)
        rc, _, err = run(capsys, *argv)
        assert rc == 2 and err.startswith("dgir: error: fp8_gemm_nt: n must be a positive multiple of 8"), err


def test_env_lists_every_variable_with_its_value(monkeypatch, capsys):
    from dgir.env import VARIABLES
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DGIR_TUNED", "0")
    rc, out, _ = run(capsys, "env")
    lines = out.splitlines()
    assert rc == 0 and [ln.split()[0] for ln in lines] == list(VARIABLES)
    tuned = next(ln for ln in lines if ln.startswith("DGIR_TUNED"))
    assert "'0'" in tuned and VARIABLES["DGIR_TUNED"] in tuned
    assert all("(unset)" in ln for ln in lines if not ln.startswith("DGIR_TUNED"))
    monkeypatch.setenv("DGIR_VERIFY", "maybe")          # a malformed value: one line naming it, exit 2
    rc, out, err = run(capsys, "env")
    assert rc == 2 and out == "" and "DGIR_VERIFY='maybe' is not a boolean" in err


def test_choose_under_an_sm_limit(capsys, monkeypatch):
    """`dgir choose --num-sms N` shows what deep_gemm.set_num_sms(N) gets: a config for N SMs, one CTA
    per SM (64x2112x7168's table entry runs three), from the model (the table measured whole devices)."""
    monkeypatch.delenv("DGIR_TUNED", raising=False)
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "64", "--n", "2112", "--k", "7168")
    assert rc == 0 and "_o3" in out.split("chosen", 1)[1].splitlines()[1]
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "64", "--n", "2112", "--k", "7168", "--num-sms", "66")
    assert rc == 0, err
    assert "no entry for 64x2112x7168 on NVIDIA H200, 66 SMs" in out and "chosen   model (66 SMs)" in out
    assert "_o3) does not carry: 3 CTAs per SM" in out           # the whole device's entry
    assert "_o3" not in out.split("chosen", 1)[1] and "_o2" not in out.split("chosen", 1)[1]
    rc, out, err = run(capsys, "choose", "fp8_gemm_nt", "--m", "64", "--n", "2112", "--k", "7168", "--num-sms", "200")
    assert rc == 2 and "--num-sms must be in 1..132" in err
