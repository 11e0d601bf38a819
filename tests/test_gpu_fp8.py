"""fp8_gemm_nt on the GPU (H200): correctness over DeepGEMM's shapes, bad inputs, graphs, devices.

Run on the H200 with `pytest -m gpu`.  Fresh random inputs every run, D poisoned with NaN before
each launch, every element checked (finite) and calc_diff against the float64 reference < 1e-3."""
import pytest
import torch

pytestmark = pytest.mark.gpu

NK = [(2112, 7168), (576, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
SHAPES = [(m, n, k) for m in (1, 64, 128, 4096) for n, k in NK] + \
         [(m, n, k) for m in (17, 4097, 8191) for n, k in NK] + \
         [(130, 1000, 272), (3, 136, 16), (257, 8, 4096)] + \
         [(18192, 1280, 512), (1064, 3920, 2048), (8, 27032, 4608), (160, 3864, 12960), (12, 408, 11088),
          (5784, 1072, 15888)] + \
         [(64, 1024, 65536), (8, 32768, 65552)]
# N tails, K tails, tiny N; spec 277's shapes: M past 8192, N % 64, N % 16, K % 128; 512 K blocks; B of
# more than 2^31 elements (with a K tail)


def _run(m, n, k, device="cuda:0", seed=None):
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs
    seed = torch.randint(0, 2**31, ()).item() if seed is None else seed   # fresh inputs every run
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, torch.device(device), seed)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    torch.cuda.synchronize(device)
    return d, ref, (A, sfa, B, sfb)


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_fp8_gemm_nt_matches_reference(m, n, k):
    from dgir.gpu_run import calc_diff
    d, ref, _ = _run(m, n, k)
    assert torch.isfinite(d).all(), "some elements were never written (NaN poison survived)"
    diff = calc_diff(d.double(), ref)
    assert diff < 1e-3, diff


def test_output_of_more_than_2_31_elements():
    """D past 2^31 elements and M past 65535 (an int32 flat index or a 16-bit row count would wrap):
    every element written (NaN poison), calc_diff against the float64 reference built 4096 rows at a
    time (the whole reference would take 17 GB)."""
    from dgir import deep_gemm
    from dgir.gpu_run import dequantised, fp8_inputs
    m, n, k = 66000, 33000, 256
    assert m * n > 2**31
    A, sfa, B, sfb, _ = fp8_inputs(m, n, k, torch.device("cuda"), torch.randint(0, 2**31, ()).item(), reference=False)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    torch.cuda.synchronize()
    b = dequantised(B, sfb, 128).double()
    xy = xx_yy = 0.0
    for r in range(0, m, 4096):
        ref = dequantised(A[r:r + 4096], sfa[r:r + 4096], 1).double() @ b.T
        out = d[r:r + 4096].double()
        assert torch.isfinite(out).all(), f"rows {r}..: some elements were never written"
        xy += float((out * ref).sum())
        xx_yy += float((out * out + ref * ref).sum())
    diff = 1 - 2 * xy / xx_yy
    assert diff < 1e-3, diff


@pytest.mark.parametrize("m,n,k", [(256, 1024, 1024), (64, 1024, 65536)])   # the second: split-K, a global workspace
def test_calls_with_fresh_tensors_do_not_keep_their_memory(m, n, k):
    """Every call with new tensors builds a launch plan and caches it by their addresses; the cache
    must not keep the caller's tensors (and their memory) alive.  Twenty calls on fresh operands
    and outputs may leave the plans' own buffers (staged scales, workspace), not twenty calls'
    operands."""
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs

    def call(seed):
        A, sfa, B, sfb, _ = fp8_inputs(m, n, k, torch.device("cuda"), seed, reference=False)
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
        return A.nbytes + B.nbytes + d.nbytes

    call(0)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    one_call = max(call(seed) for seed in range(1, 21))
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before < one_call


@pytest.mark.parametrize("m,n,k", [(200, 2112, 1024), (64, 2112, 7168)])   # the second: split-K, a global workspace
@pytest.mark.parametrize("scales", ["as given", "mn-major", "sfb transposed"])
def test_new_addresses_in_a_known_layout_are_planned_without_revalidation(m, n, k, scales, monkeypatch):
    """Calls on fresh tensors (every address new) laid out as an earlier call's reuse its validated
    layout (one validation in all) with re-pointed tensor maps and their own staging and workspace:
    every result correct.  A misaligned D in that layout is still refused, naming `d`."""
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff, fp8_inputs
    validations = []
    validate = deep_gemm._validate
    monkeypatch.setattr(deep_gemm, "_validate", lambda *args: validations.append(1) or validate(*args))
    monkeypatch.setattr(deep_gemm, "_layouts", {})
    for _ in range(3):
        A, sfa, B, sfb, ref = fp8_inputs(m, n, k, torch.device("cuda"), torch.randint(0, 2**31, ()).item())
        if scales == "mn-major":
            sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
        if scales == "sfb transposed":
            sfb = sfb.t().contiguous().t()
        d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
        torch.cuda.synchronize()
        assert torch.isfinite(d).all(), "some elements were never written (NaN poison survived)"
        assert calc_diff(d.double(), ref) < 1e-3
    assert len(validations) == 1
    shifted = torch.empty(m * n + 8, dtype=torch.bfloat16, device="cuda")[4:4 + m * n].view(m, n)
    with pytest.raises(ValueError, match="`d` must be 16-byte aligned"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), shifted)


def _staged_operands(m, n, k, seed):
    """Operands whose scales the plan stages: SFA [M, KB] row-major with padded rows (transposed into
    the plan's buffer every call; contiguous rows would be read in place), SFB column-major (copied
    into the plan's buffer every call)."""
    from dgir.gpu_run import fp8_inputs
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, torch.device("cuda"), seed)
    padded = torch.empty(m, sfa.shape[1] + 4, device="cuda")[:, :sfa.shape[1]].copy_(sfa)
    return A, padded, B, sfb.t().contiguous().t(), ref


