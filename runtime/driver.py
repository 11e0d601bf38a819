"""A thin ctypes layer over the CUDA driver (``libcuda.so.1``).

Nothing here touches the driver at import time, so ``import dgir.runtime.driver`` works on
machines without a GPU; ``libcuda`` is loaded (and ``cuInit`` called) on first use.

Contexts: dgir always uses the device's *primary* context, which is the one PyTorch uses,
so modules loaded here and tensors allocated by torch share an address space and streams.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from typing import Optional, Sequence

__all__ = [
    "CudaError", "TensorMap", "Module", "Function", "CUlaunchConfig", "CUlaunchAttribute",
    "current_device_context", "current_stream_handle", "stream_capturing", "load_module", "set_max_dynamic_smem",
    "encode_tensor_map", "retarget_tensor_map", "validate_tensor_map_args", "launch",
    "DTYPE_SIZE", "SWIZZLE_SPAN",
]

U32, U64, VP = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6

# CUtensorMapDataType -> element size in bytes (the packed 4/6-bit types 13..15 are left out:
# they are Blackwell-era and their "element size" is not a whole byte).
DTYPE_SIZE = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
_FLOAT_DTYPES = {6, 7, 8, 9, 10, 11, 12}
# CUtensorMapSwizzle -> max bytes of the inner box dimension (None: no limit)
SWIZZLE_SPAN = {0: None, 1: 32, 2: 64, 3: 128, 4: 128, 5: 128, 6: 128}


class CudaError(RuntimeError):
    def __init__(self, code: int, name: str, what: str, detail: str = ""):
        self.code, self.name = code, name
        super().__init__(f"{what} failed: {name} ({code})" + (f": {detail}" if detail else ""))


# ----------------------------------------------------------------------------- ctypes structs

class CUlaunchAttributeValue(ctypes.Union):            # 64 bytes
    _fields_ = [("pad", ctypes.c_char * 64),
                ("clusterDim", U32 * 3),
                ("programmaticStreamSerializationAllowed", ctypes.c_int)]


class CUlaunchAttribute(ctypes.Structure):             # 72 bytes: id, 4 bytes pad, value
    _fields_ = [("id", ctypes.c_int), ("_pad", ctypes.c_char * 4),
                ("value", CUlaunchAttributeValue)]


class CUlaunchConfig(ctypes.Structure):                # 56 bytes
    _fields_ = [("gridDimX", U32), ("gridDimY", U32), ("gridDimZ", U32),
                ("blockDimX", U32), ("blockDimY", U32), ("blockDimZ", U32),
                ("sharedMemBytes", U32), ("hStream", VP),
                ("attrs", ctypes.POINTER(CUlaunchAttribute)), ("numAttrs", U32)]


assert ctypes.sizeof(CUlaunchAttribute) == 72 and ctypes.sizeof(CUlaunchConfig) == 56


# ----------------------------------------------------------------------------- library

_lock = threading.RLock()
_lib: Optional[ctypes.CDLL] = None


def _cuda() -> ctypes.CDLL:
    """Load libcuda and call cuInit(0) once."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                try:
                    lib = ctypes.CDLL("libcuda.so.1")
                except OSError as exc:
                    raise RuntimeError(f"cannot load the CUDA driver libcuda.so.1: {exc}") from exc
                lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
                lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
                _check(lib.cuInit(0), "cuInit", lib)
                _lib = lib
    return _lib


def _check(res: int, what: str, lib: Optional[ctypes.CDLL] = None) -> None:
    if res == 0:
        return
    lib = lib or _lib
    name, detail = f"CUresult {res}", ""
    if lib is not None:
        s = ctypes.c_char_p()
        if lib.cuGetErrorName(res, ctypes.byref(s)) == 0 and s.value:
            name = s.value.decode()
        if lib.cuGetErrorString(res, ctypes.byref(s)) == 0 and s.value:
            detail = s.value.decode()
    raise CudaError(res, name, what, detail)


# ----------------------------------------------------------------------------- contexts

_contexts: dict[int, int] = {}       # device ordinal -> retained primary context handle


