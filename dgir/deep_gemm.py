"""DeepGEMM-compatible entry points backed by dgir-generated kernels.

    from dgir import deep_gemm
    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)

Every call runs a kernel dgir generated; there is no fallback to torch or cuBLAS.
"""
from __future__ import annotations

import functools
import threading
from typing import NamedTuple

import torch

from . import compiler
from .env import env
from .ops.fp8_gemm import ceil_div, check as check_dims
from .runtime.driver import stream_capturing

_pdl = False               # set_pdl: launch with programmatic dependent launch
_num_sms = None            # set_num_sms: the SMs a GEMM may use (None: all of its device's)
_kernels: dict = {}
_plans: dict = {}          # validated argument signature -> _Plan
_layouts: dict = {}        # the same without the addresses -> _Layout (what the validation decided)
_lock = threading.Lock()


def _fail(arg: str, expected: str, got) -> None:
    raise ValueError(f"fp8_gemm_nt: `{arg}` must be {expected}; got {got}")


def _describe(t) -> str:
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"{t.dtype} {list(t.shape)} strides {list(t.stride())} on {t.device}"


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor:
    """[M, KB] f32 scales -> the same values stored MN-major with M padded to 4 (16 bytes).
    On the GPU the copy is dgir's LLVM-built transpose kernel; on the CPU, torch."""
    m, kb = sf.shape
    m4 = ceil_div(m, 4) * 4
    if sf.stride(0) == 1 and sf.stride(1) == m4 and sf.data_ptr() % 16 == 0:
        return sf
    buf = torch.empty((kb, m4), dtype=torch.float32, device=sf.device)
    if sf.is_cuda and sf.dtype == torch.float32 and m and kb:
        from .runtime.utility_kernels import sfa_to_mn_major
        sfa_to_mn_major(sf, buf, _raw_stream(sf.device.index))
    else:
        buf[:, :m].copy_(sf.t())
    return buf[:, :m].t()


def transform_sf_into_required_layout(sf: torch.Tensor, mn: int, k: int, recipe=(1, 128, 128),
                                      is_sfa: bool = True) -> torch.Tensor:
    """DeepGEMM's helper, for the SM90 FP32 recipe: SFA -> MN-major TMA-aligned, SFB -> contiguous."""
    if is_sfa:
        return get_mn_major_tma_aligned_tensor(sf)
    return sf.contiguous()


def _check_operand(name, t, rows, cols, dtype, device):
    if not isinstance(t, torch.Tensor):
        _fail(name, "a torch.Tensor", type(t).__name__)
    if t.device.type != "cuda":
        _fail(name, "a CUDA tensor", _describe(t))
    if t.device != device:
        _fail(name, f"on {device} like `a`", _describe(t))
    if t.dtype != dtype:
        _fail(name, str(dtype), _describe(t))
    if t.dim() != 2 or (rows is not None and t.shape[0] != rows) or (cols is not None and t.shape[1] != cols):
        _fail(name, f"2-D of shape [{rows if rows is not None else '*'}, {cols}]", _describe(t))


