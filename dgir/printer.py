"""Text form of the tile IR.  One node per line, bodies indented:

    %part = wgmma(%part, %a_ring, %b_ring, %ctr) [k=128, n=128, role="mma", scale_d=0] : f32[64, 128]

`result = op(args) [attrs] : type { body }`; every part but `op` is optional.  The grammar that
reads it back is dgir/grammar.lark; `parse_ir(print_ir(k)) == k` holds for every kernel.
"""
from __future__ import annotations

import json

from .ir import FORMAT_VERSION, Node


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"attribute value {v!r} has no text form")


def _arg(a) -> str:
    return f"%{a}" if isinstance(a, str) else repr(a)


def print_node(n: Node, indent: int = 0) -> str:
    pad = "  " * indent
    s = pad
    if n.name:
        s += f"%{n.name} = "
    s += n.op.value
    if n.args:
        s += "(" + ", ".join(_arg(a) for a in n.args) + ")"
    if n.attrs:
        s += " [" + ", ".join(f"{k}={_value(v)}" for k, v in n.attrs) + "]"
    if n.type is not None:
        s += f" : {n.type}"
    if n.body or n.op.value in ("kernel", "warpgroup", "for", "if"):
        inner = "\n".join(print_node(c, indent + 1) for c in n.body)
        s += " {\n" + (inner + "\n" if inner else "") + pad + "}"
    return s


def header(target: str, position: str) -> str:
    """First line of every dump: format version, target, pipeline position."""
    return f"// dgir v{FORMAT_VERSION} target={target} position={position}"


def print_ir(kernel: Node, target: str | None = None, position: str | None = None) -> str:
    text = print_node(kernel) + "\n"
    if target is not None:
        text = header(target, position or "input") + "\n" + text
    return text