def _device_index(device) -> int:
    if device is None:
        import torch
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    import torch
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"not a CUDA device: {device!r}")
    return d.index if d.index is not None else torch.cuda.current_device()


def _make_current(index: int) -> int:
    lib = _cuda()
    with _lock:
        ctx = _contexts.get(index)
        if ctx is None:
            dev, handle = ctypes.c_int(), VP()
            _check(lib.cuDeviceGet(ctypes.byref(dev), index), f"cuDeviceGet({index})")
            _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(handle), dev),
                   "cuDevicePrimaryCtxRetain")
            ctx = _contexts[index] = handle.value
    _check(lib.cuCtxSetCurrent(VP(ctx)), "cuCtxSetCurrent")
    return ctx


def current_device_context(torch_device=None) -> int:
    """Make torch's (primary) context for ``torch_device`` current; return its handle."""
    import torch
    index = _device_index(torch_device)
    torch.cuda.init()                 # torch creates / activates the primary context
    return _make_current(index)


def current_stream_handle(torch_device=None) -> int:
    """torch's current stream on the device as a raw CUstream (honours graph capture)."""
    import torch
    return torch.cuda.current_stream(torch_device).cuda_stream


CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906


def stream_capturing(stream_handle: int) -> bool:
    """Whether work launched on the stream is being captured into a CUDA graph (cuStreamIsCapturing:
    active or invalidated).  The legacy default stream, queried while another stream captures in
    global mode, counts as capturing: a launch there would be refused or captured alike."""
    status = ctypes.c_int()
    res = _cuda().cuStreamIsCapturing(VP(stream_handle or None), ctypes.byref(status))
    if res == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
        return True
    _check(res, "cuStreamIsCapturing")
    return status.value != 0


# ----------------------------------------------------------------------------- modules

class Function:
    def __init__(self, handle: int, name: str, module: "Module"):
        self.handle, self.name, self.module = handle, name, module
        self.max_dynamic_smem = 48 * 1024

    @property
    def device_index(self) -> int:
        return self.module.device_index

    def __repr__(self):
        return f"<Function {self.name} on cuda:{self.device_index}>"


class Module:
    def __init__(self, handle: int, device_index: int, digest: str):
        self.handle, self.device_index, self.digest = handle, device_index, digest
        self._functions: dict[str, Function] = {}

    def function(self, name: str) -> Function:
        fn = self._functions.get(name)
        if fn is None:
            _make_current(self.device_index)
            h = VP()
            _check(_cuda().cuModuleGetFunction(ctypes.byref(h), VP(self.handle),
                                               name.encode()), f"cuModuleGetFunction({name!r})")
            fn = self._functions[name] = Function(h.value, name, self)
        return fn


_modules: dict[tuple[str, int], Module] = {}


def load_module(cubin: bytes, device_index: int = 0) -> Module:
    """Load a cubin into device ``device_index``'s primary context (cached per hash+device)."""
    digest = hashlib.sha256(cubin).hexdigest()
    key = (digest, device_index)
    with _lock:
        mod = _modules.get(key)
        if mod is None:
            _make_current(device_index)
            h = VP()
            image = ctypes.create_string_buffer(bytes(cubin), len(cubin))
            _check(_cuda().cuModuleLoadData(ctypes.byref(h), image), "cuModuleLoadData")
            mod = _modules[key] = Module(h.value, device_index, digest)
    return mod


def set_max_dynamic_smem(fn: Function, nbytes: int) -> None:
    """Raise the dynamic shared-memory limit of ``fn`` (needed above 48 KB)."""
    if nbytes <= fn.max_dynamic_smem:
        return
    _make_current(fn.device_index)
    _check(_cuda().cuFuncSetAttribute(VP(fn.handle),
                                      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      ctypes.c_int(nbytes)),
           f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {nbytes}) for {fn.name}")
    fn.max_dynamic_smem = nbytes