def _buffer_sizes(plan, sfa, sfb) -> set:
    """Byte sizes of a plan's buffers: SFA staging [KB, align(M, 4)] f32, SFB staging, the launch's
    workspace (computed, so that a plan which lost track of a buffer is still covered)."""
    m, kb = sfa.shape
    return {kb * (-(-m // 4) * 4) * 4, sfb.numel() * 4} | {t.nbytes for t in plan[0].workspace.values()}


def _claim_freed_blocks(sizes, count=32):
    """Tensors of these byte sizes, filled with 7.0.  The caching allocator hands such tensors any
    freed block of the size, so a launch that still uses a freed buffer writes into one of them."""
    return [torch.full((nbytes // 4,), 7.0, device="cuda") for nbytes in sizes for _ in range(count)]


def _corrupted(claims) -> int:
    torch.cuda.synchronize()
    return sum(not bool((t == 7.0).all()) for t in claims)


@pytest.mark.parametrize("m", [128, 64])     # 64: split-K with a global workspace
def test_a_cached_plans_buffers_stay_its_own(m):
    """The buffers a cached plan's launches use (SFA and SFB staging, split-K workspace) stay
    allocated while the plan is cached: tensors allocated after the plan was made never share their
    memory, so repeated warm calls leave them untouched and stay correct."""
    import gc
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff
    n, k = 2112, 7168
    A, sfa, B, sfb, _ = _staged_operands(m, n, k, 20)
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    torch.cuda.synchronize()
    gc.collect()
    plan = deep_gemm._plans[deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")]
    claims = _claim_freed_blocks(_buffer_sizes(plan, sfa, sfb))
    for seed in (21, 22):
        A2, sfa2, B2, sfb2, ref = _staged_operands(m, n, k, seed)
        A.copy_(A2), sfa.copy_(sfa2), B.copy_(B2), sfb.copy_(sfb2), d.fill_(float("nan"))
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
        torch.cuda.synchronize()
        assert torch.isfinite(d).all() and calc_diff(d.double(), ref) < 1e-3
    assert _corrupted(claims) == 0, "a warm call wrote memory its plan had given back"


def _graph_after_eviction(m):
    """Capture a call whose cached plan owns buffers, evict every plan, let other tensors take the
    freed memory, replay: (calc_diff of the replay, how many of those tensors it wrote into)."""
    import gc
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff
    n, k = 2112, 7168
    A, sfa, B, sfb, _ = _staged_operands(m, n, k, 30)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)             # the plan, cached outside the capture
    plan = deep_gemm._plans[deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")]
    g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    sizes = _buffer_sizes(plan, sfa, sfb)
    deep_gemm._plans.clear()                                  # as the cache does at 4096 plans
    del plan
    gc.collect()
    A2, sfa2, B2, sfb2, ref = _staged_operands(m, n, k, 31)
    claims = _claim_freed_blocks(sizes)
    A.copy_(A2), sfa.copy_(sfa2), B.copy_(B2), sfb.copy_(sfb2), d.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    return calc_diff(d.double(), ref), _corrupted(claims)


@pytest.mark.parametrize("m", [128, 64])     # 64: split-K with a global workspace
def test_a_graph_replays_after_its_calls_plan_was_evicted(m):
    """A graph captured on a call whose cached plan owns buffers replays correctly after the plan
    cache dropped that plan, and writes no memory the allocator has since handed to other tensors
    (the capture made a plan of its own, from the graph's memory pool)."""
    diff, corrupted = _graph_after_eviction(m)
    assert diff < 1e-3 and corrupted == 0


def one_call_on_two_streams(rounds: int = 200):
    """The same call (the same tensors) launched on two streams at once, `rounds` times, at
    128x1024x7168, whose kernel sums split-K partials through a global workspace with tile counters
    (the table's config).  Returns (calc_diff of D afterwards, how many counters of the workspaces
    the launches used are off zero, calc_diff of a later call with new operand values, whether
    the two streams' launches used distinct workspaces)."""
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff, fp8_inputs
    m, n, k = 128, 1024, 7168
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, torch.device("cuda"), torch.randint(0, 2**31, ()).item())
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    torch.cuda.synchronize()
    key = deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")
    assert "LOCKS" in deep_gemm._plans[key].launch.workspace, "this shape's kernel no longer has tile counters"
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for _ in range(rounds):
        for s in streams:
            with torch.cuda.stream(s):
                deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    torch.cuda.synchronize()
    first = calc_diff(d.double(), ref) if torch.isfinite(d).all() else float("inf")
    used = [deep_gemm._plans.get((key, s.cuda_stream), deep_gemm._plans[key]) for s in streams]
    locks = {id(p.launch.workspace["LOCKS"]): p.launch.workspace["LOCKS"] for p in [deep_gemm._plans[key], *used]}
    off_zero = sum(int((t != 0).sum()) for t in locks.values())
    A2, sfa2, B2, sfb2, ref2 = fp8_inputs(m, n, k, torch.device("cuda"), torch.randint(0, 2**31, ()).item())
    A.copy_(A2), sfa.copy_(sfa2), B.copy_(B2), sfb.copy_(sfb2), d.fill_(float("nan"))
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    torch.cuda.synchronize()
    later = calc_diff(d.double(), ref2) if torch.isfinite(d).all() else float("inf")
    distinct = used[0].launch.workspace["LOCKS"] is not used[1].launch.workspace["LOCKS"]
    return first, off_zero, later, distinct


def test_one_call_on_two_streams_at_once():
    """A plan's split-K workspace serves one stream: the same call launched on two streams at once
    uses one workspace per stream, so D stays right, every tile counter ends at zero and a later call
    is right (with one shared workspace, one launch's arrivals count into the other's)."""
    first, off_zero, later, distinct = one_call_on_two_streams()
    assert distinct and off_zero == 0 and first < 1e-3 and later < 1e-3, (first, off_zero, later, distinct)


@pytest.mark.parametrize("pad", [0, 4])      # SFA rows contiguous: read in place; padded: staged
def test_the_first_call_of_a_shape_may_be_inside_a_graph_capture(pad):
    """In a fresh process (no kernel loaded), the first call of a shape made inside a capture under
    torch's default error mode compiles and loads its kernels (the GEMM's and, SFA row-major with
    padded rows, the transpose's) while the stream captures; the replay is correct."""
    import json
    import subprocess
    import sys
    script = (
        "import torch, json\n"
        "from dgir import deep_gemm\n"
        "from dgir.gpu_run import calc_diff, fp8_inputs\n"
        "A, sfa, B, sfb, ref = fp8_inputs(200, 1544, 1040, torch.device('cuda'), torch.randint(0, 2**31, ()).item())\n"
        f"sfa = torch.empty(200, sfa.shape[1] + {pad}, device='cuda')[:, :sfa.shape[1]].copy_(sfa)\n"
        "d = torch.full((200, 1544), float('nan'), dtype=torch.bfloat16, device='cuda')\n"
        "g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()\n"
        "with torch.cuda.stream(s):\n"
        "    with torch.cuda.graph(g, stream=s):\n"
        "        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)\n"
        "assert torch.isnan(d.float()).all()\n"
        "g.replay()\n"
        "torch.cuda.synchronize()\n"
        "print(json.dumps([bool(torch.isfinite(d).all()), calc_diff(d.double(), ref)]))\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    finite, diff = json.loads(r.stdout.strip().splitlines()[-1])
    assert finite and diff < 1e-3


def test_retargeted_tensor_map_equals_a_fresh_encode():
    """cuTensorMapReplaceAddress on a copy gives the same 128 bytes as encoding the map anew at the
    new address (the launcher re-points maps of a known layout instead of encoding them)."""
    from dgir.runtime import driver
    a, b = (torch.empty(1024, 4096, dtype=torch.uint8, device="cuda") for _ in range(2))
    driver.current_device_context(a.device)
    args = (0, 2, [4096, 1024], [4096], [128, 128], 3)
    first = driver.encode_tensor_map(args[0], args[1], a.data_ptr(), *args[2:])
    moved = driver.retarget_tensor_map(first, b.data_ptr())
    fresh = driver.encode_tensor_map(args[0], args[1], b.data_ptr(), *args[2:])
    assert bytes(moved) == bytes(fresh) and bytes(moved) != bytes(first)


@pytest.mark.parametrize("m,n,k", [(4096, 7168, 2048), (64, 2112, 7168), (128, 4096, 7168)])
def test_deterministic_bitwise(m, n, k):
    """Same inputs, same bits, run after run: split-K configs (the last two) included."""
    from dgir import deep_gemm
    d, ref, (A, sfa, B, sfb) = _run(m, n, k, seed=1)
    for _ in range(3):
        e = torch.full_like(d, float("nan"))
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), e)
        assert torch.equal(d.view(torch.int16), e.view(torch.int16))


def test_m_zero_returns():
    from dgir import deep_gemm
    A = torch.empty(0, 512, dtype=torch.float8_e4m3fn, device="cuda")
    B = torch.randn(256, 512, device="cuda").to(torch.float8_e4m3fn)
    kernels, plans = len(deep_gemm._kernels), len(deep_gemm._plans)
    deep_gemm.fp8_gemm_nt((A, torch.empty(0, 4, device="cuda")), (B, torch.ones(2, 4, device="cuda")),
                          torch.empty(0, 256, dtype=torch.bfloat16, device="cuda"))
    torch.cuda.synchronize()
    # an empty product returns before any compile, plan or launch
    assert (len(deep_gemm._kernels), len(deep_gemm._plans)) == (kernels, plans)


@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])   # PDL: programmatic edges in the graph
@pytest.mark.parametrize("m", [256, 64])   # 64: a split-K config, whose workspace the graph keeps
def test_cuda_graph_capture_and_replay(m, pdl):
    from dgir import deep_gemm
    deep_gemm.set_pdl(pdl)
    try:
        _capture_and_replay(m)
    finally:
        deep_gemm.set_pdl(False)


def _capture_and_replay(m):
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff, fp8_inputs
    n, k = 2112, 7168
    A_src, sfa, B, sfb, ref = fp8_inputs(m, n, k, torch.device("cuda"), 3)
    A = A_src.clone()
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)          # compile + load outside the capture
    d.fill_(float("nan"))
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            A.copy_(A_src)                                # the kernel before the GEMM writes its A
            deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    assert torch.isnan(d.float()).all()                   # captured, not run
    A2, sfa2, B2, sfb2, ref2 = fp8_inputs(m, n, k, torch.device("cuda"), 4)
    A_src.copy_(A2); sfa.copy_(deep_gemm.get_mn_major_tma_aligned_tensor(sfa2)); B.copy_(B2); sfb.copy_(sfb2)
    g.replay()
    torch.cuda.synchronize()
    assert calc_diff(d.double(), ref2) < 1e-3


def test_warm_call_under_another_context_and_in_a_fresh_thread():
    """The warm path launches without asking which context is current (runtime/driver.py
    LaunchPlan).  With a second context on the device current, the call must still run in the
    primary context and give the caller's context back; in a fresh thread (no context yet) it
    must run too."""
    import ctypes
    import threading
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff, fp8_inputs
    from dgir.runtime import driver
    lib, VP = driver._cuda(), ctypes.c_void_p
    A, sfa, B, sfb, ref = fp8_inputs(128, 2112, 7168, torch.device("cuda"), 5)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty(128, 2112, dtype=torch.bfloat16, device="cuda")
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)          # plan built: the next calls are warm

    def check(run):
        d.fill_(float("nan"))
        torch.cuda.synchronize()
        run()
        torch.cuda.synchronize()
        assert torch.isfinite(d).all() and calc_diff(d.double(), ref) < 1e-3

    def under_other_context():
        dev, other, cur = ctypes.c_int(), VP(), VP()
        driver._check(lib.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()), "cuDeviceGet")
        if hasattr(lib, "cuCtxCreate_v4"):
            driver._check(lib.cuCtxCreate_v4(ctypes.byref(other), None, 0, dev), "cuCtxCreate")
        else:
            driver._check(lib.cuCtxCreate_v2(ctypes.byref(other), 0, dev), "cuCtxCreate")
        try:                                              # `other` is current now (pushed)
            deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
            driver._check(lib.cuCtxGetCurrent(ctypes.byref(cur)), "cuCtxGetCurrent")
            assert cur.value == other.value, "the caller's context was not given back"
        finally:
            lib.cuCtxDestroy_v2(other)                    # pops it: the primary context is current again

    check(under_other_context)
    errors = []

    def in_thread():
        try:
            deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
        except Exception as e:                            # noqa: BLE001 - reported below
            errors.append(e)

    def fresh_thread():
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()

    check(fresh_thread)
    assert not errors, errors


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device():
    from dgir.gpu_run import calc_diff
    d, ref, _ = _run(300, 2112, 7168, device="cuda:1")
    assert d.device.index == 1 and calc_diff(d.double(), ref) < 1e-3


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_operands_on_different_devices_rejected():
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs
    A, sfa, B, sfb, _ = fp8_inputs(64, 256, 512, torch.device("cuda:0"), 0)
    d = torch.empty(64, 256, dtype=torch.bfloat16, device="cuda:1")
    with pytest.raises(ValueError, match="`d` must be on cuda:0"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)


