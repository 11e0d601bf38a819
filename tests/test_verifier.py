"""Verifier: valid pipeline output passes; hand-broken kernels fail naming the rule and the op."""
from __future__ import annotations

import re

import pytest
from dgir_testlib import CONFIGS, DEFAULT, SM90A_PASSES, cfg_id, edit, final, stages_for

import dgir
from dgir.ir import Node, Op
from dgir.verifier import VerifyError, verify


@pytest.mark.parametrize("cfg", CONFIGS[::7], ids=cfg_id)
def test_every_stage_of_the_pipeline_verifies(cfg):
    for stem, k in stages_for(cfg):
        verify(k)                  # raises on failure
    assert k.get("smem_bytes") <= 232448


def _broken(fn) -> str:
    with pytest.raises(VerifyError) as ei:
        verify(fn(final()))
    return str(ei.value)


def is_op(op, **attrs):
    return lambda n: n.op is op and all(n.get(k) == v for k, v in attrs.items())


def test_tma_load_tagged_as_mma_role():
    msg = _broken(lambda k: edit(k, is_op(Op.TMA_LOAD), lambda n: n.with_attrs(role="mma")))
    assert "only the load role may issue tma_load (this op is tagged 'mma')" in msg
    assert re.search(r"at `tma_load\(%ab, %ctr, %a_ring, %A, %k0, %m0\) \[role=\"mma\"\]`", msg)


def test_wgmma_in_the_load_role():
    # a wgmma in the producer's k-loop (where %ctr is defined), tagged as the load role
    wg = Node(Op.WGMMA, "", ("part", "a_ring", "b_ring", "ctr"), None, {"n": 128, "k": 128, "role": "load"})
    msg = _broken(lambda k: edit(k, is_op(Op.COMMIT), lambda n: [n, wg]))
    assert "only the mma role may issue wgmma (this op is tagged 'load')" in msg
    assert "at `wgmma(%part, %a_ring, %b_ring, %ctr) [k=128, n=128, role=\"load\"]`" in msg


def test_undefined_name():
    msg = _broken(lambda k: edit(k, is_op(Op.PROMOTE), lambda n: Node(
        n.op, n.name, ("acc", "part", "sfa", "nope", n.args[4], n.args[5]), n.type, n.attrs, n.body)))
    assert "%nope is not defined here at `promote(%acc, %part, %sfa, %nope" in msg


def test_promote_straddle_must_be_a_promotion_form():
    msg = _broken(lambda k: edit(k, is_op(Op.PROMOTE), lambda n: n.with_attrs(straddle="branchy")))
    assert "straddle='branchy' is not a promotion form (arms / selects / jump) at `promote(%acc" in msg


def test_name_from_another_region_is_not_visible():
    # %ctr_tl is defined in the mma region's tile loop; the load region cannot see it
    msg = _broken(lambda k: edit(k, is_op(Op.COMMIT), lambda n: Node(n.op, n.name, ("ab", "ctr_tl"), n.type, n.attrs)))
    assert "%ctr_tl is not defined here at `commit(%ab, %ctr_tl)" in msg


def test_channel_without_consumer_release():
    msg = _broken(lambda k: edit(k, is_op(Op.RELEASE), lambda n: None, count=None))
    assert "channel %ab is used without release" in msg
    assert "at `%ab = channel(%a_ring, %b_ring, %sfa_ring, %sfb_ring)" in msg


def test_channel_without_producer_commit():
    msg = _broken(lambda k: edit(k, is_op(Op.COMMIT), lambda n: None, count=None))
    assert "channel %ab is used without commit" in msg


def test_channel_ring_stage_mismatch():
    msg = _broken(lambda k: edit(k, lambda n: n.op is Op.SMEM and n.name == "b_ring",
                                 lambda n: n.with_attrs(stages=3)))
    assert f"channel %ab has {DEFAULT.stages} stages but %b_ring has 3" in msg
    assert "at `%ab = channel(" in msg


def test_channel_member_not_smem():
    msg = _broken(lambda k: edit(k, is_op(Op.CHANNEL), lambda n: Node(
        n.op, n.name, ("a_ring", "acc"), n.type, n.attrs)))
    assert "channel %ab member %acc is not a smem buffer" in msg


@pytest.mark.parametrize("n_value", [100, 4, 264])
def test_wgmma_n_must_be_a_multiple_of_8_in_range(n_value):
    msg = _broken(lambda k: edit(k, is_op(Op.WGMMA), lambda n: n.with_attrs(n=n_value)))
    assert f"wgmma n={n_value}: must be a multiple of 8 in [8, 256]" in msg
    assert "at `wgmma(%part" in msg


def test_register_budgets_over_64k():
    msg = _broken(lambda k: edit(k, lambda n: n.op is Op.WARPGROUP and "mma" in n.get("roles"),
                                 lambda n: n.with_attrs(regs=248)))
    # 2 math warpgroups x 128 threads x 248 + 1 x 128 x 40 = 68608 > 384 threads x 168 (the launch's share)
    assert "register budgets need 68608 registers, a CTA starts with 64512" in msg
    assert "at `%fp8_gemm_nt" in msg


