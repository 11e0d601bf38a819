"""Host cost of one prebuilt launch of the same fp8_gemm_nt kernel (M=128 N=2112 K=7168, the warm
call's shape) through different driver entry points, each checked for a correct result:

  plan         LaunchPlan as it is (since step 48: cuLaunchKernelEx alone through ctypes, no context query;
               since step 112 the config struct of the call's (stream, PDL) looked up in a dict)
  shared_field LaunchPlan's call before step 112: one config struct whose stream field is rewritten
               when the stream changes (two threads on two streams could swap streams)
  pair_dict    the first form of step 112: every launch looks its (stream, PDL) config up in a dict
               (now only launches off the plan's first stream do)
  ex_ctx       cuCtxGetCurrent, then cuLaunchKernelEx (LaunchPlan before step 48)
  ex           cuLaunchKernelEx alone through ctypes (the context already current)
  plain        cuLaunchKernel with the kernelParams pointer array
  plain_buffer cuLaunchKernel with one packed parameter buffer (``extra``), offsets from
               cuFuncGetParamInfo
  bindings     cuda-python's cuLaunchKernelEx (cuda.bindings.driver, Cython) with a prebuilt
               CUlaunchConfig and the plan's parameter array passed by address (step 111)
  bindings_plan the same behind a plan's call (the stream compared, the result checked): what
               LaunchPlan would be through cuda-python (step 111: no faster, within the spread)
  torch_fill   torch's own launch of a small kernel (d.fill_), the host floor for comparison

and the parts of the warm call's plan key, and the whole fp8_gemm_nt call with the plan's launch
and with bindings_plan in its place.  Median of many calls, each with the GPU queue drained; the
variants take turns (three rounds), so that a drift of the host's speed reaches them all alike.

    python bench/launch_variants.py     # prints JSON
"""
import ctypes
import json
import statistics
import time

import torch

from dgir import deep_gemm
from dgir.gpu_run import calc_diff, fp8_inputs
from dgir.runtime import driver

VP, U32, SZ = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t


def median_us(fn, sync, n=3000) -> float:
    out = []
    for _ in range(n):
        sync()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e6