def _bad_cases():
    from dgir.gpu_run import fp8_inputs
    A, sfa, B, sfb, _ = fp8_inputs(64, 256, 512, torch.device("cuda"), 0)
    d = torch.empty(64, 256, dtype=torch.bfloat16, device="cuda")
    bf = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
    wide = torch.randn(64, 1024, device="cuda").to(torch.float8_e4m3fn)
    return [
        ("dtype", ((bf, sfa), (B, sfb), d), r"`a\[0\]` must be torch.float8_e4m3fn"),
        ("k mismatch", ((A, sfa), (wide[:, :520].contiguous(), sfb), d), r"`b\[0\]` must be 2-D of shape \[\*, 512\]"),
        ("d shape", ((A, sfa), (B, sfb), d[:, :128]), r"`d` must be 2-D of shape \[64, 256\]"),
        ("d dtype", ((A, sfa), (B, sfb), d.float()), r"`d` must be torch.bfloat16"),
        ("non-contiguous", ((wide[:, ::2], sfa), (B, sfb), d), r"`a\[0\]` must be K-major"),
        ("misaligned rows", ((wide[:, :520][:, :512], sfa), (B, sfb), d), None),
        ("sfa shape", ((A, sfa[:, :3]), (B, sfb), d), r"`a\[1\]` must be 2-D of shape \[64, 4\]"),
        ("sfb shape", ((A, sfa), (B, sfb[:1]), d), r"`b\[1\]` must be 2-D of shape \[2, 4\]"),
        ("sfb dtype", ((A, sfa), (B, sfb.double()), d), r"`b\[1\]` must be torch.float32"),
        ("cpu d", ((A, sfa), (B, sfb), d.cpu()), r"`d` must be a CUDA tensor"),
        ("n not multiple of 8", ((A, sfa), (B[:250], sfb), torch.empty(64, 250, dtype=torch.bfloat16, device="cuda")),
         r"n must be a positive multiple of 8"),
        # views whose first element is not 16-byte aligned (rows of A, B and D are, by the checks above)
        ("misaligned a", ((_offset(A, 8), sfa), (B, sfb), d), r"`a\[0\]` must be 16-byte aligned"),
        ("misaligned b", ((A, sfa), (_offset(B, 4), sfb), d), r"`b\[0\]` must be 16-byte aligned"),
        ("misaligned d", ((A, sfa), (B, sfb), _offset(d, 2)), r"`d` must be 16-byte aligned"),
    ]


def _offset(t, elements):
    """t's values in a fresh view that starts `elements` into its storage (same shape and strides)."""
    buf = torch.empty(t.numel() + elements, dtype=t.dtype, device=t.device)
    out = buf[elements:].view(t.shape)
    out.copy_(t)
    return out


@pytest.mark.parametrize("i", range(14))
def test_bad_input_raises_before_launch(i):
    from dgir import deep_gemm
    name, (a, b, d), pattern = _bad_cases()[i]
    if pattern is None:   # a view with row stride 1024 B and 512 columns is legal: it must work
        deep_gemm.fp8_gemm_nt(a, b, d)
        torch.cuda.synchronize()
        return
    with pytest.raises(ValueError, match=pattern):
        deep_gemm.fp8_gemm_nt(a, b, d)
    torch.cuda.synchronize()     # nothing was launched that could fault


def test_not_sm90_is_a_clear_error(monkeypatch):
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs
    A, sfa, B, sfb, _ = fp8_inputs(64, 256, 512, torch.device("cuda"), 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    with pytest.raises(RuntimeError, match="sm_90a"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), torch.empty(64, 256, dtype=torch.bfloat16, device="cuda"))


def test_device_properties_of_the_h200():
    from dgir.runtime.device import properties
    p = properties(0)
    assert p.capability == (9, 0) and p.sms == torch.cuda.get_device_properties(0).multi_processor_count
    assert p.smem_optin == 232448


