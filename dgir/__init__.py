"""dgir: a tile-IR compiler for DeepGEMM-class GEMM kernels (PTX for Hopper, AscendC for Ascend).

Public API (everything else is internal and may change)::

    dgir.compile(op, *, target="sm90a", dump_dir=None, passes=None, ..., **dims) -> CompileResult
    dgir.print_ir(kernel) -> str            dgir.parse_ir(text) -> Node    (raises ParseError)
    dgir.verify(kernel)                     (raises VerifyError)
    dgir.register_pass(p, target, before=|after=|replace=)   dgir.Pass (base class of passes)
    dgir.Node, dgir.Op, dgir.DType, dgir.Type                the IR
    dgir.CompileResult (.summary(), .stage(name), .diff(a, b=None): the IR text between stages)
    dgir.PassError, dgir.OpError, dgir.ParseError, dgir.VerifyError, dgir.DiffError

`import dgir` is cheap: only the IR core is imported eagerly; the parser (lark), the pass manager,
the compiler and anything that needs torch or the CUDA toolchain load on first use.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .ir import DType, Node, Op, Type

__version__ = "0.1.0"

# public name -> (module, attribute); resolved on first access (PEP 562)
_LAZY = {
    "compile": ("dgir.compiler", "compile"),
    "CompileResult": ("dgir.compiler", "CompileResult"),
    "print_ir": ("dgir.printer", "print_ir"),
    "parse_ir": ("dgir.parser", "parse_ir"),
    "parse_header": ("dgir.parser", "parse_header"),
    "ParseError": ("dgir.parser", "ParseError"),
    "verify": ("dgir.verifier", "verify"),
    "VerifyError": ("dgir.verifier", "VerifyError"),
    "register_pass": ("dgir.pipeline", "register_pass"),
    "unregister_all": ("dgir.pipeline", "unregister_all"),
    "PassError": ("dgir.pipeline", "PassError"),
    "PassEvent": ("dgir.pipeline", "PassEvent"),
    "Pass": ("dgir.passes", "Pass"),
    "OpError": ("dgir.ops", "OpError"),
    "DiffError": ("dgir.diff", "DiffError"),
}

__all__ = ["DType", "Node", "Op", "Type", "__version__", *_LAZY]


def __getattr__(name: str):
    try:
        mod, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'dgir' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(mod), attr)
    globals()[name] = value          # cache: later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only (re-exports: hence noqa F401)
    from .compiler import CompileResult, compile  # noqa: F401
    from .ops import OpError  # noqa: F401
    from .parser import ParseError, parse_header, parse_ir  # noqa: F401
    from .passes import Pass  # noqa: F401
    from .pipeline import PassError, PassEvent, register_pass, unregister_all  # noqa: F401
    from .printer import print_ir  # noqa: F401
    from .verifier import VerifyError, verify  # noqa: F401
