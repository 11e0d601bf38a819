"""staging="ring": D's staging tile in the ring slot of each tile's last K block (pass
stage_in_ring_slot).  The interpreter runs every pipeline stage of such kernels (several tiles per
CTA, clusters, one-K-block tiles, the shallow overlap form) and catches each way of getting the
protocol wrong; the config checks reject tiles whose staging does not fit a slot."""
from dataclasses import replace

import pytest
import torch

from dgir.interp import RaceError, calc_diff, fp8_gemm_inputs, fp8_gemm_reference, run_kernel
from dgir.ir import Op
from dgir.ops import OpError
from dgir.ops.fp8_gemm import Fp8GemmConfig, check_config, lower, max_stages, ring_staging_panels
from dgir.pipeline import pipeline, run_pipeline
from dgir.emitters.ptx import emit_ptx

# (m, n, k, block_m, block_n, stages, cluster, multicast, num_sms)
CASES = [(300, 256, 640, 128, 128, 3, 1, "A", 2),      # interleaved k-loop, three tiles per CTA
         (130, 256, 256, 128, 128, 2, 1, "A", 3),      # two K blocks: the shallow overlap form
         (200, 112, 128, 128, 56, 2, 1, "A", 2),       # one K block; unswizzled staging in the A slot
         (70, 192, 384, 64, 64, 2, 1, "A", 2),         # one math warpgroup
         (256, 256, 512, 128, 64, 2, 2, "A", 2),       # A multicast: the deferred release crosses CTAs
         (300, 128, 384, 128, 128, 3, 2, "B", 2),      # B multicast, a pair tile past M
         (70, 256, 896, 64, 256, 3, 1, "A", 1)]        # four panels in the B slot


def _kernel(m, n, k, bm, bn, stages, cl, mc, sms, staging="ring"):
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, cluster=cl, multicast=mc,
                        num_sms=sms, staging=staging)
    stages_ir = []
    run_pipeline(lower(cfg), pipeline("sm90a"), [lambda ev: stages_ir.append((ev.stem, ev.after))], verify_each=True)
    return stages_ir


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}bn{c[4]}s{c[5]}c{c[6]}{c[7]}" for c in CASES])
def test_every_stage_matches_the_tile_staged_kernel_bitwise(case):
    m, n, k = case[:3]
    ins = fp8_gemm_inputs(m, n, k, seed=m + n + k)
    ref = fp8_gemm_reference(ins["A"], ins["B"], ins["SFA"], ins["SFB"])
    own = _kernel(*case, staging="tile")[-1][1]
    first = run_kernel(own, ins, seed=1)["D"]
    stages_ir = _kernel(*case)
    for stem, kern in stages_ir[-3:]:
        for seed in range(3):
            out = run_kernel(kern, ins, seed=seed)["D"]
            assert torch.isfinite(out).all() and calc_diff(out.double(), ref) < 1e-5, stem
            assert torch.equal(out.view(torch.int16), first.view(torch.int16)), stem
    final = stages_ir[-1][1]
    tile = next(n for n in final.body if n.op is Op.SMEM and n.name == "d_tile")
    assert tile.get("ring") == "ab" and tile.get("offset") is None
    assert [tuple(p) for p in tile.get("panels")] == ring_staging_panels(case[3], case[4])
    assert final.get("staging") == "ring slot of each tile's last K block"
    assert final.get("smem_bytes") < own.get("smem_bytes")
    ptx = emit_ptx(final)
    assert "cp.async.bulk.wait_group.read 0" in ptx
    assert ("bar.sync 15" in ptx) == (case[3] > 64)


def _mutate(node, fn):
    node = fn(node)
    if node is not None and node.body:
        node = node.with_body([c for c in (_mutate(c, fn) for c in node.body) if c is not None])
    return node


def _races(kern, m, n, k, seeds=6):
    ins = fp8_gemm_inputs(m, n, k, seed=1)
    found = []
    for s in range(seeds):
        try:
            run_kernel(kern, ins, seed=s)
        except RaceError as e:
            found.append(str(e))
    return found