@pytest.mark.parametrize("layout", ["row_major", "transposed_view", "strided", "offset_mn_major"])
def test_sfa_in_any_layout(layout):
    """SFA in other layouts is brought into the kernel's by the LLVM-built transpose kernel."""
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff, fp8_inputs
    m, n, k = 300, 2112, 7168
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, torch.device("cuda"), 11)
    if layout == "transposed_view":
        sfa = sfa.t().contiguous().t()           # MN-major but not TMA-aligned (300 is, so pad differently)
        sfa = torch.empty(sfa.shape[1], m + 3, device="cuda")[:, :m].t().copy_(sfa)
    elif layout == "strided":
        sfa = torch.empty(m, 2 * sfa.shape[1], device="cuda")[:, ::2].copy_(sfa)
    elif layout == "offset_mn_major":    # the kernel's strides, but 4 bytes off a 16-byte boundary: staged
        kb, m4 = sfa.shape[1], (m + 3) // 4 * 4
        buf = torch.empty(kb * m4 + 1, device="cuda")[1:]
        sfa = torch.as_strided(buf, (m, kb), (1, m4)).copy_(sfa)
        assert sfa.data_ptr() % 16
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)       # the warm (planned) path too
    torch.cuda.synchronize()
    assert torch.isfinite(d).all() and calc_diff(d.double(), ref) < 1e-3
    t = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    assert torch.equal(t, sfa) and t.stride() == (1, (m + 3) // 4 * 4) and t.data_ptr() % 16 == 0


ISSUE_CELLS = [(m, n, k) for m in (64, 128, 4096) for n, k in NK]


K_MAJOR_EXTRA = [(257, 8, 4096), (8, 27032, 4608), (100, 256, 384), (200, 7168, 1792), (4097, 2112, 7168)]


@pytest.mark.parametrize("m,n,k", ISSUE_CELLS + K_MAJOR_EXTRA,
                         ids=[f"{m}x{n}x{k}" for m, n, k in ISSUE_CELLS + K_MAJOR_EXTRA])
def test_sfa_row_major_is_read_in_place_with_the_mn_major_kernels_bits(m, n, k, monkeypatch):
    """SFA [M, K/128] row-major and contiguous (what per-token quantisation gives), read in place for
    every tile size (the API's limit on BLOCK_M lifted): the API runs the kernel variant whose math
    threads read it (no transpose launch, no staging buffer), and D has the same bits as with SFA
    MN-major (the same scales feed the same FFMAs in the same order); rows of 12 and 56 bytes
    (K = 384, 1792), a last m block of one row."""
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff, fp8_inputs
    monkeypatch.setattr(deep_gemm, "SFA_K_MAJOR_MAX_BLOCK_M", 256)
    monkeypatch.setattr(deep_gemm, "_layouts", {})
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, torch.device("cuda"), torch.randint(0, 2**31, ()).item())
    outs = []
    for s in (sfa, deep_gemm.get_mn_major_tma_aligned_tensor(sfa)):
        d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        deep_gemm.fp8_gemm_nt((A, s), (B, sfb), d)
        outs.append(d)
        plan = deep_gemm._plans[deep_gemm._plan_key(A, s, B, sfb, d, None, None, "nk")]
        assert plan.transpose is None and plan.launch.fn.name.endswith("_sfk") == (s is sfa), plan.launch.fn.name
    torch.cuda.synchronize()
    assert torch.isfinite(outs[0]).all() and calc_diff(outs[0].double(), ref) < 1e-3
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


@pytest.mark.parametrize("m,n,k,in_place", [(64, 2112, 7168, True), (128, 7168, 16384, True), (512, 4096, 7168, True),
                                             (4096, 7168, 2048, False), (2048, 4096, 7168, False)])
def test_the_api_reads_row_major_sfa_in_place_where_the_tile_has_at_most_128_rows(m, n, k, in_place):
    """By default a contiguous row-major SFA is read in place where the shape's tile has <= 128 rows
    and staged (a transpose launch into the plan's buffer) where it has 192 or 256 (TUNING.md step
    114: slower there); either way D is right.  Padded rows are staged at any M."""
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff, fp8_inputs
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, torch.device("cuda"), torch.randint(0, 2**31, ()).item())
    padded = torch.empty(m, sfa.shape[1] + 4, device="cuda")[:, :sfa.shape[1]].copy_(sfa)
    for s, expect in ((sfa, in_place), (padded, False)):
        d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        deep_gemm.fp8_gemm_nt((A, s), (B, sfb), d)
        torch.cuda.synchronize()
        plan = deep_gemm._plans[deep_gemm._plan_key(A, s, B, sfb, d, None, None, "nk")]
        assert (plan.transpose is None) == expect and plan.launch.fn.name.endswith("_sfk") == expect
        assert torch.isfinite(d).all() and calc_diff(d.double(), ref) < 1e-3


def _run_config(m, n, k, cfg, variant, passes=None, runs=1):
    """Launch one explicit config `runs` times on fresh random inputs, D poisoned before each launch:
    (the loaded kernel, the outputs, the float64 reference)."""
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs, launch_poisoned
    dev = torch.device("cuda:0")
    kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg, variant=variant, passes=passes)
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, torch.randint(0, 2**31, ()).item())
    return kern, [launch_poisoned(kern, A, sfa, B, sfb) for _ in range(runs)], ref


def _check(d, ref):
    from dgir.gpu_run import calc_diff
    assert torch.isfinite(d).all(), "some elements were never written (NaN poison survived)"
    assert calc_diff(d.double(), ref) < 1e-3


# clusters of 2 with TMA multicast: explicit configs (the default may or may not pick them); odd
# m-block counts (B multicast: the pair's second tile lies past M), M below one block, long K
CLUSTER_CASES = [(4096, 7168, 2048, 256, 128, 3, "2A"), (4097, 4096, 7168, 128, 128, 5, "2A"),
                 (4096, 2112, 7168, 128, 192, 4, "2B"), (4225, 2112, 1536, 128, 160, 4, "2B"),
                 (100, 576, 7168, 64, 144, 6, "2B"), (17, 1024, 512, 64, 128, 8, "2A"),
                 (64, 4096, 7168, 64, 32, 8, "4A"), (330, 2112, 1536, 64, 32, 8, "4B"),
                 (768, 7168, 2048, 192, 112, 4, "2A"), (700, 576, 7168, 192, 96, 5, "2B")]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,mc", CLUSTER_CASES,
                         ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}bn{c[4]}_{c[6]}" for c in CLUSTER_CASES])
def test_cluster_multicast_matches_reference(m, n, k, bm, bn, stages, mc):
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, cluster=int(mc[0]), multicast=mc[1])
    kern, outs, ref = _run_config(m, n, k, cfg, "cluster-test", runs=2)
    assert kern.cluster == int(mc[0])
    _check(outs[0], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))     # and bitwise stable


# 256-wide tiles (columns 128-255 take the second B-scale block's scale; with the FP32 promotion the
# partial and the accumulator spill, so only checked for correctness) and the opt-in rescaled
# promotion (the tensor-core accumulator over all of K): (m, n, k, bm, bn, stages, cluster, promotion, split_k)
WIDE_AND_RESCALED = [(4096, 7168, 2048, 128, 256, 3, "2B", "fp32", 1), (300, 1024, 4096, 64, 256, 3, "1A", "fp32", 1),
                     (4096, 7168, 2048, 128, 256, 3, "2B", "rescaled", 1), (4097, 4096, 7168, 128, 256, 3, "2A", "rescaled", 1),
                     (300, 1024, 4096, 64, 256, 4, "1A", "rescaled", 1), (128, 4096, 7168, 64, 64, 8, "1A", "rescaled", 2),
                     (700, 2112, 7168, 192, 128, 4, "2B", "rescaled", 1)]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,cl,promotion,sk", WIDE_AND_RESCALED,
                         ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}bn{c[4]}_{c[6]}_{c[7]}_sk{c[8]}" for c in WIDE_AND_RESCALED])
