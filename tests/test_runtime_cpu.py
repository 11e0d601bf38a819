import ctypes
import hashlib
import multiprocessing as mp
import os

import pytest

from dgir.runtime import cache as cache_mod
from dgir.runtime import driver as drv

GOOD = dict(dtype_enum=0, rank=2, global_address=0x7F0000000000, global_dims=[4096, 2048],
            global_strides_bytes=[4096], box_dims=[128, 128], swizzle=3)


# ------------------------------------------------------------------ ctypes structures

def test_struct_layout():
    assert ctypes.sizeof(drv.CUlaunchConfig) == 56
    assert ctypes.sizeof(drv.CUlaunchAttribute) == 72
    assert drv.CUlaunchConfig.sharedMemBytes.offset == 24
    assert drv.CUlaunchConfig.hStream.offset == 32
    assert drv.CUlaunchConfig.attrs.offset == 40
    assert drv.CUlaunchConfig.numAttrs.offset == 48
    assert drv.CUlaunchAttribute.value.offset == 8


def test_tensor_map_storage_aligned():
    for _ in range(16):
        tm = drv.TensorMap({})
        assert tm.address % 64 == 0 and len(bytes(tm)) == 128


# ------------------------------------------------------------------ a fake libcuda

class FakeLib:
    """Stands in for libcuda: records calls, writes what the real one would."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        raise AssertionError(f"unexpected driver call {name}")

    def cuTensorMapEncodeTiled(self, tm, dtype, rank, gaddr, gdim, gstr, box, estr, il, sw,
                               l2, oob):
        r = rank.value
        self.calls.append(("encode", dict(
            tm=tm.value, dtype=dtype.value, rank=r, gaddr=gaddr.value, dims=list(gdim)[:r],
            strides=list(gstr)[:r - 1], box=list(box)[:r], estr=list(estr)[:r],
            interleave=il.value, swizzle=sw.value, l2=l2.value, oob=oob.value)))
        ctypes.memset(tm.value, 0xAB, 128)
        return 0

    def cuTensorMapReplaceAddress(self, tm, gaddr):
        # the real layout is opaque: the fake marks its first 8 bytes with the address
        self.calls.append(("replace", dict(tm=tm.value, gaddr=gaddr.value)))
        ctypes.c_uint64.from_address(tm.value).value = gaddr.value
        return 0

    capture_status = 0            # what cuStreamIsCapturing reports (or, as a string, the error it returns)

    def cuStreamIsCapturing(self, stream, out):
        self.calls.append(("capturing", stream.value))
        if isinstance(self.capture_status, str):
            return int(self.capture_status)
        out._obj.value = self.capture_status
        return 0

    current_ctx = 0x1234          # what cuCtxGetCurrent reports
    refuse_launches = 0           # the next launches return this many CUDA_ERROR_INVALID_HANDLE

    def cuCtxSetCurrent(self, ctx):
        self.calls.append(("ctx", ctx.value))
        return 0

    def cuCtxGetCurrent(self, out):
        self.calls.append(("get_ctx",))
        out._obj.value = self.current_ctx
        return 0

    def cuModuleLoadData(self, out, image):
        self.calls.append(("load",))
        out._obj.value = 0xAAAA
        return 0

    def cuModuleGetFunction(self, out, module, name):
        self.calls.append(("function", name))
        out._obj.value = 0xBEEF
        return 0

    def cuFuncSetAttribute(self, fn, attr, value):
        self.calls.append(("attr", fn.value, attr, value.value))
        return 0

    resident_clusters = 9         # what cuOccupancyMaxActiveClusters reports

    def cuOccupancyMaxActiveClusters(self, out, fn, cfg_ref):
        self.calls.append(("clusters", fn.value, tuple(cfg_ref._obj.attrs[0].value.clusterDim)))
        out._obj.value = self.resident_clusters
        return 0

    def cuLaunchKernelEx(self, cfg_ref, fn, params, extra):
        cfg = cfg_ref._obj
        attrs = [(cfg.attrs[i].id, tuple(cfg.attrs[i].value.clusterDim),
                  cfg.attrs[i].value.programmaticStreamSerializationAllowed)
                 for i in range(cfg.numAttrs)]
        self.calls.append(("launch", dict(
            grid=(cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
            block=(cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ), smem=cfg.sharedMemBytes,
            stream=cfg.hStream, attrs=attrs, fn=fn.value, params=list(params))))
        if self.refuse_launches:
            self.refuse_launches -= 1
            return 400
        return 0

    def cuGetErrorName(self, code, out):
        out._obj.value = b"CUDA_ERROR_INVALID_VALUE"
        return 0

    def cuGetErrorString(self, code, out):
        out._obj.value = b"invalid argument"
        return 0


@pytest.fixture
def fake(monkeypatch):
    lib = FakeLib()
    monkeypatch.setattr(drv, "_lib", lib)
    monkeypatch.setattr(drv, "_contexts", {0: 0x1234})
    return lib


# ------------------------------------------------------------------ tensor-map validation

@pytest.mark.parametrize("change,match", [
    (dict(global_address=0x7F0000000008), "global_address"),
    (dict(global_address=0), "global_address"),
    (dict(global_strides_bytes=[4100]), r"global_strides_bytes\[0\]=4100"),
    (dict(global_strides_bytes=[1 << 40]), "2\\^40"),
    (dict(box_dims=[128, 0]), r"box_dims\[1\]=0"),
    (dict(box_dims=[128, 257]), r"box_dims\[1\]=257"),
    (dict(box_dims=[8, 64], swizzle=0), r"box_dims\[0\]=8.*multiple of 16"),
    (dict(box_dims=[256, 64]), r"box_dims\[0\]=256.*span of 128"),
    (dict(dtype_enum=9, box_dims=[128, 64]), r"256 B exceeds.*128"),
    (dict(box_dims=[64, 64], swizzle=2, dtype_enum=9), r"128 B exceeds.*64"),
    (dict(global_dims=[4096]), "global_dims"),
    (dict(global_strides_bytes=[]), "global_strides_bytes"),
    (dict(global_dims=[0, 2048]), r"global_dims\[0\]=0"),
    (dict(global_dims=[(1 << 32) + 1, 2048]), r"global_dims\[0\]"),
    (dict(dtype_enum=13), "dtype_enum=13"),
    (dict(swizzle=7), "swizzle=7"),
    (dict(l2_promotion=4), "l2_promotion=4"),
    (dict(oob_fill=1), "oob_fill=1"),
    (dict(rank=6), "rank=6"),
])
def test_tensor_map_validation_before_driver(fake, change, match):
    args = {**GOOD, **change}
    with pytest.raises(ValueError, match=match):
        drv.encode_tensor_map(**args)
    assert fake.calls == []                      # nothing reached the driver


def test_tensor_map_encode_passes_aligned_storage(fake):
    tm = drv.encode_tensor_map(**GOOD)
    (kind, c), = fake.calls
    assert kind == "encode"
    assert c["tm"] == tm.address and tm.address % 64 == 0
    assert (c["dtype"], c["rank"], c["gaddr"]) == (0, 2, GOOD["global_address"])
    assert c["dims"] == [4096, 2048] and c["strides"] == [4096] and c["box"] == [128, 128]
    assert c["estr"] == [1, 1] and (c["interleave"], c["swizzle"], c["l2"], c["oob"]) == (0, 3, 3, 0)
    assert bytes(tm) == b"\xab" * 128
    # bf16 with 64 elements (128 B) under SWIZZLE_128B is fine; 3-D batched map too
    drv.encode_tensor_map(9, 2, 0x1000, [4096, 128], [8192], [64, 128], 3)
    drv.encode_tensor_map(0, 3, 0x1000, [256, 128, 4], [256, 256 * 128], [128, 64, 1], 3)
    assert len(fake.calls) == 3


def test_retargeted_tensor_map_is_a_repointed_copy(fake):
    """retarget_tensor_map copies the 128 bytes into new aligned storage and re-points the copy
    (cuTensorMapReplaceAddress); the map it came from is left as it was."""
    tm = drv.encode_tensor_map(**GOOD)
    other = drv.retarget_tensor_map(tm, 0x7F0000100000)
    assert [c[0] for c in fake.calls] == ["encode", "replace"]
    assert fake.calls[1][1] == dict(tm=other.address, gaddr=0x7F0000100000)
    assert other.address != tm.address and other.address % 64 == 0
    assert bytes(tm) == b"\xab" * 128
    assert bytes(other) == (0x7F0000100000).to_bytes(8, "little") + b"\xab" * 120
    assert other.desc == {**tm.desc, "address": "0x7f0000100000"} and other.layout is tm.layout
    for bad in (0, 0x7F0000100008, -16):
        with pytest.raises(ValueError, match="global_address"):
            drv.retarget_tensor_map(tm, bad)
    assert len(fake.calls) == 2                  # refused before the driver


def test_kernel_maps_are_encoded_once_per_layout(fake, monkeypatch, tmp_path):
    """A loaded kernel encodes the first map of each layout (dtype, shape, strides, box) and re-points
    copies of it for other addresses; an address it has seen is a look-up.  Plans for tensors at new
    addresses thus cost no full encode, and each plan's maps point at its own tensors."""
    import torch
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs, kernel_tensors
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.runtime.launcher import LoadedKernel
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    m, n, k = 64, 256, 1024
    cfg = Fp8GemmConfig(n=n, k=k, block_m=64, block_n=64, stages=4)
    kern = LoadedKernel(deep_gemm._compile_cached("fp8_gemm_nt", cfg, m, n, k, None), 0)
    A, sfa, B, sfb, _ = fp8_inputs(m, n, k, torch.device("cpu"), 0, reference=False)
    ds = [torch.empty(m, n, dtype=torch.bfloat16) for _ in range(3)]
    operands = kernel_tensors(A, sfa, B, sfb, ds[0])       # (SFA here is a new MN-major copy: made once)
    maps = [[a for a in kern.plan({**operands, "D": d}, m).args if isinstance(a, drv.TensorMap)]
            for d in (ds[0], ds[1], ds[0])]
    kinds = [c[0] for c in fake.calls if c[0] in ("encode", "replace")]
    n_maps = len(maps[0])
    assert n_maps >= 2 and kinds == ["encode"] * n_maps + ["replace"]   # only D's map was new
    (d_map,) = [tm for tm in maps[1] if tm not in maps[0]]
    assert bytes(d_map)[:8] == ds[1].data_ptr().to_bytes(8, "little")
    assert maps[2] == maps[0]                    # the first D again: the same maps, no driver call
    wide = torch.empty(m, 2 * n, dtype=torch.bfloat16)[:, :n]                   # another layout (row stride)
    kern.tensor_map("D", wide, m, m)
    (_, last), = [c for c in fake.calls if c[0] == "encode"][-1:]
    assert last["gaddr"] == wide.data_ptr() and last["strides"] == [2 * n * 2]   # encoded, not re-pointed