def fp8_gemm_nt(a, b, d, c=None, recipe=None, compiled_dims: str = "nk", disable_ue8m0_cast: bool = False) -> None:
    """D = A @ B^T with DeepSeek block scales (DeepGEMM's SM90 1D2D kernel semantics).

    a = (A, SFA): A float8_e4m3fn [M, K], K-major (row stride a multiple of 16 bytes); SFA float32
        [M, ceil(K/128)] in any layout: MN-major TMA-aligned (DeepGEMM's) and, for tiles of <= 128
        rows, row-major contiguous are read in place; any other is staged MN-major by a transpose
        launch before the GEMM.
    b = (B, SFB): B float8_e4m3fn [N, K], K-major; SFB float32 [ceil(N/128), ceil(K/128)].
    d: bfloat16 [M, N], row-major and contiguous; written, not accumulated.
    Alignment: N % 8 == 0 (16-byte rows of D for the TMA store), K % 16 == 0 (16-byte rows of A, B).
    c: must be None (DeepGEMM's SM90 1D2D kernel has no accumulation into C either).
    recipe: None or (1, 128, 128); other recipes are rejected.
    All tensors on one CUDA device of compute capability 9.0.  M = 0 returns at once.
    """
    try:   # warm path: these exact tensors were validated and planned before
        A, sfa = a
        B, sfb = b
        key = _plan_key(A, sfa, B, sfb, d, c, recipe, compiled_dims)
        plan = _plans.get(key)
    except Exception:       # malformed arguments (or unhashable recipe): the checks below say why
        key = plan = None
    if plan is not None and plan.direct:
        plan.launch(_raw_stream(plan.index), _pdl)
        return
    if plan is None:        # (a plan made now is not cached if the stream captures: see _plan_cold)
        plan = _plan_cold(a, b, d, c, recipe, compiled_dims, key)
        if plan is None:    # an empty product
            return
        stream = _raw_stream(plan.index)
    else:
        stream = _raw_stream(plan.index)
        if plan.buffers and (stream != plan.stream or _stream_capturing(stream, plan.index)):
            plan = _plan_for_stream(a, b, d, c, recipe, compiled_dims, key, stream, plan.index)
    launch, transpose, sfb_staging = plan.launch, plan.transpose, plan.sfb_staging
    if transpose is not None:
        transpose(stream)
    if sfb_staging is not None:
        sfb_staging.copy_(b[1])
    staged = transpose is not None or sfb_staging is not None
    # after a staging kernel the GEMM launches with PDL (when OVERLAP_STAGING): its CTAs start and set
    # up while that kernel finishes, and wait for it (griddepcontrol.wait) before touching memory; the
    # staging kernel itself was launched plainly, after all earlier work of the stream, so the GEMM
    # sees that work too
    launch(stream, _pdl or (staged and OVERLAP_STAGING and launch.pdl_capable))


# the GEMM after a staging kernel (SFA transpose, SFB copy) overlaps its start with that kernel's end
# (bench/sfa_layouts.py times it against serial launches, bench/TUNING.md step 113)
OVERLAP_STAGING = True


def _plan_for_stream(a, b, d, c, recipe, compiled_dims, key, stream: int, index: int):
    """The plan for a call whose cached plan owns buffers (staged scales, split-K partials and tile
    counters) that serve another stream, or that is made while its stream captures a CUDA graph.

    Buffers serve one stream: two launches of one plan running at once on two streams would share
    the split-K tile counters, and one's arrivals counted into the other's could reduce a tile
    before its partials are in, or leave a counter off zero for every later call.  So each stream
    gets its own plan, cached under (key, stream).  A CUDA graph keeps the buffers' addresses for
    every replay, and a cached plan's buffers are freed when the plan is evicted while the graph
    lives on: a plan made during a capture allocates them from the graph's own memory pool, as
    torch's temporaries are, and is not cached."""
    if _stream_capturing(stream, index):
        return _plan_cold(a, b, d, c, recipe, compiled_dims, None)
    key = (key, stream)
    return _plans.get(key) or _plan_cold(a, b, d, c, recipe, compiled_dims, key)


def set_pdl(enable: bool) -> None:
    """Launch the GEMMs with programmatic dependent launch (DeepGEMM's `set_pdl`; off by default, as
    there): each kernel may start while the stream's previous kernel is finishing, setting up its
    barriers and descriptors in that kernel's tail, and waits for its results before touching
    memory (every dgir kernel carries that wait; bench/pdl_chain.py measures the gain)."""
    global _pdl
    if not isinstance(enable, bool):
        raise ValueError(f"set_pdl: `enable` must be a bool; got {type(enable).__name__}")
    _pdl = enable


def get_pdl() -> bool:
    return _pdl


def _device_sms() -> int:
    """The SM count of torch's current CUDA device."""
    from .runtime.device import properties
    return properties(torch.cuda.current_device()).sms