def test_wide_tiles_and_rescaled_promotion_match_reference(m, n, k, bm, bn, stages, cl, promotion, sk):
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, cluster=int(cl[0]), multicast=cl[1],
                        promotion=promotion, split_k=sk)
    _, outs, ref = _run_config(m, n, k, cfg, "wide-rescaled-test", runs=2)
    _check(outs[0], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))     # and bitwise stable


# tiles that cross a 128-row B-scale block: every split column of each size (8 N tiles hit every
# residue of n0 % 128), through the branch-per-split promotion (<= 4 splits) or the per-group select
# N = 8 BLOCK_N: the tiles start at every offset n0 % 128 that the size allows; 152, 176 and 200 reach
# a third B-scale block
STRADDLE = [(64, 48, 8), (64, 80, 8), (64, 96, 8), (128, 112, 5), (128, 144, 5), (128, 160, 4), (128, 192, 4),
            (128, 176, 4), (64, 152, 6), (128, 200, 4)]


@pytest.mark.parametrize("bm,bn,stages", STRADDLE, ids=[f"bm{c[0]}_bn{c[1]}" for c in STRADDLE])
def test_straddling_tiles_match_reference(bm, bn, stages):
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    m, n, k = 200, 8 * bn, 1024
    _, (d,), ref = _run_config(m, n, k, Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages), "straddle-test")
    _check(d, ref)


# the promotion by indexed jumps (promote_scales jump=True, bench/TUNING.md step 120): the widths that
# select per column group otherwise, across 64-256 rows (152, 176 and 200 reach a third B-scale block),
# and (max_arms 0: variant jumpall) those promoted by branch arms; N = 8 BLOCK_N, every offset n0 % 128
JUMP_STRADDLE = [(64, 56, 8, 4), (128, 56, 8, 4), (64, 72, 8, 4), (128, 112, 5, 4), (128, 120, 5, 4), (128, 136, 5, 4),
                 (128, 144, 5, 4), (192, 88, 4, 4), (256, 104, 3, 4), (64, 152, 6, 4), (128, 176, 4, 4), (128, 200, 4, 4),
                 (64, 48, 8, 0), (192, 96, 5, 0), (128, 160, 4, 0)]


@pytest.mark.parametrize("bm,bn,stages,arms", JUMP_STRADDLE, ids=[f"bm{c[0]}_bn{c[1]}_arms{c[3]}" for c in JUMP_STRADDLE])
def test_straddling_tiles_promoted_by_jumps_match_reference(bm, bn, stages, arms):
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.passes.promote_scales import PromoteScales
    from dgir.pipeline import pipeline
    passes = [PromoteScales(jump=True, max_arms=arms) if p.name == "promote_scales" else p for p in pipeline("sm90a")]
    m, n, k = 200, 8 * bn, 1024
    kern, (d,), ref = _run_config(m, n, k, Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages),
                                  f"straddle-jump-test-arms{arms}", passes=passes)
    assert "brx.idx" in kern.result.ptx
    _check(d, ref)


# BLOCK_M 192 (three math warpgroups, 512 threads): M not a multiple of 192, a tile straddling two
# B-scale blocks, split-K over the global workspace (bitwise stable over launches)
BM192 = [(300, 7168, 2048, 128, 4, 1), (3072, 576, 7168, 72, 5, 1), (192, 7168, 16384, 96, 5, 2),
         (250, 2112, 7168, 64, 6, 4)]


@pytest.mark.parametrize("m,n,k,bn,stages,sk", BM192, ids=[f"{c[0]}x{c[1]}x{c[2]}_bn{c[3]}_sk{c[5]}" for c in BM192])
def test_three_math_warpgroups_match_reference(m, n, k, bn, stages, sk):
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    cfg = Fp8GemmConfig(n=n, k=k, block_m=192, block_n=bn, stages=stages, split_k=sk)
    kern, outs, ref = _run_config(m, n, k, cfg, "bm192-test", runs=2)
    _check(outs[0], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


def test_autotune_times_candidates_and_records_the_winner(tmp_path, monkeypatch):
    """DG_AUTOTUNE on the GPU: the top candidates are checked and timed, the fastest is recorded in the
    user cache, and the API then uses it."""
    import json
    from dgir import autotune, deep_gemm, tuning
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    best = autotune.autotune("fp8_gemm_nt", 96, 1536, 1024, 0, top=3)
    (entry,) = json.loads(tuning.user_cache().read_text())["entries"]
    from dgir.runtime.device import properties
    timed = len(autotune.candidates(96, 1536, 1024, properties(0).sms, 3))   # 3, cluster twins of splits, interleaved twins
    assert entry["m"] == 96 and len(entry["timed"]) == timed and entry["us"] == min(entry["timed"].values())
    deep_gemm._choice_for.cache_clear()
    assert deep_gemm._config("fp8_gemm_nt", 96, 1536, 1024, properties(0), 0) == best


@pytest.mark.parametrize("bm,bn,stages,cl", [(64, 32, 8, 1), (128, 192, 4, 1), (256, 128, 3, 2)])
def test_async_staged_b_scales_match_reference(bm, bn, stages, cl):
    """stage_b_scales with cp.async (opt-in, not yet the default): correct on the GPU."""
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.passes.stage_b_scales import StageBScales
    from dgir.pipeline import pipeline
    m, n, k = 1000, 2112 if cl == 1 else 2048, 2048
    passes = [StageBScales(async_copy=True, min_tile=0) if p.name == "stage_b_scales" else p for p in pipeline("sm90a")]
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, cluster=cl)
    _, (d,), ref = _run_config(m, n, k, cfg, "sfb-async", passes=passes)
    _check(d, ref)


@pytest.mark.parametrize("bm,bn,stages,cl,order", [(128, 128, 5, 1, "alternate"), (256, 128, 3, 2, "alternate"),
                                                   (128, 192, 4, 1, "alternate"), (256, 128, 3, 2, "pingpong"),
                                                   (128, 192, 4, 2, "pingpong"), (128, 128, 5, 1, "pingpong"),
                                                   (192, 96, 5, 2, "alternate"), (192, 128, 4, 1, "pingpong")])
def test_alternating_math_order_matches_reference(bm, bn, stages, cl, order):
    """math_order="alternate" / "pingpong" (order_wgmma_issue): the math warpgroups take turns; correct, done."""
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    m, n, k = 1000, {192: 2112, 96: 576}.get(bn, 2048), 2048
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, cluster=cl, math_order=order,
                        multicast="B" if bn == 192 else "A")
    _, (d,), ref = _run_config(m, n, k, cfg, order)
    _check(d, ref)


# split-K over a cluster: (m, n, k, block_n, stages, split_k, ctas_per_sm, num_sms); the num_sms of the
# last ones makes each cluster walk several output tiles (rounds of its ready / done barriers)
# block_m last (128: two math warpgroups exchanging their fragments, bench/TUNING.md step 116)
CLUSTER_SPLITS = [(64, 576, 7168, 32, 8, 7, 1, 132, 64), (128, 576, 7168, 64, 8, 7, 1, 132, 64),
                  (64, 2112, 7168, 64, 8, 4, 1, 132, 64), (17, 576, 7168, 32, 6, 7, 2, 132, 64),
                  (130, 1000, 2048, 40, 4, 8, 1, 16, 64), (64, 4096, 7168, 32, 6, 2, 2, 24, 64),
                  (100, 1000, 4096, 48, 6, 8, 2, 132, 64), (1, 136, 1024, 40, 4, 4, 2, 8, 64),   # N tails
                  (128, 576, 7168, 48, 8, 8, 1, 132, 128), (128, 2112, 7168, 64, 7, 4, 1, 132, 128),
                  (200, 1000, 4096, 64, 6, 4, 1, 16, 128), (77, 4096, 7168, 128, 4, 4, 1, 132, 128),
                  # non-portable clusters (9-16 CTAs); the 28-SM one walks several rounds
                  (64, 576, 7168, 32, 4, 14, 3, 132, 64), (128, 576, 7168, 64, 4, 14, 2, 132, 64),
                  (100, 1000, 2048, 48, 1, 16, 2, 32, 64), (128, 576, 7168, 32, 4, 14, 1, 132, 128)]