def blocks_per_sm(fn: Function, block: int, smem_bytes: int) -> int:
    """Resident CTAs per SM for this launch shape (cuOccupancyMaxActiveBlocksPerMultiprocessor), after
    asking for the largest shared-memory carveout (the L1/shared split otherwise may not leave room
    for a second CTA)."""
    set_max_dynamic_smem(fn, smem_bytes)
    lib = _cuda()
    _make_current(fn.device_index)
    _check(lib.cuFuncSetAttribute(VP(fn.handle), CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                  ctypes.c_int(100)), f"cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT) for {fn.name}")
    n = ctypes.c_int(0)
    _check(lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), VP(fn.handle), ctypes.c_int(block),
                                                           ctypes.c_size_t(smem_bytes)),
           f"cuOccupancyMaxActiveBlocksPerMultiprocessor({fn.name})")
    return n.value


def allow_non_portable_clusters(fn: Function) -> None:
    """Let ``fn`` run clusters of more than 8 CTAs (up to 16 on sm_90).  Its cubin fixes the cluster
    shape (.reqnctapercluster); without this attribute the occupancy query and the launch of a
    9-16-CTA cluster are refused."""
    _make_current(fn.device_index)
    _check(_cuda().cuFuncSetAttribute(VP(fn.handle), CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                      ctypes.c_int(1)),
           f"cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED) for {fn.name}")


def max_active_clusters(fn: Function, block: int, smem_bytes: int, cluster: int) -> int:
    """How many clusters of ``cluster`` CTAs can be resident at once (cuOccupancyMaxActiveClusters):
    a persistent grid larger than this would run its last clusters in a second wave."""
    set_max_dynamic_smem(fn, smem_bytes)
    attrs = (CUlaunchAttribute * 1)()
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attrs[0].value.clusterDim[:] = (cluster, 1, 1)
    cfg = CUlaunchConfig(cluster, 1, 1, block, 1, 1, smem_bytes, None, attrs, 1)
    n = ctypes.c_int(0)
    _make_current(fn.device_index)
    _check(_cuda().cuOccupancyMaxActiveClusters(ctypes.byref(n), VP(fn.handle), ctypes.byref(cfg)),
           f"cuOccupancyMaxActiveClusters({fn.name}, cluster={cluster})")
    return n.value


# ----------------------------------------------------------------------------- tensor maps

class TensorMap:
    """128 bytes of CUtensorMap in 64-byte-aligned storage; passed to kernels by value.
    `layout`: what it was encoded from besides the address (dtype, dims, strides, box, swizzle),
    shared by the maps re-pointed from it; `global_address`: the tensor's address it points at."""

    _STORAGE = ctypes.c_char * (128 + 64)

    def __init__(self, layout: dict, global_address: int = 0):
        self._raw = self._STORAGE()
        self.address = (ctypes.addressof(self._raw) + 63) & ~63
        self.layout, self.global_address = layout, global_address

    @property
    def desc(self) -> dict:
        return {"address": hex(self.global_address), **self.layout}

    def __bytes__(self) -> bytes:
        return ctypes.string_at(self.address, 128)

    def __repr__(self):
        return f"TensorMap({self.desc})"