def test_budget_at_the_limit_passes():
    k = edit(final(), lambda n: n.op is Op.WARPGROUP and "mma" in n.get("roles"), lambda n: n.with_attrs(regs=232))
    verify(k)   # 2*128*232 + 128*40 = 64512 = 384 threads x 168, what the CTA starts with
    over = edit(final(), lambda n: n.op is Op.WARPGROUP and "mma" in n.get("roles"), lambda n: n.with_attrs(regs=240))
    with pytest.raises(VerifyError, match="need 66560 registers, a CTA starts with 64512"):
        verify(over)   # under the 64K file, over the pool setmaxnreg draws from


def test_smem_over_the_limit():
    msg = _broken(lambda k: k.with_attrs(smem_bytes=232449))
    assert "shared memory 232449 B exceeds the 232448 B limit" in msg
    verify(final().with_attrs(smem_bytes=232448))


@pytest.mark.parametrize("regs", [100, 20, 264])
def test_bad_setmaxnreg_value(regs):
    msg = _broken(lambda k: edit(k, lambda n: n.op is Op.WARPGROUP and n.get("roles") == ("load",),
                                 lambda n: n.with_attrs(regs=regs)))
    assert f"regs={regs}: setmaxnreg takes a multiple of 8 in [24, 256]" in msg
    assert "at `warpgroup [ids=[2]" in msg


def test_wrong_operand_count():
    msg = _broken(lambda k: edit(k, is_op(Op.RELEASE), lambda n: Node(n.op, n.name, n.args[:1], n.type, n.attrs)))
    assert "release takes 2 operands, got 1" in msg


def test_op_without_role_tag():
    msg = _broken(lambda k: edit(k, is_op(Op.PROMOTE), lambda n: n.with_attrs(role=None)))
    assert "promote has no role tag" in msg


def test_role_not_in_region():
    msg = _broken(lambda k: edit(k, is_op(Op.STAGE_OUT), lambda n: n.with_attrs(role="load")))
    assert "role 'load' is not one of this warpgroup region's roles ['mma', 'store']" in msg


def test_tma_load_dtype_mismatch():
    msg = _broken(lambda k: edit(k, lambda n: n.op is Op.SMEM and n.name == "a_ring",
                                 lambda n: Node(n.op, n.name, n.args, dgir.Type(dgir.DType.bf16, n.type.shape), n.attrs)))
    assert "dtype mismatch: %A is e4m3, %a_ring is bf16" in msg


def test_overlapping_warpgroup_ids():
    msg = _broken(lambda k: edit(k, lambda n: n.op is Op.WARPGROUP and n.get("roles") == ("load",),
                                 lambda n: n.with_attrs(ids=(1,))))
    assert "warpgroup ids (0, 1) empty or overlapping at `warpgroup [ids=[0, 1]" in msg


def test_top_level_must_be_a_kernel():
    with pytest.raises(VerifyError, match="top-level op must be kernel, got zero"):
        verify(Node(Op.ZERO, "", ("acc",)))


def test_many_errors_are_summarised():
    k = edit(final(), is_op(Op.PROMOTE), lambda n: n.with_attrs(role=None), count=None)
    k = edit(k, is_op(Op.RELEASE), lambda n: n.with_attrs(role=None), count=None)
    with pytest.raises(VerifyError, match=r"\(and \d+ more\)"):
        verify(k)


# --- verification inside dgir.compile (DGIR_VERIFY=1 / verify=True) ----------------------------------
class Breaker(dgir.Pass):
    """Test pass: retags every TMA load as the mma role (the verifier must catch it)."""
    name = "breaker"

    def run(self, kernel):
        return edit(kernel, is_op(Op.TMA_LOAD), lambda n: n.with_attrs(role="mma"), count=None)


def _passes_with_breaker():
    from dgir.pipeline import pipeline
    p = pipeline("sm90a")
    return p[:2] + [Breaker()] + p[2:]


def test_compile_verify_true_names_the_pass_and_the_op(emitter):
    with pytest.raises(dgir.PassError) as ei:
        dgir.compile("fp8_gemm_nt", m=256, n=576, k=640, passes=_passes_with_breaker(), verify=True,
                     assemble=False)
    msg = str(ei.value)
    assert msg.startswith("pass 'breaker' produced invalid IR: ")
    assert "only the load role may issue tma_load (this op is tagged 'mma')" in msg
    assert "at `tma_load(%ab, %ctr, %a_ring" in msg


def test_dgir_verify_env_var(emitter, monkeypatch):
    monkeypatch.setenv("DGIR_VERIFY", "1")
    with pytest.raises(dgir.PassError, match="pass 'breaker' produced invalid IR"):
        dgir.compile("fp8_gemm_nt", m=256, n=576, k=640, passes=_passes_with_breaker(), assemble=False)
    monkeypatch.setenv("DGIR_VERIFY", "0")
    res = dgir.compile("fp8_gemm_nt", m=256, n=576, k=640, passes=_passes_with_breaker(), assemble=False)
    assert any(n.op is Op.TMA_LOAD and n.role == "mma" for n in res.ir.walk())   # not verified: slips through


def test_compile_verifies_after_every_pass(emitter, monkeypatch):
    import dgir.pipeline as pl
    calls = []
    real = pl.verify
    monkeypatch.setattr(pl, "verify", lambda k: (calls.append(k), real(k)))
    res = dgir.compile("fp8_gemm_nt", m=4096, n=7168, k=16384, verify=True, assemble=False)
    assert len(calls) == len(res.stages) - 1 == len(SM90A_PASSES)
    assert [c for c in calls] == [k for _, k in res.stages[1:]]