@pytest.mark.parametrize("m,n,k,bn,stages,sk,occ,sms,bm", CLUSTER_SPLITS,
                         ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[8]}_sk{c[5]}_sms{c[7]}" for c in CLUSTER_SPLITS])
def test_cluster_split_k_matches_reference_and_is_bitwise_stable(m, n, k, bn, stages, sk, occ, sms, bm):
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff, fp8_inputs, launch_poisoned
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, split_k=sk, split_reduce="cluster",
                        ctas_per_sm=occ, num_sms=sms)
    dev = torch.device("cuda:0")
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, torch.randint(0, 2**31, ()).item())
    kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg)
    outs = [launch_poisoned(kern, A, sfa, B, sfb) for _ in range(3)]
    assert torch.isfinite(outs[0]).all(), "some elements were never written (NaN poison survived)"
    assert calc_diff(outs[0].double(), ref) < 1e-3
    assert all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs[1:])


# three and four CTAs per SM (80 / 64 registers a thread at launch): (m, n, k, bn, stages, split_k,
# split_reduce, ctas_per_sm); N tails, M below one block, both split-K reductions, walks of several rounds
SHARED_SM = [(64, 24576, 1536, 64, 4, 1, "global", 3), (64, 2112, 7168, 48, 4, 4, "cluster", 3),
             (100, 4096, 7168, 32, 4, 2, "global", 4), (37, 7168, 2048, 56, 3, 1, "global", 4),
             (128, 1000, 4096, 96, 3, 1, "global", 3), (64, 576, 7168, 32, 3, 8, "cluster", 4)]


@pytest.mark.parametrize("m,n,k,bn,stages,sk,sr,occ", SHARED_SM, ids=[f"{c[0]}x{c[1]}x{c[2]}_bn{c[3]}_sk{c[5]}{c[6][:2]}_o{c[7]}"
                                                                   for c in SHARED_SM])
def test_three_and_four_ctas_per_sm_match_reference_and_are_bitwise_stable(m, n, k, bn, stages, sk, sr, occ):
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    cfg = Fp8GemmConfig(n=n, k=k, block_m=64, block_n=bn, stages=stages, split_k=sk, split_reduce=sr, ctas_per_sm=occ)
    _, outs, ref = _run_config(m, n, k, cfg, "default", runs=2)
    _check(outs[0], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


# split_order="interleaved" (opt-in, bench/TUNING.md step 130): slice s takes K blocks s, s + S, ...;
# (m, n, k, bm, bn, stages, split_k, split_reduce, ctas_per_sm): both reductions, 128-row tiles, N tails
INTERLEAVED = [(64, 576, 7168, 64, 32, 8, 8, "cluster", 2), (128, 2112, 7168, 64, 64, 12, 2, "cluster", 1),
               (100, 1000, 4096, 128, 64, 6, 4, "cluster", 1), (64, 4096, 7168, 64, 32, 8, 2, "global", 2)]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,sk,sr,occ", INTERLEAVED,
                         ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}_sk{c[6]}{c[7][:2]}" for c in INTERLEAVED])
def test_interleaved_split_k_matches_reference_and_is_bitwise_stable(m, n, k, bm, bn, stages, sk, sr, occ):
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, split_k=sk, split_reduce=sr,
                        ctas_per_sm=occ, split_order="interleaved")
    _, outs, ref = _run_config(m, n, k, cfg, "default", runs=2)
    _check(outs[0], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


# refill_slots (bench/TUNING.md step 131): the load role refills 2 or 4 ring slots together;
# (m, n, k, bm, bn, stages, split_k, split_reduce, ctas_per_sm, refill_slots): the bandwidth cell
# 128x4096x7168's table tile, a cluster split, a global split with an N tail, a 128-row tile
REFILLS = [(128, 4096, 7168, 64, 64, 11, 1, "global", 1, 4), (64, 2112, 7168, 64, 48, 4, 8, "cluster", 3, 2),
           (100, 1000, 4096, 64, 32, 8, 2, "global", 2, 4), (300, 7168, 2048, 128, 56, 9, 1, "global", 1, 4)]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,sk,sr,occ,rf", REFILLS,
                         ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}bn{c[4]}_sk{c[6]}_rf{c[9]}" for c in REFILLS])
def test_grouped_refills_match_reference_and_are_bitwise_stable(m, n, k, bm, bn, stages, sk, sr, occ, rf):
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, split_k=sk, split_reduce=sr,
                        ctas_per_sm=occ, refill_slots=rf)
    _, outs, ref = _run_config(m, n, k, cfg, "default", runs=2)
    _check(outs[0], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


# prefetch_first_stages (opt-in pass, bench variant entrypf, step 131): L2 prefetches from the kernel's
# entry, before PDL's grid_wait; (m, n, k, bm, bn, stages, split_k, split_reduce, ctas_per_sm, cluster)
ENTRY_PREFETCH = [(64, 576, 7168, 64, 32, 8, 8, "cluster", 2, "1A"), (128, 4096, 7168, 64, 64, 11, 1, "global", 1, "1A"),
                  (300, 4096, 2048, 128, 128, 5, 1, "global", 1, "2A")]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,sk,sr,occ,cl", ENTRY_PREFETCH,
                         ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}bn{c[4]}_sk{c[6]}_c{c[9]}" for c in ENTRY_PREFETCH])
def test_entry_prefetches_match_reference_and_are_bitwise_stable(m, n, k, bm, bn, stages, sk, sr, occ, cl):
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.passes.prefetch_first_stages import PrefetchFirstStages
    from dgir.pipeline import pipeline
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, split_k=sk, split_reduce=sr,
                        ctas_per_sm=occ, cluster=int(cl[0]), multicast=cl[1])
    passes = list(pipeline("sm90a"))
    at = [p.name for p in passes].index("multicast_tma") + 1
    kern, outs, ref = _run_config(m, n, k, cfg, "entrypf", passes=passes[:at] + [PrefetchFirstStages()] + passes[at:],
                                  runs=2)
    assert kern.result.ir.get("entry_prefetch").startswith("A/B of the first tile's first")
    _check(outs[0], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


# stream-K (opt-in config stream_k): cut partial rounds of tiles; (m, n, k, bm, bn, stages, cluster)
STREAM_K = [(4096, 2112, 7168, 128, 192, 4, "2B"), (3072, 576, 7168, 128, 144, 5, "1A"),
            (768, 7168, 2048, 128, 128, 5, "2A"), (300, 1000, 4096, 256, 128, 3, "1A"),
            (1024, 576, 7168, 128, 144, 5, "1A")]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,cl", STREAM_K, ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}bn{c[4]}_{c[6]}"
                                                                 for c in STREAM_K])
def test_stream_k_matches_reference_and_is_bitwise_stable(m, n, k, bm, bn, stages, cl):
    """Cut tiles are summed in piece order whichever walker completes them: the same bits run after
    run, and the tile counters are back at zero after every launch (else the next would be wrong)."""
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs, kernel_plan
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, cluster=int(cl[0]), multicast=cl[1],
                        stream_k=True)
    dev = torch.device("cuda:0")
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, torch.randint(0, 2**31, ()).item())
    kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg, variant="stream_k")
    d = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
    plan = kernel_plan(kern, A, sfa, B, sfb, d, m)       # one workspace for every launch
    outs = []
    for _ in range(3):
        d.fill_(float("nan"))
        plan(torch.cuda.current_stream(dev).cuda_stream)
        torch.cuda.synchronize(dev)
        outs.append(d.clone())
    _check(outs[0], ref)
    assert all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs[1:])


