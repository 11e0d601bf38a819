"""Shared pytest configuration: the ``gpu`` marker, and a source-tree fallback for
``dgir.runtime`` (normally mapped to ``runtime/`` by pyproject's package-dir)."""

import importlib.util
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]


def _ensure_dgir_runtime() -> None:
    try:
        import dgir.runtime  # noqa: F401  (installed package, or already mapped)
        return
    except ImportError:
        pass
    if str(_ROOT) not in sys.path:
        sys.path.insert(0, str(_ROOT))
    import dgir
    pkg_dir = _ROOT / "runtime"
    spec = importlib.util.spec_from_file_location(
        "dgir.runtime", pkg_dir / "__init__.py", submodule_search_locations=[str(pkg_dir)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["dgir.runtime"] = mod
    spec.loader.exec_module(mod)
    dgir.runtime = mod


_ensure_dgir_runtime()


@pytest.fixture
def emitter():
    """The PTX emitter (always the real one: a test must not pass on a stand-in)."""
    from dgir.emitters.ptx import emit_ptx
    return emit_ptx


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped when none is available)")


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU available")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
