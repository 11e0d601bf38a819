"""What the driver's launch costs the host, by what a kernel carries: empty kernels with one pointer
or with the warm call's parameters (three 128-byte tensor maps by value, two pointers, M), without
and with a cluster of two, and with the real kernel's 216 KB of shared memory; next to the real
warm-call kernel's prebuilt launch and torch's own one-kernel call (`d.zero_()`).  Median host time
of one LaunchPlan call, the GPU queue drained before each (bench/warm_call.py's method).

    python bench/launch_params_probe.py     # prints JSON
"""
import ctypes
import json

import torch

from dgir import deep_gemm
from dgir.gpu_run import fp8_inputs
from dgir.runtime import driver
from dgir.toolchain import assemble

from launch_variants import median_us

MAPS = ", ".join(f".param .align 64 .b8 map{i}[128]" for i in range(3))
PTX = f"""
.version 8.5
.target sm_90a
.address_size 64
.visible .entry k_ptr(.param .u64 p) {{ ret; }}
.visible .entry k_maps({MAPS}, .param .u64 sfb, .param .u64 d, .param .u32 m) {{ ret; }}
.visible .entry k_ptr_c2(.param .u64 p) .reqnctapercluster 2, 1, 1 {{ ret; }}
.visible .entry k_maps_c2({MAPS}, .param .u64 sfb, .param .u64 d, .param .u32 m) .reqnctapercluster 2, 1, 1 {{ ret; }}
"""


def main():
    dev = torch.device("cuda", 0)
    sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731
    stream = torch.cuda.current_stream(dev).cuda_stream
    module = driver.load_module(assemble(PTX, "sm_90a").cubin, 0)
    maps = [(ctypes.c_ubyte * 128)() for _ in range(3)]
    maps_args = maps + [ctypes.c_uint64(0), ctypes.c_uint64(0), ctypes.c_uint32(128)]
    out = {}
    for name, args, smem in (("k_ptr", [ctypes.c_uint64(0)], 0), ("k_maps", maps_args, 0),
                             ("k_ptr_c2", [ctypes.c_uint64(0)], 0), ("k_maps_c2", maps_args, 0),
                             ("k_maps_c2", maps_args, 216 * 1024)):
        fn = module.function(name)
        plan = driver.LaunchPlan(fn, (132, 1, 1), (256, 1, 1), smem, args)
        out[f"{name}_smem{smem // 1024}k_us"] = median_us(lambda: plan(stream), sync)
    A, sfa, B, sfb, _ = fp8_inputs(128, 2112, 7168, dev, 0)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty(128, 2112, dtype=torch.bfloat16, device=dev)
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    launch = deep_gemm._plans[deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")].launch
    out["warm_call_kernel_us"] = median_us(lambda: launch(stream), sync)
    out["whole_call_us"] = median_us(lambda: deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d), sync)
    out["plan_key_us"] = median_us(lambda: deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk"), lambda: None)
    out["torch_zero__us"] = median_us(d.zero_, sync)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
