"""Tensor-core math and FP32 promotion: zero, mma_scaled, promote, scale, wgmma and its wait, with the
asynchrony model of the package docstring: a mixin of `_Machine`."""
from __future__ import annotations

from ..ir import Node
from .state import InterpError, RaceError, _block_columns, _dot, _ffma, _Group, _poison, _scale_tile, _Task


class MathOps:
    # --- math -----------------------------------------------------------------------------------
    def _zero(self, t: _Task, n: Node):
        self._reg(t, n.args[0], "zero writes").zero_()

    def _mma_scaled(self, t: _Task, n: Node):
        if len(n.args) < 8:
            raise InterpError("mma_scaled needs (acc, a_ring, b_ring, ctr, sfa, sb0, sb1(, sb2), n0)")
        acc_name, a_ring, b_ring, ctr = n.args[:4]
        acc = self._reg(t, acc_name, "mma_scaled accumulates into")
        sfa, sbs, n0 = self._scale_operands(t, n.args[4:], "mma_scaled")
        a, b = self._mma_operands(t, n, acc, a_ring, b_ring, ctr)
        part = _dot(a, b)
        acc.copy_(_ffma(acc, part, _scale_tile(sfa, sbs, n0, acc.shape[1])))

    def _promote(self, t: _Task, n: Node):
        if len(n.args) < 6:
            raise InterpError("promote needs (acc, part, sfa, sb0, sb1(, sb2), n0)")
        acc = self._reg(t, n.args[0], "promote accumulates into")
        part = self._reg(t, n.args[1], "promote reads")
        if acc.shape != part.shape:
            raise InterpError(f"promote: acc {tuple(acc.shape)} vs part {tuple(part.shape)}")
        sfa, sbs, n0 = self._scale_operands(t, n.args[2:], "promote")
        acc.copy_(_ffma(acc, part, _scale_tile(sfa, sbs, n0, acc.shape[1])))

    def _scale(self, t: _Task, n: Node):
        acc = self._reg(t, n.args[0], "scale")
        sfa, sbs, n0 = self._scale_operands(t, n.args[1:], "scale")
        acc.mul_(_scale_tile(sfa, sbs, n0, acc.shape[1]))

    def _rescale(self, t: _Task, n: Node):
        """promotion="rescaled": s_k = sfa[row] * sfb[block]; acc *= s_prev / s_k (an f32 division, then
        an f32 multiply; the PTX multiplies by an approximate reciprocal, within 1 ulp); s_prev = s_k."""
        if len(n.args) != 6:
            raise InterpError("rescale needs (acc, s_prev, sfa, sb0, sb1, n0)")
        acc = self._reg(t, n.args[0], "rescale")
        s_prev = self._reg(t, n.args[1], "rescale")
        sfa, sbs, n0 = self._scale_operands(t, n.args[2:], "rescale")
        blocks = s_prev.shape[1]          # tiles of promotion="rescaled" never straddle a B-scale block
        acc.mul_(s_prev[:, _block_columns(n0, acc.shape[1], blocks)] / _scale_tile(sfa, sbs, n0, acc.shape[1]))
        s_prev.copy_(_scale_tile(sfa, sbs[:blocks], 0, 128 * blocks)[:, ::128])

    def _apply_scale(self, t: _Task, n: Node):
        acc = self._reg(t, n.args[0], "apply_scale")
        s_prev = self._reg(t, n.args[1], "apply_scale")
        acc.mul_(s_prev[:, _block_columns(0, acc.shape[1], s_prev.shape[1])])

    def _wgmma(self, t: _Task, n: Node):
        if len(n.args) != 4:
            raise InterpError("wgmma needs (acc, a_ring, b_ring, ctr)")
        acc_name, a_ring, b_ring, ctr = n.args
        if acc_name not in self.regs:
            raise InterpError(f"%{acc_name} is not a register tile")
        acc = t.regs[acc_name]
        self._mma_operands(t, n, acc, a_ring, b_ring, ctr)      # checks the slots are held, shapes
        chan = self.ring_chan.get(a_ring)
        if chan is None or self.ring_chan.get(b_ring) != chan:
            raise InterpError("wgmma: A and B rings must belong to the same channel")
        ch, slot, rnd = self._slot_key(t, chan, ctr)
        key = (chan, slot, rnd)
        if key in t.cta.clobbered:
            raise RaceError(f"wgmma reads channel '{chan}' stage {slot} round {rnd}, whose bytes a staging tile "
                            f"overwrote (stage_out before every warpgroup's last wgmma of the slot)")
        scale_d = n.get("scale_d", 1)
        if not scale_d:
            base = None
        elif t.inflight.get(acc_name):
            base = "chain"
        else:
            base = acc.clone()
        t.groups.append(_Group(n, acc_name, a_ring, b_ring, key, slot, base))
        t.inflight[acc_name] = t.inflight.get(acc_name, 0) + 1
        t.holds[key] = t.holds.get(key, 0) + 1
        if base != "chain":
            # the tile is undefined until retired; a chained group must keep the value its
            # predecessor will retire into it (no op may read it meanwhile: RaceError)
            _poison(acc)

    def _wgmma_wait(self, t: _Task, n: Node):
        pending = n.get("pending", 0)
        while len(t.groups) > pending:
            g = t.groups.popleft()
            if g.key not in t.waited:    # cannot happen: release checks holds
                raise RaceError(f"wgmma operands (channel '{g.key[0]}' stage {g.slot} round {g.key[2]}) were "
                                f"released before the wgmma retired")
            if g.key in t.cta.clobbered:  # cannot happen: stage_out checks holds
                raise RaceError(f"wgmma operands (channel '{g.key[0]}' stage {g.slot} round {g.key[2]}) were "
                                f"overwritten by a staging tile before the wgmma retired")
            acc = t.regs[g.acc]
            a = t.cta.smem[g.a_ring][g.slot]
            a = a[self._rows(t, a, "wgmma", g.node.get("wave"))]
            part = _dot(a, t.cta.smem[g.b_ring][g.slot])
            if g.base is None:
                res = part
            elif isinstance(g.base, str):
                res = acc + part          # the previous group's result (retired just before)
            else:
                res = g.base + part
            t.inflight[g.acc] -= 1
            if not t.inflight[g.acc]:
                del t.inflight[g.acc]
            t.holds[g.key] -= 1
            if not t.holds[g.key]:
                del t.holds[g.key]
            # while a later group still writes this tile no op may read it (RaceError), so keeping
            # the intermediate value here only serves a chained (scale_d=1) later group
            acc.copy_(res)
