"""Load a compiled kernel on a device and launch it with tensors: tensor maps, grid, stream."""
from __future__ import annotations

import ctypes
import threading

from dgir.emitters.ptx import kernel_params
from dgir.ir import DType, Op
from dgir.ops.fp8_gemm import kernel_grid, launch_scalar, workspace_shapes
from dgir.ops.fp8_gemm_config import PORTABLE_CLUSTER_SIZE

from . import driver
from .device import properties

# CUtensorMapDataType for our element types (FP8 travels as UINT8)
TMA_DTYPE = {DType.e4m3: 0, DType.e5m2: 0, DType.e2m1: 0, DType.ue8m0: 0, DType.f16: 6, DType.f32: 7,
             DType.bf16: 9, DType.i32: 3, DType.u32: 2}
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}


class LoadedKernel:
    """A cubin loaded on one device, with its launch geometry taken from the kernel IR."""

    def __init__(self, result, device_index: int):
        k = result.ir
        self.result = result
        self.device_index = device_index
        self.params = kernel_params(k)
        self.decls = {n.name: n for n in k.body if n.op is Op.PARAM}
        self.smem = k.get("smem_bytes")
        self.threads = k.get("threads")
        self.block_m, self.block_n = k.get("block_m"), k.get("block_n")
        self.num_sms = k.get("num_sms")
        self.n_blocks = -(-k.get("n") // self.block_n)
        self.split_k = k.get("split_k") or 1
        self.pdl_capable = k.get("pdl") is True     # passes/programmatic_dependent_launch.py ran
        self.module = driver.load_module(result.cubin, device_index)
        self.fn = self.module.function(result.name)
        driver.set_max_dynamic_smem(self.fn, self.smem)
        # the persistent grid: whole clusters, no more than can be resident at once
        self.grid_attrs = dict(k.attrs)
        self.cluster = k.get("cluster") or 1
        if self.cluster > 1:
            if self.cluster > PORTABLE_CLUSTER_SIZE:
                driver.allow_non_portable_clusters(self.fn)
            resident = driver.max_active_clusters(self.fn, self.threads, self.smem, self.cluster)
            if resident < 1:
                raise RuntimeError(f"{result.name}: no cluster of {self.cluster} CTAs with {self.smem} B of "
                                   f"shared memory fits on device {device_index}")
            if k.get("split_reduce") == "cluster":   # clusters of K slices walk the output tiles
                if self.num_sms < properties(device_index).sms:   # set_num_sms: on that many SMs at most
                    resident = max(1, min(resident, self.num_sms // self.cluster))
                self.grid_attrs["resident_clusters"] = resident
            else:
                self.grid_attrs["num_sms"] = min(self.num_sms, resident * self.cluster)
        occupancy = k.get("ctas_per_sm") or 1
        if occupancy > 1:    # as many CTAs per SM as actually fit (never a second wave of CTAs)
            self.grid_attrs["ctas_per_sm"] = max(1, min(occupancy, driver.blocks_per_sm(self.fn, self.threads,
                                                                                        self.smem)))
        # what each tensor-map param's map is built from: (CUtensorMapDataType, box, fit_m, swizzle)
        self.map_specs = {name: (TMA_DTYPE[p.type.dtype], tuple(p.get("box")), p.get("fit_m"),
                                 SWIZZLE[p.get("swizzle", 0)]) for name, p in self.decls.items() if p.get("box")}
        self.workspace_names = tuple(name for name, p in self.decls.items() if p.get("workspace"))
        # (argument position, tensor) of each tensor-map and pointer argument
        self.map_slots = tuple((i, name) for i, (_, kind, name) in enumerate(self.params) if kind == "tmap")
        self.pointer_slots = tuple((i, name) for i, (_, kind, name) in enumerate(self.params) if kind == "ptr")
        self._grids: dict = {}                 # M -> persistent grid
        self._layouts: dict = {}               # (param, layout) -> the map encoded first for it
        self._maps: dict = {}                  # (param, layout, address) -> map
        self._lock = threading.Lock()

    def tensor_map(self, name: str, t, rows: int, m: int | None = None):
        """2-D map over a row-major tensor (innermost dim first), box from the param's attrs.

        A map depends on the address and the layout (dtype, shape, strides, box).  The first map of
        a layout is encoded (every argument checked); a later address in the same layout re-points
        a copy of it, and a repeated one is a dictionary look-up."""
        dtype_enum, box, fit_m, swizzle = self.map_specs[name]
        if fit_m is not None and m is not None:   # the kernel's expect_tx uses the same rule
            axis, a = fit_m
            box = box[:axis] + (min(box[axis], -(-m // a) * a),) + box[axis + 1:]
        layout = (name, t.dtype, tuple(t.shape), tuple(t.stride()), rows, box)
        address = t.data_ptr()
        tm = self._maps.get((layout, address))
        if tm is None:
            first = self._layouts.get(layout)
            if first is None:
                tm = first = driver.encode_tensor_map(dtype_enum, 2, address, [t.shape[1], rows],
                                                      [t.stride(0) * t.element_size()], list(box), swizzle)
            else:
                tm = driver.retarget_tensor_map(first, address)
            with self._lock:
                if len(self._maps) > 256:
                    self._maps.clear()
                if len(self._layouts) > 256:
                    self._layouts.clear()
                self._layouts.setdefault(layout, first)
                self._maps[(layout, address)] = tm
        return tm

    def grid(self, m: int) -> int:
        """The persistent grid of a launch with M = m."""
        g = self._grids.get(m)
        if g is None:
            g = kernel_grid(self.grid_attrs, m)
            if len(self._grids) > 4096:
                self._grids.clear()
            self._grids[m] = g
        return g

    def plan(self, tensors: dict, m: int) -> "driver.LaunchPlan":
        """A prebuilt launch for these exact tensors (addresses, shapes and strides are baked into
        the tensor maps): the warm path of the DeepGEMM-style API.

        The plan owns its workspace (split-K partials, tile counters: created here unless `tensors`
        brings them) and nothing else: the API caches plans by the tensors' addresses and layouts,
        so a plan that kept the caller's tensors would keep their memory from ever being freed while
        it is cached.  A later tensor at the same address with the same shape, strides and dtype is
        served by the same tensor maps."""
        owned = {} if all(name in tensors for name in self.workspace_names) else self.workspace(m, tensors["A"].device)
        args = self.arguments({**owned, **tensors} if owned else tensors, m)
        plan = driver.LaunchPlan(self.fn, self.grid(m), self.threads, self.smem, args, self.pdl_capable)
        plan.workspace = owned                # the launch must not outlive its workspace
        return plan

    def replan(self, plan: "driver.LaunchPlan", tensors: dict, m: int) -> "driver.LaunchPlan":
        """`plan`'s launch (made by `plan(..., m)`) for tensors laid out exactly as the ones it was
        made for (dtype, shape, strides: the caller vouches) at other addresses: the same grid and
        scalars, each tensor map a re-pointed copy of `plan`'s, pointers replaced, a fresh workspace."""
        owned = {} if all(name in tensors for name in self.workspace_names) else self.workspace(m, tensors["A"].device)
        if owned:
            tensors = {**owned, **tensors}
        changes = {i: ctypes.c_uint64(tensors[name].data_ptr()) for i, name in self.pointer_slots}
        for i, name in self.map_slots:
            address = tensors[name].data_ptr()
            if address != plan.args[i].global_address:
                changes[i] = driver.retarget_tensor_map(plan.args[i], address)
        new = plan.rebound(changes)
        new.workspace = owned
        return new

    def workspace(self, m: int, device) -> dict:
        """Fresh scratch tensors for params marked `workspace` (split-K partials and tile counters).
        Each launch plan owns its own, so plans never share counters; counters start at zero and the
        kernel leaves them at zero."""
        import torch
        out = {}
        for name, shape in workspace_shapes(self.result.ir, m, self.grid(m)).items():
            if self.decls[name].type.dtype is DType.i32:
                out[name] = torch.zeros(shape, dtype=torch.int32, device=device)
            else:
                out[name] = torch.empty(shape, dtype=torch.float32, device=device)
        return out

    def arguments(self, tensors: dict, m: int) -> list:
        """The kernel's arguments in PTX parameter order, from `tensors` (workspace included)."""
        missing = [name for _, kind, name in self.params if kind not in ("dim", "derived") and name not in tensors]
        if missing:
            raise ValueError(f"{self.result.name}: no tensor for param(s) {', '.join(missing)}")
        args = []
        for ptx_name, kind, name in self.params:
            if kind == "tmap":
                t = tensors[name]
                args.append(self.tensor_map(name, t, t.shape[0], m))
            elif kind == "ptr":
                args.append(ctypes.c_uint64(tensors[name].data_ptr()))
            elif kind == "derived":
                args.append(ctypes.c_uint32(launch_scalar(name, m, self.grid_attrs)))
            else:
                args.append(ctypes.c_uint32(m))
        return args

    def launch(self, tensors: dict, m: int, stream_handle: int, pdl: bool = False) -> None:
        """One-off launch (tests, benchmarks): builds a plan and runs it."""
        self.plan(tensors, m)(stream_handle, pdl)
