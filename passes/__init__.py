"""Passes over the tile IR: one pass per file, each a named object with a docstring.

A pass is any object with `name`, a docstring and `run(kernel) -> kernel`.  Subclass `Pass` to get
the source hash that goes into the kernel cache key.
"""
from __future__ import annotations

import hashlib
import inspect

from dgir.ir import Node


class Pass:
    name: str = ""

    def run(self, kernel: Node) -> Node:  # pragma: no cover - interface
        raise NotImplementedError

    @property
    def doc(self) -> str:
        return inspect.getdoc(self) or ""

    def identity(self) -> str:
        """Name plus a hash of the defining source: part of every kernel's cache key."""
        try:
            src = inspect.getsource(type(self))
        except (OSError, TypeError):
            src = repr(type(self))
        return f"{self.name}:{hashlib.sha256(src.encode()).hexdigest()[:12]}"

    def __repr__(self):
        return f"<pass {self.name}>"