def set_num_sms(num_sms: int) -> None:
    """Let each GEMM use at most `num_sms` SMs (DeepGEMM's `set_num_sms`), e.g. to leave the others to
    kernels that run beside it (communication).  The persistent grid then has at most that many CTAs,
    one per SM (no config with two CTAs per SM is chosen: those could spread over twice as many SMs),
    and the tile config is the one chosen for that many SMs (dgir.tuning.choose with the device's
    count): an entry measured at that count (DG_AUTOTUNE=1 records under it), else the whole device's
    entry where it runs the same way on fewer SMs, else the cost model's pick.  Every argument layout
    is decided afresh after the call.  `num_sms` must be 1 .. the current
    device's SM count; that count itself (DeepGEMM's default) lifts the limit."""
    global _num_sms
    if isinstance(num_sms, bool) or not isinstance(num_sms, int):
        raise ValueError(f"set_num_sms: `num_sms` must be an int; got {type(num_sms).__name__}")
    total = _device_sms()
    if not 1 <= num_sms <= total:
        raise ValueError(f"set_num_sms: `num_sms` must be in 1..{total} (the SMs of the current device); got {num_sms}")
    with _lock:
        _num_sms = None if num_sms == total else num_sms
        _plans.clear()       # their launches were decided for the old count
        _layouts.clear()


def get_num_sms() -> int:
    """The SMs a GEMM may use: set_num_sms's value, else the current device's SM count."""
    return _device_sms() if _num_sms is None else _num_sms


def _plan_cold(a, b, d, c, recipe, compiled_dims, key):
    """A call whose tensors sit at addresses no plan was made for.  Tensors laid out as an earlier
    call's (devices, dtypes, shapes, strides, alignment) at other addresses, the usual case when a
    model allocates its activations anew, skip the validation and kernel look-up: their layout's
    decisions are reused and only the addresses are new (re-pointed tensor maps, fresh staging)."""
    layout = lkey = None
    if key is not None:
        A, sfa = a
        B, sfb = b
        lkey = _layout_key(A, sfa, B, sfb, d, recipe, compiled_dims)
        layout = _layouts.get(lkey)
    if layout is None:
        layout = _validate(a, b, d, c, recipe, compiled_dims)
        if layout is None:
            return None
        if lkey is not None:
            if len(_layouts) > 4096:
                _layouts.clear()
            _layouts[lkey] = layout
    plan = layout.plan(a[0], a[1], b[0], b[1], d)
    if key is not None and not (plan.buffers and _stream_capturing(_raw_stream(plan.index), plan.index)):
        if len(_plans) > 4096:
            _plans.clear()
        _plans[key] = plan
    return plan


def _layout_key(A, sfa, B, sfb, d, recipe, compiled_dims):
    """What the validation looked at besides the addresses: devices, dtypes, shapes, strides, and of
    the addresses only what it checked (TMA's 16-byte alignment of A, B and D, which every validated
    layout has, so a misaligned tensor never matches; whether SFA can be read in place)."""
    return (A.device, sfa.device, B.device, sfb.device, d.device,
            A.dtype, A.shape, A.stride(), sfa.dtype, sfa.shape, sfa.stride(), B.dtype, B.shape, B.stride(),
            sfb.dtype, sfb.shape, sfb.stride(), d.dtype, d.shape, d.stride(),
            (A.data_ptr() | B.data_ptr() | d.data_ptr()) % 16, sfa.data_ptr() % 16, recipe, compiled_dims)


