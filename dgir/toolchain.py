"""Locate and drive NVIDIA's offline tools: ``ptxas`` (PTX -> cubin) and ``nvdisasm``.

Discovery order for a tool ``name`` (``find_tool``):

1. the explicit override ``DGIR_PTXAS`` / ``DGIR_NVDISASM`` (must exist, else error);
2. ``$CUDA_HOME/bin/<name>``;
3. ``PATH`` (``shutil.which``);
4. NVIDIA's PyPI wheels (``nvidia-cuda-nvcc`` ships ptxas, ``nvidia-cuda-nvdisasm``
   ships nvdisasm; CUDA 13 wheels install to ``site-packages/nvidia/cu13/bin``,
   CUDA 12 wheels to ``site-packages/nvidia/cuda_nvcc/bin`` etc.);
5. ``/usr/local/cuda/bin`` as a last resort.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from dgir.env import env

__all__ = [
    "ToolchainError", "PtxasError", "Resources", "AssembleResult",
    "find_tool", "tool_version", "toolchain_versions", "assemble", "disassemble",
]

_OVERRIDE = {"ptxas": "DGIR_PTXAS", "nvdisasm": "DGIR_NVDISASM"}
_WHEELS = {
    "ptxas": ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc-cu13"),
    "nvdisasm": ("nvidia-cuda-nvdisasm", "nvidia-cuda-nvdisasm-cu12",
                 "nvidia-cuda-nvdisasm-cu13"),
}
# relative to a site-packages directory
_WHEEL_DIRS = ("nvidia/cu13/bin", "nvidia/cu12/bin", "nvidia/cuda_nvcc/bin",
               "nvidia/cuda_nvdisasm/bin")


class ToolchainError(RuntimeError):
    """A required CUDA tool could not be found or run."""


class PtxasError(RuntimeError):
    """ptxas rejected the PTX; the message carries ptxas's own diagnostics."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


# --------------------------------------------------------------------------- discovery