@pytest.mark.parametrize("split_k,k", [(8, 7168), (14, 7168), (16, 8192)])
def test_clusters_over_eight_ctas_are_allowed_before_the_occupancy_query(fake, monkeypatch, tmp_path, split_k, k):
    """A split over 9-16 slices is a non-portable cluster: the launcher sets the function's
    NON_PORTABLE_CLUSTER_SIZE_ALLOWED (14) before it asks how many clusters are resident (the driver
    refuses both the query and the launch otherwise); a portable cluster of 8 leaves it unset."""
    from dgir import deep_gemm
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.runtime import launcher
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(launcher, "properties", lambda index: type("P", (), {"sms": 132})())
    m, n = 64, 576
    cfg = Fp8GemmConfig(n=n, k=k, block_m=64, block_n=32, stages=4, split_k=split_k, split_reduce="cluster")
    kern = launcher.LoadedKernel(deep_gemm._compile_cached("fp8_gemm_nt", cfg, m, n, k, None), 0)
    allowed = [i for i, c in enumerate(fake.calls) if c[0] == "attr" and c[2] == drv.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED]
    query = [i for i, c in enumerate(fake.calls) if c[0] == "clusters"]
    assert [fake.calls[i][2] for i in query] == [(split_k, 1, 1)]
    if split_k > 8:
        assert len(allowed) == 1 and fake.calls[allowed[0]][3] == 1 and allowed[0] < query[0]
    else:
        assert allowed == []
    assert kern.grid_attrs["resident_clusters"] == fake.resident_clusters