WOVEN = [(4096, 2112, 7168, 192, 128, 4, 2, "B", "together"), (3072, 2112, 1536, 128, 192, 4, 1, "A", "together"),
         (2000, 2112, 2048, 192, 96, 5, 1, "A", "alternate"), (3000, 2048, 128, 192, 128, 4, 1, "A", "together")]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,cl,mc,order", WOVEN,
                         ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}bn{c[4]}_c{c[6]}{c[7]}_{c[8]}" for c in WOVEN])
def test_woven_epilogue_matches_the_default_bitwise(m, n, k, bm, bn, stages, cl, mc, order):
    """overlap_epilogue's woven form (opt-in, whole_block=True: the next tile's first K block with this
    tile's epilogue woven in) adds the same products in the same order as the default kernel: on the
    same inputs the bits must agree, and both match the reference.  Several tiles per CTA, so the
    woven branch runs; K = 128 is a tile of one K block."""
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs, launch_poisoned
    from dgir.ir import Op
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.passes.overlap_epilogue import OverlapEpilogue
    from dgir.pipeline import pipeline
    dev = torch.device("cuda:0")
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, cluster=cl, multicast=mc, math_order=order)
    woven = [OverlapEpilogue(whole_block=True) if p.name == "overlap_epilogue" else p for p in pipeline("sm90a")]
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, torch.randint(0, 2**31, ()).item())
    outs = []
    for variant, passes in (("default", None), ("woven-test", woven)):
        kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg, variant=variant, passes=passes)
        modes = [x.get("overlap_epilogue") for x in kern.result.ir.walk() if x.op is Op.FOR and x.get("overlap_epilogue")]
        assert modes and modes[0].endswith("woven in") == (passes is not None), modes
        outs.append(launch_poisoned(kern, A, sfa, B, sfb))
    _check(outs[1], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


# direct stores (epilogue="direct"): lane pairs swap bf16 pairs so each lane stores 8 bytes; tiles with an
# odd count of 8-column groups (56, 72), an N tail (1000), M tails, clusters of 2 and two waves a warpgroup
DIRECT = [(4096, 32768, 512, 256, 128, 4, "2A"), (4097, 7168, 2048, 256, 128, 4, "2A"), (1000, 2112, 7168, 192, 128, 4, "2B"),
          (130, 1000, 1536, 128, 56, 6, "1A"), (77, 7168, 2048, 64, 72, 8, "1A"), (4096, 576, 7168, 192, 96, 5, "2B")]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,cl", DIRECT, ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}bn{c[4]}_c{c[6]}" for c in DIRECT])
def test_direct_epilogue_matches_the_tma_epilogue_bitwise(m, n, k, bm, bn, stages, cl):
    """The direct epilogue stores the same bf16 values as the staged TMA epilogue (only the path to
    memory differs): on the same inputs every bit of D agrees, and D matches the reference."""
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs, launch_poisoned
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    dev = torch.device("cuda:0")
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, torch.randint(0, 2**31, ()).item())
    outs = []
    for epilogue in ("tma", "direct"):
        st = stages if epilogue == "direct" else stages - 1      # the staging tile takes a ring slot's room
        cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=st, cluster=int(cl[0]), multicast=cl[1],
                            epilogue=epilogue)
        kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg)
        outs.append(launch_poisoned(kern, A, sfa, B, sfb))
    _check(outs[1], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


EARLY = [(4096, 7168, 2048, 256, 128, 3, "2A"), (1000, 2112, 1536, 256, 64, 4, "1A")]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,cl", EARLY, ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}bn{c[4]}_c{c[6]}" for c in EARLY])
def test_early_first_wave_staging_matches_the_default_bitwise(m, n, k, bm, bn, stages, cl):
    """stage_first_wave_early (the default at K <= 2048; here at any K) moves wave 0's staging into the
    last K block: same products, same conversion, so the bits of D agree with the kernel without it,
    and D matches the reference."""
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs, launch_poisoned
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    from dgir.passes.stage_first_wave_early import StageFirstWaveEarly
    from dgir.pipeline import pipeline
    dev = torch.device("cuda:0")
    cfg = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, cluster=int(cl[0]), multicast=cl[1])
    without = [p for p in pipeline("sm90a") if p.name != "stage_first_wave_early"]
    early = [StageFirstWaveEarly(max_k_blocks=10**6) if p.name == "stage_first_wave_early" else p
             for p in pipeline("sm90a")]
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, torch.randint(0, 2**31, ()).item())
    outs = []
    for variant, ps in (("no-early-test", without), ("early-test", early)):
        kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg, variant=variant, passes=ps)
        outs.append(launch_poisoned(kern, A, sfa, B, sfb))
    _check(outs[1], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


# programmatic dependent launch: 256x128 c2A, 64-row split-K over a cluster (DSMEM), global split-K, 64x64
PDL_SHAPES = [(4096, 7168, 2048), (128, 576, 7168), (64, 2112, 7168), (128, 4096, 7168)]


@pytest.mark.parametrize("m,n,k", PDL_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in PDL_SHAPES])
def test_pdl_launch_reads_what_the_previous_kernels_wrote(m, n, k):
    """set_pdl(True): the GEMM may start while the kernels before it finish.  Those kernels rewrite
    A, the scales and B right before each launch; the GEMM must see the new values: bitwise the
    result of the same GEMM on those inputs without PDL."""
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff, fp8_inputs
    seed = torch.randint(0, 2**31 - 2, ()).item()
    dev = torch.device("cuda")
    old = fp8_inputs(m, n, k, dev, seed)[:4]
    new = fp8_inputs(m, n, k, dev, seed + 1)
    A, sfa, B, sfb = (t.clone() for t in old)
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=dev)
    deep_gemm.fp8_gemm_nt((new[0], new[1]), (new[2], new[3]), d)       # the same kernel, PDL off
    torch.cuda.synchronize()
    expected = d.clone()
    assert calc_diff(expected.double(), new[4]) < 1e-3
    new_sfa = deep_gemm.get_mn_major_tma_aligned_tensor(new[1])
    deep_gemm.set_pdl(True)
    try:
        for _ in range(4):
            A.copy_(old[0]); sfa.copy_(deep_gemm.get_mn_major_tma_aligned_tensor(old[1]))
            B.copy_(old[2]); sfb.copy_(old[3])
            d.fill_(float("nan"))
            A.copy_(new[0]); B.copy_(new[2]); sfb.copy_(new[3]); sfa.copy_(new_sfa)   # sfa last: right before
            deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
            torch.cuda.synchronize()
            assert torch.equal(d.view(torch.int16), expected.view(torch.int16))
    finally:
        deep_gemm.set_pdl(False)


def test_pdl_chain_into_one_output_keeps_the_launch_order():
    """A long GEMM, then a short one into the same D, both with PDL: the long one lets the short one
    launch after its last loads, while its own epilogues still write D; the short one's writes must
    still land last (its grid_wait)."""
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff, fp8_inputs
    m, n = 512, 7168
    dev = torch.device("cuda")
    seed = torch.randint(0, 2**31 - 2, ()).item()
    long_ = fp8_inputs(m, n, 16384, dev, seed)
    short = fp8_inputs(m, n, 512, dev, seed + 1)
    d = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
    deep_gemm.fp8_gemm_nt((short[0], short[1]), (short[2], short[3]), d)
    torch.cuda.synchronize()
    expected = d.clone()
    assert calc_diff(expected.double(), short[4]) < 1e-3
    deep_gemm.set_pdl(True)
    try:
        for _ in range(8):
            d.fill_(float("nan"))
            deep_gemm.fp8_gemm_nt((long_[0], long_[1]), (long_[2], long_[3]), d)
            deep_gemm.fp8_gemm_nt((short[0], short[1]), (short[2], short[3]), d)
            torch.cuda.synchronize()
            assert torch.equal(d.view(torch.int16), expected.view(torch.int16))
    finally:
        deep_gemm.set_pdl(False)


