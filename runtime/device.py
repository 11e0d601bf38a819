"""Device properties through cuda-bindings (`cuda.bindings.driver`): the SM count that sizes the
persistent grid and the config choice, and the shared-memory opt-in limit checked before a launch."""
from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceProps:
    index: int
    name: str
    sms: int
    smem_optin: int            # bytes of dynamic shared memory a block may opt in to
    capability: tuple


def _ok(ret):
    err, *out = ret
    from cuda.bindings import driver as cu
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {err!r}")
    return out[0] if len(out) == 1 else tuple(out)


@functools.cache
def properties(index: int) -> DeviceProps:
    from cuda.bindings import driver as cu
    try:
        _ok(cu.cuInit(0))
    except RuntimeError as e:      # no driver on this machine, or it refuses
        raise RuntimeError(f"cannot query CUDA device {index} through cuda-bindings: {e}") from None
    dev = _ok(cu.cuDeviceGet(index))
    attr = lambda a: int(_ok(cu.cuDeviceGetAttribute(a, dev)))  # noqa: E731
    A = cu.CUdevice_attribute
    name = _ok(cu.cuDeviceGetName(128, dev))
    return DeviceProps(index=index, name=name.split(b"\0", 1)[0].decode(errors="replace"),
                       sms=attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                       smem_optin=attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                       capability=(attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                                   attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)))