MUTATIONS = {
    # no barrier over both math warpgroups: one stages D over A / B bytes the other's wgmma still reads
    "no math-wide sync": (lambda c: c.with_attrs(across=None) if c.op is Op.SYNC and c.get("across") else c,
                          ("overwrote", "still reads that slot")),
    # the slot released while the TMA store may still be reading the staging tile
    "no store wait before the release": (lambda c: None if c.op is Op.TMA_STORE_WAIT and c.get("read") else c,
                                         ("may still read the staging tile",)),
    # the k-loop releases the last K block too: the staging then writes a slot nobody holds
    "last K block released in the loop": (lambda c: replace(c, args=c.args[:2]) if c.op is Op.RELEASE and len(c.args) == 3
                                          else c, ("does not hold",)),
}


@pytest.mark.parametrize("what", list(MUTATIONS))
def test_the_interpreter_catches_a_broken_protocol(what):
    m, n, k = 300, 256, 640
    kern = _kernel(m, n, k, 128, 128, 3, 1, "A", 2)[-1][1]
    assert not _races(kern, m, n, k, seeds=3)
    fn, messages = MUTATIONS[what]
    found = _races(_mutate(kern, fn), m, n, k)
    assert found and all(any(s in e for s in messages) for e in found), found[:1]


def test_panels_fit_one_slot():
    assert ring_staging_panels(128, 128) == [("b_ring", 0), ("a_ring", 0)]
    assert ring_staging_panels(64, 256) == [("b_ring", 8192 * i) for i in range(4)]
    assert ring_staging_panels(128, 64) == [("a_ring", 0)]
    assert ring_staging_panels(128, 56) == [("a_ring", 0)]          # 14 KB unswizzled in the 16 KB A slot
    assert ring_staging_panels(64, 48) == [("b_ring", 0)]
    for bm, bn in ((256, 128), (128, 192), (192, 128), (128, 96)):
        assert ring_staging_panels(bm, bn) is None


def test_ring_staging_gives_128x128_a_sixth_stage():
    assert max_stages(128, 128) == 5 and max_stages(128, 128, staging=False) >= 6
    _kernel(512, 4096, 7168, 128, 128, 6, 1, "A", 132)      # verifies (shared memory within the limit)
    with pytest.raises(Exception, match="over the 232448 B a CTA may have"):
        _kernel(512, 4096, 7168, 128, 128, 6, 1, "A", 132, staging="tile")


@pytest.mark.parametrize("fields,needle", [
    (dict(block_m=256, block_n=128), "does not fit one ring slot"),
    (dict(block_m=128, block_n=192), "does not fit one ring slot"),
    (dict(split_k=2), "split_k=1"),
    (dict(epilogue="direct"), "epilogue='tma'"),
    (dict(stages=1), "stages >= 2"),
    (dict(staging="slot"), "'tile' or 'ring'"),
])
def test_bad_ring_configs_are_rejected(fields, needle):
    cfg = Fp8GemmConfig(**{**dict(n=1024, k=1024, block_m=128, block_n=128, stages=4, staging="ring"), **fields})
    with pytest.raises(OpError, match=needle):
        check_config(cfg)


def test_default_configs_keep_their_key_and_name():
    cfg = Fp8GemmConfig(n=4096, k=7168)
    assert "staging" not in cfg.as_dict()
    assert replace(cfg, staging="ring").kernel_name().endswith("_dring")


def test_ring_staged_dumps_round_trip():
    """The staging tile's `panels`, the releases' `keep` operand and the math-wide sync survive the
    text format, so a ring-staged dump can be edited and compiled again (`dgir compile --from`)."""
    import dgir
    for stem, kern in _kernel(300, 256, 640, 128, 128, 3, 2, "A", 2):
        text = dgir.print_ir(kern)
        assert dgir.parse_ir(text) == kern, stem