def _is_exe(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def _wheel_candidates(name: str) -> list[Path]:
    """Executables named ``name`` inside installed NVIDIA wheels."""
    out: list[Path] = []
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover
        metadata = None
    if metadata is not None:
        for dist_name in _WHEELS.get(name, ()):
            try:
                dist = metadata.distribution(dist_name)
            except metadata.PackageNotFoundError:
                continue
            for f in dist.files or ():
                if f.name == name and f.parent.name == "bin":
                    out.append(Path(dist.locate_file(f)).resolve())
    # Fallback: look for the usual layouts on sys.path (e.g. a vendored site dir).
    for entry in sys.path:
        if not entry:
            continue
        for rel in _WHEEL_DIRS:
            out.append(Path(entry) / rel / name)
    return out


def _candidates(name: str) -> list[tuple[str, Optional[Path]]]:
    e = env()
    cands: list[tuple[str, Optional[Path]]] = []
    if e.cuda_home is not None:
        cands.append(("$CUDA_HOME/bin", e.cuda_home / "bin" / name))
    which = shutil.which(name)
    cands.append(("PATH", Path(which) if which else None))
    for p in _wheel_candidates(name):
        cands.append(("NVIDIA wheel", p))
    cands.append(("/usr/local/cuda/bin", Path("/usr/local/cuda/bin") / name))
    return cands


def find_tool(name: str) -> Path:
    """Return the path of ``ptxas`` / ``nvdisasm`` (or any CUDA tool) per the order above."""
    var = _OVERRIDE.get(name)
    if var is not None:
        override = getattr(env(), name)
        if override is not None:
            if _is_exe(override):
                return override
            raise ToolchainError(f"{var}={override} does not name an executable file")
    searched = []
    for where, p in _candidates(name):
        if p is not None and _is_exe(p):
            return p
        searched.append(f"{where}: {p if p is not None else '(not found)'}")
    hint = f"set {var} to its path, " if var else ""
    wheel = f" or `pip install {_WHEELS[name][0]}`" if name in _WHEELS else ""
    raise ToolchainError(
        f"cannot find {name!r}; {hint}set CUDA_HOME, put it on PATH{wheel}. Searched:\n  "
        + "\n  ".join(searched)
    )


@functools.lru_cache(maxsize=None)
def _version_of(path: str, mtime_ns: int, size: int) -> str:
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise ToolchainError(f"cannot run {path}: {exc}") from exc
    text = r.stdout + r.stderr
    ver = re.search(r"\bV(\d+\.\d+\.\d+)", text)
    build = re.search(r"Build\s+(\S+)", text)
    if ver:
        return ver.group(1) + (f" ({build.group(1)})" if build else "")
    lines = [l for l in text.strip().splitlines() if l.strip()]
    if r.returncode != 0 or not lines:
        raise ToolchainError(f"{path} --version failed (rc={r.returncode}): {text.strip()}")
    return lines[-1].strip()


def tool_version(path: os.PathLike | str) -> str:
    """``'13.0.88 (cuda_13.0.r13.0/compiler.36424714_0)'``; cached per (path, mtime, size)."""
    p = Path(path)
    st = p.stat()
    return _version_of(str(p), st.st_mtime_ns, st.st_size)


def toolchain_versions() -> str:
    """A string identifying the ptxas (and nvdisasm, if present) in use, for cache keys."""
    parts = [f"ptxas={tool_version(find_tool('ptxas'))}"]
    try:
        parts.append(f"nvdisasm={tool_version(find_tool('nvdisasm'))}")
    except ToolchainError:
        parts.append("nvdisasm=none")
    return ";".join(parts)


# --------------------------------------------------------------------------- ptxas

@dataclass(frozen=True)
class Resources:
    """What ``ptxas -v`` reports for one entry function."""
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    smem_static: int = 0
    barriers: int = 0
    cmem: dict = field(default_factory=dict)   # bank -> bytes, e.g. {0: 536}


@dataclass
class AssembleResult:
    cubin: bytes
    log: str
    resources: Optional[Resources]             # the single (or first) entry's resources
    entries: dict[str, Resources] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_BARS_RE = re.compile(r"used (\d+) barriers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
# "ptxas warning : ..." and advisory infos such as "(C7508) Potential Performance Loss: ..."
_WARN_RE = re.compile(r"ptxas\s+warning|\(C\d{4}\)|Performance Advisory|Potential Performance Loss")


def parse_ptxas_log(log: str) -> tuple[dict[str, Resources], list[str]]:
    """Parse a ``ptxas -v`` log into per-entry :class:`Resources` and a warning list."""
    raw: dict[str, dict] = {}
    cur: Optional[str] = None
    warnings: list[str] = []
    for line in log.splitlines():
        if _WARN_RE.search(line):
            warnings.append(re.sub(r"^ptxas\s+(info|warning)\s*:\s*", "", line.strip()))
            continue
        m = _ENTRY_RE.search(line) or _PROPS_RE.search(line)
        if m:
            cur = m.group(1)
            raw.setdefault(cur, {})
            continue
        if cur is None:
            continue
        d = raw[cur]
        m = _FRAME_RE.search(line)
        if m:
            d["stack_bytes"], d["spill_stores"], d["spill_loads"] = map(int, m.groups())
        m = _USED_RE.search(line)
        if m:
            d["registers"] = int(m.group(1))
            if (b := _BARS_RE.search(line)):
                d["barriers"] = int(b.group(1))
            if (s := _SMEM_RE.search(line)):
                d["smem_static"] = int(s.group(1))
            d["cmem"] = {int(bank): int(n) for n, bank in _CMEM_RE.findall(line)}
    return {k: Resources(**v) for k, v in raw.items()}, warnings


def assemble(ptx: str, arch: str = "sm_90a", extra: Sequence[str] = ()) -> AssembleResult:
    """Run ``ptxas -arch=<arch> -v`` on ``ptx``; return the cubin, log, resources, warnings."""
    ptxas = find_tool("ptxas")
    with tempfile.TemporaryDirectory(prefix="dgir-ptxas-") as tmp:
        src, out = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        cmd = [str(ptxas), f"-arch={arch}", "-v", *extra, "-o", str(out), str(src)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as exc:
            raise ToolchainError(f"cannot run {ptxas}: {exc}") from exc
        log = (r.stdout + r.stderr).replace(str(src), "kernel.ptx")
        if r.returncode != 0 or not out.exists():
            errs = [l for l in log.splitlines() if "error" in l or "fatal" in l] or [log.strip()]
            raise PtxasError(f"ptxas failed (rc={r.returncode}):\n" + "\n".join(errs), log)
        cubin = out.read_bytes()
    entries, warnings = parse_ptxas_log(log)
    first = next(iter(entries.values()), None)
    return AssembleResult(cubin=cubin, log=log, resources=first, entries=entries,
                          warnings=warnings)


# --------------------------------------------------------------------------- nvdisasm

def disassemble(cubin: bytes, extra: Iterable[str] = ("-c", "-hex")) -> str:
    """SASS text of ``cubin`` via nvdisasm.

    The default flags print code sections only (``-c``) and, after each instruction, its
    128-bit encoding as two 64-bit words (``-hex``): the low word on the instruction's
    line and the high word (control bits, reuse flags) on the following line.
    """
    nvdisasm = find_tool("nvdisasm")
    with tempfile.TemporaryDirectory(prefix="dgir-nvdisasm-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            r = subprocess.run([str(nvdisasm), *extra, str(path)],
                               capture_output=True, text=True)
        except OSError as exc:
            raise ToolchainError(f"cannot run {nvdisasm}: {exc}") from exc
    if r.returncode != 0:
        raise ToolchainError(f"nvdisasm failed (rc={r.returncode}): {r.stderr.strip()}")
    return r.stdout