@pytest.mark.parametrize("status,capturing", [(0, False), (1, True), (2, True), ("906", True)])
def test_stream_capturing_reads_the_capture_status(fake, status, capturing):
    """none / active / invalidated; the legacy stream during another stream's global capture
    (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) counts as capturing; other errors raise."""
    fake.capture_status = status
    assert drv.stream_capturing(0x5000) is capturing
    assert fake.calls[-1] == ("capturing", 0x5000)
    fake.capture_status = "400"
    with pytest.raises(drv.CudaError, match="cuStreamIsCapturing"):
        drv.stream_capturing(0x5000)


def test_replan_repoints_a_plan_at_tensors_of_the_same_layout(fake, monkeypatch, tmp_path):
    """LoadedKernel.replan gives what plan() would for tensors laid out as the first plan's at other
    addresses: the same grid, block, shared memory and scalars; each map pointing at the new tensor
    (re-pointed, or the very map where the address is unchanged); its own workspace; the launch
    parameters pointing at its own arguments."""
    import torch
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs, kernel_tensors
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.runtime.launcher import LoadedKernel
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    m, n, k = 64, 256, 1024
    cfg = Fp8GemmConfig(n=n, k=k, block_m=64, block_n=64, stages=4, split_k=2)   # with a global workspace
    kern = LoadedKernel(deep_gemm._compile_cached("fp8_gemm_nt", cfg, m, n, k, None), 0)
    A, sfa, B, sfb, _ = fp8_inputs(m, n, k, torch.device("cpu"), 0, reference=False)
    first = kernel_tensors(A, sfa, B, sfb, torch.empty(m, n, dtype=torch.bfloat16))
    second = {**first, "A": A.clone(), "D": torch.empty(m, n, dtype=torch.bfloat16)}
    pattern = kern.plan(first, m).rebound({})
    assert pattern.workspace == {}
    replanned, built = kern.replan(pattern, second, m), kern.plan(second, m)
    assert bytes(replanned.cfg) == bytes(built.cfg)
    assert set(replanned.workspace) == set(kern.workspace_names)
    assert not set(map(id, replanned.workspace.values())) & set(map(id, built.workspace.values()))
    for (_, kind, name), new, old, ref in zip(kern.params, replanned.args, pattern.args, built.args):
        if kind == "tmap":
            assert new.global_address == second[name].data_ptr() and new.layout == ref.layout
            assert (new is old) == (name in ("B", "SFA", "SFB"))            # unchanged addresses: the same map
        elif kind == "ptr":
            tensor = second.get(name, replanned.workspace.get(name))
            assert new.value == tensor.data_ptr()
        else:
            assert new.value == ref.value
    assert list(replanned.params) == [drv._arg_pointer(a, i) for i, a in enumerate(replanned.args)]