def shape_variants(dev, m, n, k) -> dict:
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, 0)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    torch.cuda.synchronize(dev)
    key = deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")
    plan = deep_gemm._plans[key].launch
    stream = deep_gemm._raw_stream(0)
    lib = driver._cuda()
    sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731
    cfg = plan.cfg
    grid = (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ)
    block = (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ)
    smem = cfg.sharedMemBytes
    fn = VP(plan.fn.handle)

    # the packed parameter buffer: each argument's bytes at the offset the driver reports
    sizes, offsets = [], []
    for i in range(len(plan.args)):
        off, size = SZ(), SZ()
        driver._check(lib.cuFuncGetParamInfo(fn, SZ(i), ctypes.byref(off), ctypes.byref(size)), "cuFuncGetParamInfo")
        offsets.append(off.value)
        sizes.append(size.value)
    total = offsets[-1] + sizes[-1]
    buf = (ctypes.c_uint8 * total)()
    for i, a in enumerate(plan.args):
        ctypes.memmove(ctypes.addressof(buf) + offsets[i], plan.params[i], sizes[i])
    buf_size = SZ(total)
    extra = (VP * 5)(VP(1), ctypes.cast(buf, VP), VP(2), ctypes.cast(ctypes.pointer(buf_size), VP), VP(0))

    plain = lib.cuLaunchKernel
    gx, gy, gz = (U32(x) for x in grid)
    bx, by, bz = (U32(x) for x in block)
    sm = U32(smem)
    cfg_ref = ctypes.byref(cfg)
    launch_ex = lib.cuLaunchKernelEx

    def ex():
        cfg.hStream = stream
        return launch_ex(cfg_ref, fn, plan.params, None)

    def ex_ctx():
        cur = VP()
        lib.cuCtxGetCurrent(ctypes.byref(cur))
        return ex()

    from cuda.bindings import driver as cb
    bcfg = cb.CUlaunchConfig()
    bcfg.gridDimX, bcfg.gridDimY, bcfg.gridDimZ = grid
    bcfg.blockDimX, bcfg.blockDimY, bcfg.blockDimZ = block
    bcfg.sharedMemBytes, bcfg.hStream, bcfg.numAttrs = smem, cb.CUstream(stream), 0
    bfn, params_addr, launch_cb = cb.CUfunction(plan.fn.handle), ctypes.addressof(plan.params), cb.cuLaunchKernelEx
    last_stream = [None]

    def bindings_plan(stream_handle, pdl=False):
        if stream_handle != last_stream[0]:
            bcfg.hStream, last_stream[0] = cb.CUstream(stream_handle), stream_handle
        res, = launch_cb(bcfg, bfn, params_addr, 0)
        driver._check(int(res), "cuLaunchKernelEx")

    last_shared = [None]

    def shared_field():
        if stream != last_shared[0]:
            cfg.hStream = last_shared[0] = stream
        return launch_ex(cfg_ref, fn, plan.params, None)

    own_cfg = driver.CUlaunchConfig.from_buffer_copy(cfg)
    own_cfg.hStream = stream
    pair_configs = {(stream, False): ctypes.byref(own_cfg)}

    def pair_dict():
        return launch_ex(pair_configs.get((stream, False)), fn, plan.params, None)

    variants = {
        "plan": lambda: plan(stream),
        "shared_field": shared_field,
        "pair_dict": pair_dict,
        "bindings": lambda: launch_cb(bcfg, bfn, params_addr, 0)[0],
        "bindings_plan": lambda: bindings_plan(stream),
        "ex_ctx": ex_ctx,
        "ex": ex,
        "plain": lambda: plain(fn, gx, gy, gz, bx, by, bz, sm, VP(stream), plan.params, None),
        "plain_buffer": lambda: plain(fn, gx, gy, gz, bx, by, bz, sm, VP(stream), None, extra),
    }
    out = {"shape": [m, n, k], "kernel": plan.fn.name, "grid": grid, "param_offsets": offsets,
           "param_sizes": sizes, "variants": {}}
    for name, call in variants.items():
        d.fill_(float("nan"))
        res = call()
        sync()
        diff = calc_diff(d, ref)
        ok = (res in (None, 0)) and bool(torch.isfinite(d).all()) and diff < 1e-3
        out["variants"][name] = {"ok": ok, "result": None if res is None else int(res), "diff": diff, "launch_us": []}
    out["variants"]["torch_fill"] = {"launch_us": []}
    variants["torch_fill"] = lambda: d.fill_(1.0)
    entry = deep_gemm._plans[key]
    bindings_entry = entry._replace(launch=bindings_plan)

    def whole_call(with_entry):
        deep_gemm._plans[key] = with_entry
        return median_us(lambda: deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d), sync)

    out["whole_call_us"], out["whole_call_bindings_us"] = [], []
    for _ in range(3):                        # in turns
        for name, call in variants.items():
            out["variants"][name]["launch_us"].append(median_us(call, sync))
        out["whole_call_us"].append(whole_call(entry))
        out["whole_call_bindings_us"].append(whole_call(bindings_entry))
    deep_gemm._plans[key] = entry
    out["plan_key_us"] = median_us(lambda: deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk"), lambda: None)
    out["ctx_get_us"] = median_us(lambda: lib.cuCtxGetCurrent(ctypes.byref(VP())), lambda: None)
    return out


def main():
    dev = torch.device("cuda", 0)
    # the warm call's shape, a cluster-of-2 kernel (192x128 c2B) and a cluster split-K one
    print(json.dumps([shape_variants(dev, *s) for s in ((128, 2112, 7168), (4096, 2112, 7168), (128, 576, 7168))],
                     indent=1))


if __name__ == "__main__":
    main()