class _Layout:
    """The decisions of one validated argument layout: the kernel, and how each scale tensor is read:
    SFA in place as "mn" (MN-major, TMA-aligned) or "k" (row-major, by a kernel built to read it so),
    or None: through a staging buffer the plan owns (refreshed every call); SFB in place or staged."""

    def __init__(self, kernel, m: int, sfa_in_place: str | None, sfb_in_place: bool, device):
        self.kernel, self.m, self.device = kernel, m, device
        self.sfa_in_place, self.sfb_in_place = sfa_in_place, sfb_in_place
        self.first_launch = None     # the layout's first launch plan, without its workspace: a pattern
        self.first_transpose = None  # the same for the SFA transpose (when SFA is staged)

    def plan(self, A, sfa, B, sfb, d):
        """The launch plan for these tensors (laid out as validated) and its staging."""
        M, kb, device = self.m, sfa.shape[1], self.device
        # SFA in the kernel's layout: [ceil(K/128), M] rows of stride align(M, 4) (MN-major, TMA-aligned);
        # the tensor map covers exactly M columns, so nothing past the caller's tensor is read.
        sfa_staging = sfb_staging = transpose = None
        if self.sfa_in_place == "k":
            sfa_storage = sfa
        elif self.sfa_in_place == "mn":
            sfa_storage = torch.as_strided(sfa, (kb, M), (sfa.stride(1), 1))
        else:   # an LLVM-built SIMT kernel copies SFA into the plan's buffer (runtime/utility_kernels.py)
            from .runtime import utility_kernels
            sfa_storage = sfa_staging = torch.empty((kb, ceil_div(M, 4) * 4), dtype=torch.float32, device=device)[:, :M]
            if self.first_transpose is None:
                transpose = self.first_transpose = utility_kernels.sfa_to_mn_major_plan(sfa, sfa_staging)
            else:
                transpose = utility_kernels.sfa_to_mn_major_replan(self.first_transpose, sfa, sfa_staging)
        if self.sfb_in_place:
            sfb_storage = sfb
        else:   # e.g. contiguous-transposed, which DeepGEMM also accepts
            sfb_storage = sfb_staging = torch.empty(sfb.shape, dtype=torch.float32, device=device)
        tensors = {"A": A, "B": B, "SFA": sfa_storage, "SFB": sfb_storage, "D": d}
        if self.first_launch is None:
            launch = self.kernel.plan(tensors, M)
            self.first_launch = launch.rebound({})      # (a pattern keeps no workspace alive)
        else:   # tensors in this layout: the first plan's launch re-pointed at theirs
            launch = self.kernel.replan(self.first_launch, tensors, M)
        buffers = tuple(t for t in (sfa_staging, sfb_staging, *launch.workspace.values()) if t is not None)
        # the buffers serve the stream of the call that made the plan (see _plan_for_stream)
        return _Plan(launch, transpose, sfb_staging, device.index, buffers,
                     _raw_stream(device.index) if buffers else None,
                     direct=transpose is None and sfb_staging is None and not buffers)


class _Plan(NamedTuple):
    """A validated call's launch: the GEMM's LaunchPlan, the SFA transpose into the plan's staging
    (None: SFA read in place), the SFB staging buffer (None: read in place), the device, and the
    device buffers the launches write or read that the plan owns and keeps alive (SFA and SFB
    staging, split-K workspace; the launch plans hold only their addresses) and the stream those
    buffers serve (None: no buffers)."""
    launch: object
    transpose: object
    sfb_staging: object
    index: int
    buffers: tuple
    stream: object
    # nothing but the launch: both scales read in place, no buffers (so no stream to check): the
    # usual warm call, which skips the rest of fp8_gemm_nt's branches (0.10-0.15 us of the 3.3 us
    # host path on the 2-core CPU machine, the launch excluded; TUNING.md step 115)
    direct: bool = False