# ------------------------------------------------------------------ launch / errors

def test_launch_packs_config_and_params(fake):
    mod = drv.Module(0xAAAA, 0, "d")
    fn = drv.Function(0xBEEF, "k", mod)
    tm = drv.encode_tensor_map(**GOOD)
    ptr, n = ctypes.c_uint64(0xDEAD0000), ctypes.c_uint32(7)
    drv.launch(fn, (4, 2), 384, 100_000, [tm, ptr, n], stream_handle=0x5000,
               cluster=(2, 1, 1), pdl=True)
    attr = [c for c in fake.calls if c[0] == "attr"]
    assert attr == [("attr", 0xBEEF, drv.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100_000)]
    (_, l), = [c for c in fake.calls if c[0] == "launch"]
    assert l["grid"] == (4, 2, 1) and l["block"] == (384, 1, 1) and l["smem"] == 100_000
    assert l["stream"] == 0x5000 and l["fn"] == 0xBEEF
    (id0, dims, _), (id1, _, pdl) = l["attrs"]          # the value is a union
    assert (id0, dims, id1, pdl) == (4, (2, 1, 1), 6, 1)
    assert l["params"] == [tm.address, ctypes.addressof(ptr), ctypes.addressof(n)]
    # second launch: attribute already raised, no second cuFuncSetAttribute
    drv.launch(fn, (4, 2), 384, 100_000, [tm, ptr, n], stream_handle=0x5000)
    assert len([c for c in fake.calls if c[0] == "attr"]) == 1


def test_launch_rejects_bad_args(fake):
    fn = drv.Function(0xBEEF, "k", drv.Module(1, 0, "d"))
    with pytest.raises(TypeError, match="argument 1"):
        drv.launch(fn, 1, 128, 0, [ctypes.c_uint64(1), 5], stream_handle=0)
    with pytest.raises(ValueError, match="cluster"):
        drv.launch(fn, (3, 1, 1), 128, 0, [], stream_handle=0, cluster=(2, 1, 1))
    with pytest.raises(ValueError, match="block"):
        drv.launch(fn, 1, (0, 1), 0, [], stream_handle=0)
    assert not [c for c in fake.calls if c[0] == "launch"]


def _plan(fake):
    fn = drv.Function(0xBEEF, "k", drv.Module(0xAAAA, 0, "d"))
    plan = drv.LaunchPlan(fn, (132, 1, 1), 384, 1000, [ctypes.c_uint64(0xDEAD0000)])
    fake.calls.clear()
    return plan