def validate_tensor_map_args(dtype_enum, rank, global_address, global_dims,
                             global_strides_bytes, box_dims, swizzle, l2_promotion, oob_fill,
                             element_strides=None) -> None:
    """Check every cuTensorMapEncodeTiled constraint (hopper-ptx.md §3.4); ValueError if not."""
    if dtype_enum not in DTYPE_SIZE:
        raise ValueError(f"dtype_enum={dtype_enum} is not a supported CUtensorMapDataType "
                         f"(use 0..12; e4m3/e5m2 are UINT8=0)")
    esize = DTYPE_SIZE[dtype_enum]
    if not isinstance(rank, int) or not 1 <= rank <= 5:
        raise ValueError(f"rank={rank} must be 1..5")
    if len(global_dims) != rank:
        raise ValueError(f"global_dims={list(global_dims)} must have rank={rank} entries")
    if len(global_strides_bytes) != rank - 1:
        raise ValueError(f"global_strides_bytes={list(global_strides_bytes)} must have "
                         f"rank-1={rank - 1} entries (dims 1..rank-1, in bytes)")
    if len(box_dims) != rank:
        raise ValueError(f"box_dims={list(box_dims)} must have rank={rank} entries")
    if not isinstance(global_address, int) or global_address <= 0:
        raise ValueError(f"global_address={global_address!r} must be a non-null device address")
    if global_address % 16:
        raise ValueError(f"global_address=0x{global_address:x} is not 16-byte aligned")
    for i, d in enumerate(global_dims):
        if not 1 <= d <= 1 << 32:
            raise ValueError(f"global_dims[{i}]={d} must be in 1..2^32")
    for i, s in enumerate(global_strides_bytes):
        if s <= 0 or s % 16:
            raise ValueError(f"global_strides_bytes[{i}]={s} must be a positive multiple of 16")
        if s >= 1 << 40:
            raise ValueError(f"global_strides_bytes[{i}]={s} must be < 2^40")
    for i, b in enumerate(box_dims):
        if not 1 <= b <= 256:
            raise ValueError(f"box_dims[{i}]={b} must be in 1..256")
    if element_strides is not None:
        if len(element_strides) != rank:
            raise ValueError(f"element_strides={list(element_strides)} must have {rank} entries")
        for i, e in enumerate(element_strides):
            if not 1 <= e <= 8:
                raise ValueError(f"element_strides[{i}]={e} must be in 1..8")
    if swizzle not in SWIZZLE_SPAN:
        raise ValueError(f"swizzle={swizzle} must be a CUtensorMapSwizzle value 0..6")
    inner = box_dims[0] * esize
    if inner % 16:
        raise ValueError(f"box_dims[0]={box_dims[0]} x {esize} B = {inner} B is not a "
                         f"multiple of 16 bytes")
    span = SWIZZLE_SPAN[swizzle]
    if span is not None and inner > span:
        raise ValueError(f"box_dims[0]={box_dims[0]} x {esize} B = {inner} B exceeds the "
                         f"swizzle={swizzle} span of {span} bytes")
    if l2_promotion not in (0, 1, 2, 3):
        raise ValueError(f"l2_promotion={l2_promotion} must be 0..3")
    if oob_fill not in (0, 1):
        raise ValueError(f"oob_fill={oob_fill} must be 0 or 1")
    if oob_fill == 1 and dtype_enum not in _FLOAT_DTYPES:
        raise ValueError(f"oob_fill=1 (NaN fill) needs a float dtype, got dtype_enum={dtype_enum}")


def encode_tensor_map(dtype_enum: int, rank: int, global_address: int,
                      global_dims: Sequence[int], global_strides_bytes: Sequence[int],
                      box_dims: Sequence[int], swizzle: int, l2_promotion: int = 3,
                      oob_fill: int = 0, element_strides: Optional[Sequence[int]] = None
                      ) -> TensorMap:
    """cuTensorMapEncodeTiled into aligned storage. Dims are innermost (contiguous) first."""
    validate_tensor_map_args(dtype_enum, rank, global_address, global_dims,
                             global_strides_bytes, box_dims, swizzle, l2_promotion, oob_fill,
                             element_strides)
    estr = list(element_strides) if element_strides is not None else [1] * rank
    tm = TensorMap(dict(dtype=dtype_enum, dims=list(global_dims), strides=list(global_strides_bytes),
                        box=list(box_dims), swizzle=swizzle), global_address)
    _check(_cuda().cuTensorMapEncodeTiled(
        VP(tm.address), ctypes.c_int(dtype_enum), U32(rank), VP(global_address),
        (U64 * rank)(*global_dims), (U64 * max(rank - 1, 1))(*global_strides_bytes),
        (U32 * rank)(*box_dims), (U32 * rank)(*estr),
        ctypes.c_int(0), ctypes.c_int(swizzle), ctypes.c_int(l2_promotion),
        ctypes.c_int(oob_fill)), f"cuTensorMapEncodeTiled({tm.desc})")
    return tm


def retarget_tensor_map(tm: TensorMap, global_address: int) -> TensorMap:
    """A copy of `tm` over the same layout (dtype, dims, strides, box, swizzle) at another address:
    cuTensorMapReplaceAddress on the copied 128 bytes, which costs a fraction of a full encode (and
    of its argument checks, which the layout already passed)."""
    if not isinstance(global_address, int) or global_address <= 0 or global_address % 16:
        raise ValueError(f"global_address={global_address!r} must be a non-null, 16-byte aligned device address")
    out = TensorMap(tm.layout, global_address)
    ctypes.memmove(out.address, tm.address, 128)
    res = _cuda().cuTensorMapReplaceAddress(VP(out.address), VP(global_address))
    if res:
        _check(res, f"cuTensorMapReplaceAddress({out.desc})")
    return out


