"""Every environment variable dgir reads, in one typed place.

Call :func:`env` to get a snapshot (a frozen :class:`Env`).  It re-reads
``os.environ`` on every call, so tests can ``monkeypatch.setenv`` freely; the
cost is a dozen dictionary look-ups: the parsing is memoised on the raw values
(it took ~40% of an API call that has to build a launch plan, step 111).

Boolean variables accept ``1/true/yes/on`` (true) and ``0/false/no/off`` or the
empty string (false), case-insensitively; anything else raises ``ValueError``
naming the variable, so a typo never silently means "off".
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

__all__ = ["Env", "env", "parse_bool", "VARIABLES"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

# name -> one-line description (kept next to the dataclass so docs/CLI can list them)
VARIABLES: dict[str, str] = {
    "DGIR_VERIFY": "bool: run the IR verifier after every pass",
    "DGIR_PTXAS": "path: ptxas binary to use (overrides discovery)",
    "DGIR_NVDISASM": "path: nvdisasm binary to use (overrides discovery)",
    "CUDA_HOME": "path: CUDA toolkit root; $CUDA_HOME/bin is searched for tools",
    "DG_JIT_CACHE_DIR": "path: kernel cache directory (default ~/.dgir/cache)",
    "DG_JIT_DEBUG": "bool: print JIT debugging information",
    "DG_PRINT_CONFIGS": "bool: print the chosen kernel configuration per shape",
    "DG_JIT_DUMP_PTX": "bool: print/dump the generated PTX",
    "DG_JIT_DUMP_SASS": "bool: print/dump the SASS of compiled kernels",
    "DGIR_SASS_INTERLEAVE": "bool: apply the FFMA reuse/yield SASS patch (default off)",
    "DGIR_DUMP_DIR": "path: directory to dump intermediate artefacts into (default: none)",
    "DGIR_TUNED": "bool: use measured configs (shipped table, user cache) before the cost model (default on)",
    "DG_AUTOTUNE": "bool: time the model's best candidates for a shape without a measured config, record the winner",
    "DGIR_TRACEBACK": "bool: the CLI re-raises errors with their traceback instead of one `dgir: error:` line",
    "DGIR_ASCEND_EMU_CACHE": "path: build cache of the Ascend emulator binaries (default <tmp>/dgir_ascend_emu_<uid>)",
}


def parse_bool(name: str, value: Optional[str], default: bool = False) -> bool:
    """Parse a boolean environment value; ``None`` (unset) gives ``default``."""
    if value is None:
        return default
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(
        f"environment variable {name}={value!r} is not a boolean "
        f"(use one of 1/true/yes/on or 0/false/no/off)"
    )


def _path(value: Optional[str]) -> Optional[Path]:
    if value is None or value.strip() == "":
        return None
    return Path(value).expanduser()


@dataclass(frozen=True)
class Env:
    verify: bool = False                 # DGIR_VERIFY
    ptxas: Optional[Path] = None         # DGIR_PTXAS
    nvdisasm: Optional[Path] = None      # DGIR_NVDISASM
    cuda_home: Optional[Path] = None     # CUDA_HOME
    cache_dir: Path = Path("~/.dgir/cache").expanduser()  # DG_JIT_CACHE_DIR
    jit_debug: bool = False              # DG_JIT_DEBUG
    print_configs: bool = False          # DG_PRINT_CONFIGS
    dump_ptx: bool = False               # DG_JIT_DUMP_PTX
    dump_sass: bool = False              # DG_JIT_DUMP_SASS
    sass_interleave: bool = False        # DGIR_SASS_INTERLEAVE
    dump_dir: Optional[Path] = None      # DGIR_DUMP_DIR
    tuned: bool = True                   # DGIR_TUNED
    autotune: bool = False               # DG_AUTOTUNE
    traceback: bool = False              # DGIR_TRACEBACK
    ascend_emu_cache: Optional[Path] = None  # DGIR_ASCEND_EMU_CACHE (None: the default under the temp dir)


# what the snapshot depends on: the variables, and HOME (a "~" in a path, the default cache directory)
_RAW = tuple(VARIABLES) + ("HOME",)
# os.environ's own store (CPython: encoded keys -> encoded values, kept in step by os.environ[...] = ...
# and monkeypatch.setenv): read as one C-level lookup per name.  Through the Mapping interface an
# unset variable costs a raised and caught KeyError, ~1.5 us each (most of these are unset).
_STORE = getattr(os.environ, "_data", None)
_STORE_KEYS = tuple(map(os.environ.encodekey, _RAW)) if _STORE is not None else ()


def env(environ: Optional[Mapping[str, str]] = None) -> Env:
    """Read the environment now and return a typed, immutable snapshot."""
    if environ is None and _STORE is not None:
        return _parsed(tuple(map(_STORE.get, _STORE_KEYS)), True)
    e = os.environ if environ is None else environ
    return _parsed(tuple(map(e.get, _RAW)), False)


@functools.lru_cache(maxsize=64)
def _parsed(raw: tuple, encoded: bool) -> Env:
    if encoded:
        raw = tuple(None if v is None else os.environ.decodevalue(v) for v in raw)
    e = dict(zip(_RAW, raw))
    cache = _path(e.get("DG_JIT_CACHE_DIR")) or Path("~/.dgir/cache").expanduser()
    return Env(
        verify=parse_bool("DGIR_VERIFY", e.get("DGIR_VERIFY")),
        ptxas=_path(e.get("DGIR_PTXAS")),
        nvdisasm=_path(e.get("DGIR_NVDISASM")),
        cuda_home=_path(e.get("CUDA_HOME")),
        cache_dir=cache,
        jit_debug=parse_bool("DG_JIT_DEBUG", e.get("DG_JIT_DEBUG")),
        print_configs=parse_bool("DG_PRINT_CONFIGS", e.get("DG_PRINT_CONFIGS")),
        dump_ptx=parse_bool("DG_JIT_DUMP_PTX", e.get("DG_JIT_DUMP_PTX")),
        dump_sass=parse_bool("DG_JIT_DUMP_SASS", e.get("DG_JIT_DUMP_SASS")),
        sass_interleave=parse_bool("DGIR_SASS_INTERLEAVE", e.get("DGIR_SASS_INTERLEAVE")),
        dump_dir=_path(e.get("DGIR_DUMP_DIR")),
        tuned=parse_bool("DGIR_TUNED", e.get("DGIR_TUNED"), default=True),
        autotune=parse_bool("DG_AUTOTUNE", e.get("DG_AUTOTUNE")),
        traceback=parse_bool("DGIR_TRACEBACK", e.get("DGIR_TRACEBACK")),
        ascend_emu_cache=_path(e.get("DGIR_ASCEND_EMU_CACHE")),
    )
