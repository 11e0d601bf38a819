"""A small helper for writing IR in Python: nested `with b.region(...)` blocks append nodes."""
from __future__ import annotations

from contextlib import contextmanager

from .ir import DType, Node, Op, Type


class Builder:
    def __init__(self, role: str | None = None):
        self._stack: list[list[Node]] = [[]]
        self._names: set[str] = set()
        self.role = role

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self._names:
            i += 1
            name = f"{base}{i}"
        self._names.add(name)
        return name

    def emit(self, op: Op, name: str = "", *args, type: Type | None = None, body=(), **attrs) -> str:
        if name:
            name = self.fresh(name)
        if self.role is not None and "role" not in attrs and op not in (Op.PARAM, Op.SMEM, Op.REGS, Op.CHANNEL):
            attrs["role"] = self.role
        self._stack[-1].append(Node(op, name, args, type, {k: v for k, v in attrs.items() if v is not None}, body))
        return name

    def scalar(self, op: Op, name: str, *args, **attrs) -> str:
        return self.emit(op, name, *args, type=Type(DType.i32), **attrs)

    @contextmanager
    def region(self, op: Op, name: str = "", *args, **attrs):
        """Open a structured op; nodes emitted inside the block become its body."""
        if name:
            name = self.fresh(name)
        if self.role is not None and "role" not in attrs and op is not Op.WARPGROUP:
            attrs["role"] = self.role
        self._stack.append([])
        yield name
        body = self._stack.pop()
        self._stack[-1].append(Node(op, name, args, None, attrs, tuple(body)))

    def nodes(self) -> tuple:
        assert len(self._stack) == 1
        return tuple(self._stack[0])
