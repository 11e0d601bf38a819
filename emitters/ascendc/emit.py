"""AscendC C++ from the Ascend tile IR (after the ascend950 / ascend910b pipelines).

One small function per IR op (the EMIT table below); the kernel is the walk of the IR, not a template.
The output uses the AscendC class API as documented (ascendc.md §1.5) and is checked two ways: it
compiles with g++ against emu/ascendc_api_decls.h (-fsyntax-only: names and argument lists), and it runs
against the CPU emulator emu/ascendc_emu.h (numerics, capacities, pipe races).  Neither is CANN.

Mapping: a `warpgroup` region with unit="aic" becomes `if ASCEND_IS_AIC { ... }`, unit="aiv" becomes
`if ASCEND_IS_AIV { ... }`; `local` buffers become LocalTensors at their allocated offsets; params become
GlobalTensors; scalars are int64_t; runtime M is read from the tiling struct in GM.
"""
from __future__ import annotations

from dgir.ir import DType, Node, Op

CTYPE = {DType.bf16: "bfloat16_t", DType.f16: "half", DType.e4m3: "fp8_e4m3fn_t", DType.e5m2: "fp8_e5m2_t",
         DType.f32: "float", DType.i32: "int32_t", DType.e2m1: "fp4x2_e2m1_t", DType.ue8m0: "fp8_e8m0_t"}
SREG = {"block_id": "GetBlockIdx()", "aic_id": "(GetBlockIdx() / GetTaskRatio())",
        "sub_block_id": "GetSubBlockIdx()", "grid_size": "GetBlockNum()"}
CHIP_NAME = {"950": "Ascend 950 (arch 3510)", "910b": "Ascend 910B (arch 2201)"}


class EmitError(ValueError):
    """The IR holds something the AscendC emitter cannot express (e.g. a pass did not run)."""


class _Ctx:
    def __init__(self, kernel: Node):
        self.kernel = kernel
        self.chip = kernel.get("chip")
        self.decls = {n.name: n for n in kernel.body if n.op in (Op.PARAM, Op.LOCAL)}
        self.lines: list[str] = []
        self.depth = 0

    def out(self, line: str = ""):
        self.lines.append(("  " * self.depth + line) if line else "")

    def v(self, a) -> str:
        """An operand as a C++ expression."""
        if isinstance(a, bool):
            return "true" if a else "false"
        if isinstance(a, (int, float)):
            return repr(a)
        return _ident(a)

    def ctype(self, name: str) -> str:
        return CTYPE[self.decls[name].type.dtype]

    def pitch(self, param: str) -> int:
        """Row length (elements) of a 2-D GM param; compiled in."""
        d = self.decls[param].type.shape[-1]
        if not isinstance(d, int):
            raise EmitError(f"param %{param}: row length {d} must be compiled in")
        return d

    def gm(self, param: str) -> str:
        return _ident(param).lower() + "_gm"


def _ident(name: str) -> str:
    return name.replace(".", "_")


