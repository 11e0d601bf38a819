"""Pass manager and extension: register_pass, pipeline identity / cache key, user passes in dumps."""
from __future__ import annotations

import importlib.util
import textwrap

import pytest
from dgir_testlib import DEFAULT, SM90A_PASSES

import dgir
from dgir import cli
from dgir.ir import Op
from dgir.ops.fp8_gemm import lower
from dgir.pipeline import PassEvent, identity, pipeline, run_pipeline, unregister_all

BASE = SM90A_PASSES
DIMS = dict(m=256, n=576, k=640)


@pytest.fixture(autouse=True)
def _clean_registry():
    unregister_all()
    yield
    unregister_all()


class TagKernel(dgir.Pass):
    """Test pass: marks the kernel with `tagged=true` (and counts how often it ran)."""
    name = "tag_kernel"

    def run(self, kernel):
        return kernel.with_attrs(tagged=True, tag_runs=kernel.get("tag_runs", 0) + 1)


class Broken(dgir.Pass):
    """Test pass: fails while running."""
    name = "broken"

    def run(self, kernel):
        raise ZeroDivisionError("boom")


def names(target="sm90a"):
    return [p.name for p in pipeline(target)]


# --- register_pass ------------------------------------------------------------------------------
def test_base_pipeline():
    assert names() == BASE


@pytest.mark.parametrize("where,expect", [
    (dict(before="schedule_mma"), BASE[:4] + ["tag_kernel"] + BASE[4:]),
    (dict(after="schedule_mma"), BASE[:5] + ["tag_kernel"] + BASE[5:]),
    (dict(after="allocate_smem"), BASE + ["tag_kernel"]),
    (dict(before="promote_scales"), ["tag_kernel"] + BASE),
    (dict(replace="schedule_mma"), BASE[:4] + ["tag_kernel"] + BASE[5:]),
])
def test_register_pass_changes_the_pipeline_and_its_identity(where, expect):
    before_id = identity(pipeline("sm90a"))
    dgir.register_pass(TagKernel(), "sm90a", **where)
    assert names() == expect
    assert identity(pipeline("sm90a")) != before_id
    assert "tag_kernel:" in identity(pipeline("sm90a"))
    unregister_all()
    assert names() == BASE and identity(pipeline("sm90a")) == before_id


def test_register_pass_is_per_target():
    dgir.register_pass(TagKernel(), "sm90a", after="promote_scales")
    assert "tag_kernel" in names("sm90a")
    from dgir.pipeline import _registered
    assert _registered["ascend950"] == []


@pytest.mark.parametrize("kwargs,err,words", [
    (dict(), ValueError, "exactly one of before=, after=, replace="),
    (dict(before="schedule_mma", after="schedule_mma"), ValueError, "exactly one of"),
    (dict(after="no_such_pass"), ValueError, "no pass named 'no_such_pass' in the sm90a pipeline"),
])
def test_register_pass_rejects_bad_anchors(kwargs, err, words):
    with pytest.raises(err, match=words):
        dgir.register_pass(TagKernel(), "sm90a", **kwargs)
    assert names() == BASE


def test_register_pass_needs_a_name_run_and_docstring():
    class NoDoc(dgir.Pass):
        name = "nodoc"

        def run(self, k):
            return k
    with pytest.raises(TypeError, match="needs a docstring"):
        dgir.register_pass(NoDoc(), after="schedule_mma")
    with pytest.raises(TypeError, match="is not a pass"):
        dgir.register_pass(object(), after="schedule_mma")
    with pytest.raises(ValueError, match="unknown target 'nope'"):
        dgir.register_pass(TagKernel(), "nope", after="schedule_mma")


def _pass_from_source(tmp_path, modname: str, body: str, module_level: str = ""):
    """Define a pass class in a real file (identity hashes the file's source)."""
    path = tmp_path / f"{modname}.py"
    path.write_text(textwrap.dedent(f'''
        import dgir
        {module_level}

        class MyPass(dgir.Pass):
            """User pass under test."""
            name = "my_pass"

            def run(self, kernel):
                {body}
    '''))
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MyPass()


def test_identity_changes_when_only_the_source_changes(tmp_path, emitter):
    v1 = _pass_from_source(tmp_path, "user_pass_v1", "return kernel")
    v2 = _pass_from_source(tmp_path, "user_pass_v2", "return kernel  # same behaviour, new source")
    assert v1.name == v2.name
    assert v1.identity() != v2.identity()
    dgir.register_pass(v1, after="allocate_smem")
    id1 = identity(pipeline("sm90a"))
    r1 = dgir.compile("fp8_gemm_nt", assemble=False, **DIMS)
    unregister_all()
    dgir.register_pass(v2, after="allocate_smem")
    id2 = identity(pipeline("sm90a"))
    r2 = dgir.compile("fp8_gemm_nt", assemble=False, **DIMS)
    assert id1 != id2
    assert r1.ir == r2.ir                       # same IR ...
    assert r1.cache_key != r2.cache_key         # ... but a different kernel-cache key
    assert r1.pipeline_id == id1 and r2.pipeline_id == id2


def test_identity_covers_the_module_a_pass_reads(tmp_path):
    """A pass's behaviour can live in its module's tables (latencies, reserves): a change there
    alone is a new identity, though the class's own source is the same."""
    v1 = _pass_from_source(tmp_path, "table_pass_v1", "return kernel", "RESERVE = 8")
    v2 = _pass_from_source(tmp_path, "table_pass_v2", "return kernel", "RESERVE = 16")
    same = _pass_from_source(tmp_path, "table_pass_v3", "return kernel", "RESERVE = 8")
    assert v1.identity() != v2.identity()
    assert v1.identity() == same.identity()     # the hash is of the content, not the file's name