def _validate(a, b, d, c, recipe, compiled_dims):
    """Every check of a new argument layout (each failure names the argument), then the kernel:
    the layout's decisions, or None when there is nothing to compute."""
    if not (isinstance(a, (tuple, list)) and len(a) == 2):
        _fail("a", "a pair (A, SFA)", type(a).__name__)
    if not (isinstance(b, (tuple, list)) and len(b) == 2):
        _fail("b", "a pair (B, SFB)", type(b).__name__)
    A, sfa = a
    B, sfb = b
    if not isinstance(A, torch.Tensor):
        _fail("a[0]", "a torch.Tensor", type(A).__name__)
    if c is not None:
        raise ValueError("fp8_gemm_nt: `c` is not supported by the SM90 FP8 kernel with 128x128 B scales "
                         "(DeepGEMM's SM90 1D2D kernel only writes BF16 D without accumulation); pass c=None")
    if recipe is not None and tuple(recipe) != (1, 128, 128):
        raise ValueError(f"fp8_gemm_nt: `recipe` must be None or (1, 128, 128) on SM90 with FP32 128x128 B scales; "
                         f"got {recipe}")
    if compiled_dims != "nk":
        raise ValueError(f"fp8_gemm_nt: `compiled_dims` must be 'nk' (N and K are compiled in); got {compiled_dims!r}")
    device = A.device
    if device.type != "cuda":
        _fail("a[0]", "a CUDA tensor", _describe(A))
    _check_operand("a[0]", A, None, None, torch.float8_e4m3fn, device)
    M, K = A.shape
    _check_operand("b[0]", B, None, K, torch.float8_e4m3fn, device)
    N = B.shape[0]
    _check_operand("d", d, M, N, torch.bfloat16, device)
    kb = ceil_div(K, 128)
    _check_operand("a[1]", sfa, M, kb, torch.float32, device)
    _check_operand("b[1]", sfb, ceil_div(N, 128), kb, torch.float32, device)
    for name, t in (("a[0]", A), ("b[0]", B)):
        if t.stride(1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.stride(0) < K:
            _fail(name, "K-major (stride(1) == 1) with a row stride that is a multiple of 16 bytes", _describe(t))
    if d.stride(1) != 1 or d.stride(0) != N:
        _fail("d", "contiguous row-major", _describe(d))
    for name, t in (("a[0]", A), ("b[0]", B), ("d", d)):      # TMA reads and writes them: 16-byte bases
        if t.numel() and t.data_ptr() % 16:
            _fail(name, "16-byte aligned (TMA)", f"{_describe(t)} at 0x{t.data_ptr():x}")
    if M == 0 or N == 0:
        return None
    check_dims(M, N, K)
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) != (9, 0):
        raise RuntimeError(f"fp8_gemm_nt: dgir's kernels are built for sm_90a (H100/H200); {device} is sm_{major}{minor}")
    if sfa.stride(0) == 1 and sfa.stride(1) == ceil_div(M, 4) * 4 and sfa.data_ptr() % 16 == 0:
        sfa_in_place = "mn"
    else:
        sfa_in_place = "k" if _sfa_k_major_in_place(sfa) and _k_major_pays(M, N, K, device) else None
    kernel = get_kernel("fp8_gemm_nt", M, N, K, device, sfa_major="k" if sfa_in_place == "k" else "mn")
    return _Layout(kernel, M, sfa_in_place, sfb.is_contiguous(), device)


# True: SFA row-major [M, ceil(K/128)] and contiguous (what per-token quantisation gives, DeepGEMM's usual
# input) is read in place, with no transpose launch before the GEMM, by a kernel variant (sfa_major="k")
# whose math threads load their rows' scales through L1, where the shape's tile has at most
# SFA_K_MAJOR_MAX_BLOCK_M rows; elsewhere it is staged MN-major.  bench/sfa_layouts.py, TUNING.md step
# 114: the whole call 0.84-1.04x the staged call's time at the M <= 128 cells (geomean 0.92),
# 0.91-0.99x at M = 256-2048 with tiles of <= 128 rows; the host's warm call 7.3 us instead of 12.4.
# Tiles of 192 and 256 rows ran 1.00-1.21x the staged call's time (their rows' lines fill L1), so those
# keep the transpose
SFA_K_MAJOR_IN_PLACE = True
SFA_K_MAJOR_MAX_BLOCK_M = 128