def _c0(dtype: DType) -> int:
    return int(32 * 8 // dtype.bits)            # elements per 32 B: the fractal width


def _per_unit(dtype: DType) -> int:
    """IR elements per C++ storage element: 2 for e2m1 (fp4x2_e2m1_t holds two), else 1."""
    return 2 if dtype is DType.e2m1 else 1


def _units(expr: str, dtype: DType) -> str:
    """An element count / index as a count of C++ storage elements."""
    return expr if _per_unit(dtype) == 1 else f"({expr}) / {_per_unit(dtype)}"


def _tile_elems(t) -> int:
    return t.numel // _per_unit(t.dtype)


# --------------------------------------------------------------------------------------------
# scalars and structure
_BIN = {Op.ADD: "{} + {}", Op.SUB: "{} - {}", Op.MUL: "{} * {}", Op.DIV: "{} / {}", Op.MOD: "{} % {}",
        Op.MIN: "({0} < {1} ? {0} : {1})", Op.LT: "({} < {} ? 1 : 0)", Op.CEILDIV: "({0} + {1} - 1) / {1}"}


def _scalar(n: Node, c: _Ctx):
    if n.op is Op.SREG:
        expr = SREG[n.get("which")]
    elif n.op is Op.DIM:
        expr = "m_rows" if n.get("axis") == 0 else c.v(c.decls[n.args[0]].type.shape[n.get("axis")])
    elif n.op is Op.CONST:
        expr = c.v(n.args[0])
    else:
        expr = _BIN[n.op].format(*(c.v(a) for a in n.args))
    c.out(f"const int64_t {_ident(n.name)} = {expr};")


def _if(n: Node, c: _Ctx):
    c.out(f"if ({c.v(n.args[0])}) {{")
    c.depth += 1
    _body(n.body, c)
    c.depth -= 1
    c.out("}")


def _gm_read(n: Node, c: _Ctx):
    param, idx = n.args
    c.out(f"const int64_t {_ident(n.name)} = {c.gm(param)}.GetValue((uint64_t){c.v(idx)});   // gm_read %{param} (scalar unit)")


def _for(n: Node, c: _Ctx):
    i = _ident(n.name)
    start, stop, step = (c.v(a) for a in n.args)
    inc = f"++{i}" if step == "1" else f"{i} += {step}"
    c.out(f"for (int64_t {i} = {start}; {i} < {stop}; {inc}) {{")
    c.depth += 1
    _body(n.body, c)
    c.depth -= 1
    c.out("}")


# --------------------------------------------------------------------------------------------
# data movement
def _copy_in(n: Node, c: _Ctx):
    dst, param, r0, c0, rows, cols = n.args
    pos = c.decls[dst].get("pos")
    dt = c.decls[param].type.dtype
    if n.get("mx_scales"):
        _copy_in_mx_scales(n, c)
        return
    if _per_unit(dt) != 1:
        pitch = c.pitch(param) // _per_unit(dt)
        c.out(f"// copy_in %{dst} <- %{param}: GM -> L1, ND -> Nz, {c.v(rows)} x {c.v(cols)} {dt.name} "
              f"(two per byte: {c.v(cols)} / 2 fp4x2 columns) (MTE2)")
        c.out(f"DataCopy({_ident(dst)}, {c.gm(param)}[(uint64_t){c.v(r0)} * {pitch} + {_units(c.v(c0), dt)}], "
              f"Nd2NzParams(1, {c.v(rows)}, {_units(c.v(cols), dt)}, 0, {pitch}, CeilAlign({c.v(rows)}, 16), 1, 0));")
        return
    src = f"{c.gm(param)}[(uint64_t){c.v(r0)} * {c.pitch(param)} + {c.v(c0)}]"
    if pos == "L1":
        c.out(f"// copy_in %{dst} <- %{param}: GM -> L1, ND -> Nz, {c.v(rows)} x {c.v(cols)} (MTE2)")
        c.out(f"DataCopy({_ident(dst)}, {src}, Nd2NzParams(1, {c.v(rows)}, {c.v(cols)}, 0, {c.pitch(param)}, "
              f"CeilAlign({c.v(rows)}, 16), 1, 0));")
    elif pos == "UB":
        if cols != c.pitch(param):
            raise EmitError(f"copy_in to UB copies whole rows of %{param} (cols {cols} != row length)")
        c.out(f"// copy_in %{dst} <- %{param}: GM -> UB, {c.v(rows)} whole rows (MTE2)")
        c.out(f"DataCopy({_ident(dst)}, {src}, (uint32_t)({c.v(rows)} * {c.v(cols)}));")
    else:
        raise EmitError(f"copy_in into {pos}")


def _copy_in_mx_scales(n: Node, c: _Ctx):
    dst, param, r0, c0, rows, cols = n.args
    pairs = c.pitch(param) // 2
    c.out(f"// copy_in %{dst} <- %{param}: GM -> L1, e8m0 scales of {c.v(rows)} rows x {c.v(cols)} K blocks read as "
          f"16-bit pairs, DN -> Nz: one 16 x 2 scale fractal (32 B) per 16 rows and 64 K (MTE2)")
    c.out(f"DataCopy({_ident(dst)}.ReinterpretCast<uint16_t>(), {c.gm(param)[:-3]}_pairs_gm[(uint64_t){c.v(r0)} * {pairs} + "
          f"{c.v(c0)} / 2], Dn2NzParams(1, CeilDiv({c.v(cols)}, 2), {c.v(rows)}, 0, {pairs}, CeilDiv({c.v(cols)}, 2), 1, 0));")


def _fill_l1(n: Node, c: _Ctx):
    dst, rows, col0, cols = n.args
    dt = c.decls[dst].type.dtype
    c0 = _c0(dt)
    if col0 % c0 or cols % c0:
        raise EmitError(f"fill_l1 %{dst}: columns [{col0}, {col0 + cols}) are not whole 32 B fractal columns")
    c.out(f"// fill_l1 %{dst}: zero K columns [{col0}, {col0 + cols}) (fractal columns {col0 // c0}..{(col0 + cols) // c0 - 1}"
          f" of the Nz tile): ND -> Nz pads only to 32 B, MmadMx reads K in 64s (MTE1)")
    blocks = f"CeilAlign({c.v(rows)}, 16)" + (f" * {cols // c0}" if cols // c0 > 1 else "")
    c.out(f"InitConstValue({_ident(dst)}.ReinterpretCast<uint16_t>()[{col0 // c0} * CeilAlign({c.v(rows)}, 16) * 16], "
          f"InitConstValueParams<uint16_t>(1, (uint16_t)({blocks}), 0, 0));   // one run of 32 B blocks")


def _load_l0_mx(n: Node, c: _Ctx):
    dst, src, scales, rows, cols = n.args
    pos = c.decls[dst].get("pos")
    dt = c.decls[dst].type.dtype
    c.out(f"{{  // load_l0_mx %{dst} <- %{src}, scales %{scales}: L1 (Nz) -> {pos}, e8m0 pairs -> {pos}_MX "
          f"(at the {pos} address / 16) (MTE1)")
    c.depth += 1
    c.out(f"const uint16_t r1 = CeilDiv({c.v(rows)}, 16), k1 = CeilAlign({c.v(cols)}, 64) / {_c0(dt)}, "
          f"kp = CeilDiv({c.v(cols)}, 64);   // 16-row fractals, 32 B fractal columns, 16 x 2 scale fractals")
    c.out(f"LoadData({_ident(dst)}, {_ident(src)}, {_ident(scales)}, LoadData2DParamsV2(0, 0, r1, k1, r1, r1, false, 0), "
          f"LoadData2DMxParams(0, 0, r1, kp, kp, kp));")
    c.depth -= 1
    c.out("}")


def _mmad_mx(n: Node, c: _Ctx):
    acc, a, b, m, nn, k, init = n.args[:7]
    init_s = "true" if init == 1 else ("false" if init == 0 else f"{c.v(init)} != 0")
    c.out(f"{{  // mmad_mx %{acc} {'=' if init == 1 else '(+)='} (%{a} * 2^sa) @ (%{b} * 2^sb)^T, one e8m0 scale per "
          f"32 K (MmadMx), fp32 in L0C (M)")
    c.depth += 1
    c.out(f"MmadParams mmad_params({c.v(m)}, {c.v(nn)}, CeilAlign({c.v(k)}, 64), 0, false, {init_s});   "
          f"// K padded to the 64-element scale fractal (zeros in L1)")
    c.out("mmad_params.disableGemv = true;   // m == 1 keeps the Nz L0A layout (no GEMV mode)")
    c.out(f"MmadMx({_ident(acc)}, {_ident(a)}, {_ident(b)}, mmad_params);")
    c.out(f"if (CeilDiv({c.v(m)}, 16) * CeilDiv({c.v(nn)}, 16) < 10) PipeBarrier<PIPE_M>();   "
          f"// back-to-back small Mmads")
    c.depth -= 1
    c.out("}")


def _load_l0(n: Node, c: _Ctx):
    dst, src, rows, cols = n.args
    pos = c.decls[dst].get("pos")
    dt = c.decls[dst].type.dtype
    fractal = 512 * 8 // dt.bits
    r1, k1 = f"CeilDiv({c.v(rows)}, 16)", f"CeilDiv({c.v(cols)}, {_c0(dt)})"
    c.out(f"{{  // load_l0 %{dst} <- %{src}: L1 (Nz) -> {pos} (MTE1)")
    c.depth += 1
    c.out(f"const uint16_t r1 = {r1}, k1 = {k1};   // 16-row fractal rows, {_c0(dt)}-element fractal columns")
    if c.chip == "950":
        layout = "Nz" if pos == "L0A" else "Zn (B^T in Nz is already Zn)"
        c.out(f"// arch 3510: {pos} is {layout}: one (r1 x k1) fractal block copy")
        c.out(f"LoadData({_ident(dst)}, {_ident(src)}, LoadData2DParamsV2(0, 0, r1, k1, r1, r1, false, 0));")
    elif pos == "L0A":
        c.out("// arch 2201: L0A is Zz: gather each 16-row band's k1 fractals (stride r1 in the Nz L1 tile)")
        c.out(f"for (uint16_t i = 0; i < r1; ++i) LoadData({_ident(dst)}[i * k1 * {fractal}], {_ident(src)}, "
              f"LoadData2DParams(i, k1, r1, 0, 0, false, 0));")
    else:
        c.out("// arch 2201: L0B is Zn: B^T in Nz is already in that order; one column group per call")
        c.out(f"for (uint16_t kk = 0; kk < k1; ++kk) LoadData({_ident(dst)}[kk * r1 * {fractal}], {_ident(src)}, "
              f"LoadData2DParams(kk * r1, r1, 1, 0, 0, false, 0));")
    c.depth -= 1
    c.out("}")


def _mmad(n: Node, c: _Ctx):
    acc, a, b, m, nn, k, init = n.args[:7]
    init_s = "true" if init == 1 else ("false" if init == 0 else f"{c.v(init)} != 0")
    c.out(f"{{  // mmad %{acc} {'=' if init == 1 else '(+)='} %{a} @ %{b}^T, fp32 in L0C (M)")
    c.depth += 1
    if c.chip == "950":
        c.out(f"MmadParams mmad_params({c.v(m)}, {c.v(nn)}, {c.v(k)}, 0, false, {init_s});")
        c.out("mmad_params.disableGemv = true;   // m == 1 keeps the Nz L0A layout (no GEMV mode)")
    else:
        c.out("// m == 1 would switch to GEMV mode (ND L0A); compute a full 16-row fractal instead")
        c.out(f"MmadParams mmad_params({c.v(m)} == 1 ? 16 : {c.v(m)}, {c.v(nn)}, {c.v(k)}, 0, false, {init_s});")
    c.out(f"Mmad({_ident(acc)}, {_ident(a)}, {_ident(b)}, mmad_params);")
    c.out(f"if (CeilDiv({c.v(m)}, 16) * CeilDiv({c.v(nn)}, 16) < 10) PipeBarrier<PIPE_M>();   "
          f"// back-to-back small Mmads")
    c.depth -= 1
    c.out("}")


def _fixpipe(n: Node, c: _Ctx):
    param, acc, r0, c0, rows, cols = n.args
    out_t = c.decls[param].type.dtype
    quant = {DType.bf16: "F322BF16", DType.f16: "F322F16", DType.f32: "NoQuant"}[out_t]
    ld = c.pitch(param)
    c.out(f"// fixpipe %{param} <- %{acc}: L0C (Nz, fp32) -> GM (ND, {out_t.name}) (FIX)")
    c.out(f"Fixpipe({c.gm(param)}[(uint64_t){c.v(r0)} * {ld} + {c.v(c0)}], {_ident(acc)}, "
          f"FixpipeParamsV220({c.v(cols)}, {c.v(rows)}, CeilAlign({c.v(rows)}, 16), {ld}, false, "
          f"QuantMode_t::{quant}, 0, 1, 0, 0, 0));")


def _copy_out(n: Node, c: _Ctx):
    param, src, r0, c0, rows, cols = n.args
    t = c.ctype(src)
    ub_row = c.decls[src].type.shape[-1]
    ld = c.pitch(param)
    c.out(f"if ({c.v(rows)} > 0) {{  // copy_out %{param} <- %{src}: UB -> GM, byte-granular row tails (MTE3)")
    c.depth += 1
    c.out(f"const uint32_t row_bytes = (uint32_t)({c.v(cols)} * sizeof({t}));")
    c.out(f"DataCopyPad({c.gm(param)}[(uint64_t){c.v(r0)} * {ld} + {c.v(c0)}], {_ident(src)}, "
          f"DataCopyExtParams((uint16_t){c.v(rows)}, row_bytes, ({ub_row} * sizeof({t}) - CeilAlign(row_bytes, 32)) / 32, "
          f"(uint32_t)(({ld} - {c.v(cols)}) * sizeof({t})), 0));")
    c.depth -= 1
    c.out("}")


# --------------------------------------------------------------------------------------------
# vector unit
def _vfill(n: Node, c: _Ctx):
    dst = n.args[0]
    t = c.ctype(dst)
    c.out(f"// vfill %{dst} = {n.get('value')} (V)")
    c.out(f"Duplicate({_ident(dst)}, ({t}){float(n.get('value'))}f, (int32_t){c.decls[dst].type.numel});")


def _vpromote(n: Node, c: _Ctx):
    acc, part, rows, cols, kb, m0, sb_row = n.args
    sfa, sfb = n.get("sfa"), n.get("sfb")
    kbs = c.pitch(sfa)
    row = c.decls[acc].type.shape[-1]
    c.out(f"{{  // vpromote %{acc} += %{part} * sfa[row, kb] * sfb[n block, kb] (V; scales read by the scalar unit)")
    c.depth += 1
    c.out(f"const float sfb_kb = {c.gm(sfb)}.GetValue((uint64_t){c.v(sb_row)} * {kbs} + {c.v(kb)});")
    c.out(f"for (int64_t r = 0; r < {c.v(rows)}; ++r) {{")
    c.out(f"  const float scale = {c.gm(sfa)}.GetValue((uint64_t)({c.v(m0)} + r) * {kbs} + {c.v(kb)}) * sfb_kb;")
    c.out(f"  Axpy({_ident(acc)}[r * {row}], {_ident(part)}[r * {row}], scale, (int32_t){c.v(cols)});")
    c.out("}")
    c.depth -= 1
    c.out("}")


def _vcast(n: Node, c: _Ctx):
    dst, src = n.args
    c.out(f"// vcast %{dst} <- %{src}: {c.decls[src].type.dtype.name} -> {c.decls[dst].type.dtype.name}, round to nearest even (V)")
    c.out(f"Cast({_ident(dst)}, {_ident(src)}, RoundMode::CAST_RINT, (uint32_t){c.decls[dst].type.numel});")


# --------------------------------------------------------------------------------------------
# synchronisation
def _set_flag(n: Node, c: _Ctx):
    c.out(f"SetFlag<HardEvent::{n.get('event')}>({n.get('id')});")


def _wait_flag(n: Node, c: _Ctx):
    c.out(f"WaitFlag<HardEvent::{n.get('event')}>({n.get('id')});")


def _xcore_set(n: Node, c: _Ctx):
    c.out(f"CrossCoreSetFlag<{n.get('mode')}, PIPE_{n.get('pipe', 'S')}>({n.get('flag')});   "
          f"// xcore_set: {'cube -> vector' if _unit(c) == 'aic' else 'vector -> cube'}")


def _xcore_wait(n: Node, c: _Ctx):
    c.out(f"CrossCoreWaitFlag({n.get('flag')});   // xcore_wait")


def _unit(c: _Ctx) -> str:
    return getattr(c, "unit", "aic")


EMIT = {
    Op.SREG: _scalar, Op.DIM: _scalar, Op.CONST: _scalar, Op.ADD: _scalar, Op.SUB: _scalar, Op.MUL: _scalar,
    Op.DIV: _scalar, Op.MOD: _scalar, Op.MIN: _scalar, Op.LT: _scalar, Op.CEILDIV: _scalar,
    Op.FOR: _for, Op.IF: _if, Op.GM_READ: _gm_read,
    Op.COPY_IN: _copy_in, Op.LOAD_L0: _load_l0, Op.MMAD: _mmad, Op.FIXPIPE: _fixpipe, Op.COPY_OUT: _copy_out,
    Op.VFILL: _vfill, Op.VPROMOTE: _vpromote, Op.VCAST: _vcast,
    Op.SET_FLAG: _set_flag, Op.WAIT_FLAG: _wait_flag, Op.XCORE_SET: _xcore_set, Op.XCORE_WAIT: _xcore_wait,
    Op.LOAD_L0_MX: _load_l0_mx, Op.MMAD_MX: _mmad_mx, Op.FILL_L1: _fill_l1,
}


def _body(body, c: _Ctx):
    for n in body:
        fn = EMIT.get(n.op)
        if fn is None:
            hint = " (run the ascend pipeline: ascend_promote_scales lowers it)" if n.op is Op.MMAD_SCALED else ""
            raise EmitError(f"the AscendC emitter has no rule for {n.op.value}{hint}")
        fn(n, c)


# --------------------------------------------------------------------------------------------
_TPOS = {"L0A": "A2", "L0B": "B2", "L0C": "CO1"}


def _tposition(kernel: Node, buf: Node) -> str:
    pos = buf.get("pos")
    if pos in _TPOS:
        return _TPOS[pos]
    uses = [n for n in kernel.walk() if buf.name in n.args[:3]]
    if pos == "L1":
        into_b = any(n.op in (Op.LOAD_L0, Op.LOAD_L0_MX) and buf.name in n.args[1:3]
                     and kernel.decl(n.args[0]).get("pos") == "L0B" for n in uses)
        return "B1" if into_b else "A1"
    if any(n.op is Op.COPY_IN and n.args[0] == buf.name for n in uses):
        return "VECIN"
    if any(n.op is Op.COPY_OUT and n.args[1] == buf.name for n in uses):
        return "VECOUT"
    return "VECCALC"


def _region(region: Node, kernel: Node, c: _Ctx):
    unit = region.get("unit", "aic")
    c.unit = unit
    used = {a for n in region.walk() for a in n.args if isinstance(a, str)}
    c.out(f"if {'ASCEND_IS_AIC' if unit == 'aic' else 'ASCEND_IS_AIV'} {{")
    c.depth += 1
    c.out("// " + ("cube core (AIC): MTE2 GM->L1, MTE1 L1->L0A/L0B, M Mmad, FIX L0C->GM" if unit == "aic" else
                   "vector cores (AIV, 2 per AIC): MTE2 GM->UB, V promotion, MTE3 UB->GM"))
    for buf in (n for n in kernel.body if n.op is Op.LOCAL and n.name in used):
        if buf.get("offset") is None:
            raise EmitError(f"local %{buf.name} has no offset (run ascend_allocate_buffers)")
        c.out(f"LocalTensor<{CTYPE[buf.type.dtype]}> {_ident(buf.name)}(TPosition::{_tposition(kernel, buf)}, "
              f"{buf.get('offset')}, {_tile_elems(buf.type)});   // local %{buf.name}: {buf.get('pos')} {buf.type}")
    _body(region.body, c)
    c.depth -= 1
    c.out("}")


def emit_ascendc(kernel: Node) -> str:
    """AscendC C++ source of `kernel` (the final IR of an ascend950 / ascend910b pipeline)."""
    if kernel.op is not Op.KERNEL:
        raise EmitError(f"expected a kernel, got {kernel.op.value}")
    c = _Ctx(kernel)
    name = _ident(kernel.name)
    params = [n for n in kernel.body if n.op is Op.PARAM]
    units = [n.get("unit", "aic") for n in kernel.body if n.op is Op.WARPGROUP]
    ktype = "KERNEL_TYPE_MIX_AIC_1_2" if "aiv" in units else "KERNEL_TYPE_AIC_ONLY"
    a = kernel.a
    c.lines += [
        f"// {name}: AscendC kernel generated by dgir from the tile IR ({a.get('op')}, target {a.get('target')},",
        f"// {CHIP_NAME.get(c.chip, c.chip)}).  Tile {a.get('block_m')}x{a.get('block_n')}x{a.get('block_k')}; "
        f"N={a.get('n')}, K={a.get('k')} compiled in, M read at run time.",
        "// Each block below names the IR op it was emitted from; see the numbered pass dumps.",
        "#if !defined(ASCENDC_EMU) && !defined(ASCENDC_API_DECLS_ONLY)",
        "#include \"kernel_operator.h\"",
        "#endif",
        "using namespace AscendC;",
        "",
        "struct GemmTiling {",
        "  uint32_t m;   // rows of A and D",
        "};",
        "",
        "__aicore__ inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }",
        "__aicore__ inline int64_t CeilAlign(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }",
        "",
        f"extern \"C\" __global__ __aicore__ void {name}("
        + ", ".join(f"GM_ADDR {_param_arg(p)}" for p in params) + ", GM_ADDR tiling) {",
    ]
    c.depth = 1
    c.out(f"KERNEL_TASK_TYPE_DEFAULT({ktype});")
    c.out("const uint32_t m_rows = reinterpret_cast<__gm__ GemmTiling*>(tiling)->m;")
    for p in params:
        t = CTYPE[p.type.dtype]
        size = " * ".join(f"(uint64_t){'m_rows' if d == 'M' else d}" for d in p.type.shape)
        if _per_unit(p.type.dtype) != 1:
            size = f"{size} / {_per_unit(p.type.dtype)}"
        c.out(f"GlobalTensor<{t}> {c.gm(p.name)};   // param %{p.name}: {p.type}"
              + (" (output)" if p.get("output") else " (workspace)" if p.get("workspace") else "")
              + (" (two e2m1 per byte, low nibble first)" if p.type.dtype is DType.e2m1 else ""))
        c.out(f"{c.gm(p.name)}.SetGlobalBuffer(reinterpret_cast<__gm__ {t}*>({_param_arg(p)}), {size});")
        if p.type.dtype is DType.ue8m0:
            pairs = c.gm(p.name)[:-3] + "_pairs_gm"
            c.out(f"GlobalTensor<uint16_t> {pairs};   // the same scales as 16-bit pairs (K groups 2j, 2j+1)")
            c.out(f"{pairs}.SetGlobalBuffer(reinterpret_cast<__gm__ uint16_t*>({_param_arg(p)}), {size} / 2);")
    for region in (n for n in kernel.body if n.op is Op.WARPGROUP):
        _region(region, kernel, c)
    c.depth = 0
    c.out("}")
    return "\n".join(c.lines) + "\n"


def _param_arg(p: Node) -> str:
    return "workspace" if p.get("workspace") else _ident(p.name).lower()


def kernel_params(kernel: Node) -> list[Node]:
    """The kernel's GM params in argument order (the tiling struct follows them)."""
    return [n for n in kernel.body if n.op is Op.PARAM]