# ----------------------------------------------------------------------------- launch

def _dim3(v, what) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, int) else tuple(v)
    if not 1 <= len(t) <= 3 or any(not isinstance(x, int) or x < 1 for x in t):
        raise ValueError(f"{what}={v!r} must be 1-3 positive ints")
    return t + (1,) * (3 - len(t))


def _arg_pointer(a, i: int) -> int:
    if isinstance(a, TensorMap):
        return a.address
    if isinstance(a, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)):
        return ctypes.addressof(a)
    raise TypeError(f"kernel argument {i} is {type(a).__name__}; pass a ctypes object "
                    f"(c_uint64, c_uint32, c_float, ...) or a TensorMap")


def launch(fn: Function, grid, block, smem_bytes: int, args: Sequence, stream_handle=None,
           cluster=None, pdl: bool = False) -> None:
    """cuLaunchKernelEx. ``args`` are ctypes objects in PTX parameter order (TensorMaps are
    passed by value); ``stream_handle`` defaults to torch's current stream on fn's device."""
    grid, block = _dim3(grid, "grid"), _dim3(block, "block")
    if stream_handle is None:
        stream_handle = current_stream_handle(fn.device_index)
    if smem_bytes > fn.max_dynamic_smem:
        set_max_dynamic_smem(fn, smem_bytes)
    attrs = (CUlaunchAttribute * 2)()
    n = 0
    if cluster is not None:
        c = _dim3(cluster, "cluster")
        if any(g % k for g, k in zip(grid, c)):
            raise ValueError(f"grid {grid} is not a multiple of cluster {c}")
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attrs[n].value.clusterDim[:] = c
        n += 1
    if pdl:
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attrs[n].value.programmaticStreamSerializationAllowed = 1
        n += 1
    cfg = CUlaunchConfig(*grid, *block, smem_bytes, VP(stream_handle or None), attrs, n)
    params = (VP * max(len(args), 1))(*[_arg_pointer(a, i) for i, a in enumerate(args)])
    _make_current(fn.device_index)
    _check(_cuda().cuLaunchKernelEx(ctypes.byref(cfg), VP(fn.handle), params, None),
           f"cuLaunchKernelEx({fn.name}, grid={grid}, block={block}, smem={smem_bytes})")


# ----------------------------------------------------------------------------- prebuilt launches