# staging="ring": D staged in the ring slot of each tile's last K block (stage_in_ring_slot).  Several
# tiles per CTA where the grid is small (the deferred release and the next tile's loads interleave),
# clusters, K of one block, 64-row tiles with a deep ring, 128x64 and 128x56
RING_STAGING = [(512, 4096, 7168, 128, 128, 6, 1, "A", 132), (3000, 2048, 640, 128, 128, 6, 2, "B", 132),
                (1000, 1024, 128, 128, 128, 3, 1, "A", 8), (700, 7168, 2048, 128, 56, 9, 1, "A", 132),
                (128, 4096, 7168, 64, 64, 12, 1, "A", 132), (300, 2048, 1536, 128, 64, 9, 2, "A", 16),
                (2000, 576, 7168, 64, 128, 8, 2, "B", 32)]


@pytest.mark.parametrize("m,n,k,bm,bn,stages,cl,mc,sms", RING_STAGING,
                         ids=[f"{c[0]}x{c[1]}x{c[2]}_bm{c[3]}bn{c[4]}s{c[5]}_c{c[6]}{c[7]}_sms{c[8]}" for c in RING_STAGING])
def test_ring_staging_matches_the_default_bitwise(m, n, k, bm, bn, stages, cl, mc, sms):
    """The staging tile in a ring slot changes where D's bf16 bytes wait for the TMA store, not a single
    product: the bits equal the same tile's kernel with its own staging tile (one stage fewer when that
    does not fit), and both match the reference; run twice (the slot rotates between tiles)."""
    from dataclasses import replace
    from dgir import deep_gemm
    from dgir.gpu_run import fp8_inputs, launch_poisoned
    from dgir.ops.fp8_gemm import Fp8GemmConfig, max_stages
    dev = torch.device("cuda:0")
    ring = Fp8GemmConfig(n=n, k=k, block_m=bm, block_n=bn, stages=stages, cluster=cl, multicast=mc, num_sms=sms,
                         staging="ring")
    own = replace(ring, staging="tile", stages=min(stages, max_stages(bm, bn)))
    A, sfa, B, sfb, ref = fp8_inputs(m, n, k, dev, torch.randint(0, 2**31, ()).item())
    outs = []
    for cfg in (own, ring, ring):
        kern = deep_gemm.get_kernel("fp8_gemm_nt", m, n, k, dev, config=cfg)
        outs.append(launch_poisoned(kern, A, sfa, B, sfb))
    _check(outs[1], ref)
    assert all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs[1:])


# (N, K) the tuned table has never measured: at M <= 512 the API carries over a measured neighbour's
# config where the cost model's pick is a global split-K or a narrow unsplit tile (bench/TUNING.md
# steps 82, 85; above M = 128 a straddling carried width moves to 32 or 64 columns; a width whose
# rounding crossed a round is widened back), an M near
# measured ones takes their config scaled by the SM load, and the rest keep the model's pick
TUNED_DEVICE = "NVIDIA H200"     # the device of the shipped tuned table (dgir/tuned/*.json)
UNMEASURED = [(64, 1664, 7168, "analogous"), (48, 1792, 7168, "analogous"), (128, 4096, 12288, "analogous"),
              (96, 320, 7168, "analogous"), (128, 672, 7168, "analogous"), (64, 6656, 7168, "model"),
              (224, 640, 7168, "analogous"), (288, 704, 7168, "analogous"), (224, 1152, 7168, "analogous"),
              (224, 1024, 4096, "nearby"), (600, 1664, 7168, "model"),
              (4, 3200, 9728, "analogous"), (120, 1344, 5632, "analogous")]   # widened back to one round


@pytest.mark.parametrize("m,n,k,source", UNMEASURED, ids=[f"{m}x{n}x{k}" for m, n, k, _ in UNMEASURED])
def test_unmeasured_shapes_run_their_carried_or_modelled_config(m, n, k, source):
    from dgir import deep_gemm
    from dgir.ops import get_operator
    from dgir import tuning
    from dgir.ops.fp8_gemm import settle_m_tail
    from dgir.runtime.device import properties
    d, ref, _ = _run(m, n, k)
    _check(d, ref)
    dev = torch.cuda.current_device()
    choice = deep_gemm._choice("fp8_gemm_nt", m, n, k, properties(dev), dev)
    model = get_operator("fp8_gemm_nt").choose_config(m=m, n=n, k=k, num_sms=properties(dev).sms)
    model = settle_m_tail(model, m)      # the API's m_tail for this M (600 = 9 x 64 + 24: shifted)
    name, sms = properties(dev).name, properties(dev).sms
    if name != TUNED_DEVICE and tuning.stand_in_device(name, sms) != TUNED_DEVICE:
        source = "model"                 # the measured entries these rules carry are the H200's (and its
        #                                  stand-ins': the H100 SXM, tuning.stand_in_device)
    assert choice.source == source, choice.describe()
    assert (choice.config != model) == (source != "model"), (choice.config.kernel_name(), model.kernel_name())


# the whole config space sampled jointly (tests/dgir_testlib.random_fp8_case; its CPU twin is
# tests/test_config_fuzz.py): every knob at once, DeepGEMM-sized K, ragged M / N / K edges, full and
# partial grids.  Wide tiles that reach a third B-scale block spill (slow, still exact).
def _sampled_gpu_cases():
    import random
    from dgir_testlib import random_fp8_case
    return [random_fp8_case(random.Random(1000 + seed), gpu=True) for seed in range(96)]


SAMPLED = _sampled_gpu_cases()


@pytest.mark.parametrize("i", range(len(SAMPLED)),
                         ids=[f"{m}x{n}x{k}_{c.kernel_name().split('_', 5)[-1]}_sms{c.num_sms}_g{c.swizzle_group}"
                              for m, n, k, c in SAMPLED])
def test_sampled_configs_match_reference_and_are_bitwise_stable(i):
    m, n, k, cfg = SAMPLED[i]
    _, outs, ref = _run_config(m, n, k, cfg, "sampled", runs=2)
    _check(outs[0], ref)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


# 64x2112x7168 and 64x576x7168: the table runs three CTAs per SM (a split over a cluster); 4096x7168x2048:
# a 2-CTA cluster; 128x7168x16384 one round of 128-row tiles
@pytest.mark.parametrize("limit", [66, 131])
@pytest.mark.parametrize("m,n,k", [(64, 2112, 7168), (64, 576, 7168), (4096, 7168, 2048), (128, 7168, 16384)])
def test_set_num_sms_limits_the_grid_and_stays_correct(m, n, k, limit):
    from dgir import deep_gemm
    from dgir.gpu_run import calc_diff
    total = torch.cuda.get_device_properties(0).multi_processor_count
    assert deep_gemm.get_num_sms() == total
    deep_gemm.set_num_sms(limit)
    try:
        d, ref, (A, sfa, B, sfb) = _run(m, n, k)
        plan = deep_gemm._plans[deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")]
        assert plan.launch.cfg.gridDimX <= limit            # CTAs, one per SM (clusters included)
        assert torch.isfinite(d).all()
        assert calc_diff(d.double(), ref) < 1e-3
    finally:
        deep_gemm.set_num_sms(total)
    assert deep_gemm.get_num_sms() == total and deep_gemm._num_sms is None