def test_launch_plan_fast_path_asks_no_context(fake):
    plan = _plan(fake)
    plan(0x5000)
    plan(0x5000)
    plan(0x6000)
    assert [c[0] for c in fake.calls] == ["launch"] * 3
    assert [c[1]["stream"] for c in fake.calls] == [0x5000, 0x5000, 0x6000]


def test_launch_plan_passes_its_geometry_function_and_parameter_array(fake):
    """The prebuilt launch carries what the plan was built with: grid, block, shared memory, the
    function handle and a parameter array whose slots point at the arguments."""
    arg = ctypes.c_uint64(0xDEAD0000)
    plan = drv.LaunchPlan(drv.Function(0xBEEF, "k", drv.Module(0xAAAA, 0, "d")), (132, 2), (384,), 1000, [arg])
    fake.calls.clear()
    plan(0x5000)
    (kind, l), = fake.calls
    assert (l["grid"], l["block"], l["smem"], l["fn"]) == ((132, 2, 1), (384, 1, 1), 1000, 0xBEEF)
    assert l["params"] == [ctypes.addressof(arg)]


def test_launch_plan_refused_in_another_context_retries_in_its_own(fake):
    plan = _plan(fake)
    fake.current_ctx, fake.refuse_launches = 0x9999, 1     # the caller made another context current
    plan(0x5000)
    assert [c[0] for c in fake.calls] == ["launch", "get_ctx", "ctx", "launch", "ctx"]
    assert fake.calls[2] == ("ctx", 0x1234) and fake.calls[4] == ("ctx", 0x9999)   # switched, given back


def test_launch_plan_refused_in_its_own_context_raises(fake):
    plan = _plan(fake)
    fake.refuse_launches = 1
    with pytest.raises(drv.CudaError, match="cuLaunchKernelEx"):
        plan(0x5000)
    assert [c[0] for c in fake.calls] == ["launch", "get_ctx"]    # no blind retry
    fake.current_ctx, fake.refuse_launches = 0x9999, 2             # refused in both contexts
    fake.calls.clear()
    with pytest.raises(drv.CudaError):
        plan(0x5000)
    assert fake.calls[-1] == ("ctx", 0x9999)                       # the caller's context given back


def test_launch_plan_thread_without_context_keeps_primary(fake):
    plan = _plan(fake)
    fake.current_ctx, fake.refuse_launches = None, 1       # a fresh thread: no current context
    plan(0x5000)
    assert [c[0] for c in fake.calls] == ["launch", "get_ctx", "ctx", "launch"]   # not switched back
    assert fake.calls[2] == ("ctx", 0x1234)


def test_error_names_cuda_result(fake):
    with pytest.raises(drv.CudaError, match="CUDA_ERROR_INVALID_VALUE") as ei:
        drv._check(1, "cuSomething")
    assert ei.value.code == 1 and "cuSomething" in str(ei.value)


def test_import_does_not_load_driver():
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    code = ("import sys; sys.path.insert(0, 'tests'); import conftest; "
            "import dgir.runtime.driver as d; assert d._lib is None; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


# ------------------------------------------------------------------ kernel cache

def _files(key: str, size=1 << 20):
    blob = hashlib.sha256(key.encode()).digest() * (size // 32)
    return {"kernel.ptx": b"// ptx " + key.encode(), "kernel.cubin": blob,
            "meta.json": b'{"k": 1}'}


def test_cache_roundtrip(tmp_path):
    c = cache_mod.KernelCache(tmp_path)
    key = cache_mod.make_key("ir", "pipeline-v1", "ptxas=13.0", "0.1")
    assert c.get(key) is None
    c.put(key, _files(key, 4096))
    assert c.get(key) == _files(key, 4096)
    assert not [p for p in tmp_path.rglob("*.tmp")]
    # field boundaries matter
    assert cache_mod.make_key("ab", "c", "", "") != cache_mod.make_key("a", "bc", "", "")
    assert len({cache_mod.make_key("ir", p, "t", "v") for p in ("a", "b")}) == 2


def test_cache_corrupt_entry_is_miss(tmp_path):
    c = cache_mod.KernelCache(tmp_path)
    key = "ab" * 32
    c.put(key, _files(key, 4096))
    (c.entry_dir(key) / "kernel.cubin").write_bytes(b"torn")
    assert c.get(key) is None
    c.put(key, _files(key, 4096))
    assert c.get(key) == _files(key, 4096)


def test_cache_validation(tmp_path):
    c = cache_mod.KernelCache(tmp_path)
    with pytest.raises(ValueError):
        c.put("../etc", {"a": b""})
    with pytest.raises(ValueError, match="name"):
        c.put("cd" * 32, {"../x": b""})
    with pytest.raises(TypeError):
        c.put("cd" * 32, {"x.ptx": "text"})


def test_cache_root_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "c"))
    assert cache_mod.KernelCache().root == tmp_path / "c"