# the one launch attribute a plan may pass (read-only, so every plan shares it)
_PDL_ATTRIBUTE = (CUlaunchAttribute * 1)()
_PDL_ATTRIBUTE[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
_PDL_ATTRIBUTE[0].value.programmaticStreamSerializationAllowed = 1


_NO_HOME = (object(), object(), None)     # a LaunchPlan before its first launch: no stream equals it


class LaunchPlan:
    """A launch with everything but the stream fixed: config struct, attributes and the kernel
    parameter array are built once, so a warm call is one ctypes call.

    The fast path does not ask which context is current (that query cost 0.5-1.7 us of a ~4 us
    launch on the H200 host, bench/launch_variants.py): it launches, and only when the driver
    refuses does it look.  A function belongs to its device's primary context, so a launch from a
    thread whose current context is another one (another device's, a user's, none) is refused
    before anything is queued; then the launch is retried in the function's own context and the
    caller's context is given back (a thread that had none keeps the primary context current, as
    CUDA's runtime API leaves it).  Each (stream, PDL) pair gets its own config struct, never
    changed once made, so threads launching one plan on different streams at the same time each
    pass their own stream (a shared, rewritten stream field could send one thread's launch to the
    other's stream).  The first launch's pair is the plan's home, checked by two comparisons
    (a look-up of the pair in a dict cost ~0.6 us a launch on the H200 host, step 112).

    `pdl=True` launches with programmatic dependent launch (the kernel may start while the
    stream's previous kernel finishes), allowed only for kernels built to wait for it
    (`pdl_capable`: the programmatic_dependent_launch pass ran)."""

    def __init__(self, fn: Function, grid, block, smem_bytes: int, args: Sequence, pdl_capable: bool = False):
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        if smem_bytes > fn.max_dynamic_smem:
            set_max_dynamic_smem(fn, smem_bytes)
        self.fn = fn
        self.args = list(args)                         # keep the ctypes objects / tensor maps alive
        # the cluster shape travels in the cubin; the one attribute is PDL, counted only when asked for
        self.cfg = CUlaunchConfig(*grid, *block, smem_bytes, None, _PDL_ATTRIBUTE, 0)   # no stream, no PDL
        self.pdl_capable = pdl_capable
        self.params = (VP * max(len(args), 1))(*[_arg_pointer(a, i) for i, a in enumerate(args)])
        # the function's own (primary) context, retained when its module was loaded
        self.ctx = _contexts.get(fn.device_index) or _make_current(fn.device_index)
        self.workspace: dict = {}      # device buffers the launch uses that the plan keeps alive (set by its maker)
        self._launch, self._fn_ref = _cuda().cuLaunchKernelEx, VP(fn.handle)
        self._configs: dict = {}       # (stream, pdl) -> reference to that launch's config struct
        self._home = _NO_HOME          # (stream, pdl, config reference) of the first launch, set once

    def rebound(self, changes: dict) -> "LaunchPlan":
        """This launch (kernel, grid, block, shared memory) with the arguments at the given positions
        replaced ({index: ctypes object or TensorMap}), nothing re-checked; no launch made yet, so
        its configs per (stream, PDL) start afresh."""
        plan = LaunchPlan.__new__(LaunchPlan)
        plan.__dict__.update(self.__dict__)
        plan.args, plan.workspace = list(self.args), {}
        plan.params = type(self.params).from_buffer_copy(self.params)
        for i, a in changes.items():
            plan.args[i] = a
            plan.params[i] = _arg_pointer(a, i)
        plan._configs, plan._home = {}, _NO_HOME
        return plan

    def __call__(self, stream_handle: int, pdl: bool = False) -> None:
        home_stream, home_pdl, cfg = self._home       # one read: a consistent triple
        if stream_handle != home_stream or pdl is not home_pdl:
            cfg = self._config(stream_handle, pdl)
        res = self._launch(cfg, self._fn_ref, self.params, None)
        if res:
            self._launch_in_own_context(res, cfg)

    def _config(self, stream_handle: int, pdl: bool):
        """The config struct of launches on this stream with or without PDL: a copy of the base one,
        made once and never changed afterwards."""
        if pdl and not self.pdl_capable:
            raise ValueError(f"{self.fn.name} was built without the programmatic_dependent_launch pass: launched "
                             f"with PDL it could read its inputs before the previous kernel has written them")
        ref = self._configs.get((stream_handle, pdl))
        if ref is None:
            cfg = CUlaunchConfig.from_buffer_copy(self.cfg)
            cfg.hStream, cfg.numAttrs = stream_handle or None, 1 if pdl else 0
            ref = ctypes.byref(cfg)        # (holds the struct)
            with _lock:
                if len(self._configs) >= 16:   # streams come and go
                    self._configs.clear()
                self._configs[(stream_handle, pdl)] = ref
                if self._home is _NO_HOME:
                    self._home = (stream_handle, pdl, ref)
        return ref

    def _launch_in_own_context(self, res: int, cfg) -> None:
        lib, cur = _cuda(), VP()
        _check(lib.cuCtxGetCurrent(ctypes.byref(cur)), "cuCtxGetCurrent")
        if cur.value == self.ctx:             # the right context: the refusal was real
            _check(res, f"cuLaunchKernelEx({self.fn.name})")
        _check(lib.cuCtxSetCurrent(VP(self.ctx)), "cuCtxSetCurrent")
        try:
            _check(self._launch(cfg, self._fn_ref, self.params, None), f"cuLaunchKernelEx({self.fn.name})")
        finally:
            if cur.value:     # a thread that had no context keeps the primary one, as the runtime API does
                lib.cuCtxSetCurrent(cur)
