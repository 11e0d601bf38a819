"""ascend_promote_scales: block-scaled cube MMA -> per-K-block partial + vector-core FP32 promotion (Ascend 950)."""
from __future__ import annotations

from dgir.builder import Builder
from dgir.ir import DType, Node, Op, Type

from . import Pass

FLAG_READY = 1        # cube -> vector: a partial is in the workspace
FLAG_FREE = 2         # vector -> cube: both vector cores have read it


class AscendPromoteScales(Pass):
    """The Ascend 950 form of promote_scales.  The Cube cannot apply a per-row (1x128) or per-K-block
    scale (Fixpipe scales are per tensor or per N column), so each `mmad_scaled` becomes, as in CATLASS
    example 51: a fresh `mmad` of one 128-wide K block into L0C (init), a `fixpipe` of that fp32 partial
    into this AI core's slot of a GM workspace, and a cube -> vector cross-core flag.  A new vector
    region (unit aiv, the two AIVs of each AIC each own BM/2 rows) waits for the flag, copies its half
    of the partial into UB, hands the slot back (flag FREE) and promotes: acc += part * sfa[row, kb] *
    sfb[n block, kb] (`vpromote`); after the K loop it casts acc to bf16 and copies it out (`vcast`,
    `copy_out`).  The cube's own `fixpipe` of acc to D is removed.  The workspace slot is single
    buffered: the AIVs pre-credit FREE once, the AIC waits FREE before every partial and once at the end.
    Declares the workspace param WS and the UB buffers part_ub, acc_ub, out_ub.  No-op without mmad_scaled.
    """
    name = "ascend_promote_scales"

    def run(self, kernel: Node) -> Node:
        if not kernel.find(Op.MMAD_SCALED):
            return kernel
        BM, BN, cores = kernel.get("block_m"), kernel.get("block_n"), kernel.get("cores")
        half = BM // 2
        scaled = kernel.find(Op.MMAD_SCALED)[0]
        sfa, sfb = scaled.get("sfa"), scaled.get("sfb")
        accs = {n.args[0] for n in kernel.find(Op.MMAD_SCALED)}

        def rewrite(body):
            out = []
            for n in body:
                if n.body:
                    n = n.with_body(rewrite(n.body))
                if n.op is Op.MMAD_SCALED:
                    acc, a, b, m, nn, k = n.args[:6]
                    out.append(Node(Op.MMAD, "", (acc, a, b, m, nn, k, 1), None, {"role": "mma"}))
                    out.append(Node(Op.XCORE_WAIT, "", (), None, {"flag": FLAG_FREE, "mode": 2, "role": "store"}))
                    out.append(Node(Op.FIXPIPE, "", ("WS", acc, "ws_row", 0, m, nn), None, {"role": "store"}))
                    out.append(Node(Op.XCORE_SET, "", (), None,
                                    {"flag": FLAG_READY, "mode": 2, "pipe": "FIX", "role": "store"}))
                    continue
                if n.op is Op.FIXPIPE and n.args[1] in accs:
                    continue                          # the vector cores store D
                out.append(n)
            return out

        regions = [n for n in kernel.body if n.op is Op.WARPGROUP]
        cube = regions[0]
        body = list(rewrite(cube.body))
        # the AIC's workspace slot: rows [bid*BM, bid*BM + BM) of WS
        i_bid = next(i for i, n in enumerate(body) if n.op is Op.SREG and n.get("which") == "block_id")
        body.insert(i_bid + 1, Node(Op.MUL, "ws_row", (body[i_bid].name, BM), Type(DType.i32), {"role": "store"}))
        body.append(Node(Op.XCORE_WAIT, "", (), None, {"flag": FLAG_FREE, "mode": 2, "role": "store"}))
        cube = cube.with_body(body)

        d_store = next(n for n in kernel.walk() if n.op is Op.FIXPIPE and n.args[1] in accs)
        out_param = d_store.args[0]
        vec = self._vector_region(kernel, half, BN, sfa, sfb, out_param)

        decls = [n for n in kernel.body if n.op is not Op.WARPGROUP]
        new = Builder()
        new.emit(Op.PARAM, "WS", type=Type(DType.f32, (cores * BM, BN)), layout="rowmajor", workspace=True)
        new.emit(Op.LOCAL, "part_ub", type=Type(DType.f32, (half, BN)), pos="UB")
        new.emit(Op.LOCAL, "acc_ub", type=Type(DType.f32, (half, BN)), pos="UB")
        new.emit(Op.LOCAL, "out_ub", type=Type(DType.bf16, (half, BN)), pos="UB")
        return kernel.with_body(decls + list(new.nodes()) + [cube, vec]).with_attrs(mix="1:2")

    @staticmethod
    def _vector_region(kernel: Node, half: int, BN: int, sfa: str, sfb: str, out_param: str) -> Node:
        from dgir.ops.ascend_gemm import AscendGemmConfig, _maybe_group, _tile_coords, tile_loop_header
        a = kernel.a
        cfg = AscendGemmConfig(op=a["op"], chip=a["chip"], n=a["n"], k=a["k"], in_dtype=a["in_dtype"],
                               block_m=a["block_m"], block_n=a["block_n"], block_k=a["block_k"], cores=a["cores"],
                               groups=a.get("groups", 0))
        b = Builder(role="store")
        bid, gsz, M, tiles = tile_loop_header(b, cfg, "aic_id")
        sub = b.scalar(Op.SREG, "sub", which="sub_block_id")
        r0 = b.scalar(Op.MUL, "r0", sub, half)
        ws_row = b.scalar(Op.ADD, "ws_row", b.scalar(Op.MUL, "ws_base", bid, cfg.block_m), r0)
        b.emit(Op.XCORE_SET, "", flag=FLAG_FREE, mode=2, pipe="S")          # pre-credit: the slot starts free
        with b.region(Op.FOR, "t", bid, tiles, gsz) as t:
            m0, n0, rows, cols = _tile_coords(b, cfg, t, M)
            with _maybe_group(b, cfg, m0, n0) as (_, sb_row):   # m-grouped: the AIC's group and skip rule
                vrows = b.scalar(Op.MIN, "vrows", b.scalar(Op.SUB, "rows_left", rows, r0), half)
                vm0 = b.scalar(Op.ADD, "vm0", m0, r0)
                b.emit(Op.VFILL, "", "acc_ub", value=0.0)
                with b.region(Op.FOR, "kb", 0, cfg.k_blocks, 1) as kb:
                    b.emit(Op.XCORE_WAIT, "", flag=FLAG_READY, mode=2)
                    b.emit(Op.COPY_IN, "", "part_ub", "WS", ws_row, 0, half, BN, role="load")
                    b.emit(Op.XCORE_SET, "", flag=FLAG_FREE, mode=2, pipe="MTE2")
                    b.emit(Op.VPROMOTE, "", "acc_ub", "part_ub", vrows, BN, kb, vm0, sb_row, sfa=sfa, sfb=sfb)
                b.emit(Op.VCAST, "", "out_ub", "acc_ub")
                b.emit(Op.COPY_OUT, "", out_param, "out_ub", vm0, n0, vrows, cols)
        return Node(Op.WARPGROUP, "", (), None, {"ids": (1,), "roles": ("load", "store"), "unit": "aiv"}, b.nodes())


PASS = AscendPromoteScales()