def _hammer(root, key, rounds, q):
    c = cache_mod.KernelCache(root)
    want = _files(key)
    bad = 0
    for i in range(rounds):
        if i % 2 == 0:
            c.put(key, want)
        got = c.get(key)
        if got is not None and got != want:
            bad += 1
    q.put(bad)


def _compile_once(root, key, counter, q):
    c = cache_mod.KernelCache(root)

    def compute():
        with open(counter, "a") as f:
            f.write("x")
        return _files(key, 4096)

    files, _hit = c.get_or_put(key, compute)
    q.put(files == _files(key, 4096))


def test_cache_concurrent_processes(tmp_path):
    ctx = mp.get_context("fork")
    key = "ef" * 32
    q = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(tmp_path, key, 10, q)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert [q.get(timeout=5) for _ in procs] == [0] * 6     # nobody saw a torn entry
    assert cache_mod.KernelCache(tmp_path).get(key) == _files(key)
    assert not [p for p in tmp_path.rglob("*.tmp")]

    # get_or_put: exactly one process compiles
    key2, counter = "12" * 32, tmp_path / "count"
    procs = [ctx.Process(target=_compile_once, args=(tmp_path, key2, counter, q))
             for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [q.get(timeout=5) for _ in procs] == [True] * 6
    assert counter.read_text() == "x"


# ------------------------------------------------------------------ on a GPU (skipped on CPU)

_GPU_PTX = r"""
.version 8.7
.target sm_90a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry probe(.param .align 64 .b8 tmap[128], .param .u64 out, .param .u32 k)
{
  .reg .b64 %rd<8>; .reg .b32 %r<8>; .reg .pred %p<2>;
  ld.param.u64 %rd0, [out]; cvta.to.global.u64 %rd0, %rd0;
  ld.param.u32 %r0, [k];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %cluster_ctarank;
  mad.lo.u32 %r4, %r2, 128, %r1;
  mad.lo.u32 %r5, %r1, %r0, %r3;
  mul.wide.u32 %rd1, %r4, 4;
  add.s64 %rd2, %rd0, %rd1;
  st.global.u32 [%rd2+64], %r5;
  setp.ne.u32 %p0, %r4, 0;
  @%p0 bra DONE;
  ld.param.u64 %rd3, [tmap];
  ld.param.u64 %rd4, [tmap+120];
  st.global.u64 [%rd0], %rd3;
  st.global.u64 [%rd0+8], %rd4;
DONE:
  ret;
}
"""


@pytest.mark.gpu
def test_gpu_launch_end_to_end():
    import torch

    from dgir import toolchain as tc
    dev = torch.device("cuda", 0)
    drv.current_device_context(dev)
    mod = drv.load_module(tc.assemble(_GPU_PTX).cubin, 0)
    assert drv.load_module(tc.assemble(_GPU_PTX).cubin, 0) is mod
    fn = mod.function("probe")
    a = torch.zeros(256, 512, dtype=torch.uint8, device=dev)
    tm = drv.encode_tensor_map(0, 2, a.data_ptr(), [512, 256], [512], [128, 64], 3)
    out = torch.full((16 + 256,), -1, dtype=torch.int32, device=dev)
    drv.launch(fn, (2, 1, 1), (128, 1, 1), 100 * 1024,
               [tm, ctypes.c_uint64(out.data_ptr()), ctypes.c_uint32(3)],
               cluster=(2, 1, 1), pdl=True)
    torch.cuda.synchronize()
    got = out.cpu()
    t = torch.arange(128, dtype=torch.int32)
    assert torch.equal(got[16:144], t * 3) and torch.equal(got[144:272], t * 3 + 1)
    raw = bytes(tm)
    assert got[:2].numpy().tobytes() == raw[:8] and got[2:4].numpy().tobytes() == raw[120:]
    with pytest.raises(drv.CudaError, match="CUDA_ERROR"):
        mod.function("no_such_kernel")


@pytest.mark.gpu
def test_gpu_sass_patched_kernel_runs():
    import torch

    from dgir import toolchain as tc
    from dgir.runtime import sass
    from test_sass import _ffma_ptx
    dev = torch.device("cuda", 0)
    drv.current_device_context(dev)
    cubin = tc.assemble(_ffma_ptx()).cubin
    r = sass.interleave_ffma_sass(cubin, "ffma_run")
    assert r.patched > 0
    results = []
    x = torch.randn(131072 + 64, device=dev)
    for image in (cubin, r.cubin):
        buf = x.clone()
        fn = drv.load_module(image, 0).function("ffma_run")
        drv.launch(fn, 1, 32, 0, [ctypes.c_uint64(buf.data_ptr())])
        torch.cuda.synchronize()
        results.append(buf.cpu())
    assert torch.equal(results[0], results[1])
    n = 32
    xs = x.cpu().view(-1)
    s0, s1 = xs[131072:131072 + 32], xs[131073:131073 + 32]     # per-thread loads
    for i in range(0, n, 7):
        v = xs[32768 + i * 1024: 32768 + i * 1024 + 32].clone()   # c_i (offset 131072 + i*4096 B)
        v = torch.addcmul(v, xs[i * 1024: i * 1024 + 32], s0)
        v = v + s0 * s1
        assert torch.allclose(results[0][i * 1024: i * 1024 + 32], v, rtol=1e-5, atol=1e-5)


def test_device_properties_come_from_cuda_bindings():
    """runtime.device asks the driver through cuda-bindings; without a GPU that is a clear error."""
    import torch
    from dgir.runtime import device
    if torch.cuda.is_available():
        p = device.properties(0)
        assert p.sms > 0 and p.smem_optin >= 48 * 1024 and len(p.capability) == 2
    else:
        device.properties.cache_clear()
        with pytest.raises(RuntimeError, match="cannot query CUDA device 0 through cuda-bindings"):
            device.properties(0)


def test_sfa_transpose_kernel_is_built_by_llvm_nvptx():
    """The SIMT layout kernel: LLVM IR from llvmlite, PTX from LLVM's NVPTX backend, cubin from ptxas."""
    from dgir import toolchain
    from dgir.runtime import utility_kernels as uk
    ir_text = uk.sfa_transpose_llvm_ir()
    assert "nvvm.annotations" in ir_text and "nvptx64-nvidia-cuda" in ir_text
    ptx = uk.sfa_transpose_ptx()
    assert ".target sm_90a" in ptx and ".visible .entry dgir_sfa_to_mn_major" in ptx
    res = toolchain.assemble(ptx)
    assert res.cubin[:4] == b"\x7fELF" and res.resources.spill_stores == 0


def test_sfa_transpose_replan_equals_a_fresh_plan(fake, monkeypatch):
    """A re-pointed SFA transpose launch (a known layout's later plans) passes exactly what a plan
    built for the new tensors would: grid, block, every argument."""
    import torch
    from dgir.runtime import utility_kernels as uk
    monkeypatch.setattr(uk, "_function", lambda index: drv.Function(0xBEEF, "dgir_sfa_to_mn_major",
                                                                    drv.Module(0xAAAA, 0, "d")))
    m, kb = 200, 9

    def operands():
        return torch.rand(m, kb), torch.empty(kb, 204)[:, :m]

    kept = operands()                     # alive, so that the second pair gets other addresses
    first = uk.sfa_to_mn_major_plan(*kept)
    src, dst = operands()
    replanned, built = uk.sfa_to_mn_major_replan(first, src, dst), uk.sfa_to_mn_major_plan(src, dst)
    fake.calls.clear()
    replanned(0x5000)
    built(0x5000)
    (_, a), (_, b) = fake.calls
    assert (a["grid"], a["block"]) == (b["grid"], b["block"])
    values = [[x.value for x in plan.args] for plan in (replanned, built, first)]
    assert values[0] == values[1] and values[0][:2] == [src.data_ptr(), dst.data_ptr()] != values[2][:2]


def test_disk_cache_key_follows_the_emitted_ptx(tmp_path, monkeypatch):
    """Same IR, different PTX (an emitter change): a different cache entry, never a stale cubin."""
    from dgir import deep_gemm
    from dgir.emitters.ptx import emit as emit_mod
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    deep_gemm._compile_cached("fp8_gemm_nt", None, 256, 256, 512, None)
    first = {p.name for p in tmp_path.glob("*/*") if p.is_dir()}
    monkeypatch.setattr(emit_mod, "PTX_VERSION", "8.8")
    deep_gemm._compile_cached("fp8_gemm_nt", None, 256, 256, 512, None)
    assert len(first) == 1 and len({p.name for p in tmp_path.glob("*/*") if p.is_dir()} - first) == 1


def test_launch_plan_pdl_attribute_only_when_asked(fake):
    fn = drv.Function(0xBEEF, "k", drv.Module(0xAAAA, 0, "d"))
    plan = drv.LaunchPlan(fn, (132, 1, 1), 384, 1000, [ctypes.c_uint64(0xDEAD0000)], pdl_capable=True)
    fake.calls.clear()
    plan(0x5000)
    plan(0x5000, True)
    plan(0x5000, True)
    plan(0x5000)
    attrs = [c[1]["attrs"] for c in fake.calls]
    pdl = [(drv.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, (1, 0, 0), 1)]   # clusterDim aliases the int
    assert attrs == [[], pdl, pdl, []]


def test_launch_plan_on_two_streams_at_once_keeps_each_launch_on_its_stream(fake):
    """Two threads launching one plan on different streams: the driver call releases the GIL, so
    the other thread may launch in between the first one passing its config and the driver reading
    it.  Each (stream, PDL) has its own config struct, never rewritten: the first launch still goes
    to its own stream."""
    plan = _plan(fake)
    real = fake.cuLaunchKernelEx
    entered = []

    def launch(cfg_ref, fn, params, extra):
        if not entered:                    # the other thread runs here, before the driver reads cfg
            entered.append(1)
            plan(0x6000)
        return real(cfg_ref, fn, params, extra)

    plan._launch = launch
    plan(0x5000)
    assert [c[1]["stream"] for c in fake.calls] == [0x6000, 0x5000]
    plan(0x5000)
    plan(0x6000)
    assert [c[1]["stream"] for c in fake.calls][2:] == [0x5000, 0x6000]


def test_launch_plan_refuses_pdl_for_a_kernel_that_does_not_wait(fake):
    plan = _plan(fake)                                     # built without pdl_capable
    with pytest.raises(ValueError, match="programmatic_dependent_launch"):
        plan(0x5000, True)
    assert fake.calls == []                                # nothing launched
    plan(0x5000)                                           # without PDL it still launches
    assert [c[0] for c in fake.calls] == ["launch"]


@pytest.mark.parametrize("m,n,k", [(5, 136, 272), (130, 1000, 16), (3, 8, 4096)])
def test_dequantised_operands_rebuild_the_reference(m, n, k):
    """gpu_run.dequantised (the piecewise reference of outputs too large for one float64 tensor)
    gives exactly fp8_inputs' reference, K and N tails included; reference=False skips building it."""
    import torch
    from dgir.gpu_run import dequantised, fp8_inputs
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, torch.device("cpu"), 3)
    assert torch.equal(dequantised(A, sfa, 1).double() @ dequantised(B, sfb, 128).double().T, ref)
    assert fp8_inputs(m, n, k, torch.device("cpu"), 3, reference=False)[4] is None