def test_cache_key_is_stable(emitter):
    a = dgir.compile("fp8_gemm_nt", assemble=False, **DIMS)
    b = dgir.compile("fp8_gemm_nt", assemble=False, **DIMS)
    assert a.cache_key == b.cache_key and len(a.cache_key) == 64


# --- the event stream ---------------------------------------------------------------------------
def test_run_pipeline_sends_one_event_per_stage():
    events: list[PassEvent] = []
    k0 = lower(DEFAULT)
    out = run_pipeline(k0, pipeline("sm90a"), [events.append], lowering_name="lower_gemm")
    assert [e.stem for e in events] == ["00_lower_gemm"] + [f"{i:02d}_{n}" for i, n in enumerate(BASE, 1)]
    assert events[0].before is None and events[0].after == k0
    for prev, ev in zip(events, events[1:]):
        assert ev.before == prev.after and ev.seconds >= 0
    assert events[-1].after == out


def test_user_pass_gets_its_own_numbered_dump_and_diff(tmp_path, emitter, capsys):
    dgir.register_pass(TagKernel(), after="schedule_mma")
    res = dgir.compile("fp8_gemm_nt", dump_dir=tmp_path, assemble=False, **DIMS)
    stems = [s for s, _ in res.stages]
    assert stems[5:8] == ["05_schedule_mma", "06_tag_kernel", "07_interleave_ffma"]
    assert res.stage("tag_kernel").get("tagged") is True
    assert res.ir.get("tagged") is True                       # later passes keep it
    files = sorted(p.name for p in res.dump_dir.glob("*.dgir"))
    assert files == [f"{s}.dgir" for s in stems]
    assert "position=06_tag_kernel" in (res.dump_dir / "06_tag_kernel.dgir").read_text().splitlines()[0]
    assert cli.main(["diff", str(res.dump_dir), "tag_kernel"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("--- a/05_schedule_mma.dgir\n+++ b/06_tag_kernel.dgir\n")
    changed = [l for l in out.splitlines() if l[:1] in "+-" and l[:3] not in ("+++", "---")]
    assert len(changed) == 2 and "tagged=true" in changed[1] and "tagged" not in changed[0]


def test_pass_that_runs_twice_gets_two_numbers(tmp_path, emitter, capsys):
    dgir.register_pass(TagKernel(), after="promote_scales")
    dgir.register_pass(TagKernel(), after="allocate_smem")
    res = dgir.compile("fp8_gemm_nt", dump_dir=tmp_path, assemble=False, **DIMS)
    stems = [s for s, _ in res.stages]
    last = len(SM90A_PASSES) + 2          # the lowering, the pipeline, then the two tag_kernel runs
    assert "02_tag_kernel" in stems and stems[-1] == f"{last:02d}_tag_kernel"
    assert res.ir.get("tag_runs") == 2
    assert cli.main(["diff", str(res.dump_dir), "tag_kernel#2"]) == 0
    out = capsys.readouterr().out
    assert f"a/{last - 1:02d}_allocate_smem.dgir" in out and "+%fp8" in out and "tag_runs=2" in out
    assert cli.main(["diff", str(res.dump_dir), "tag_kernel", f"{last:02d}_tag_kernel"]) == 0
    assert f"b/{last:02d}_tag_kernel.dgir" in capsys.readouterr().out


def test_broken_user_pass_raises_pass_error_naming_it(emitter):
    dgir.register_pass(Broken(), after="schedule_mma")
    with pytest.raises(dgir.PassError, match=r"^pass 'broken' failed: ZeroDivisionError: boom$"):
        dgir.compile("fp8_gemm_nt", assemble=False, **DIMS)


def test_pass_returning_garbage_is_named(emitter):
    class Nothing(dgir.Pass):
        """Test pass: forgets to return the kernel."""
        name = "forgetful"

        def run(self, kernel):
            kernel.with_attrs(x=1)
    dgir.register_pass(Nothing(), after="promote_scales")
    with pytest.raises(dgir.PassError, match="pass 'forgetful' returned NoneType, expected a Node"):
        dgir.compile("fp8_gemm_nt", assemble=False, **DIMS)


def test_user_pass_breaking_the_ir_is_caught_by_the_verifier(emitter):
    class DropRelease(dgir.Pass):
        """Test pass: drops the consumer's release (the ring would deadlock)."""
        name = "drop_release"

        def run(self, kernel):
            from dgir.ir import map_bodies
            return map_bodies(kernel, lambda parent, body: tuple(n for n in body if n.op is not Op.RELEASE))
    dgir.register_pass(DropRelease(), after="allocate_smem")
    with pytest.raises(dgir.PassError, match=r"pass 'drop_release' produced invalid IR: channel %ab is used "
                                             r"without release at `%ab = channel"):
        dgir.compile("fp8_gemm_nt", assemble=False, verify=True, **DIMS)


def test_explicit_passes_list(emitter):
    res = dgir.compile("fp8_gemm_nt", assemble=False, passes=pipeline("sm90a")[:1] + [TagKernel()]
                       + pipeline("sm90a")[1:], **DIMS)
    assert [s for s, _ in res.stages][:3] == ["00_lower_gemm", "01_promote_scales", "02_tag_kernel"]
    assert names() == BASE                      # the registry is untouched