def _sfa_k_major_in_place(sfa) -> bool:
    """Whether the K-major kernel can read this [M, KB] SFA in place: row-major and contiguous (the
    kernel's row stride is KB, compiled in) at a 4-byte aligned address."""
    kb = sfa.shape[1]
    return SFA_K_MAJOR_IN_PLACE and sfa.stride(1) == 1 and sfa.stride(0) == kb and sfa.data_ptr() % 4 == 0


def row_major_sfa_read_in_place(cfg) -> bool:
    """Whether a contiguous row-major SFA is read in place (by `cfg` made K-major) for a shape whose
    chosen config is `cfg`: the in-place read is on and the tile has at most SFA_K_MAJOR_MAX_BLOCK_M
    rows; otherwise the call stages SFA MN-major (`dgir choose` shows the answer per shape)."""
    return SFA_K_MAJOR_IN_PLACE and cfg.block_m <= SFA_K_MAJOR_MAX_BLOCK_M


def _k_major_pays(m: int, n: int, k: int, device) -> bool:
    """Whether the shape's tile is one the K-major SFA read suits (SFA_K_MAJOR_MAX_BLOCK_M rows at most)."""
    from .runtime.device import properties
    dev = device.index if device.index is not None else torch.cuda.current_device()
    return row_major_sfa_read_in_place(_config("fp8_gemm_nt", m, n, k, properties(dev), dev))


def _current_stream_handle(index: int) -> int:      # torch without the raw-stream entry point
    return torch.cuda.current_stream(index).cuda_stream


# torch's current stream on a device as a raw handle (honours graph capture)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _current_stream_handle)


_current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
_current_stream_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)


def _stream_capturing(stream: int, index: int) -> bool:
    """Whether the launch stream (torch's current stream on device `index`) is capturing a CUDA graph.
    On the current device that stream is the one torch's own query reads, at less than half the
    cost of the driver query through ctypes (0.79 against 1.82 us on the H200 host, step 112)."""
    if index == _current_device():
        return _current_stream_capturing()
    return stream_capturing(stream)


def _plan_key(A, sfa, B, sfb, d, c, recipe, compiled_dims):
    """Everything the validation looked at: equal keys -> the same checks pass, the same launch.
    The device is implied by the address (CUDA's unified virtual addressing gives every device's and
    the host's allocations disjoint ranges), which keeps the key cheap: it is built on every call."""
    if c is not None:
        return None
    return (A.data_ptr(), A.dtype, A.shape, A.stride(), sfa.data_ptr(), sfa.dtype, sfa.shape, sfa.stride(),
            B.data_ptr(), B.dtype, B.shape, B.stride(), sfb.data_ptr(), sfb.dtype, sfb.shape, sfb.stride(),
            d.data_ptr(), d.dtype, d.shape, d.stride(), recipe, compiled_dims)


def _config(op: str, m: int, n: int, k: int, props, device_index: int):
    """The tile config for this shape on this device (dgir.tuning.choose: a measured one, else with
    DG_AUTOTUNE=1 the winner of timing the model's best candidates, else one measured at a nearby M
    for the same N and K, else the cost model's, or at a small M one measured for a similar (N, K)
    where the model's pick is of a kind it misjudges)."""
    return _choice(op, m, n, k, props, device_index).config


def _choice(op: str, m: int, n: int, k: int, props, device_index: int):
    e = env()
    sms = props.sms if _num_sms is None else min(_num_sms, props.sms)
    return _choice_for(op, m, n, k, props.name, sms, props.sms, device_index, e.tuned, e.autotune, str(e.cache_dir))


@functools.lru_cache(maxsize=4096)
def _choice_for(op, m, n, k, device_name, sms, device_sms, device_index, tuned, autotune, cache_dir):
    """`sms`: the SMs the launch may use, `device_sms` the device's (fewer: set_num_sms's limit)."""
    from . import tuning
    hook = None
    if autotune:
        from .autotune import autotune as tune
        limit = sms if sms < device_sms else None
        hook = lambda: tune(op, m, n, k, device_index, num_sms=limit)     # noqa: E731
    return tuning.choose(op, m, n, k, device_name, sms, tuned=tuned, autotune=hook, device_sms=device_sms)