def test_a_plan_owns_its_workspace_and_not_the_callers_tensors(fake, monkeypatch, tmp_path):
    """The API caches launch plans by the tensors' addresses and layouts; a plan that held the
    caller's tensors would keep their memory alive for as long as it stays cached (thousands of
    calls).  A plan keeps only its own workspace (a global split-K's partials and tile counters),
    and its parameters point at that workspace."""
    import gc
    import weakref

    import torch
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs, kernel_tensors
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.runtime.launcher import LoadedKernel
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    m, n, k = 64, 256, 1024
    cfg = Fp8GemmConfig(n=n, k=k, block_m=64, block_n=64, stages=4, split_k=2)
    kern = LoadedKernel(deep_gemm._compile_cached("fp8_gemm_nt", cfg, m, n, k, None), 0)
    assert kern.workspace_names, "the config must have a global workspace for this test to mean anything"
    A, sfa, B, sfb, _ = fp8_inputs(m, n, k, torch.device("cpu"), 0, reference=False)
    tensors = kernel_tensors(A, sfa, B, sfb, torch.empty(m, n, dtype=torch.bfloat16))
    callers = [weakref.ref(t) for t in tensors.values()]
    plan = kern.plan(tensors, m)
    del tensors, A, sfa, B, sfb
    gc.collect()
    assert all(r() is None for r in callers), "the plan keeps a caller's tensor alive"
    assert set(plan.workspace) == set(kern.workspace_names)
    pointers = {a.value for a in plan.args if isinstance(a, ctypes.c_uint64)}
    assert {t.data_ptr() for t in plan.workspace.values()} <= pointers
