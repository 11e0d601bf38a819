"""Passes over the tile IR: one pass per file, each a named object with a docstring.

A pass is any object with `name`, a docstring and `run(kernel) -> kernel`.  Subclass `Pass` to get
the source hash that goes into the kernel cache key.
"""
from __future__ import annotations

import hashlib
import inspect
import os

from dgir.ir import Node

_file_hashes: dict = {}       # (path, mtime, size) -> sha256 of the file's bytes


def _defining_file(cls: type) -> str:
    """The file of the class's own methods (known even when its module is not in sys.modules, as
    for a file loaded by path), else the one inspect finds through its module."""
    for member in vars(cls).values():
        code = getattr(member, "__code__", None)
        if code is not None:
            return code.co_filename
    return inspect.getsourcefile(cls)


def source_hash(cls: type) -> str:
    """sha256 (12 hex digits) of the file that defines `cls` (else of its source, else its repr).

    The whole file, not the class alone: a pass reads module-level tables and helpers (latencies,
    register reserves, op sets) that change what it does.  Hashing the bytes also costs a file read
    where `inspect.getsource` tokenized the module to find the class (~6 ms a pass, 0.1 s of a
    cold compile's 0.5 s on the 2-core machine)."""
    try:
        path = _defining_file(cls)
        st = os.stat(path)
    except (OSError, TypeError):      # defined in a notebook cell or by exec: its own source, if known
        try:
            src = inspect.getsource(cls)
        except (OSError, TypeError):
            src = repr(cls)
        return hashlib.sha256(src.encode()).hexdigest()[:12]
    key = (path, st.st_mtime_ns, st.st_size)
    digest = _file_hashes.get(key)
    if digest is None:
        with open(path, "rb") as f:
            digest = _file_hashes[key] = hashlib.sha256(f.read()).hexdigest()[:12]
    return digest


class Pass:
    name: str = ""

    def run(self, kernel: Node) -> Node:  # pragma: no cover - interface
        raise NotImplementedError

    @property
    def doc(self) -> str:
        return inspect.getdoc(self) or ""

    def identity(self) -> str:
        """Name plus a hash of the defining source file: part of every kernel's cache key."""
        return f"{self.name}:{source_hash(type(self))}"

    def __repr__(self):
        return f"<pass {self.name}>"
