import os
import stat
from pathlib import Path

import pytest

from dgir import toolchain as tc

# hopper-ptx.md §1.1: the minimal complete sm_90a module
SECTION_1_1 = r"""
.version 8.7
.target sm_90a
.address_size 64

.extern .shared .align 1024 .b8 smem[];

.visible .entry gemm_kernel(
    .param .align 64 .b8 tmap_a[128],
    .param .align 64 .b8 tmap_b[128],
    .param .u64 d_ptr,
    .param .u32 k_tiles)
.maxntid 384, 1, 1
.minnctapersm 1
.reqnctapercluster 2, 1, 1
{
  .reg .b64 %rd<8>;
  .reg .b32 %r<8>;
  mov.u64        %rd0, tmap_a;
  cvta.param.u64 %rd1, %rd0;
  prefetch.tensormap [%rd1];
  ld.param.u64   %rd2, [d_ptr];
  cvta.to.global.u64 %rd2, %rd2;
  ld.param.u32   %r0, [k_tiles];
  mov.u32        %r1, smem;
  mov.u32        %r2, %cluster_ctarank;
  mov.u32        %r3, %clusterid.x;
  mov.u32        %r4, %cluster_nctarank;
  st.global.u32  [%rd2], %r2;
  ret;
}
"""

TWO_ENTRIES = r"""
.version 8.7
.target sm_90a
.address_size 64
.shared .align 16 .b8 buf[1024];
.visible .entry k_smem(.param .u64 p)
.reqntid 384
{
  .reg .b64 %rd<4>; .reg .b32 %r<4>;
  setmaxnreg.inc.sync.aligned.u32 232;
  ld.param.u64 %rd0, [p]; cvta.to.global.u64 %rd0, %rd0;
  mov.u32 %r1, buf; ld.shared.u32 %r0, [%r1];
  st.global.u32 [%rd0], %r0;
  ret;
}
.visible .entry k_plain(.param .u64 p)
{
  .reg .b64 %rd<4>; .reg .b32 %r<4>;
  ld.param.u64 %rd0, [p]; cvta.to.global.u64 %rd0, %rd0;
  mov.u32 %r0, 7;
  st.global.u32 [%rd0], %r0;
  ret;
}
"""


def _fake_tool(path: Path, version="12.3.107") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.3, V%s'\n" % version)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def bare(monkeypatch):
    """No override, no CUDA_HOME, empty PATH."""
    for v in ("DGIR_PTXAS", "DGIR_NVDISASM", "CUDA_HOME"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("PATH", "")
    return monkeypatch


# ------------------------------------------------------------------ discovery order

def test_env_override_wins(bare, tmp_path):
    fake = _fake_tool(tmp_path / "override" / "ptxas")
    _fake_tool(tmp_path / "cuda" / "bin" / "ptxas")
    bare.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    bare.setenv("DGIR_PTXAS", str(fake))
    assert tc.find_tool("ptxas") == fake


def test_env_override_must_exist(bare, tmp_path):
    bare.setenv("DGIR_NVDISASM", str(tmp_path / "nope"))
    with pytest.raises(tc.ToolchainError, match="DGIR_NVDISASM"):
        tc.find_tool("nvdisasm")


def test_cuda_home_before_path(bare, tmp_path):
    home = _fake_tool(tmp_path / "cuda" / "bin" / "ptxas")
    on_path = _fake_tool(tmp_path / "p" / "ptxas")
    bare.setenv("PATH", str(on_path.parent))
    bare.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert tc.find_tool("ptxas") == home
    bare.delenv("CUDA_HOME")
    assert tc.find_tool("ptxas") == on_path


@pytest.mark.parametrize("name", ["ptxas", "nvdisasm"])
def test_wheel_fallback(bare, name):
    if not [p for p in tc._wheel_candidates(name) if p.is_file()]:
        pytest.skip(f"no NVIDIA wheel providing {name} is installed here")
    p = tc.find_tool(name)
    assert "site-packages" in p.parts and "nvidia" in p.parts and p.parent.name == "bin"
    assert p.name == name and os.access(p, os.X_OK)
    assert tc.tool_version(p)[0].isdigit()


def test_not_found_names_search(bare):
    with pytest.raises(tc.ToolchainError) as ei:
        tc.find_tool("dgir-no-such-tool")
    msg = str(ei.value)
    assert "dgir-no-such-tool" in msg and "PATH" in msg and "Searched" in msg


def test_tool_version_parsing_and_cache(tmp_path):
    fake = _fake_tool(tmp_path / "ptxas", "12.8.93")
    assert tc.tool_version(fake) == "12.8.93"
    assert tc.tool_version(str(fake)) == "12.8.93"
    real = tc.tool_version(tc.find_tool("ptxas"))
    assert real.startswith("13.") and real == tc.tool_version(tc.find_tool("ptxas"))
    assert "ptxas=" in tc.toolchain_versions()


# ------------------------------------------------------------------ assemble / disassemble

def test_assemble_section_1_1():
    r = tc.assemble(SECTION_1_1)
    assert r.cubin[:4] == b"\x7fELF"
    assert list(r.entries) == ["gemm_kernel"]
    res = r.resources
    assert res is r.entries["gemm_kernel"]
    assert 0 < res.registers <= 255
    assert res.spill_stores == res.spill_loads == res.stack_bytes == 0
    assert "gemm_kernel" in r.log


def test_assemble_two_entries_smem_and_warning():
    r = tc.assemble(TWO_ENTRIES)
    assert set(r.entries) == {"k_smem", "k_plain"}
    assert r.entries["k_smem"].smem_static == 1024
    assert r.entries["k_plain"].smem_static == 0
    assert any("C7508" in w and "setmaxnreg" in w for w in r.warnings), r.warnings


def test_parse_ptxas_log_synthetic():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'kern' for 'sm_90a'
ptxas info    : Function properties for kern
    48 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 2048 bytes smem, 536 bytes cmem[0], 4 bytes cmem[2]
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to ...
ptxas warning : Unresolved extern function 'foo'
"""
    entries, warnings = tc.parse_ptxas_log(log)
    r = entries["kern"]
    assert (r.registers, r.spill_stores, r.spill_loads, r.stack_bytes) == (168, 12, 8, 48)
    assert (r.smem_static, r.barriers, r.cmem) == (2048, 1, {0: 536, 2: 4})
    assert len(warnings) == 2 and "serialized" in warnings[0] and "foo" in warnings[1]


def test_ptxas_error_on_bad_ptx():
    bad = SECTION_1_1.replace("st.global.u32  [%rd2], %r2;", "st.global.u32  [%rd2], %r99;")
    with pytest.raises(tc.PtxasError) as ei:
        tc.assemble(bad)
    assert "%r99" in str(ei.value) or "r99" in ei.value.log
    with pytest.raises(tc.PtxasError, match="version"):
        tc.assemble("garbage\n")


def test_disassemble_has_encodings():
    sass = tc.disassemble(tc.assemble(SECTION_1_1).cubin)
    assert ".text.gemm_kernel" in sass and "EXIT" in sass
    assert "/* 0x" in sass           # -hex: per-instruction encodings
