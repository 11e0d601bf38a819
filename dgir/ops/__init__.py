"""Operator registry: an operator turns user dimensions into a config and a lowered tile IR."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class OpError(ValueError):
    """Unknown operator or a shape it cannot take."""


@dataclass(frozen=True)
class Operator:
    name: str
    dims: tuple                 # the dimensions the user gives, e.g. ("m", "n", "k")
    compiled_dims: tuple        # those baked into the kernel (M stays a runtime value)
    choose_config: Callable     # (**dims) -> config dataclass
    lower: Callable             # (config) -> Kernel
    check: Callable             # (**dims) -> None, raises OpError
    doc: str = ""
    ascend: object = None       # Ascend lowering (dgir/ops/ascend_gemm.py: check/choose_config/lower); None: no Ascend path


OPERATORS: dict[str, Operator] = {}


def register_operator(op: Operator) -> Operator:
    OPERATORS[op.name] = op
    return op


def get_operator(name: str) -> Operator:
    from . import fp8_gemm  # noqa: F401  (registers itself)
    from . import ascend_gemm  # noqa: F401  (adds the Ascend lowerings and the Ascend-only operators)
    if name not in OPERATORS:
        raise OpError(f"unknown operator {name!r}; known: {', '.join(sorted(OPERATORS))}")
    return OPERATORS[name]
