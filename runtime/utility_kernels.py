"""SIMT utility kernels written in LLVM IR with llvmlite and compiled by LLVM's NVPTX backend.

The GEMM kernels come from the tile IR; small layout kernels like this one are plain SIMT code, for
which LLVM is the right tool.  `sfa_to_mn_major` brings FP32 scale factors from any 2-D layout into
the MN-major, TMA-aligned storage fp8_gemm_nt reads (DeepGEMM's transform_sf_into_required_layout).
"""
from __future__ import annotations

import functools

TRIPLE = "nvptx64-nvidia-cuda"
DATALAYOUT = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
THREADS = 256


def _sreg(builder, mod, name: str):
    from llvmlite import ir
    fn = mod.globals.get(name) or ir.Function(mod, ir.FunctionType(ir.IntType(32), []), name=name)
    return builder.call(fn, [])


@functools.cache
def sfa_transpose_llvm_ir() -> str:
    """dst[kb * dst_stride + m] = src[m * s0 + kb * s1] for m < M, kb < KB (one thread per element).
    Grid: (ceil(M / 256), KB); block: 256."""
    from llvmlite import ir
    i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
    fptr = ir.PointerType(f32, addrspace=1)          # global memory
    mod = ir.Module(name="dgir_utility")
    mod.triple, mod.data_layout = TRIPLE, DATALAYOUT
    fnty = ir.FunctionType(ir.VoidType(), [fptr, fptr, i32, i32, i64, i64, i32])
    fn = ir.Function(mod, fnty, name="dgir_sfa_to_mn_major")
    # kernel entry: nvvm.annotations below (LLVM >= 20 upgrades it to the ptx_kernel convention)
    src, dst, M, KB, s0, s1, dstride = fn.args
    for a, nm in zip(fn.args, ("src", "dst", "m", "kb", "s0", "s1", "dst_stride")):
        a.name = nm
    entry, body, done = fn.append_basic_block("entry"), fn.append_basic_block("body"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    tid = _sreg(b, mod, "llvm.nvvm.read.ptx.sreg.tid.x")
    bx = _sreg(b, mod, "llvm.nvvm.read.ptx.sreg.ctaid.x")
    by = _sreg(b, mod, "llvm.nvvm.read.ptx.sreg.ctaid.y")
    m = b.add(b.mul(bx, ir.Constant(i32, THREADS)), tid, name="row")
    inside = b.and_(b.icmp_unsigned("<", m, M), b.icmp_unsigned("<", by, KB))
    b.cbranch(inside, body, done)
    b = ir.IRBuilder(body)
    m64, k64 = b.zext(m, i64), b.zext(by, i64)
    v = b.load(b.gep(src, [b.add(b.mul(m64, s0), b.mul(k64, s1))]), name="scale")
    b.store(v, b.gep(dst, [b.add(b.mul(k64, b.zext(dstride, i64)), m64)]))
    b.branch(done)
    ir.IRBuilder(done).ret_void()
    # mark it a kernel entry for NVPTX
    md = mod.add_metadata([fn, ir.MetaDataString(mod, "kernel"), ir.Constant(i32, 1)])
    mod.add_named_metadata("nvvm.annotations", md)
    return str(mod)


@functools.cache
def sfa_transpose_ptx() -> str:
    """PTX for sm_90a from LLVM's NVPTX backend (assembled by ptxas like every other kernel)."""
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple(TRIPLE).create_target_machine(cpu="sm_90a", features="+ptx80", opt=3)
    mod = llvm.parse_assembly(sfa_transpose_llvm_ir())
    mod.verify()
    return tm.emit_assembly(mod)


@functools.cache
def _function(device_index: int):
    from dgir import toolchain

    from . import driver
    cubin = toolchain.assemble(sfa_transpose_ptx()).cubin
    return driver.load_module(cubin, device_index).function("dgir_sfa_to_mn_major")


def sfa_to_mn_major_plan(src, dst):
    """A prebuilt launch: dst (a [KB, >= M] row-major f32 view) <- src.t() for src [M, KB] f32 of any
    strides.  The addresses are baked in, like the GEMM's own launch plan."""
    import ctypes

    from . import driver
    m, kb = src.shape
    fn = _function(src.device.index)
    args = [ctypes.c_uint64(src.data_ptr()), ctypes.c_uint64(dst.data_ptr()), ctypes.c_uint32(m),
            ctypes.c_uint32(kb), ctypes.c_uint64(src.stride(0)), ctypes.c_uint64(src.stride(1)),
            ctypes.c_uint32(dst.stride(0))]
    return driver.LaunchPlan(fn, (-(-m // THREADS), kb, 1), THREADS, 0, args)


def sfa_to_mn_major_replan(plan, src, dst):
    """`plan` (made by sfa_to_mn_major_plan) for a src and dst laid out as its own (shape, strides)
    at other addresses: only the two address arguments change."""
    import ctypes
    return plan.rebound({0: ctypes.c_uint64(src.data_ptr()), 1: ctypes.c_uint64(dst.data_ptr())})


def sfa_to_mn_major(src, dst, stream_handle: int) -> None:
    sfa_to_mn_major_plan(src, dst)(stream_handle)