def get_kernel(op: str, m: int, n: int, k: int, device, passes=None, variant: str = "default", config=None,
               sass_interleave: bool | None = None, sfa_major: str | None = None):
    """Compile (or fetch) the kernel for this shape's config and load it on `device`; `sfa_major`
    ("mn" or "k") sets how it reads SFA (default: as the config says, "mn" for every chosen one).

    Warm calls cost one dict look-up: the key is (op, config, device, variant)."""
    dev = device.index if isinstance(device, torch.device) and device.index is not None else torch.device(device).index
    if dev is None:
        dev = torch.cuda.current_device()
    from .runtime.device import properties
    props = properties(dev)
    choice = None if config is not None else _choice(op, m, n, k, props, dev)
    cfg = config or choice.config
    if sfa_major is not None:
        from .ops.fp8_gemm import with_sfa_major
        cfg = with_sfa_major(cfg, sfa_major)
    key = (op, cfg, dev, variant)
    kern = _kernels.get(key)
    if kern is None:
        from .runtime.launcher import LoadedKernel
        if sass_interleave is None:
            sass_interleave = env().sass_interleave
        with _lock:
            kern = _kernels.get(key)
            if kern is None:
                res = _compile_cached(op, cfg, m, n, k, passes, sass_interleave)
                if res.ir.get("smem_bytes") > props.smem_optin:
                    raise RuntimeError(f"{op}: kernel {res.name} needs {res.ir.get('smem_bytes')} B of shared memory, "
                                       f"{props.name} allows {props.smem_optin} B per block")
                if env().print_configs or env().jit_debug:
                    print(f"dgir: {op} m={m} n={n} k={k} -> {cfg}"
                          + (f" [{choice.describe()}]" if choice is not None else " [given]"))
                from .runtime import driver
                driver.current_device_context(dev)
                kern = _kernels[key] = LoadedKernel(res, dev)
    return kern


def _compile_cached(op, cfg, m, n, k, passes, sass_interleave=False):
    """Lowering and passes always run (they are cheap and give the IR); ptxas only on a cache miss.
    The key covers the final IR, the emitted PTX (so an emitter change is a new kernel even when the
    IR is the same), the pipeline identity (pass names + sources) and the toolchain."""
    from . import __version__, toolchain
    from .printer import print_ir
    from .runtime.cache import KernelCache, make_key
    res = compiler.compile(op, m=m, n=n, k=k, config=cfg, passes=passes, assemble=False)
    from .runtime import sass
    key = make_key(print_ir(res.ir) + "\n" + res.ptx, res.pipeline_id, toolchain.toolchain_versions(), __version__,
                   f"sass_interleave={sass.SOURCE_ID if sass_interleave else 'off'}")

    def build():
        asm = toolchain.assemble(res.ptx)
        res.resources, res.warnings = asm.resources, asm.warnings
        files = {"kernel.ptx": res.ptx.encode(), "kernel.cubin": asm.cubin}
        if sass_interleave:
            # SASS-level pass over the cubin, with its own before/after listing
            patched = sass.interleave_ffma_sass(asm.cubin, res.name)
            files.update({"kernel.cubin": patched.cubin, "before.sass": patched.before_sass.encode(),
                          "after.sass": patched.after_sass.encode(),
                          "sass_patch.txt": f"runs {patched.runs} patched {patched.patched}\n".encode()})
        return files

    files, _ = KernelCache().get_or_put(key, build)
    res.cubin = files["kernel.cubin"]
    res.sass_patch = files.get("sass_patch.txt", b"").decode()
    if env().dump_ptx:
        print(res.ptx)
    if env().dump_sass:
        from .toolchain import disassemble
        print(disassemble(res.cubin))
    return res
