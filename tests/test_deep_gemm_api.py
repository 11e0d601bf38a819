"""fp8_gemm_nt's argument checks: every bad input is a ValueError naming the argument, raised
before anything is compiled or launched.  These run on the CPU (tensors on the CPU are themselves
a bad input); the GPU file repeats the device-dependent ones on the H200."""
import pytest
import torch

from dgir import deep_gemm


def good(m=64, n=256, k=512, device="cpu"):
    A = torch.randn(m, k).to(torch.float8_e4m3fn).to(device)
    B = torch.randn(n, k).to(torch.float8_e4m3fn).to(device)
    sfa = torch.rand(m, (k + 127) // 128, device=device) + 0.5
    sfb = torch.rand((n + 127) // 128, (k + 127) // 128, device=device) + 0.5
    d = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    return A, sfa, B, sfb, d


def test_cpu_tensors_are_rejected_naming_the_argument():
    A, sfa, B, sfb, d = good()
    with pytest.raises(ValueError, match=r"`a\[0\]` must be a CUDA tensor"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)


def test_pairs_are_required():
    A, sfa, B, sfb, d = good()
    with pytest.raises(ValueError, match="`a` must be a pair"):
        deep_gemm.fp8_gemm_nt(A, (B, sfb), d)
    with pytest.raises(ValueError, match="`b` must be a pair"):
        deep_gemm.fp8_gemm_nt((A, sfa), [B], d)


def test_c_and_recipes_are_rejected_like_deepgemm_sm90():
    A, sfa, B, sfb, d = good()
    with pytest.raises(ValueError, match="`c` is not supported"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d, c=d)
    with pytest.raises(ValueError, match="`recipe` must be None or \\(1, 128, 128\\)"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d, recipe=(1, 1, 128))
    with pytest.raises(ValueError, match="compiled_dims"):
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d, compiled_dims="mn")


def test_transform_sf_gives_mn_major_tma_aligned_layout():
    sfa = torch.rand(37, 5)
    t = deep_gemm.transform_sf_into_required_layout(sfa, 37, 640)
    assert t.shape == (37, 5) and t.stride() == (1, 40)
    assert torch.equal(t, sfa)
    # already in the required layout: returned as is, no copy
    assert deep_gemm.get_mn_major_tma_aligned_tensor(t) is t


def test_set_pdl_takes_a_bool_and_get_pdl_reads_it_back():
    assert deep_gemm.get_pdl() is False                    # off by default, as in DeepGEMM
    try:
        deep_gemm.set_pdl(True)
        assert deep_gemm.get_pdl() is True
        with pytest.raises(ValueError, match="`enable` must be a bool"):
            deep_gemm.set_pdl(1)
        assert deep_gemm.get_pdl() is True                 # a rejected call changes nothing
    finally:
        deep_gemm.set_pdl(False)
    assert deep_gemm.get_pdl() is False


def test_new_addresses_in_a_validated_layout_skip_the_validation(monkeypatch):
    """A call at new addresses whose layout (devices, dtypes, shapes, strides, TMA alignment) an
    earlier call validated reuses that layout's decisions: no second validation, a new plan for the
    new addresses.  A change the validation looks at (a misaligned D, another row stride, dtype or
    shape) is a new layout and is validated (here: the stand-in validation counts and refuses)."""
    validated = []

    class Launch:
        workspace = {}

        def __init__(self, d, made_by):
            self.d, self.made_by = d.data_ptr(), made_by

        def rebound(self, changes):
            return self

    class Kernel:                            # stands in for the loaded kernel
        def plan(self, tensors, m):
            return Launch(tensors["D"], "plan")

        def replan(self, first, tensors, m):
            return Launch(tensors["D"], "replan")

    def validate(a, b, d, c, recipe, compiled_dims):
        validated.append(d.data_ptr())
        if d.data_ptr() % 16 or d.stride(0) != d.shape[1]:
            raise ValueError("d refused")
        return deep_gemm._Layout(Kernel(), a[0].shape[0], "mn", True, d.device)

    monkeypatch.setattr(deep_gemm, "_validate", validate)
    monkeypatch.setattr(deep_gemm, "_layouts", {})
    monkeypatch.setattr(deep_gemm, "_plans", {})

    def call(A, sfa, B, sfb, d):
        key = deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")
        return deep_gemm._plan_cold((A, sfa), (B, sfb), d, None, None, "nk", key)

    A, sfa, B, sfb, d = good()
    m, n = d.shape
    # SFA MN-major and TMA-aligned, as a layout read in place has it
    sfa = deep_gemm.get_mn_major_tma_aligned_tensor(sfa)
    first = call(A, sfa, B, sfb, d)
    assert (first.launch.d, first.launch.made_by) == (d.data_ptr(), "plan") and len(validated) == 1
    others = [torch.empty(m, n, dtype=torch.bfloat16) for _ in range(3)]
    plans = [call(A, sfa, B, sfb, e) for e in others]
    assert len(validated) == 1, "a known layout at new addresses was validated again"
    assert [(p.launch.d, p.launch.made_by) for p in plans] == [(e.data_ptr(), "replan") for e in others]
    assert len(deep_gemm._plans) == 4 and len(deep_gemm._layouts) == 1
    buf = torch.empty(m * n + 8, dtype=torch.bfloat16)
    shifted = buf[4:4 + m * n].view(m, n)                           # 8 bytes past buf's (aligned) start
    assert shifted.data_ptr() % 16
    wide = torch.empty(m, 2 * n, dtype=torch.bfloat16)[:, :n]
    for bad in (shifted, wide):
        with pytest.raises(ValueError, match="d refused"):
            call(A, sfa, B, sfb, bad)
    assert len(validated) == 3
    for changed in (dict(d=torch.empty(m, n, dtype=torch.float16)), dict(A=A[:m // 2], sfa=sfa[:m // 2])):
        args = dict(A=A, sfa=sfa, B=B, sfb=sfb, d=d)
        args.update(changed)
        assert (deep_gemm._layout_key(*args.values(), None, "nk")
                != deep_gemm._layout_key(A, sfa, B, sfb, d, None, "nk"))


@pytest.mark.parametrize("owns_buffers,capturing,replanned", [(True, True, True), (True, False, False),
                                                               (False, True, False)])
def test_a_graph_capture_does_not_reuse_a_cached_plans_buffers(monkeypatch, owns_buffers, capturing, replanned):
    """A cached plan whose launch uses buffers it owns (staged scales, split-K workspace) is not
    launched inside a CUDA graph capture: the graph would keep those addresses after the plan's
    eviction freed them.  The capture gets a plan of its own (allocated from the graph's pool, not
    cached); a plan without buffers, or a call outside a capture, launches the cached plan."""
    launched = []

    class Launch:
        def __init__(self, name):
            self.name = name

        def __call__(self, stream, pdl):
            launched.append(self.name)

    A, sfa, B, sfb, d = good()
    key = deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")
    cached = deep_gemm._Plan(Launch("cached"), None, None, 0, *(((torch.empty(4),), 0x5000) if owns_buffers
                                                                else ((), None)))
    monkeypatch.setattr(deep_gemm, "_plans", {key: cached})
    monkeypatch.setattr(deep_gemm, "_raw_stream", lambda index: 0x5000)
    monkeypatch.setattr(deep_gemm, "_stream_capturing", lambda stream, index: capturing)
    cold = []
    monkeypatch.setattr(deep_gemm, "_plan_cold", lambda *args: cold.append(args[-1])
                        or deep_gemm._Plan(Launch("capture's own"), None, None, 0, (torch.empty(4),), 0x5000))
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    assert launched == (["capture's own"] if replanned else ["cached"])
    assert cold == ([None] if replanned else [])          # key None: the capture's plan is not cached
    assert deep_gemm._plans == {key: cached}


@pytest.mark.parametrize("owns_buffers", [True, False])
def test_a_plans_buffers_serve_one_stream(monkeypatch, owns_buffers):
    """A cached plan whose launch uses buffers it owns (split-K partials and tile counters, staged
    scales) serves the stream it was made on; the same call on another stream gets a plan of its
    own, cached under (key, stream), so launches on two streams at once never share tile counters.
    A plan without buffers serves every stream."""
    launched = []

    class Launch:
        def __init__(self, name):
            self.name = name

        def __call__(self, stream, pdl):
            launched.append((self.name, stream))

    A, sfa, B, sfb, d = good()
    key = deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")
    home = deep_gemm._Plan(Launch("home"), None, None, 0, *(((torch.empty(4),), 0x5000) if owns_buffers
                                                           else ((), None)))
    plans = {key: home}
    monkeypatch.setattr(deep_gemm, "_plans", plans)
    stream = [0x5000]
    monkeypatch.setattr(deep_gemm, "_raw_stream", lambda index: stream[0])
    monkeypatch.setattr(deep_gemm, "_stream_capturing", lambda s, index: False)
    cold = []

    def plan_cold(a, b, d, c, recipe, compiled_dims, key):        # what _plan_cold caches
        cold.append(key)
        plans[key] = deep_gemm._Plan(Launch(f"own {stream[0]:#x}"), None, None, 0, (torch.empty(4),), stream[0])
        return plans[key]
    monkeypatch.setattr(deep_gemm, "_plan_cold", plan_cold)
    for s in (0x5000, 0x6000, 0x6000, 0x5000, 0x7000):
        stream[0] = s
        deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    if owns_buffers:
        assert launched == [("home", 0x5000), ("own 0x6000", 0x6000), ("own 0x6000", 0x6000),
                            ("home", 0x5000), ("own 0x7000", 0x7000)]
        assert cold == [(key, 0x6000), (key, 0x7000)]
    else:
        assert launched == [("home", s) for s in (0x5000, 0x6000, 0x6000, 0x5000, 0x7000)] and cold == []


@pytest.mark.parametrize("current", [0, 1])
def test_the_capture_query_reads_the_launch_stream(monkeypatch, current):
    """torch's query (its current stream on the current device) answers when the launch's device is
    the current one; for another device the driver is asked about the launch stream itself."""
    asked = []
    monkeypatch.setattr(deep_gemm, "_current_device", lambda: current)
    monkeypatch.setattr(deep_gemm, "_current_stream_capturing", lambda: asked.append("torch") or True)
    monkeypatch.setattr(deep_gemm, "stream_capturing", lambda stream: asked.append(("driver", stream)) or True)
    assert deep_gemm._stream_capturing(0x5000, 1) is True
    assert asked == (["torch"] if current == 1 else [("driver", 0x5000)])


def test_a_new_call_inside_a_capture_makes_one_plan(monkeypatch):
    """A call with no cached plan, made while the stream captures: its one new plan (which
    _plan_cold leaves uncached when the stream captures) is launched; no second plan is made."""
    launched, cold = [], []

    class Launch:
        def __call__(self, stream, pdl):
            launched.append(stream)

    A, sfa, B, sfb, d = good()
    monkeypatch.setattr(deep_gemm, "_plans", {})
    monkeypatch.setattr(deep_gemm, "_raw_stream", lambda index: 0x5000)
    monkeypatch.setattr(deep_gemm, "_stream_capturing", lambda stream, index: True)
    monkeypatch.setattr(deep_gemm, "_plan_cold", lambda *args: cold.append(args[-1])
                        or deep_gemm._Plan(Launch(), None, None, 0, (torch.empty(4),), 0x5000))
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    assert launched == [0x5000] and len(cold) == 1 and cold[0] is not None


@pytest.mark.parametrize("transpose,sfb_staged,overlap,capable,expected", [
    (True, False, True, True, True), (False, True, True, True, True), (False, False, True, True, False),
    (True, False, False, True, False), (True, False, True, False, False)])
def test_the_gemm_after_a_staging_kernel_launches_with_pdl(monkeypatch, transpose, sfb_staged, overlap, capable,
                                                           expected):
    """After an SFA transpose or SFB copy in the same call, the GEMM launches with PDL (it waits for
    that kernel before touching memory) when OVERLAP_STAGING is on and the kernel was built for PDL;
    otherwise, and with set_pdl off, it launches plainly."""
    launched = []

    class Launch:
        pdl_capable = capable

        def __call__(self, stream, pdl):
            launched.append(("gemm", pdl))

    A, sfa, B, sfb, d = good()
    key = deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")
    staging = torch.empty(sfb.shape) if sfb_staged else None
    plan = deep_gemm._Plan(Launch(), (lambda stream: launched.append(("transpose", None))) if transpose else None,
                           staging, 0, (), None)
    monkeypatch.setattr(deep_gemm, "_plans", {key: plan})
    monkeypatch.setattr(deep_gemm, "_raw_stream", lambda index: 0x5000)
    monkeypatch.setattr(deep_gemm, "OVERLAP_STAGING", overlap)
    deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
    assert launched[-1] == ("gemm", expected)
    assert launched[0] == (("transpose", None) if transpose else ("gemm", expected))
    if sfb_staged:
        assert torch.equal(staging, sfb)


# --- set_num_sms / get_num_sms (DeepGEMM's knob): a GEMM limited to N of the device's SMs -----------

def _h200():
    from dgir.runtime.device import DeviceProps
    return DeviceProps(index=0, name="NVIDIA H200", sms=132, smem_optin=232448, capability=(9, 0))


@pytest.fixture
def sms_limit(monkeypatch):
    """deep_gemm with a 132-SM current device, the limit restored afterwards."""
    monkeypatch.setattr(deep_gemm, "_device_sms", lambda: 132)
    yield
    deep_gemm._num_sms = None
    deep_gemm._plans.clear()
    deep_gemm._layouts.clear()


def test_set_num_sms_checks_its_argument_and_reads_back(sms_limit):
    assert deep_gemm.get_num_sms() == 132                  # the device's count by default, as in DeepGEMM
    deep_gemm._plans["stale"] = deep_gemm._layouts["stale"] = object()
    deep_gemm.set_num_sms(66)
    assert deep_gemm.get_num_sms() == 66
    assert "stale" not in deep_gemm._plans and "stale" not in deep_gemm._layouts   # decided afresh
    for bad, why in ((0, "must be in 1..132"), (133, "must be in 1..132"), (66.0, "must be an int"),
                     (True, "must be an int")):
        with pytest.raises(ValueError, match=f"`num_sms` {why}"):
            deep_gemm.set_num_sms(bad)
    assert deep_gemm.get_num_sms() == 66                   # a rejected call changes nothing
    deep_gemm.set_num_sms(132)                             # the whole device: no limit
    assert deep_gemm.get_num_sms() == 132 and deep_gemm._num_sms is None


@pytest.mark.parametrize("limit", [66, 131, 7])
@pytest.mark.parametrize("m,n,k", [(64, 2112, 7168), (128, 7168, 16384), (4096, 7168, 2048), (128, 576, 7168)])
def test_a_limited_gemm_is_chosen_for_that_many_sms_one_cta_each(sms_limit, limit, m, n, k):
    """64x2112x7168's and 128x576x7168's table configs run three CTAs per SM, 4096x7168x2048's is a
    2-CTA cluster: under a limit every config is for `limit` SMs, one CTA per SM, clusters only
    where they divide it, and the persistent grid has at most `limit` CTAs."""
    from dgir.ops.fp8_gemm import check_config, persistent_grid
    whole = deep_gemm._choice("fp8_gemm_nt", m, n, k, _h200(), 0).config
    deep_gemm.set_num_sms(limit)
    cfg = deep_gemm._choice("fp8_gemm_nt", m, n, k, _h200(), 0).config
    check_config(cfg)
    assert cfg.num_sms == limit and cfg.ctas_per_sm == 1 and limit % cfg.cluster == 0
    grid = persistent_grid(m, cfg.block_m, cfg.n_blocks, cfg.split_k, cfg.num_sms, cfg.cluster, cfg.multicast,
                           cfg.ctas_per_sm, cfg.split_cluster, None, cfg.stream_k)
    assert grid <= limit
    assert whole.num_sms == 132
    if (m, n) in ((64, 2112), (128, 576)):
        assert whole.ctas_per_sm == 3                      # (so the case tests the replacement)


def test_the_chooser_replaces_a_two_cta_pick_under_a_limit(monkeypatch):
    """Whatever step answers (a user-cache entry recorded for that SM count, say), a config with two
    CTAs per SM gives way to the model's best with one, settled like any other choice."""
    from dgir import tuning
    from dgir.ops.fp8_gemm import Fp8GemmConfig
    o2 = Fp8GemmConfig(n=2112, k=7168, block_m=64, block_n=48, stages=6, num_sms=66, split_k=4, ctas_per_sm=2)
    monkeypatch.setattr(tuning, "_choose", lambda *a, **kw: tuning.Choice(o2, "measured", "a user-cache entry"))
    steps = []
    c = tuning.choose("fp8_gemm_nt", 64, 2112, 7168, "NVIDIA H200", 66, device_sms=132, trace=steps)
    assert c.config.ctas_per_sm == 1 and c.config.num_sms == 66 and c.source == "model"
    assert any("one CTA per SM" in s and o2.kernel_name() in s for s in steps)
    assert tuning.choose("fp8_gemm_nt", 64, 2112, 7168, "NVIDIA H200", 66).config.ctas_per_sm == 2   # no limit


def test_the_model_offers_clusters_only_where_they_divide_the_sms():
    from dgir.ops.fp8_gemm_model import candidate_configs
    assert any(c.cluster == 2 for c in candidate_configs(4096, 7168, 2048, 132))
    assert not any(c.cluster > 1 for c in candidate_configs(4096, 7168, 2048, 131))
    assert any(c.ctas_per_sm == 2 for c in candidate_configs(64, 2112, 7168, 132))
    assert not any(c.ctas_per_sm == 2 for c in candidate_configs(64, 2112, 7168, 132, one_cta_per_sm=True))


def test_the_whole_devices_entry_stands_where_it_runs_the_same_on_fewer_sms(sms_limit):
    """128x7168x16384's table entry is one round of 112 tiles: on 120 SMs it is still one round, so the
    measured config stands (for 120 SMs); on 66 it would take two, and the model answers."""
    from dgir.ops.fp8_gemm import on_fewer_sms
    whole = deep_gemm._choice("fp8_gemm_nt", 128, 7168, 16384, _h200(), 0)
    assert whole.source == "measured" and whole.config.ctas_per_sm == 1
    deep_gemm.set_num_sms(120)
    c = deep_gemm._choice("fp8_gemm_nt", 128, 7168, 16384, _h200(), 0)
    assert c.source == "measured" and "all 132 SMs" in c.detail
    assert c.config == whole.config.__class__(**{**whole.config.as_dict(), "num_sms": 120})
    deep_gemm.set_num_sms(66)
    c = deep_gemm._choice("fp8_gemm_nt", 128, 7168, 16384, _h200(), 0)
    assert c.source == "model" and c.config.num_sms == 66
    assert on_fewer_sms(whole.config, 128, 66) == (None, "its walk takes 2 rounds on 66 SMs, 1 on all")


@pytest.mark.parametrize("sfa_in_place,sfb_in_place,workspace,direct", [
    ("mn", True, {}, True), ("k", True, {}, True),                      # both scales read in place
    ("mn", True, {"W": torch.empty(4)}, False),                         # a split-K workspace to guard
    ("mn", False, {}, False), (None, True, {}, False)])                  # SFB copied, SFA transposed
def test_a_plan_is_direct_only_when_the_launch_is_all_it_does(monkeypatch, sfa_in_place, sfb_in_place, workspace,
                                                              direct):
    """_Layout.plan marks a plan `direct` when its call is the launch alone (no staging kernel or copy,
    no buffers whose stream must be checked); a warm call of such a plan launches on the current
    stream with set_pdl's setting and does nothing else."""
    from dgir.runtime import utility_kernels
    launched = []

    class Launch:
        pdl_capable = True

        def __init__(self):
            self.workspace = workspace

        def rebound(self, changes):
            return self

        def __call__(self, stream, pdl):
            launched.append((stream, pdl))

    class Kernel:
        def plan(self, tensors, m):
            return Launch()

    monkeypatch.setattr(utility_kernels, "sfa_to_mn_major_plan", lambda sfa, out: (lambda stream: None))
    monkeypatch.setattr(deep_gemm, "_raw_stream", lambda index: 0x5000)
    A, sfa, B, sfb, d = good()
    layout = deep_gemm._Layout(Kernel(), A.shape[0], sfa_in_place, sfb_in_place, torch.device("cpu"))
    plan = layout.plan(A, deep_gemm.get_mn_major_tma_aligned_tensor(sfa) if sfa_in_place == "mn" else sfa, B, sfb, d)
    assert plan.direct is direct
    if direct:
        key = deep_gemm._plan_key(A, sfa, B, sfb, d, None, None, "nk")
        monkeypatch.setattr(deep_gemm, "_plans", {key: plan})
        monkeypatch.setattr(deep_gemm, "_stream_capturing", lambda *a: pytest.fail("a direct plan has no buffers"))
        for pdl in (False, True):
            monkeypatch.setattr(deep_gemm, "_pdl", pdl)
            deep_gemm.fp8_gemm_nt((A, sfa), (B, sfb), d)
        assert launched == [(0x5000, False), (0x5000, True)]
